/* cli_out — tables, details and progress for people (see cli_out.h). */
#include "cli_out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"

struct cli_table {
    int     ncols, nrows, cap;
    char   *head[CLI_MAX_COLS];
    char  **cells;            /* nrows * ncols */
};

/* ---- cells ------------------------------------------------------------------ */

/* Characters (not bytes) of UTF-8 text. */
static size_t cli_width(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* A cell as shown: control bytes as spaces, at most CLI_CELL_MAX
 * characters (the last three "..." when cut).  Caller frees. */
static char *cli_cell(const char *s)
{
    kf_buf b = KF_BUF_INIT;
    size_t chars = 0;
    const char *p;

    if (!s || !*s)
        return kf_strdup("-");
    for (p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if ((c & 0xC0) != 0x80) {
            if (chars == CLI_CELL_MAX - 3 && cli_width(p) > 3) {
                kf_buf_adds(&b, "...");
                break;
            }
            chars++;
        }
        if (c < 0x20 || c == 0x7f)
            kf_buf_addc(&b, ' ');
        else
            kf_buf_addc(&b, *p);
    }
    return kf_buf_detach(&b);
}

cli_table *cli_table_new(int ncols, const char *const *headers)
{
    cli_table *t = kf_calloc(1, sizeof(*t));

    t->ncols = ncols < 1 ? 1 : ncols > CLI_MAX_COLS ? CLI_MAX_COLS : ncols;
    for (int i = 0; i < t->ncols; i++)
        t->head[i] = cli_cell(headers[i]);
    return t;
}

void cli_table_add(cli_table *t, const char *const *cells)
{
    if (t->nrows == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->cells = kf_realloc(t->cells, (size_t)t->cap * (size_t)t->ncols * sizeof(char *));
    }
    for (int i = 0; i < t->ncols; i++)
        t->cells[t->nrows * t->ncols + i] = cli_cell(cells[i]);
    t->nrows++;
}

int cli_table_rows(const cli_table *t)
{
    return t->nrows;
}

static void cli_table_line(const cli_table *t, char *const *row, const size_t *w, kf_buf *out)
{
    for (int i = 0; i < t->ncols; i++) {
        bool last = i == t->ncols - 1;
        kf_buf_adds(out, row[i]);
        if (!last)
            for (size_t k = cli_width(row[i]); k < w[i] + 2; k++)
                kf_buf_addc(out, ' ');
    }
    kf_buf_addc(out, '\n');
}

void cli_table_render(const cli_table *t, kf_buf *out)
{
    size_t w[CLI_MAX_COLS];

    for (int i = 0; i < t->ncols; i++) {
        w[i] = cli_width(t->head[i]);
        for (int r = 0; r < t->nrows; r++) {
            size_t n = cli_width(t->cells[r * t->ncols + i]);
            w[i] = n > w[i] ? n : w[i];
        }
    }
    cli_table_line(t, t->head, w, out);
    for (int r = 0; r < t->nrows; r++)
        cli_table_line(t, t->cells + (size_t)r * (size_t)t->ncols, w, out);
}

void cli_table_free(cli_table *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->ncols; i++)
        free(t->head[i]);
    for (int i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t);
}

/* ---- JSON fields -------------------------------------------------------------- */

static const cJSON *jget(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = jget(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool jnum(const cJSON *o, const char *k, double *out)
{
    const cJSON *v = jget(o, k);
    if (!cJSON_IsNumber(v))
        return false;
    *out = v->valuedouble;
    return true;
}

/* Any JSON value as a cell's text: strings as they are, numbers in %g,
 * null as "-", the rest as compact JSON.  buf must hold 256 bytes. */
static const char *cli_val(const cJSON *v, char *buf, size_t cap)
{
    char *txt;

    if (!v || cJSON_IsNull(v))
        return "-";
    if (cJSON_IsString(v))
        return v->valuestring;
    if (cJSON_IsNumber(v)) {
        snprintf(buf, cap, "%.10g", v->valuedouble);
        return buf;
    }
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v) ? "true" : "false";
    txt = cJSON_PrintUnformatted(v);
    snprintf(buf, cap, "%s", txt ? txt : "-");
    buf[kf_utf8_cut(buf, strlen(buf))] = '\0';
    free(txt);
    return buf;
}

void cli_fmt_latency(double ns, char *buf, size_t cap)
{
    if (ns < 1e3)
        snprintf(buf, cap, "%.0f ns", ns);
    else if (ns < 1e6)
        snprintf(buf, cap, "%.1f us", ns / 1e3);
    else if (ns < 1e9)
        snprintf(buf, cap, "%.2f ms", ns / 1e6);
    else
        snprintf(buf, cap, "%.2f s", ns / 1e9);
}

static const char *cli_lat(const cJSON *o, const char *k, char *buf, size_t cap)
{
    double v;
    if (!jnum(o, k, &v))
        return "-";
    cli_fmt_latency(v, buf, cap);
    return buf;
}

static const char *cli_frac(const cJSON *o, const char *k, char *buf, size_t cap)
{
    double v;
    if (!jnum(o, k, &v))
        return "-";
    snprintf(buf, cap, "%.2f", v);
    return buf;
}

/* "NAME=V NAME=V" of a params object. */
static void cli_params(const cJSON *params, char *buf, size_t cap)
{
    const cJSON *v;
    size_t o = 0;

    buf[0] = '\0';
    cJSON_ArrayForEach(v, params)
    {
        char vb[256];
        if (o + 2 >= cap)
            break;
        o += (size_t)snprintf(buf + o, cap - o, "%s%s=%s", o ? " " : "", v->string ? v->string : "?",
                              cli_val(v, vb, sizeof(vb)));
    }
    if (o >= cap)
        buf[kf_utf8_cut(buf, cap - 1)] = '\0';
}

static void cli_more(const cJSON *page, const char *cmd, kf_buf *out)
{
    const char *next = jstr(page, "next_cursor");
    if (next)
        kf_buf_addf(out, "more: %s --cursor %s\n", cmd, next);
}

/* ---- lists -------------------------------------------------------------------- */

void cli_render_jobs(const cJSON *page, kf_buf *out)
{
    static const char *const head[] = { "ID", "STATE", "KIND", "OP", "TARGET", "BEST", "FRACTION", "CREATED" };
    cli_table *t = cli_table_new(8, head);
    /* the jobs list's page holds "jobs" (the runs routes' pages: "items") */
    const cJSON *list = jget(page, "jobs") ? jget(page, "jobs") : jget(page, "items"), *it;

    cJSON_ArrayForEach(it, list)
    {
        const cJSON *best = jget(it, "best");
        const cJSON *res = jget(it, "result");
        const cJSON *src = cJSON_IsObject(best) ? best : res;
        char lat[32], fr[32], created[20] = "";
        const char *c = jstr(it, "created_at");
        const char *row[8];

        if (c)
            snprintf(created, sizeof(created), "%.19s", c);
        row[0] = jstr(it, "id");
        row[1] = jstr(it, "state");
        row[2] = jstr(it, "kind");
        row[3] = jstr(jget(it, "spec"), "op");
        row[4] = jstr(it, "target");
        row[5] = cli_lat(src, "latency_ns", lat, sizeof(lat));
        row[6] = cli_frac(src, "fraction_of_bound", fr, sizeof(fr));
        row[7] = created;
        cli_table_add(t, row);
    }
    if (cli_table_rows(t) == 0)
        kf_buf_adds(out, "no jobs\n");
    else
        cli_table_render(t, out);
    cli_table_free(t);
    cli_more(page, "kforge jobs", out);
}

void cli_render_events(const cJSON *doc, kf_buf *out)
{
    static const char *const head[] = { "ID", "AT", "TYPE", "FROM", "TO", "ATTEMPT", "DETAIL" };
    cli_table *t = cli_table_new(7, head);
    const cJSON *ev;

    cJSON_ArrayForEach(ev, jget(doc, "events"))
    {
        char id[32], att[32], detail[256], at[24] = "";
        const char *a = jstr(ev, "created_at");
        const char *row[7];
        if (a)
            snprintf(at, sizeof(at), "%.23s", a);
        row[0] = cli_val(jget(ev, "id"), id, sizeof(id));
        row[1] = at;
        row[2] = jstr(ev, "type");
        row[3] = jstr(ev, "from_state");
        row[4] = jstr(ev, "to_state");
        row[5] = cli_val(jget(ev, "attempt"), att, sizeof(att));
        row[6] = cli_val(jget(ev, "detail"), detail, sizeof(detail));
        cli_table_add(t, row);
    }
    if (cli_table_rows(t) == 0)
        kf_buf_adds(out, "no events\n");
    else
        cli_table_render(t, out);
    cli_table_free(t);
}

void cli_render_iterations(const cJSON *page, kf_buf *out)
{
    static const char *const head[] = { "SEQ", "ATTEMPT", "ACTION", "LATENCY", "FRACTION", "CORRECT", "BEST",
                                        "PARAMS", "REASON" };
    cli_table *t = cli_table_new(9, head);
    const cJSON *it;

    cJSON_ArrayForEach(it, jget(page, "items"))
    {
        char seq[32], att[32], lat[32], fr[32], best[32], ok[32], params[256];
        const char *row[9];
        cli_params(jget(it, "params"), params, sizeof(params));
        row[0] = cli_val(jget(it, "seq"), seq, sizeof(seq));
        row[1] = cli_val(jget(it, "attempt"), att, sizeof(att));
        row[2] = jstr(it, "action");
        row[3] = cli_lat(it, "latency_ns", lat, sizeof(lat));
        row[4] = cli_frac(it, "fraction_of_bound", fr, sizeof(fr));
        row[5] = cli_val(jget(it, "correct"), ok, sizeof(ok));
        row[6] = cli_lat(it, "best_so_far_ns", best, sizeof(best));
        row[7] = params;
        row[8] = jstr(it, "reason");
        cli_table_add(t, row);
    }
    if (cli_table_rows(t) == 0)
        kf_buf_adds(out, "no iterations\n");
    else
        cli_table_render(t, out);
    cli_table_free(t);
    cli_more(page, "kforge iterations ID", out);
}

void cli_render_iteration(const cJSON *it, int what, kf_buf *out)
{
    static const char *const keys[] = { "seq", "attempt", "action", "reason", "correct", "created_at" };
    const cJSON *f;
    char buf[256], params[1024];

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        char *cell = cli_cell(cli_val(jget(it, keys[i]), buf, sizeof(buf)));
        kf_buf_addf(out, "%-12s %s\n", keys[i], cell);
        free(cell);
    }
    cli_params(jget(it, "params"), params, sizeof(params));
    kf_buf_addf(out, "%-12s %s\n", "params", params[0] ? params : "-");
    kf_buf_addf(out, "%-12s %s\n", "latency", cli_lat(it, "latency_ns", buf, sizeof(buf)));
    kf_buf_addf(out, "%-12s %s\n", "fraction", cli_frac(it, "fraction_of_bound", buf, sizeof(buf)));
    kf_buf_addf(out, "%-12s %s\n", "best so far", cli_lat(it, "best_so_far_ns", buf, sizeof(buf)));
    kf_buf_addf(out, "%-12s %s\n", "validation", cli_val(jget(it, "validation"), buf, sizeof(buf)));
    cJSON_ArrayForEach(f, jget(it, "findings"))
    {
        char *msg = cli_cell(jstr(f, "message"));
        kf_buf_addf(out, "%-12s %s %s: %s\n", "finding", jstr(f, "code") ? jstr(f, "code") : "-",
                    jstr(f, "severity") ? jstr(f, "severity") : "", msg);
        free(msg);
    }
    if (what == 1 || what == 2) {
        const char *text = jstr(it, what == 1 ? "source" : "source_diff");
        kf_buf_addf(out, "\n%s", text ? text : what == 1 ? "(no source kept)\n" : "(no diff: the first iteration)\n");
        if (text && *text && text[strlen(text) - 1] != '\n')
            kf_buf_addc(out, '\n');
    }
}

void cli_render_artifacts(const cJSON *list, kf_buf *out)
{
    static const char *const head[] = { "NAME", "SEQ", "ATTEMPT", "FINAL", "SIZE", "SHA256", "CONTENT-TYPE" };
    cli_table *t = cli_table_new(7, head);
    const cJSON *a;

    cJSON_ArrayForEach(a, jget(list, "items"))
    {
        char seq[32], att[32], size[32], sha[20] = "";
        const char *s = jstr(a, "sha256");
        const char *row[7];
        if (s)
            snprintf(sha, sizeof(sha), "%.12s", s);
        row[0] = jstr(a, "name");
        row[1] = cli_val(jget(a, "seq"), seq, sizeof(seq));
        row[2] = cli_val(jget(a, "attempt"), att, sizeof(att));
        row[3] = cJSON_IsTrue(jget(a, "final")) ? "final" : "";
        row[4] = cli_val(jget(a, "size"), size, sizeof(size));
        row[5] = sha;
        row[6] = jstr(a, "content_type");
        cli_table_add(t, row);
    }
    if (cli_table_rows(t) == 0)
        kf_buf_adds(out, "no artifacts\n");
    else
        cli_table_render(t, out);
    cli_table_free(t);
}

/* ---- the kernel library ------------------------------------------------------- */

void cli_render_library(const cJSON *page, kf_buf *out)
{
    static const char *const head[] = { "ENTRY", "OP", "TARGET", "DTYPE", "SHAPE", "LATENCY", "FRACTION", "PARAMS",
                                        "UPDATED" };
    cli_table *t = cli_table_new(9, head);
    const cJSON *it;

    cJSON_ArrayForEach(it, jget(page, "items"))
    {
        char lat[32], fr[32], shape[256], params[256], updated[20] = "";
        const char *u = jstr(it, "updated_at");
        const char *row[9];

        if (u)
            snprintf(updated, sizeof(updated), "%.19s", u);
        cli_params(jget(it, "params"), params, sizeof(params));
        row[0] = jstr(it, "id");
        row[1] = jstr(it, "op");
        row[2] = jstr(it, "target");
        row[3] = jstr(it, "dtype");
        row[4] = cli_val(jget(it, "shape"), shape, sizeof(shape));
        row[5] = cli_lat(it, "latency_ns", lat, sizeof(lat));
        row[6] = cli_frac(it, "fraction_of_bound", fr, sizeof(fr));
        row[7] = params;
        row[8] = updated;
        cli_table_add(t, row);
    }
    if (cli_table_rows(t) == 0)
        kf_buf_adds(out, "no library entries\n");
    else
        cli_table_render(t, out);
    cli_table_free(t);
    cli_more(page, "kforge library list", out);
}

/* An error ratio as a signed percent ("+2.1%"), or "-". */
static const char *cli_pct(const cJSON *o, const char *k, bool sign, char *buf, size_t cap)
{
    double v;
    if (!jnum(o, k, &v))
        return "-";
    snprintf(buf, cap, sign ? "%+.1f%%" : "%.1f%%", v * 100);
    return buf;
}

void cli_render_calibration(const cJSON *doc, kf_buf *out)
{
    static const char *const head[] = { "OP", "TARGET", "COUNT", "MEDIAN|ERR|", "MEAN|ERR|", "BIAS", "WORST",
                                        "WORST JOB" };
    static const char *const lhead[] = { "LOC", "OP", "TARGET", "DEVICE", "SIM", "SIM-DEVICE", "JOB" };
    cli_table *t = cli_table_new(8, head), *lt = cli_table_new(7, lhead);
    const cJSON *g, *l;

    cJSON_ArrayForEach(g, jget(doc, "groups"))
    {
        char cnt[256], med[32], mean[32], bias[32], worst[32];
        const cJSON *w = cJSON_GetArrayItem(jget(g, "worst"), 0);
        const char *row[8];
        row[0] = jstr(g, "op");
        row[1] = jstr(g, "target");
        row[2] = cli_val(jget(g, "count"), cnt, sizeof(cnt));
        row[3] = cli_pct(g, "median_abs_error", false, med, sizeof(med));
        row[4] = cli_pct(g, "mean_abs_error", false, mean, sizeof(mean));
        row[5] = cli_pct(g, "bias", true, bias, sizeof(bias));
        row[6] = cli_pct(w, "error", true, worst, sizeof(worst));
        row[7] = jstr(w, "job_id");
        cli_table_add(t, row);
    }
    if (cli_table_rows(t) == 0) {
        kf_buf_adds(out, "no calibration records (a neuron job's device profile makes one)\n");
    } else {
        kf_buf_adds(out, "error = simulated time / device median latency - 1 (bias > 0: the simulator predicts "
                         "slower)\n");
        cli_table_render(t, out);
    }
    cJSON_ArrayForEach(l, jget(doc, "worst_lines"))
    {
        char dev[32], sim[32], diff[40];
        double dv = 0;
        const char *row[7];
        row[0] = jstr(l, "loc");
        row[1] = jstr(l, "op");
        row[2] = jstr(l, "target");
        row[3] = cli_lat(l, "device_ns", dev, sizeof(dev));
        row[4] = cli_lat(l, "sim_ns", sim, sizeof(sim));
        if (jnum(l, "diff_ns", &dv)) {
            /* signed; under half a ns prints as 0 */
            cli_fmt_latency(dv < 0 ? -dv : dv, diff + 1, sizeof(diff) - 1);
            if (dv <= -0.5)
                diff[0] = '-';
            else if (dv >= 0.5)
                diff[0] = '+';
            else
                diff[0] = ' ';
            row[5] = diff[0] == ' ' ? diff + 1 : diff;
        } else {
            row[5] = NULL;
        }
        row[6] = jstr(l, "job_id");
        cli_table_add(lt, row);
    }
    if (cli_table_rows(lt) > 0) {
        kf_buf_adds(out, "\nworst lines (device instruction table vs simulated time per line):\n");
        cli_table_render(lt, out);
    }
    cli_table_free(t);
    cli_table_free(lt);
}

/* The members of two provenance objects that differ, "k: a -> b; ...". */
static void cli_prov_diff(const cJSON *a, const cJSON *b, char *buf, size_t cap)
{
    const cJSON *v;
    size_t o = 0;

    buf[0] = '\0';
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *walk = pass ? a : b, *other = pass ? b : a;
        cJSON_ArrayForEach(v, walk)
        {
            const cJSON *w = jget(other, v->string);
            char x[256], y[256];
            if (!v->string || strcmp(v->string, "worker") == 0 || (pass && w) || (w && cJSON_Compare(v, w, true)))
                continue;
            if (o + 2 >= cap)
                break;
            o += (size_t)snprintf(buf + o, cap - o, "%s%s: %s -> %s", o ? "; " : "", v->string,
                                  cli_val(pass ? v : w, x, sizeof(x)), cli_val(pass ? w : v, y, sizeof(y)));
        }
    }
    if (o >= cap)
        buf[kf_utf8_cut(buf, cap - 1)] = '\0';
}

void cli_render_library_entry(const cJSON *e, kf_buf *out)
{
    static const char *const head[] = { "AT", "WHY", "BEFORE", "AFTER", "JOB", "PROVENANCE CHANGED" };
    cli_table *t = cli_table_new(6, head);
    const cJSON *h;
    char lat[32], fr[32], shape[256], params[256], prov[256];
    double seq = 0, att = 0;

    jnum(e, "iteration", &seq);
    jnum(e, "attempt", &att);
    cli_params(jget(e, "params"), params, sizeof(params));
    kf_buf_addf(out, "entry %s: %s (%s) on %s, %s, %s\n", jstr(e, "id") ? jstr(e, "id") : "?",
                jstr(e, "op") ? jstr(e, "op") : "?", jstr(e, "entry") ? jstr(e, "entry") : "?",
                jstr(e, "target") ? jstr(e, "target") : "?", jstr(e, "dtype") ? jstr(e, "dtype") : "?",
                jstr(e, "backend") ? jstr(e, "backend") : "?");
    kf_buf_addf(out, "shape: %s\n", cli_val(jget(e, "shape"), shape, sizeof(shape)));
    kf_buf_addf(out, "best: %s, %s of the bound, params %s\n", cli_lat(e, "latency_ns", lat, sizeof(lat)),
                cli_frac(e, "fraction_of_bound", fr, sizeof(fr)), params[0] ? params : "(none)");
    kf_buf_addf(out, "from: job %s attempt %.0f iteration %.0f\n", jstr(e, "job_id") ? jstr(e, "job_id") : "?", att,
                seq);
    kf_buf_addf(out, "provenance: %s\n", cli_val(jget(e, "provenance"), prov, sizeof(prov)));
    kf_buf_addf(out, "shared: %s; kernel: %s\n\n", cJSON_IsTrue(jget(e, "shared")) ? "yes (every user reads it)"
                                                                                 : "no (its owner and admins)",
                jstr(e, "kernel_url") ? jstr(e, "kernel_url") : "-");
    cJSON_ArrayForEach(h, jget(e, "history"))
    {
        char before[32], after[32], at[20] = "", diff[256];
        const char *a = jstr(h, "at");
        const char *row[6];
        if (a)
            snprintf(at, sizeof(at), "%.19s", a);
        cli_prov_diff(jget(h, "old_provenance"), jget(h, "new_provenance"), diff, sizeof(diff));
        row[0] = at;
        row[1] = jstr(h, "reason");
        row[2] = cli_lat(h, "old_latency_ns", before, sizeof(before));
        row[3] = cli_lat(h, "new_latency_ns", after, sizeof(after));
        row[4] = jstr(h, "new_job_id");
        row[5] = cJSON_IsObject(jget(h, "old_provenance")) ? (diff[0] ? diff : "(same)") : "-";
        cli_table_add(t, row);
    }
    kf_buf_adds(out, "history:\n");
    cli_table_render(t, out);
    cli_table_free(t);
}

/* ---- compare ---------------------------------------------------------------- */

/* A table of FIELD then one column per job, from {"field": [vA, vB, ...]}
 * (or {"field": {"values": [...], "delta": [...]}} with deltas). */
static void cli_compare_fields(const cJSON *obj, const char *title, const char *const *jobs, int n, bool deltas,
                               kf_buf *out)
{
    const char *head[CLI_MAX_COLS];
    char names[4][16];
    cli_table *t;
    const cJSON *f;
    int nc = 1 + n + (deltas ? n - 1 : 0);

    head[0] = "FIELD";
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "%.8s", jobs[i] ? jobs[i] : "?");
        head[1 + i] = names[i];
    }
    for (int i = 1; deltas && i < n; i++)
        head[n + i] = i == 1 ? "DELTA 2-1" : i == 2 ? "DELTA 3-1" : "DELTA 4-1";
    t = cli_table_new(nc, head);
    cJSON_ArrayForEach(f, obj)
    {
        const cJSON *vals = deltas ? jget(f, "values") : f, *dl = deltas ? jget(f, "delta") : NULL;
        char cells[CLI_MAX_COLS][256];
        const char *row[CLI_MAX_COLS];
        row[0] = f->string;
        for (int i = 0; i < n; i++)
            row[1 + i] = cli_val(cJSON_GetArrayItem(vals, i), cells[1 + i], sizeof(cells[1 + i]));
        for (int i = 1; deltas && i < n; i++)
            row[n + i] = cli_val(cJSON_GetArrayItem(dl, i), cells[n + i], sizeof(cells[n + i]));
        cli_table_add(t, row);
    }
    kf_buf_addf(out, "\n%s:\n", title);
    if (cli_table_rows(t) == 0)
        kf_buf_adds(out, "  none\n");
    else
        cli_table_render(t, out);
    cli_table_free(t);
}

void cli_render_compare(const cJSON *cmp, bool with_diff, kf_buf *out)
{
    static const char *const head[] = { "JOB", "KIND", "OP", "TARGET", "STATE", "BEST", "FRACTION", "SEQ" };
    cli_table *t = cli_table_new(8, head);
    const char *ids[4] = { NULL, NULL, NULL, NULL };
    const cJSON *j, *f;
    int n = 0;

    cJSON_ArrayForEach(j, jget(cmp, "jobs"))
    {
        const cJSON *best = jget(j, "best");
        char lat[32], fr[32], seq[32];
        const char *row[8];
        if (n == 4)
            break;
        ids[n++] = jstr(j, "id");
        row[0] = jstr(j, "id");
        row[1] = jstr(j, "kind");
        row[2] = jstr(j, "op");
        row[3] = jstr(j, "target");
        row[4] = jstr(j, "state");
        row[5] = cli_lat(best, "latency_ns", lat, sizeof(lat));
        row[6] = cli_frac(best, "fraction_of_bound", fr, sizeof(fr));
        row[7] = cli_val(jget(best, "seq"), seq, sizeof(seq));
        cli_table_add(t, row);
    }
    cli_table_render(t, out);
    cli_table_free(t);
    if (n == 0)
        return;
    cli_compare_fields(jget(cmp, "params_differ"), "Params that differ", ids, n, false, out);
    cli_compare_fields(jget(cmp, "profile_deltas"), "Profile (deltas against the first job)", ids, n, true, out);
    kf_buf_adds(out, "\nFindings only in one:\n");
    {
        int shown = 0;
        cJSON_ArrayForEach(f, jget(cmp, "findings_only"))
        {
            const cJSON *code;
            if (!cJSON_GetArraySize(f))
                continue;
            kf_buf_addf(out, "  %.8s:", f->string ? f->string : "?");
            cJSON_ArrayForEach(code, f)
            {
                char *c = cli_cell(cJSON_IsString(code) ? code->valuestring : NULL);
                kf_buf_addf(out, " %s", c);
                free(c);
            }
            kf_buf_addc(out, '\n');
            shown++;
        }
        if (!shown)
            kf_buf_adds(out, "  none\n");
    }
    cli_compare_fields(jget(cmp, "provenance_differ"), "Provenance differences", ids, n, false, out);
    if (with_diff) {
        const cJSON *d;
        int i = 0;
        cJSON_ArrayForEach(d, jget(cmp, "source_diff"))
        {
            i++;
            kf_buf_addf(out, "\nSource diff, job %d against job 1:\n", i + 1);
            if (cJSON_IsString(d) && *d->valuestring) {
                kf_buf_adds(out, d->valuestring);
                if (d->valuestring[strlen(d->valuestring) - 1] != '\n')
                    kf_buf_addc(out, '\n');
            } else {
                kf_buf_adds(out, "(same source)\n");
            }
        }
    }
}

void cli_render_job(const cJSON *job, kf_buf *out)
{
    const cJSON *res = jget(job, "result");
    const cJSON *best = jget(res, "best");
    const char *err = jstr(job, "last_error");
    double att = 0, max = 0, lat, fr, seq;
    char l[32];

    jnum(job, "attempt", &att);
    jnum(job, "max_attempts", &max);
    kf_buf_addf(out, "job %s: %s (%s", jstr(job, "id") ? jstr(job, "id") : "?",
                jstr(job, "state") ? jstr(job, "state") : "?", jstr(job, "kind") ? jstr(job, "kind") : "?");
    if (jstr(jget(job, "spec"), "op"))
        kf_buf_addf(out, " %s", jstr(jget(job, "spec"), "op"));
    kf_buf_addf(out, " on %s, attempt %.0f of %.0f)\n", jstr(job, "target") ? jstr(job, "target") : "?", att, max);
    if (jnum(res, "latency_ns", &lat) || jnum(best, "latency_ns", &lat)) {
        cli_fmt_latency(lat, l, sizeof(l));
        kf_buf_addf(out, "best: %s", l);
        if (jnum(res, "fraction_of_bound", &fr) || jnum(best, "fraction_of_bound", &fr))
            kf_buf_addf(out, ", %.2f of the bound", fr);
        if (jnum(job, "best_iteration", &seq) || jnum(best, "iteration", &seq))
            kf_buf_addf(out, ", iteration %.0f", seq);
        kf_buf_addc(out, '\n');
    }
    if (err) {
        char *c = cli_cell(err);
        kf_buf_addf(out, "error: %s\n", c);
        free(c);
    }
}

/* ---- progress ------------------------------------------------------------------ */

void cli_progress_init(cli_progress *p, bool tty)
{
    memset(p, 0, sizeof(*p));
    p->tty = tty;
    p->seq = -1;
    p->fraction = -1;
    snprintf(p->state, sizeof(p->state), "waiting");
}

static void cli_progress_bar(const cli_progress *p, kf_buf *out)
{
    char lat[32];
    size_t start = out->len;
    int fill = p->fraction < 0 ? 0 : p->fraction >= 1 ? 20 : (int)(p->fraction * 20.0 + 0.5);

    kf_buf_addf(out, "\r%-9s attempt %d", p->state, p->attempt);
    if (p->seq >= 0)
        kf_buf_addf(out, "  iteration %ld", p->seq);
    if (p->best_ns > 0) {
        cli_fmt_latency(p->best_ns, lat, sizeof(lat));
        kf_buf_addf(out, "  best %s", lat);
    }
    if (p->fraction >= 0) {
        kf_buf_addf(out, "  %.2f of bound [", p->fraction);
        for (int i = 0; i < 20; i++)
            kf_buf_addc(out, i < fill ? '#' : '.');
        kf_buf_addc(out, ']');
    }
    /* pad over what a longer earlier line left */
    while (out->len - start < 80)
        kf_buf_addc(out, ' ');
}

void cli_progress_event(cli_progress *p, const char *type, const cJSON *data, kf_buf *out)
{
    double v;

    if (jnum(data, "attempt", &v))
        p->attempt = (int)v;
    if (strcmp(type, "state") == 0) {
        const char *to = jstr(data, "to");
        const char *from = jstr(data, "from");
        if (to)
            snprintf(p->state, sizeof(p->state), "%s", to);
        if (!p->tty)
            kf_buf_addf(out, "state: %s -> %s (attempt %d)\n", from ? from : "-", to ? to : "-", p->attempt);
    } else if (strcmp(type, "iteration") == 0) {
        double lat = 0, fr = -1, best = 0;
        bool correct = cJSON_IsTrue(jget(data, "correct"));
        bool has_lat = jnum(data, "latency_ns", &lat);
        char params[256], l1[32], l2[32];

        p->n_iterations++;
        if (jnum(data, "seq", &v))
            p->seq = (long)v;
        jnum(data, "fraction_of_bound", &fr);
        if (!jnum(data, "best_so_far_ns", &best) && correct && has_lat && (p->best_ns <= 0 || lat < p->best_ns))
            best = lat;
        if (best > 0 && (p->best_ns <= 0 || best <= p->best_ns)) {
            if (correct && has_lat && lat <= best)
                p->fraction = fr;
            p->best_ns = best;
        }
        if (!p->tty) {
            cli_params(jget(data, "params"), params, sizeof(params));
            if (has_lat)
                cli_fmt_latency(lat, l1, sizeof(l1));
            else
                snprintf(l1, sizeof(l1), "no latency");
            if (p->seq >= 0)
                kf_buf_addf(out, "iteration %ld", p->seq);
            else
                kf_buf_adds(out, "iteration ?");
            kf_buf_addf(out, " (attempt %d): %s", p->attempt, l1);
            if (fr >= 0)
                kf_buf_addf(out, ", %.2f of bound", fr);
            kf_buf_addf(out, ", %s", correct ? "correct" : "not correct");
            if (p->best_ns > 0) {
                cli_fmt_latency(p->best_ns, l2, sizeof(l2));
                kf_buf_addf(out, "; best %s", l2);
            }
            if (params[0]) {
                char *c = cli_cell(params);
                kf_buf_addf(out, "; %s", c);
                free(c);
            }
            kf_buf_addc(out, '\n');
        }
    } else {
        return;
    }
    if (p->tty)
        cli_progress_bar(p, out);
}
