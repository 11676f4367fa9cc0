/*
 * kforge — command-line client of kforge-api, for people and scripts.
 *
 * Talks HTTP+JSON to KFORGE_API_URL with the bearer token KFORGE_TOKEN
 * (cli_http.c).  List-like answers print as tables (cli_out.c), other
 * answers as short summaries; --json prints the API's JSON as it came, on
 * every command.  `wait` and `submit --wait` follow the job's event stream
 * (GET /v1/jobs/{id}/stream, kf_sse_client) with a progress line, and
 * reconnect with Last-Event-ID when the connection drops.  Exit status:
 * 0 ok, 1 refused by the server / job did not succeed / download did not
 * verify, 2 usage, 3 API unreachable, 4 --timeout passed while waiting.
 */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli_http.h"
#include "cli/cli_library.h"
#include "cli/cli_mcp.h"
#include "cli/cli_out.h"
#include "cli_batch.h"
#include "cli_tune.h"
#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_error.h"
#include "kf_num.h"
#include "kf_sse_client.h"

enum { EXIT_REFUSED = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3, EXIT_TIMEOUT = 4 };

#define CLI_MAX_LABELS 16
#define CLI_MAX_PAGES 1000          /* --all: pages followed at most */
#define CLI_MAX_ARTIFACT (1LL << 32) /* bytes of one download */

/* The options of every command (each command reads the ones it takes). */
typedef struct cli_opts {
    const char *idem, *state, *kind, *target, *cursor, *op, *batch, *since, *until, *worker, *output;
    const char *labels[CLI_MAX_LABELS];
    int         n_labels, limit, timeout_s, sleep_ms, attempt;
    bool        wait, fail, quiet, json, all, source, diff, force, full;
} cli_opts;

/* ---- help -------------------------------------------------------------------- */

typedef struct cli_cmd_help {
    const char *name, *usage, *text;
} cli_cmd_help;

static const cli_cmd_help cli_helps[] = {
    { "submit", "submit FILE|- [--idempotency-key K] [--wait [--timeout S]] [--json]",
      "POST the job in FILE (JSON; - reads stdin) to /v1/jobs and print its id and state.\n"
      "--wait then follows it as `kforge wait` does (progress, summary, exit status)." },
    { "get", "get ID [--json]", "A job's summary: state, attempt, best latency and fraction, error." },
    { "jobs", "jobs [--state S] [--kind K] [--target T] [--op OP] [--label K=V ...] [--batch ID]\n"
              "     [--since TIME] [--until TIME] [--worker W] [--full] [--limit N] [--cursor C] [--json]",
      "List jobs, newest first, as a table (`list` is the same command).  Filters combine with AND;\n"
      "--label is repeatable (KEY: 1..64 of A-Z a-z 0-9 _ . -); TIME is RFC 3339\n"
      "(2026-12-02T10:00:00Z), exclusive; --full asks for the full job documents (view=full).\n"
      "A last line `more: ...` gives the command for the next page." },
    { "cancel", "cancel ID [--json]", "Ask the service to cancel a job." },
    { "events", "events ID [--json]", "A job's state changes and iterations, as a table." },
    { "wait", "wait ID [--timeout S] [--json]",
      "Follow the job's event stream until it ends: on a terminal one updating line (state,\n"
      "iteration, best latency, fraction of the bound and a bar), in a pipe one plain line per\n"
      "iteration and state change, on stderr; then the job's summary (--json: the job's JSON) on\n"
      "stdout.  A dropped connection is resumed with Last-Event-ID.  Exit 0 when the job\n"
      "succeeded, 1 when it failed, was cancelled or is dead, 4 when --timeout (default 600 s)\n"
      "passed first, 3 when the API could not be reached." },
    { "iterations", "iterations ID [--attempt N] [--all] [--limit N] [--cursor C] [--json]",
      "A job's iterations in (attempt, seq) order: seq, action, latency, fraction, correct, best so\n"
      "far, params, reason.  --all follows every page (with --json: one document with every item)." },
    { "iteration", "iteration ID SEQ [--attempt N] [--source|--diff] [--json]",
      "One iteration in full; --source adds its kernel source, --diff its diff from the previous." },
    { "compare", "compare A B [C [D]] [--diff] [--json]",
      "Two to four jobs side by side: best latency and fraction, params that differ, profile\n"
      "deltas against the first, findings only in one, provenance differences; --diff adds the\n"
      "unified diffs of the best sources." },
    { "artifact", "artifact list ID [--json]\n"
                  "  artifact get ID NAME [-o FILE|-] [--force]",
      "list: a job's artifacts (kernel.py, profile.json, instructions.json, trace.json, ...).\n"
      "get: download NAME of the job's final set to FILE (default: ./NAME; - for stdout), check\n"
      "its size and SHA-256 against the listing (exit 1 and nothing written when they differ);\n"
      "an existing FILE is kept unless --force." },
    { "diag", "diag [--sleep-ms N] [--fail] [--target T] [--timeout S] [--json]",
      "Submit a diag health-check job and wait for it as `kforge wait` does." },
    { "health", "health [--json]", "GET /readyz: whether the API reaches PostgreSQL and Redis." },
    { "batch", "batch submit|status|list|cancel|report ...",
      "Batches of jobs: a template x matrix or every library op, their progress and reports\n"
      "(kforge batch --help)." },
    { "calibration", "calibration [--op OP] [--target T] [--since TIME] [--limit N] [--cursor C] [--json]",
      "The simulator checked by hardware (GET /v1/calibration): for each op and target, how far the\n"
      "simulator's time is from the device's median latency (error = sim / device - 1) over the\n"
      "calibration records this token may see (its own jobs'; every job's with an admin token):\n"
      "count, median and mean |error|, bias (the mean signed error) and the worst record's job; then\n"
      "the source lines whose device and simulated times differ most.  A neuron job's device profile\n"
      "makes a record (docs/neuron-backend.md).  --op (a library op, or user.ENTRY), --target and\n"
      "--since TIME (RFC 3339, records made at or after it) filter the records.  --limit and --cursor\n"
      "page the list of records in --json's \"items\" (newest first); the tables cover every record\n"
      "the filters match." },
    { "tune", "tune OP|KERNEL.py ...", "Tune a kernel locally, no service (kforge tune --help)." },
    { "library", "library list|show ENTRY|export DIR ...",
      "The kernel library: best kernel per op, shape, dtype and target (kforge library --help)." },
    { "mcp", "mcp",
      "Serve kforge's tools to an MCP client (Claude Code, Kiro...) on stdio (kforge mcp --help)." },
};

static const cli_cmd_help *cli_help_of(const char *cmd)
{
    for (size_t i = 0; i < sizeof(cli_helps) / sizeof(cli_helps[0]); i++)
        if (strcmp(cli_helps[i].name, cmd) == 0 || (strcmp(cmd, "list") == 0 && strcmp(cli_helps[i].name, "jobs") == 0))
            return &cli_helps[i];
    return NULL;
}

static void cli_usage(FILE *out)
{
    fprintf(out, "usage: kforge COMMAND [ARGS]   (kforge COMMAND --help for one command)\n\n"
                 "Commands (talk to kforge-api at KFORGE_API_URL with token KFORGE_TOKEN):\n");
    for (size_t i = 0; i < sizeof(cli_helps) / sizeof(cli_helps[0]); i++)
        fprintf(out, "  %s\n", cli_helps[i].usage);
    fprintf(out, "\nOptions of every command: --json (the API's JSON on stdout, as it came), --quiet (nothing on\n"
                 "stdout), --help.  Tables and summaries go to stdout, progress and errors to stderr.\n"
                 "Exit status: 0 ok, 1 refused by the server, job not succeeded or download not verified,\n"
                 "2 usage, 3 API unreachable, 4 --timeout passed while waiting.\n");
    kf_config_print_help(out, KF_USE_CLI);
}

/* ---- requests ------------------------------------------------------------------ */

/* One request; *out gets the parsed answer (caller deletes).  With --json
 * (and not --quiet) the answer is printed as it came.  Returns the exit code. */
static int cli_call(const cli_opts *o, const char *method, const char *path, const char *body, cJSON **out)
{
    cli_resp r = CLI_RESP_INIT;
    int code = 0;

    if (cli_http(method, path, body, o->idem, &r) != 0) {
        cli_print_unreachable(&r);
        code = EXIT_UNREACHABLE;
    } else if (r.status >= 400) {
        cli_print_problem(&r);
        code = EXIT_REFUSED;
    } else {
        if (o->json && !o->quiet)
            printf("%s%s", r.body.data, (r.body.len && r.body.data[r.body.len - 1] == '\n') ? "" : "\n");
        if (out) {
            *out = cJSON_Parse(r.body.data);
            if (!*out) {
                fprintf(stderr, "kforge: %s%s answered %ld with a body that is not JSON\n",
                        kf_config_str(KF_CFG_API_URL), path, r.status);
                code = EXIT_REFUSED;
            }
        }
    }
    cli_resp_release(&r);
    return code;
}

/* Print what a renderer made, unless --json or --quiet. */
static void cli_show(const cli_opts *o, void (*render)(const cJSON *, kf_buf *), const cJSON *doc)
{
    kf_buf b = KF_BUF_INIT;

    if (o->json || o->quiet)
        return;
    render(doc, &b);
    fputs(b.data, stdout);
    kf_buf_release(&b);
}

static char *cli_read_file(const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    kf_buf b = KF_BUF_INIT;
    char chunk[8192];
    size_t n;

    if (!f) {
        fprintf(stderr, "kforge: cannot open '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        kf_buf_add(&b, chunk, n);
    if (f != stdin)
        fclose(f);
    return kf_buf_detach(&b);
}

static bool cli_id_ok(const char *id)
{
    if (strlen(id) == 36 && strspn(id, "0123456789abcdefABCDEF-") == 36)
        return true;
    fprintf(stderr, "kforge: '%s' is not a job id (a UUID like 0b6c1f3e-...)\n", id);
    return false;
}

/* ---- wait: the event stream ---------------------------------------------------------- */

typedef struct cli_follow {
    cli_progress   prog;
    bool           quiet, ended;
    char           end_state[24];
    cli_stream_io *io;
} cli_follow;

static kf_code cli_follow_event(void *ud, const kf_sse_event *ev, kf_err *err)
{
    cli_follow *f = ud;
    cJSON *data = cJSON_ParseWithLength(ev->data, ev->data_len);
    kf_buf b = KF_BUF_INIT;

    (void)err;
    if (strcmp(ev->type, "end") == 0) {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(data, "state");
        snprintf(f->end_state, sizeof(f->end_state), "%s", cJSON_IsString(st) ? st->valuestring : "");
        f->ended = true;
        f->io->stop = true;
    } else if (data && !f->quiet) {
        cli_progress_event(&f->prog, ev->type, data, &b);
        fputs(b.data, stderr);
        fflush(stderr);
    }
    kf_buf_release(&b);
    cJSON_Delete(data);
    return KF_OK;
}

/* Follow a job's stream until `end` (reconnecting after a drop), then
 * print its summary; returns the exit code. */
static int cli_wait(const cli_opts *o, const char *id)
{
    char *path = kf_asprintf("/v1/jobs/%s/stream", id);
    time_t deadline = time(NULL) + o->timeout_s;
    cli_follow f;
    cli_stream_io io;
    int code = 0;

    memset(&f, 0, sizeof(f));
    memset(&io, 0, sizeof(io));
    cli_progress_init(&f.prog, isatty(STDERR_FILENO));
    f.quiet = o->quiet;
    f.io = &io;
    io.parser = kf_sse_new(0, 0);
    io.cb = cli_follow_event;
    io.ud = &f;
    io.idle_seconds = 45;   /* three missed heartbeats */
    {
        char *what = kf_asprintf("job %s", id);
        switch (cli_http_follow(path, what, deadline, &io)) {
        case CLI_FOLLOW_ENDED: break;
        case CLI_FOLLOW_TIMEOUT:
            fprintf(stderr, "%skforge: job %s still %s after %d s (--timeout)\n", f.prog.tty ? "\n" : "", id,
                    f.prog.state, o->timeout_s);
            code = EXIT_TIMEOUT;
            break;
        case CLI_FOLLOW_REFUSED: code = EXIT_REFUSED; break;
        case CLI_FOLLOW_UNREACHABLE: code = EXIT_UNREACHABLE; break;
        }
        free(what);
    }
    if (f.prog.tty && !o->quiet && (f.prog.n_iterations || strcmp(f.prog.state, "waiting") != 0))
        fputc('\n', stderr);
    if (f.ended) {
        char *jp = kf_asprintf("/v1/jobs/%s", id);
        cJSON *job = NULL;
        code = cli_call(o, "GET", jp, NULL, &job);
        if (code == 0) {
            cli_show(o, cli_render_job, job);
            code = strcmp(f.end_state, "succeeded") == 0 ? 0 : EXIT_REFUSED;
        }
        cJSON_Delete(job);
        free(jp);
    }
    kf_sse_free(io.parser);
    free(path);
    return code;
}

/* ---- commands ----------------------------------------------------------------------- */

/* The job's id in a POST answer, then wait; or print the short line. */
static int cli_submitted(const cli_opts *o, const cJSON *job)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(job, "id");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(job, "state");
    const cJSON *w;

    if (!cJSON_IsString(id)) {
        fprintf(stderr, "kforge: the API's answer has no job id\n");
        return EXIT_REFUSED;
    }
    if (!o->json && !o->quiet)
        printf("job %s %s\n", id->valuestring, cJSON_IsString(st) ? st->valuestring : "");
    fflush(stdout);
    /* Accepted, but e.g. no worker has ever offered its (target, backend). */
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(job, "warnings"))
    {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(w, "message");
        if (cJSON_IsString(msg))
            fprintf(stderr, "kforge: warning: %s\n", msg->valuestring);
    }
    return o->wait ? cli_wait(o, id->valuestring) : 0;
}

static int cli_cmd_submit(cli_opts *o, const char *file)
{
    char *body = cli_read_file(file);
    cJSON *job = NULL;
    int code;
    bool json = o->json;

    if (!body)
        return EXIT_USAGE;
    o->json = json && !o->wait;   /* with --wait, --json prints the final job only */
    code = cli_call(o, "POST", "/v1/jobs", body, &job);
    o->json = json;
    free(body);
    if (code == 0)
        code = cli_submitted(o, job);
    cJSON_Delete(job);
    return code;
}

/* Append "&key=escaped(value)". */
static void cli_q(kf_buf *q, CURL *esc, const char *key, const char *val)
{
    char *k, *v;

    if (!val)
        return;
    k = curl_easy_escape(esc, key, 0);
    v = curl_easy_escape(esc, val, 0);
    kf_buf_addf(q, "%c%s=%s", strchr(q->data, '?') ? '&' : '?', k, v);
    curl_free(k);
    curl_free(v);
}

static bool cli_label_ok(const char *kv)
{
    const char *eq = strchr(kv, '=');
    size_t n = eq ? (size_t)(eq - kv) : 0;

    if (!eq || n < 1 || n > 64 ||
        strspn(kv, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") != n) {
        fprintf(stderr, "kforge: --label %s: write KEY=VALUE, KEY being 1..64 of A-Z a-z 0-9 _ . -\n", kv);
        return false;
    }
    return true;
}

/* GET a list path q (its filters added with esc) with the page options
 * (--cursor, --limit), shown by render; frees q and esc.  The exit code. */
static int cli_list_get(const cli_opts *o, kf_buf *q, CURL *esc, void (*render)(const cJSON *, kf_buf *))
{
    cJSON *doc = NULL;
    int code;

    cli_q(q, esc, "cursor", o->cursor);
    if (o->limit > 0) {
        char l[16];
        snprintf(l, sizeof(l), "%d", o->limit);
        cli_q(q, esc, "limit", l);
    }
    curl_easy_cleanup(esc);
    code = cli_call(o, "GET", q->data, NULL, &doc);
    if (code == 0)
        cli_show(o, render, doc);
    cJSON_Delete(doc);
    kf_buf_release(q);
    return code;
}

static int cli_cmd_jobs(const cli_opts *o)
{
    kf_buf q = KF_BUF_INIT;
    CURL *esc = curl_easy_init();

    kf_buf_adds(&q, "/v1/jobs");
    cli_q(&q, esc, "state", o->state);
    cli_q(&q, esc, "kind", o->kind);
    cli_q(&q, esc, "target", o->target);
    cli_q(&q, esc, "op", o->op);
    cli_q(&q, esc, "batch", o->batch);
    cli_q(&q, esc, "created_after", o->since);
    cli_q(&q, esc, "created_before", o->until);
    cli_q(&q, esc, "worker", o->worker);
    if (o->full)
        cli_q(&q, esc, "view", "full");
    for (int i = 0; i < o->n_labels; i++) {
        const char *eq = strchr(o->labels[i], '=');
        char *key = kf_asprintf("label.%.*s", (int)(eq - o->labels[i]), o->labels[i]);
        cli_q(&q, esc, key, eq + 1);
        free(key);
    }
    return cli_list_get(o, &q, esc, cli_render_jobs);
}

static int cli_cmd_calibration(const cli_opts *o)
{
    kf_buf q = KF_BUF_INIT;
    CURL *esc = curl_easy_init();

    kf_buf_adds(&q, "/v1/calibration");
    cli_q(&q, esc, "op", o->op);
    cli_q(&q, esc, "target", o->target);
    cli_q(&q, esc, "since", o->since);
    return cli_list_get(o, &q, esc, cli_render_calibration);
}

static int cli_cmd_iterations(const cli_opts *o, const char *id)
{
    cJSON *all = cJSON_CreateObject(), *items = cJSON_AddArrayToObject(all, "items");
    char *cursor = o->cursor ? kf_strdup(o->cursor) : NULL;
    cli_opts one = *o;
    int code = 0;

    one.json = o->json && !o->all;   /* --all --json prints the merged document */
    for (int page_no = 0; page_no < CLI_MAX_PAGES; page_no++) {
        kf_buf q = KF_BUF_INIT;
        CURL *esc = curl_easy_init();
        cJSON *page = NULL, *it;
        const cJSON *next;
        char n[16];

        kf_buf_addf(&q, "/v1/jobs/%s/iterations", id);
        if (o->attempt > 0) {
            snprintf(n, sizeof(n), "%d", o->attempt);
            cli_q(&q, esc, "attempt", n);
        }
        if (o->limit > 0) {
            snprintf(n, sizeof(n), "%d", o->limit);
            cli_q(&q, esc, "limit", n);
        }
        cli_q(&q, esc, "cursor", cursor);
        curl_easy_cleanup(esc);
        code = cli_call(&one, "GET", q.data, NULL, &page);
        kf_buf_release(&q);
        if (code != 0) {
            cJSON_Delete(page);
            break;
        }
        if (!o->all) {
            cli_show(o, cli_render_iterations, page);
            cJSON_Delete(page);
            break;
        }
        while ((it = cJSON_DetachItemFromArray(cJSON_GetObjectItemCaseSensitive(page, "items"), 0)) != NULL)
            cJSON_AddItemToArray(items, it);
        next = cJSON_GetObjectItemCaseSensitive(page, "next_cursor");
        free(cursor);
        cursor = cJSON_IsString(next) ? kf_strdup(next->valuestring) : NULL;
        cJSON_Delete(page);
        if (!cursor)
            break;
    }
    if (code == 0 && o->all) {
        cJSON_AddNullToObject(all, "next_cursor");
        if (o->json && !o->quiet) {
            char *txt = cJSON_PrintUnformatted(all);
            printf("%s\n", txt);
            free(txt);
        }
        cli_show(o, cli_render_iterations, all);
    }
    free(cursor);
    cJSON_Delete(all);
    return code;
}

static int cli_cmd_iteration(const cli_opts *o, const char *id, const char *seq_s)
{
    kf_err e = KF_ERR_INIT;
    long seq;
    char *path;
    cJSON *it = NULL;
    int code;

    if (kf_num_long(seq_s, 0, 2147483647L, &seq, &e) != KF_OK) {
        fprintf(stderr, "kforge: SEQ %s: %s\n", seq_s, e.msg);
        return EXIT_USAGE;
    }
    if (o->attempt > 0)
        path = kf_asprintf("/v1/jobs/%s/iterations/%ld?attempt=%d", id, seq, o->attempt);
    else
        path = kf_asprintf("/v1/jobs/%s/iterations/%ld", id, seq);
    code = cli_call(o, "GET", path, NULL, &it);
    if (code == 0 && !o->json && !o->quiet) {
        kf_buf b = KF_BUF_INIT;
        cli_render_iteration(it, o->source ? 1 : o->diff ? 2 : 0, &b);
        fputs(b.data, stdout);
        kf_buf_release(&b);
    }
    cJSON_Delete(it);
    free(path);
    return code;
}

static int cli_cmd_compare(const cli_opts *o, char **ids, int n)
{
    kf_buf q = KF_BUF_INIT;
    cJSON *cmp = NULL;
    int code;

    kf_buf_adds(&q, "/v1/compare?jobs=");
    for (int i = 0; i < n; i++) {
        if (!cli_id_ok(ids[i])) {
            kf_buf_release(&q);
            return EXIT_USAGE;
        }
        kf_buf_addf(&q, "%s%s", i ? "," : "", ids[i]);
    }
    code = cli_call(o, "GET", q.data, NULL, &cmp);
    if (code == 0 && !o->json && !o->quiet) {
        kf_buf b = KF_BUF_INIT;
        cli_render_compare(cmp, o->diff, &b);
        fputs(b.data, stdout);
        kf_buf_release(&b);
    }
    cJSON_Delete(cmp);
    kf_buf_release(&q);
    return code;
}

/* The final set's entry NAME in a job's artifact listing, or NULL. */
static const cJSON *cli_artifact_find(const cJSON *list, const char *name)
{
    const cJSON *a;

    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(list, "items"))
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(a, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0 &&
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "final")))
            return a;
    }
    return NULL;
}

/* Copy a verified temporary file to stdout. */
static int cli_copy_out(FILE *tmp)
{
    char chunk[65536];
    size_t n;

    rewind(tmp);
    while ((n = fread(chunk, 1, sizeof(chunk), tmp)) > 0)
        if (fwrite(chunk, 1, n, stdout) != n)
            return EXIT_REFUSED;
    return fflush(stdout) == 0 ? 0 : EXIT_REFUSED;
}

static int cli_cmd_artifact_get(const cli_opts *o, const char *id, const char *name)
{
    const char *dest = o->output ? o->output : name;
    bool to_stdout = strcmp(dest, "-") == 0;
    char *lp = kf_asprintf("/v1/jobs/%s/artifacts", id), *tmp_path = NULL, *ap = NULL;
    cli_opts quiet = *o;
    cJSON *list = NULL;
    const cJSON *a, *sha, *size;
    FILE *tmp = NULL;
    struct stat st;
    char got[65] = "";
    long long bytes = 0;
    cli_resp r = CLI_RESP_INIT;
    int code;

    if (!o->output && (strchr(name, '/') || name[0] == '.' || !name[0])) {
        fprintf(stderr, "kforge: '%s' cannot be a file name here; give one with -o FILE\n", name);
        free(lp);
        return EXIT_USAGE;
    }
    if (!to_stdout && !o->force && stat(dest, &st) == 0) {
        fprintf(stderr, "kforge: %s exists; add --force to overwrite it\n", dest);
        free(lp);
        return EXIT_USAGE;
    }
    quiet.json = false;
    code = cli_call(&quiet, "GET", lp, NULL, &list);
    if (code != 0)
        goto out;
    a = cli_artifact_find(list, name);
    sha = cJSON_GetObjectItemCaseSensitive(a, "sha256");
    size = cJSON_GetObjectItemCaseSensitive(a, "size");
    if (!a || !cJSON_IsString(sha) || strlen(sha->valuestring) != 64 ||
        strspn(sha->valuestring, "0123456789abcdef") != 64 || !cJSON_IsNumber(size) || size->valuedouble < 0) {
        fprintf(stderr, "kforge: job %s has no final artifact named %s (kforge artifact list %s)\n", id, name, id);
        code = EXIT_REFUSED;
        goto out;
    }
    if (to_stdout) {
        tmp = tmpfile();
    } else {
        tmp_path = kf_asprintf("%s.kforge-part", dest);
        tmp = fopen(tmp_path, "w+b");
    }
    if (!tmp) {
        fprintf(stderr, "kforge: cannot write %s: %s\n", tmp_path ? tmp_path : "a temporary file", strerror(errno));
        code = EXIT_REFUSED;
        goto out;
    }
    ap = kf_asprintf("/v1/artifacts/%s", sha->valuestring);
    if (cli_http_download(ap, tmp, (long long)size->valuedouble, got, &bytes, &r) != 0 && r.status < 300) {
        if (r.status == 0)
            cli_print_unreachable(&r);
        else
            fprintf(stderr, "kforge: downloading %s: %s\n", name, r.err);
        code = r.status == 0 ? EXIT_UNREACHABLE : EXIT_REFUSED;
    } else if (r.status >= 300) {
        cli_print_problem(&r);
        code = EXIT_REFUSED;
    } else if (bytes != (long long)size->valuedouble || strcmp(got, sha->valuestring) != 0) {
        fprintf(stderr, "kforge: %s did not verify: got %lld bytes with SHA-256 %s, the listing says %.0f bytes "
                        "with %s; nothing was written (try again)\n",
                name, bytes, got, size->valuedouble, sha->valuestring);
        code = EXIT_REFUSED;
    } else if (to_stdout) {
        code = cli_copy_out(tmp);
    } else if (fflush(tmp) != 0 || rename(tmp_path, dest) != 0) {
        fprintf(stderr, "kforge: cannot write %s: %s\n", dest, strerror(errno));
        code = EXIT_REFUSED;
    } else if (!o->quiet) {
        fprintf(stderr, "kforge: %s: %lld bytes, SHA-256 %s verified\n", dest, bytes, got);
    }
out:
    if (tmp)
        fclose(tmp);
    if (tmp_path && code != 0)
        unlink(tmp_path);
    cli_resp_release(&r);
    cJSON_Delete(list);
    free(tmp_path);
    free(ap);
    free(lp);
    return code;
}

/* ---- main --------------------------------------------------------------------------- */

/* A bounded integer option; false (after saying why) when it is not one. */
static bool cli_int(const char *s, const char *name, long lo, long hi, int *out)
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

/* Parse the options after the command; -1 to go on, else the exit code. */
static int cli_parse(int argc, char **argv, const char *cmd, cli_opts *o)
{
    enum { O_OP = 256, O_LABEL, O_BATCH, O_SINCE, O_UNTIL, O_WORKER, O_ATTEMPT, O_ALL, O_SOURCE, O_DIFF, O_FORCE,
           O_FULL, O_JSON };
    static const struct option opts[] = {
        { "idempotency-key", required_argument, NULL, 'k' }, { "wait", no_argument, NULL, 'w' },
        { "timeout", required_argument, NULL, 't' },         { "state", required_argument, NULL, 'S' },
        { "kind", required_argument, NULL, 'K' },            { "target", required_argument, NULL, 'T' },
        { "limit", required_argument, NULL, 'L' },           { "cursor", required_argument, NULL, 'C' },
        { "sleep-ms", required_argument, NULL, 's' },        { "fail", no_argument, NULL, 'f' },
        { "quiet", no_argument, NULL, 'q' },                 { "help", no_argument, NULL, 'h' },
        { "op", required_argument, NULL, O_OP },             { "label", required_argument, NULL, O_LABEL },
        { "batch", required_argument, NULL, O_BATCH },       { "since", required_argument, NULL, O_SINCE },
        { "until", required_argument, NULL, O_UNTIL },       { "worker", required_argument, NULL, O_WORKER },
        { "attempt", required_argument, NULL, O_ATTEMPT },   { "all", no_argument, NULL, O_ALL },
        { "source", no_argument, NULL, O_SOURCE },           { "diff", no_argument, NULL, O_DIFF },
        { "force", no_argument, NULL, O_FORCE },             { "full", no_argument, NULL, O_FULL },
        { "json", no_argument, NULL, O_JSON },               { "output", required_argument, NULL, 'o' },
        { NULL, 0, NULL, 0 },
    };
    const cli_cmd_help *h = cli_help_of(cmd);
    int c;

    optind = 2;
    while ((c = getopt_long(argc, argv, "qho:", opts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case 'k': o->idem = optarg; break;
        case 'w': o->wait = true; break;
        case 't': ok = cli_int(optarg, "timeout", 1, 86400, &o->timeout_s); break;
        case 'S': o->state = optarg; break;
        case 'K': o->kind = optarg; break;
        case 'T': o->target = optarg; break;
        case 'L': ok = cli_int(optarg, "limit", 1, strcmp(cmd, "iterations") == 0 ? 500 : 200, &o->limit); break;
        case 'C': o->cursor = optarg; break;
        case 's': ok = cli_int(optarg, "sleep-ms", 0, 600000, &o->sleep_ms); break;
        case 'f': o->fail = true; break;
        case 'q': o->quiet = true; break;
        case 'o': o->output = optarg; break;
        case O_OP: o->op = optarg; break;
        case O_LABEL:
            if (o->n_labels == CLI_MAX_LABELS) {
                fprintf(stderr, "kforge: at most %d --label filters\n", CLI_MAX_LABELS);
                return EXIT_USAGE;
            }
            ok = cli_label_ok(optarg);
            o->labels[o->n_labels++] = optarg;
            break;
        case O_BATCH: o->batch = optarg; break;
        case O_SINCE: o->since = optarg; break;
        case O_UNTIL: o->until = optarg; break;
        case O_WORKER: o->worker = optarg; break;
        case O_ATTEMPT: ok = cli_int(optarg, "attempt", 1, 1000, &o->attempt); break;
        case O_ALL: o->all = true; break;
        case O_SOURCE: o->source = true; break;
        case O_DIFF: o->diff = true; break;
        case O_FORCE: o->force = true; break;
        case O_FULL: o->full = true; break;
        case O_JSON: o->json = true; break;
        case 'h':
            if (!h) {
                cli_usage(stdout);
                return 0;
            }
            printf("usage: kforge %s\n\n%s\n", h->usage, h->text);
            printf("\nOptions of every command: --json, --quiet, --help.\n"
                   "Exit status: 0 ok, 1 refused by the server, job not succeeded or download not verified,\n"
                   "2 usage, 3 API unreachable, 4 --timeout passed while waiting.\n");
            return 0;
        default:
            fprintf(stderr, "usage: kforge %s\n", h ? h->usage : "COMMAND ... (kforge --help)");
            return EXIT_USAGE;
        }
        if (!ok)
            return EXIT_USAGE;
    }
    if (o->source && o->diff) {
        fprintf(stderr, "kforge: give --source or --diff, not both\n");
        return EXIT_USAGE;
    }
    return -1;
}

/* Run the command; argv[optind..] are its operands. */
static int cli_run(cli_opts *o, const char *cmd, int n, char **args)
{
    const cli_cmd_help *h = cli_help_of(cmd);

    if (strcmp(cmd, "submit") == 0 && n == 1)
        return cli_cmd_submit(o, args[0]);
    if ((strcmp(cmd, "jobs") == 0 || strcmp(cmd, "list") == 0) && n == 0)
        return cli_cmd_jobs(o);
    if (strcmp(cmd, "calibration") == 0 && n == 0)
        return cli_cmd_calibration(o);
    if (strcmp(cmd, "health") == 0 && n == 0) {
        int code = cli_call(o, "GET", "/readyz", NULL, NULL);
        if (code == 0 && !o->json && !o->quiet)
            printf("ready\n");
        return code;
    }
    if (strcmp(cmd, "diag") == 0 && n == 0) {
        char *body = kf_asprintf("{\"kind\":\"diag\",\"target\":\"%s\",\"backend\":\"diag\","
                                 "\"spec\":{\"sleep_ms\":%d,\"fail\":%s}}",
                                 o->target ? o->target : "trn2", o->sleep_ms, o->fail ? "true" : "false");
        cli_opts q = *o;
        cJSON *job = NULL;
        int code;
        q.json = false;
        q.quiet = true;
        code = cli_call(&q, "POST", "/v1/jobs", body, &job);
        free(body);
        if (code == 0) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(job, "id");
            code = cJSON_IsString(id) ? cli_wait(o, id->valuestring) : EXIT_REFUSED;
        }
        cJSON_Delete(job);
        return code;
    }
    if (strcmp(cmd, "compare") == 0 && n >= 2 && n <= 4)
        return cli_cmd_compare(o, args, n);
    if (strcmp(cmd, "artifact") == 0 && n >= 2 && (strcmp(args[0], "list") == 0 || strcmp(args[0], "get") == 0)) {
        if (!cli_id_ok(args[1]))
            return EXIT_USAGE;
        if (strcmp(args[0], "get") == 0 && n == 3)
            return cli_cmd_artifact_get(o, args[1], args[2]);
        if (strcmp(args[0], "list") == 0 && n == 2) {
            char *path = kf_asprintf("/v1/jobs/%s/artifacts", args[1]);
            cJSON *list = NULL;
            int code = cli_call(o, "GET", path, NULL, &list);
            if (code == 0)
                cli_show(o, cli_render_artifacts, list);
            cJSON_Delete(list);
            free(path);
            return code;
        }
    }
    if (strcmp(cmd, "iteration") == 0 && n == 2)
        return cli_id_ok(args[0]) ? cli_cmd_iteration(o, args[0], args[1]) : EXIT_USAGE;
    if ((strcmp(cmd, "get") == 0 || strcmp(cmd, "cancel") == 0 || strcmp(cmd, "events") == 0 ||
         strcmp(cmd, "wait") == 0 || strcmp(cmd, "iterations") == 0) &&
        n == 1) {
        const char *id = args[0];
        char *path;
        cJSON *doc = NULL;
        int code;
        if (!cli_id_ok(id))
            return EXIT_USAGE;
        if (strcmp(cmd, "wait") == 0)
            return cli_wait(o, id);
        if (strcmp(cmd, "iterations") == 0)
            return cli_cmd_iterations(o, id);
        path = kf_asprintf("/v1/jobs/%s%s", id,
                           strcmp(cmd, "cancel") == 0 ? "/cancel" : strcmp(cmd, "events") == 0 ? "/events" : "");
        code = cli_call(o, strcmp(cmd, "cancel") == 0 ? "POST" : "GET", path, NULL, &doc);
        if (code == 0)
            cli_show(o, strcmp(cmd, "events") == 0 ? cli_render_events : cli_render_job, doc);
        cJSON_Delete(doc);
        free(path);
        return code;
    }
    if (h)
        fprintf(stderr, "usage: kforge %s\n", h->usage);
    else
        fprintf(stderr, "kforge: unknown command %s (kforge --help lists them)\n", cmd);
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    cli_opts o;
    kf_err err = KF_ERR_INIT;
    int code;

    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        cli_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    if (strcmp(argv[1], "tune") == 0)
        return cli_tune_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "library") == 0)
        return cli_library_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "mcp") == 0)
        return cli_mcp_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "batch") == 0) {
        if (kf_config_load(&err) != KF_OK) {
            fprintf(stderr, "kforge: %s\n", err.msg);
            return EXIT_USAGE;
        }
        curl_global_init(CURL_GLOBAL_DEFAULT);
        code = cli_batch_main(argc - 1, argv + 1);
        curl_global_cleanup();
        return code;
    }
    memset(&o, 0, sizeof(o));
    o.timeout_s = 600;
    o.sleep_ms = 100;
    code = cli_parse(argc, argv, argv[1], &o);
    if (code >= 0)
        return code;
    if (kf_config_load(&err) != KF_OK) {
        fprintf(stderr, "kforge: %s\n", err.msg);
        return EXIT_USAGE;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    code = cli_run(&o, argv[1], argc - optind, argv + optind);
    curl_global_cleanup();
    return code;
}
