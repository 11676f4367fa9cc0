/* cli_batch — `kforge batch` (see cli_batch.h). */
#include "cli_batch.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli_http.h"
#include "cli/cli_out.h"
#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_error.h"
#include "kf_num.h"
#include "kf_sse_client.h"

enum { B_OK = 0, B_REFUSED = 1, B_USAGE = 2, B_UNREACHABLE = 3, B_TIMEOUT = 4 };

#define B_MAX_TARGETS 8
#define B_MAX_DTYPES 16

typedef struct batch_opts {
    const char *idem, *library, *name, *baseline, *format, *cursor, *threshold;
    const char *targets[B_MAX_TARGETS], *dtypes[B_MAX_DTYPES];
    int         n_targets, n_dtypes, priority, limit, timeout_s;
    bool        wait, json, quiet;
} batch_opts;

static const char batch_usage_text[] =
    "usage: kforge batch submit FILE|- [--idempotency-key K] [--wait [--timeout S]]\n"
    "       kforge batch submit --library all|OP[,OP...] --target T [--target T ...] [--dtype D ...]\n"
    "                           [--priority N] [--name NAME] [--idempotency-key K] [--wait [--timeout S]]\n"
    "       kforge batch status ID [--wait [--timeout S]]\n"
    "       kforge batch list [--limit N] [--cursor C]\n"
    "       kforge batch cancel ID\n"
    "       kforge batch report ID [--baseline ID] [--threshold X] [--format md|csv|json]\n"
    "\n"
    "Batches of jobs (POST /v1/batches, docs/batches.md): a job template times a matrix of op,\n"
    "shapes, dtype and target, or every op of kforge's kernel library at its declared shapes.\n"
    "\n"
    "submit   FILE (JSON: {\"template\": {...}, \"matrix\": {...}}, or the library form; - reads\n"
    "         stdin), or --library all (or a comma-separated list of ops) with one --target per\n"
    "         target (--dtype: bfloat16 when none is given).  --priority 0..4 (default 2: below\n"
    "         interactive jobs).  Prints the batch's id and size; --wait then follows it as\n"
    "         `status --wait` does.\n"
    "status   The batch's roll-up: counts by state and a progress bar (on a terminal; plain lines\n"
    "         otherwise), started/finished.  --wait follows the batch's event stream\n"
    "         (GET /v1/batches/ID/stream, resumed with Last-Event-ID after a drop) until every job\n"
    "         has finished; exit 0 when all succeeded, 1 otherwise, 4 when --timeout (default\n"
    "         3600 s) passed first.\n"
    "list     Your batches, newest first (admins: everyone's); `more:` gives the next page.\n"
    "cancel   Cancel every job of the batch that has not finished (running ones are asked to stop).\n"
    "report   Per entry the baseline's and this batch's best latency, their ratio and a verdict\n"
    "         (improved, regressed, unchanged within the threshold (default 0.03), failed, new,\n"
    "         missing, pending) and the provenance that differs.  Baseline: --baseline, else the\n"
    "         newest earlier finished batch of yours over the same matrix.  --format md (default),\n"
    "         csv or json, printed as the API gives it.\n"
    "\n"
    "Options of every command: --json (the API's JSON on stdout, as it came), --quiet, --help.\n"
    "Exit status: 0 ok, 1 refused by the server or a job did not succeed (--wait), 2 usage,\n"
    "3 API unreachable, 4 --timeout passed while waiting.\n";

/* ---- requests ---------------------------------------------------------------- */

/* One request; *out (may be NULL) the parsed answer; with --json the
 * answer is printed as it came.  Returns the exit code. */
static int batch_call(const batch_opts *o, const char *method, const char *path, const char *body, cJSON **out)
{
    cli_resp r = CLI_RESP_INIT;
    int code = B_OK;

    if (cli_http(method, path, body, o->idem, &r) != 0) {
        cli_print_unreachable(&r);
        code = B_UNREACHABLE;
    } else if (r.status >= 400) {
        cli_print_problem(&r);
        code = B_REFUSED;
    } else {
        if (o->json && !o->quiet)
            printf("%s%s", r.body.data, (r.body.len && r.body.data[r.body.len - 1] == '\n') ? "" : "\n");
        if (out && !(*out = cJSON_Parse(r.body.data))) {
            fprintf(stderr, "kforge: %s answered %ld with a body that is not JSON\n", path, r.status);
            code = B_REFUSED;
        }
    }
    cli_resp_release(&r);
    return code;
}

static bool batch_id_ok(const char *id)
{
    if (strlen(id) == 36 && strspn(id, "0123456789abcdefABCDEF-") == 36)
        return true;
    fprintf(stderr, "kforge: '%s' is not a batch id (a UUID like 0b6c1f3e-...)\n", id);
    return false;
}

static int batch_num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : 0;
}

static const char *batch_str(const cJSON *o, const char *k, const char *dflt)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
    return s ? s : dflt;
}

/* ---- progress ---------------------------------------------------------------------- */

/* One line of a roll-up (GET /v1/batches/ID or the stream's "batch"
 * event): "[#####.....]  42%  4200/10000  succeeded 4000  failed 150 ...". */
static void batch_bar(const cJSON *roll, kf_buf *out)
{
    static const char *const states[] = { "succeeded", "failed", "cancelled", "dead", "running", "retrying",
                                          "queued", NULL };
    const cJSON *counts = cJSON_GetObjectItemCaseSensitive(roll, "counts");
    const cJSON *pg = cJSON_GetObjectItemCaseSensitive(roll, "progress");
    double p = cJSON_IsNumber(pg) ? pg->valuedouble : 0;
    int n = batch_num(roll, "n_jobs"), done = 0, fill = (int)(p * 30 + 0.5);

    for (int i = 0; i < 4; i++)
        done += batch_num(counts, states[i]);
    kf_buf_addc(out, '[');
    for (int i = 0; i < 30; i++)
        kf_buf_addc(out, i < fill ? '#' : '.');
    kf_buf_addf(out, "] %3d%%  %d/%d", (int)(p * 100 + 1e-9), done, n);
    for (int i = 0; states[i]; i++) {
        int v = batch_num(counts, states[i]);
        if (v)
            kf_buf_addf(out, "  %s %d", states[i], v);
    }
}

static void batch_print_status(const cJSON *b)
{
    kf_buf line = KF_BUF_INIT;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");

    printf("batch %s%s%s%s  %s  priority %d  %s\n", batch_str(b, "id", "?"), cJSON_IsString(name) ? " (" : "",
           cJSON_IsString(name) ? name->valuestring : "", cJSON_IsString(name) ? ")" : "", batch_str(b, "state", "?"),
           batch_num(b, "priority"), batch_str(b, "source", ""));
    batch_bar(b, &line);
    printf("%s\n", line.data);
    printf("created %s  started %s  finished %s\n", batch_str(b, "created_at", "-"), batch_str(b, "started_at", "-"),
           batch_str(b, "finished_at", "-"));
    kf_buf_release(&line);
}

typedef struct batch_follow {
    bool           tty, quiet, ended, drew;
    cli_stream_io *io;
} batch_follow;

static kf_code batch_follow_event(void *ud, const kf_sse_event *ev, kf_err *err)
{
    batch_follow *f = ud;
    cJSON *data;
    kf_buf b = KF_BUF_INIT;

    (void)err;
    if (strcmp(ev->type, "end") == 0) {
        f->ended = true;
        f->io->stop = true;
        return KF_OK;
    }
    if (strcmp(ev->type, "batch") != 0 || f->quiet)
        return KF_OK;   /* a job's own events: the roll-up that follows says it */
    data = cJSON_ParseWithLength(ev->data, ev->data_len);
    if (data) {
        batch_bar(data, &b);
        if (f->tty)
            fprintf(stderr, "\r%s\033[K", b.data);
        else
            fprintf(stderr, "%s\n", b.data);
        fflush(stderr);
        f->drew = true;
    }
    kf_buf_release(&b);
    cJSON_Delete(data);
    return KF_OK;
}

/* Follow the batch's stream until its end; then its status.  Exit 0 when
 * every job succeeded. */
static int batch_wait(const batch_opts *o, const char *id)
{
    char *path = kf_asprintf("/v1/batches/%s/stream", id), *bp = kf_asprintf("/v1/batches/%s?limit=1", id);
    time_t deadline = time(NULL) + o->timeout_s;
    batch_follow f = { isatty(STDERR_FILENO), o->quiet, false, false, NULL };
    cli_stream_io io;
    int code = B_OK;

    memset(&io, 0, sizeof(io));
    f.io = &io;
    io.parser = kf_sse_new(0, 0);
    io.cb = batch_follow_event;
    io.ud = &f;
    io.idle_seconds = 45;   /* three missed heartbeats */
    {
        char *what = kf_asprintf("batch %s", id);
        switch (cli_http_follow(path, what, deadline, &io)) {
        case CLI_FOLLOW_ENDED: break;
        case CLI_FOLLOW_TIMEOUT:
            fprintf(stderr, "%skforge: batch %s still open after %d s (--timeout)\n", f.tty && f.drew ? "\n" : "", id,
                    o->timeout_s);
            code = B_TIMEOUT;
            break;
        case CLI_FOLLOW_REFUSED: code = B_REFUSED; break;
        case CLI_FOLLOW_UNREACHABLE: code = B_UNREACHABLE; break;
        }
        free(what);
    }
    if (f.tty && f.drew && !o->quiet)
        fputc('\n', stderr);
    if (f.ended) {
        cJSON *b = NULL;
        batch_opts q = *o;
        q.idem = NULL;
        code = batch_call(&q, "GET", bp, NULL, &b);
        if (code == B_OK) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(b, "counts");
            if (!o->json && !o->quiet)
                batch_print_status(b);
            code = batch_num(c, "succeeded") == batch_num(b, "n_jobs") ? B_OK : B_REFUSED;
        }
        cJSON_Delete(b);
    }
    kf_sse_free(io.parser);
    free(path);
    free(bp);
    return code;
}

/* ---- commands ------------------------------------------------------------------------- */

static char *batch_read(const char *file)
{
    FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
    kf_buf b = KF_BUF_INIT;
    char chunk[8192];
    size_t n;

    if (!f) {
        fprintf(stderr, "kforge: cannot open '%s': %s\n", file, strerror(errno));
        return NULL;
    }
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        kf_buf_add(&b, chunk, n);
    if (f != stdin)
        fclose(f);
    return kf_buf_detach(&b);
}

/* The library form's body from the options. */
static char *batch_library_body(const batch_opts *o)
{
    cJSON *b = cJSON_CreateObject(), *t = cJSON_AddArrayToObject(b, "targets");
    char *s;

    if (strcmp(o->library, "all") == 0) {
        cJSON_AddStringToObject(b, "library", "all");
    } else {
        cJSON *ops = cJSON_AddArrayToObject(b, "library");
        char *copy = kf_strdup(o->library), *save = NULL;
        for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save))
            cJSON_AddItemToArray(ops, cJSON_CreateString(p));
        free(copy);
    }
    for (int i = 0; i < o->n_targets; i++)
        cJSON_AddItemToArray(t, cJSON_CreateString(o->targets[i]));
    if (o->n_dtypes) {
        cJSON *d = cJSON_AddArrayToObject(b, "dtypes");
        for (int i = 0; i < o->n_dtypes; i++)
            cJSON_AddItemToArray(d, cJSON_CreateString(o->dtypes[i]));
    }
    if (o->priority >= 0)
        cJSON_AddNumberToObject(b, "priority", o->priority);
    if (o->name)
        cJSON_AddStringToObject(b, "name", o->name);
    s = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    return s;
}

static int batch_submit(const batch_opts *o, const char *file)
{
    char *body;
    cJSON *b = NULL;
    int code;

    if (o->library && file) {
        fprintf(stderr, "kforge: give FILE or --library, not both\n");
        return B_USAGE;
    }
    if (o->library && o->n_targets == 0) {
        fprintf(stderr, "kforge: --library needs at least one --target (trn1, inf2, trn2, trn3)\n");
        return B_USAGE;
    }
    if (!o->library && !file) {
        fprintf(stderr, "kforge: give a batch FILE (- for stdin) or --library all --target T\n");
        return B_USAGE;
    }
    if (!o->library && (o->n_targets || o->n_dtypes || o->priority >= 0 || o->name)) {
        fprintf(stderr, "kforge: --target, --dtype, --priority and --name go with --library; a FILE says them "
                        "itself\n");
        return B_USAGE;
    }
    body = o->library ? batch_library_body(o) : batch_read(file);
    if (!body)
        return B_USAGE;
    code = batch_call(o, "POST", "/v1/batches", body, &b);
    free(body);
    if (code == B_OK) {
        const char *id = batch_str(b, "id", NULL);
        if (!id) {
            fprintf(stderr, "kforge: the API's answer has no batch id\n");
            code = B_REFUSED;
        } else {
            if (!o->json && !o->quiet)
                printf("batch %s %d jobs %s\n", id, batch_num(b, "n_jobs"), batch_str(b, "state", ""));
            fflush(stdout);
            if (o->wait)
                code = batch_wait(o, id);
        }
    }
    cJSON_Delete(b);
    return code;
}

static int batch_status(const batch_opts *o, const char *id)
{
    char *path;
    cJSON *b = NULL;
    int code;

    if (o->wait)
        return batch_wait(o, id);
    path = kf_asprintf("/v1/batches/%s?limit=1", id);
    code = batch_call(o, "GET", path, NULL, &b);
    if (code == B_OK && !o->json && !o->quiet)
        batch_print_status(b);
    cJSON_Delete(b);
    free(path);
    return code;
}

static int batch_list(const batch_opts *o)
{
    static const char *const head[] = { "ID", "NAME", "STATE", "JOBS", "DONE", "SUCCEEDED", "FAILED", "CREATED" };
    kf_buf path = KF_BUF_INIT;
    cJSON *page = NULL;
    int code;

    kf_buf_adds(&path, "/v1/batches?");
    if (o->limit)
        kf_buf_addf(&path, "limit=%d&", o->limit);
    if (o->cursor) {
        CURL *esc = curl_easy_init();
        char *c = curl_easy_escape(esc, o->cursor, 0);
        kf_buf_addf(&path, "cursor=%s&", c);
        curl_free(c);
        curl_easy_cleanup(esc);
    }
    path.data[--path.len] = '\0';
    code = batch_call(o, "GET", path.data, NULL, &page);
    if (code == B_OK && !o->json && !o->quiet) {
        cli_table *t = cli_table_new(8, head);
        kf_buf out = KF_BUF_INIT;
        const cJSON *it;
        const cJSON *next = cJSON_GetObjectItemCaseSensitive(page, "next_cursor");
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(page, "items"))
        {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "counts");
            const cJSON *pg = cJSON_GetObjectItemCaseSensitive(it, "progress");
            char jobs[16], done[16], ok[16], bad[16];
            const char *cells[8];
            snprintf(jobs, sizeof(jobs), "%d", batch_num(it, "n_jobs"));
            snprintf(done, sizeof(done), "%d%%", (int)((cJSON_IsNumber(pg) ? pg->valuedouble : 0) * 100 + 1e-9));
            snprintf(ok, sizeof(ok), "%d", batch_num(c, "succeeded"));
            snprintf(bad, sizeof(bad), "%d", batch_num(c, "failed") + batch_num(c, "dead"));
            cells[0] = batch_str(it, "id", "");
            cells[1] = batch_str(it, "name", "-");
            cells[2] = batch_str(it, "state", "");
            cells[3] = jobs;
            cells[4] = done;
            cells[5] = ok;
            cells[6] = bad;
            cells[7] = batch_str(it, "created_at", "");
            cli_table_add(t, cells);
        }
        cli_table_render(t, &out);
        fputs(out.data, stdout);
        if (cJSON_IsString(next))
            printf("more: kforge batch list --cursor %s%s\n", next->valuestring, o->limit ? " --limit N" : "");
        kf_buf_release(&out);
        cli_table_free(t);
    }
    cJSON_Delete(page);
    kf_buf_release(&path);
    return code;
}

static int batch_cancel(const batch_opts *o, const char *id)
{
    char *path = kf_asprintf("/v1/batches/%s/cancel", id);
    cJSON *b = NULL;
    int code = batch_call(o, "POST", path, NULL, &b);

    if (code == B_OK && !o->json && !o->quiet) {
        printf("batch %s: %d cancelled, %d running asked to stop\n", id, batch_num(b, "cancelled"),
               batch_num(b, "cancel_requested"));
        batch_print_status(b);
    }
    cJSON_Delete(b);
    free(path);
    return code;
}

static int batch_report(const batch_opts *o, const char *id)
{
    const char *fmt = o->json ? "json" : (o->format ? o->format : "md");
    kf_buf path = KF_BUF_INIT;
    cli_resp r = CLI_RESP_INIT;
    int code = B_OK;

    if (strcmp(fmt, "md") != 0 && strcmp(fmt, "csv") != 0 && strcmp(fmt, "json") != 0) {
        fprintf(stderr, "kforge: --format is md, csv or json\n");
        return B_USAGE;
    }
    if (o->baseline && !batch_id_ok(o->baseline))
        return B_USAGE;
    kf_buf_addf(&path, "/v1/batches/%s/report?format=%s", id, fmt);
    if (o->baseline)
        kf_buf_addf(&path, "&baseline=%s", o->baseline);
    if (o->threshold)
        kf_buf_addf(&path, "&threshold=%s", o->threshold);
    if (cli_http("GET", path.data, NULL, NULL, &r) != 0) {
        cli_print_unreachable(&r);
        code = B_UNREACHABLE;
    } else if (r.status >= 400) {
        cli_print_problem(&r);
        code = B_REFUSED;
    } else if (!o->quiet) {
        fwrite(r.body.data, 1, r.body.len, stdout);
        if (r.body.len && r.body.data[r.body.len - 1] != '\n')
            fputc('\n', stdout);
    }
    cli_resp_release(&r);
    kf_buf_release(&path);
    return code;
}

/* ---- options --------------------------------------------------------------------------- */

static bool batch_int(const char *s, const char *name, long lo, long hi, int *out)
{
    kf_err e = KF_ERR_INIT;
    long v;

    if (kf_num_long(s, lo, hi, &v, &e) != KF_OK) {
        fprintf(stderr, "kforge: --%s: %s\n", name, e.msg);
        return false;
    }
    *out = (int)v;
    return true;
}

static bool batch_threshold_ok(const char *s)
{
    char *end = NULL;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (!*s || !end || *end || errno || !(v >= 0 && v < 1)) {
        fprintf(stderr, "kforge: --threshold: a number from 0 up to (not including) 1, e.g. 0.03\n");
        return false;
    }
    return true;
}

int cli_batch_main(int argc, char **argv)
{
    enum { O_LIB = 256, O_NAME, O_BASE, O_FMT, O_THR, O_DTYPE, O_PRIO, O_JSON };
    static const struct option opts[] = {
        { "idempotency-key", required_argument, NULL, 'k' }, { "wait", no_argument, NULL, 'w' },
        { "timeout", required_argument, NULL, 't' },         { "target", required_argument, NULL, 'T' },
        { "limit", required_argument, NULL, 'L' },           { "cursor", required_argument, NULL, 'C' },
        { "quiet", no_argument, NULL, 'q' },                 { "help", no_argument, NULL, 'h' },
        { "library", required_argument, NULL, O_LIB },       { "name", required_argument, NULL, O_NAME },
        { "baseline", required_argument, NULL, O_BASE },     { "format", required_argument, NULL, O_FMT },
        { "threshold", required_argument, NULL, O_THR },     { "dtype", required_argument, NULL, O_DTYPE },
        { "priority", required_argument, NULL, O_PRIO },     { "json", no_argument, NULL, O_JSON },
        { NULL, 0, NULL, 0 },
    };
    batch_opts o;
    const char *sub;
    char **args;
    int c, n;

    memset(&o, 0, sizeof(o));
    o.priority = -1;
    o.timeout_s = 3600;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        fputs(batch_usage_text, argc < 2 ? stderr : stdout);
        return argc < 2 ? B_USAGE : B_OK;
    }
    sub = argv[1];
    optind = 2;
    while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case 'k': o.idem = optarg; break;
        case 'w': o.wait = true; break;
        case 't': ok = batch_int(optarg, "timeout", 1, 604800, &o.timeout_s); break;
        case 'T':
            if (o.n_targets == B_MAX_TARGETS) {
                fprintf(stderr, "kforge: at most %d --target\n", B_MAX_TARGETS);
                return B_USAGE;
            }
            o.targets[o.n_targets++] = optarg;
            break;
        case O_DTYPE:
            if (o.n_dtypes == B_MAX_DTYPES) {
                fprintf(stderr, "kforge: at most %d --dtype\n", B_MAX_DTYPES);
                return B_USAGE;
            }
            o.dtypes[o.n_dtypes++] = optarg;
            break;
        case 'L': ok = batch_int(optarg, "limit", 1, 200, &o.limit); break;
        case 'C': o.cursor = optarg; break;
        case 'q': o.quiet = true; break;
        case O_LIB: o.library = optarg; break;
        case O_NAME: o.name = optarg; break;
        case O_BASE: o.baseline = optarg; break;
        case O_FMT: o.format = optarg; break;
        case O_THR: ok = batch_threshold_ok(optarg); o.threshold = optarg; break;
        case O_PRIO: ok = batch_int(optarg, "priority", 0, 4, &o.priority); break;
        case O_JSON: o.json = true; break;
        case 'h': fputs(batch_usage_text, stdout); return B_OK;
        default: fputs(batch_usage_text, stderr); return B_USAGE;
        }
        if (!ok)
            return B_USAGE;
    }
    n = argc - optind;
    args = argv + optind;
    if (strcmp(sub, "submit") == 0 && n <= 1)
        return batch_submit(&o, n == 1 ? args[0] : NULL);
    if (strcmp(sub, "list") == 0 && n == 0)
        return batch_list(&o);
    if ((strcmp(sub, "status") == 0 || strcmp(sub, "cancel") == 0 || strcmp(sub, "report") == 0) && n == 1) {
        if (!batch_id_ok(args[0]))
            return B_USAGE;
        if (strcmp(sub, "status") == 0)
            return batch_status(&o, args[0]);
        if (strcmp(sub, "cancel") == 0)
            return batch_cancel(&o, args[0]);
        return batch_report(&o, args[0]);
    }
    fprintf(stderr, "kforge: batch %s: unknown subcommand or wrong arguments\n%s", sub, batch_usage_text);
    return B_USAGE;
}
