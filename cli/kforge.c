/*
 * kforge — command-line client of kforge-api.
 *
 * Talks HTTP+JSON to KFORGE_API_URL with the bearer token KFORGE_TOKEN.
 * Every command prints the server's JSON (or a short human line with
 * --quiet) and exits 0 on success, 1 when the server refused or the job
 * ended badly, 2 on usage errors, 3 when the API could not be reached.
 */
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

#include "cli_tune.h"
#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_error.h"
#include "kf_num.h"

enum { EXIT_REFUSED = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

typedef struct cli_resp {
    long   status;     /* HTTP status, 0 when no response */
    kf_buf body;
    char   err[CURL_ERROR_SIZE];
} cli_resp;

static size_t cli_write(char *p, size_t size, size_t n, void *ud)
{
    kf_buf_add(ud, p, size * n);
    return size * n;
}

/* One HTTP exchange.  body may be NULL (GET/empty POST). */
static int cli_http(const char *method, const char *path, const char *body, const char *idem_key,
                    cli_resp *r)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    char *url = kf_asprintf("%s%s", kf_config_str(KF_CFG_API_URL), path);
    char *auth = NULL;
    char *idem = NULL;
    CURLcode rc;

    r->status = 0;
    r->err[0] = '\0';
    if (*kf_config_str(KF_CFG_TOKEN)) {
        auth = kf_asprintf("Authorization: Bearer %s", kf_config_str(KF_CFG_TOKEN));
        h = curl_slist_append(h, auth);
    }
    if (idem_key) {
        idem = kf_asprintf("Idempotency-Key: \"%s\"", idem_key);
        h = curl_slist_append(h, idem);
    }
    if (body)
        h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, cli_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r->body);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->err);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    }
    rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    else if (!r->err[0])
        snprintf(r->err, sizeof(r->err), "%s", curl_easy_strerror(rc));
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    free(url);
    free(auth);
    free(idem);
    return rc == CURLE_OK ? 0 : -1;
}

/* Print a problem+json error as one readable line. */
static void cli_print_problem(const cli_resp *r)
{
    cJSON *j = cJSON_Parse(r->body.data);
    const cJSON *title = cJSON_GetObjectItemCaseSensitive(j, "title");
    const cJSON *detail = cJSON_GetObjectItemCaseSensitive(j, "detail");

    if (cJSON_IsString(title))
        fprintf(stderr, "kforge: %ld %s%s%s\n", r->status, title->valuestring,
                cJSON_IsString(detail) ? ": " : "", cJSON_IsString(detail) ? detail->valuestring : "");
    else
        fprintf(stderr, "kforge: HTTP %ld: %s\n", r->status, r->body.data);
    cJSON_Delete(j);
}

/* Run one request and print its JSON body; returns the exit code. */
static int cli_call(const char *method, const char *path, const char *body, const char *idem, bool quiet,
                    cJSON **out)
{
    cli_resp r = { 0, KF_BUF_INIT, { 0 } };
    int code = 0;

    if (cli_http(method, path, body, idem, &r) != 0) {
        fprintf(stderr, "kforge: cannot reach %s: %s (is kforge-api running? set KFORGE_API_URL)\n",
                kf_config_str(KF_CFG_API_URL), r.err);
        code = EXIT_UNREACHABLE;
    } else if (r.status >= 400) {
        cli_print_problem(&r);
        code = EXIT_REFUSED;
    } else {
        if (!quiet)
            printf("%s%s", r.body.data, (r.body.len && r.body.data[r.body.len - 1] == '\n') ? "" : "\n");
        if (out)
            *out = cJSON_Parse(r.body.data);
    }
    kf_buf_release(&r.body);
    return code;
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

static const char *cli_state(const cJSON *job)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(job, "state");
    return cJSON_IsString(s) ? s->valuestring : "?";
}

static bool cli_terminal(const char *state)
{
    return strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
           strcmp(state, "cancelled") == 0 || strcmp(state, "dead") == 0;
}

/* Poll a job until it ends; a progress line on stderr when it is a tty. */
static int cli_wait(const char *id, int timeout_s, bool quiet)
{
    char *path = kf_asprintf("/v1/jobs/%s", id);
    time_t end = time(NULL) + timeout_s;
    int code = 0;
    bool tty = isatty(STDERR_FILENO);

    for (;;) {
        cJSON *job = NULL;
        const char *state;

        code = cli_call("GET", path, NULL, NULL, true, &job);
        if (code != 0)
            break;
        state = cli_state(job);
        if (tty) {
            const cJSON *att = cJSON_GetObjectItemCaseSensitive(job, "attempt");
            fprintf(stderr, "\r%s  state=%-10s attempt=%d   ", id, state,
                    cJSON_IsNumber(att) ? att->valueint : 0);
        }
        if (cli_terminal(state)) {
            char *txt = cJSON_Print(job);
            if (tty)
                fputc('\n', stderr);
            if (!quiet)
                printf("%s\n", txt);
            free(txt);
            code = strcmp(state, "succeeded") == 0 ? 0 : EXIT_REFUSED;
            cJSON_Delete(job);
            break;
        }
        cJSON_Delete(job);
        if (time(NULL) >= end) {
            fprintf(stderr, "\nkforge: job %s still %s after %d s\n", id, state, timeout_s);
            code = EXIT_REFUSED;
            break;
        }
        usleep(200 * 1000);
    }
    free(path);
    return code;
}

/* Parse a bounded integer option; exits with a usage error naming it. */
static int cli_int(const char *s, const char *name, long lo, long hi)
{
    kf_err e = KF_ERR_INIT;
    long v;

    if (kf_num_long(s, lo, hi, &v, &e) != KF_OK) {
        fprintf(stderr, "kforge: --%s: %s\n", name, e.msg);
        exit(EXIT_USAGE);
    }
    return (int)v;
}

static void cli_usage(FILE *out)
{
    fprintf(out,
            "usage: kforge COMMAND [ARGS]\n"
            "\n"
            "Commands (talk to kforge-api at KFORGE_API_URL with token KFORGE_TOKEN):\n"
            "  submit FILE|-  [--idempotency-key K] [--wait] [--timeout S]\n"
            "                 POST the job in FILE (JSON, - for stdin) to /v1/jobs; prints the job\n"
            "  get ID         print a job\n"
            "  list [--state S] [--kind K] [--target T] [--limit N] [--cursor C]\n"
            "                 list jobs, newest first (prints next_cursor for the next page)\n"
            "  cancel ID      cancel a job\n"
            "  events ID      print a job's events\n"
            "  wait ID [--timeout S]\n"
            "                 wait until the job ends; exit 0 if it succeeded\n"
            "  diag [--sleep-ms N] [--fail] [--target T] [--timeout S]\n"
            "                 submit a diag health-check job and wait for it\n"
            "  health         GET /readyz\n"
            "  tune OP|KERNEL.py ...\n"
            "                 tune a kernel locally, no service (kforge tune --help)\n"
            "\n"
            "Options: --quiet (no JSON on stdout), --help.\n"
            "Exit status: 0 ok, 1 refused by the server or job not succeeded, 2 usage, 3 API unreachable.\n");
    kf_config_print_help(out, KF_USE_CLI);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "idempotency-key", required_argument, NULL, 'k' },
        { "wait", no_argument, NULL, 'w' },
        { "timeout", required_argument, NULL, 't' },
        { "state", required_argument, NULL, 'S' },
        { "kind", required_argument, NULL, 'K' },
        { "target", required_argument, NULL, 'T' },
        { "limit", required_argument, NULL, 'L' },
        { "cursor", required_argument, NULL, 'C' },
        { "sleep-ms", required_argument, NULL, 's' },
        { "fail", no_argument, NULL, 'f' },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *idem = NULL, *state = NULL, *kind = NULL, *target = NULL, *cursor = NULL;
    int limit = 0, timeout_s = 600, sleep_ms = 100, c, code = 0;
    bool wait = false, fail = false, quiet = false;
    const char *cmd;
    kf_err err = KF_ERR_INIT;

    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        cli_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    if (strcmp(argv[1], "tune") == 0)
        return cli_tune_main(argc - 1, argv + 1);
    cmd = argv[1];
    optind = 2;
    while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        switch (c) {
        case 'k': idem = optarg; break;
        case 'w': wait = true; break;
        case 't': timeout_s = cli_int(optarg, "timeout", 1, 86400); break;
        case 'S': state = optarg; break;
        case 'K': kind = optarg; break;
        case 'T': target = optarg; break;
        case 'L': limit = cli_int(optarg, "limit", 1, 200); break;
        case 'C': cursor = optarg; break;
        case 's': sleep_ms = cli_int(optarg, "sleep-ms", 0, 600000); break;
        case 'f': fail = true; break;
        case 'q': quiet = true; break;
        case 'h': cli_usage(stdout); return 0;
        default: cli_usage(stderr); return EXIT_USAGE;
        }
    }
    if (kf_config_load(&err) != KF_OK) {
        fprintf(stderr, "kforge: %s\n", err.msg);
        return EXIT_USAGE;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);

    if (strcmp(cmd, "submit") == 0 && optind < argc) {
        char *body = cli_read_file(argv[optind]);
        cJSON *job = NULL;
        if (!body)
            return EXIT_USAGE;
        code = cli_call("POST", "/v1/jobs", body, idem, quiet || wait, &job);
        free(body);
        if (code == 0 && wait) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(job, "id");
            code = cJSON_IsString(id) ? cli_wait(id->valuestring, timeout_s, quiet) : EXIT_REFUSED;
        }
        cJSON_Delete(job);
    } else if ((strcmp(cmd, "get") == 0 || strcmp(cmd, "cancel") == 0 || strcmp(cmd, "events") == 0 ||
                strcmp(cmd, "wait") == 0) && optind < argc) {
        const char *id = argv[optind];
        if (strspn(id, "0123456789abcdefABCDEF-") != strlen(id) || strlen(id) != 36) {
            fprintf(stderr, "kforge: '%s' is not a job id (a UUID like 0b6c1f3e-...)\n", id);
            return EXIT_USAGE;
        }
        if (strcmp(cmd, "wait") == 0) {
            code = cli_wait(id, timeout_s, quiet);
        } else {
            char *path = kf_asprintf("/v1/jobs/%s%s", id,
                                     strcmp(cmd, "cancel") == 0   ? "/cancel"
                                     : strcmp(cmd, "events") == 0 ? "/events"
                                                                  : "");
            code = cli_call(strcmp(cmd, "cancel") == 0 ? "POST" : "GET", path, NULL, NULL, quiet, NULL);
            free(path);
        }
    } else if (strcmp(cmd, "list") == 0) {
        kf_buf q = KF_BUF_INIT;
        CURL *esc = curl_easy_init();
        const char *keys[] = { "state", "kind", "target", "cursor" };
        const char *vals[] = { state, kind, target, cursor };
        kf_buf_adds(&q, "/v1/jobs?");
        for (int i = 0; i < 4; i++) {
            if (vals[i]) {
                char *e = curl_easy_escape(esc, vals[i], 0);
                kf_buf_addf(&q, "%s=%s&", keys[i], e);
                curl_free(e);
            }
        }
        if (limit > 0)
            kf_buf_addf(&q, "limit=%d&", limit);
        q.data[--q.len] = '\0';
        curl_easy_cleanup(esc);
        code = cli_call("GET", q.data, NULL, NULL, quiet, NULL);
        kf_buf_release(&q);
    } else if (strcmp(cmd, "diag") == 0) {
        char *body = kf_asprintf("{\"kind\":\"diag\",\"target\":\"%s\",\"backend\":\"diag\","
                                 "\"spec\":{\"sleep_ms\":%d,\"fail\":%s}}",
                                 target ? target : "trn2", sleep_ms, fail ? "true" : "false");
        cJSON *job = NULL;
        code = cli_call("POST", "/v1/jobs", body, idem, true, &job);
        free(body);
        if (code == 0) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(job, "id");
            code = cJSON_IsString(id) ? cli_wait(id->valuestring, timeout_s, quiet) : EXIT_REFUSED;
        }
        cJSON_Delete(job);
    } else if (strcmp(cmd, "health") == 0) {
        code = cli_call("GET", "/readyz", NULL, NULL, quiet, NULL);
    } else {
        fprintf(stderr, "kforge: unknown command or missing argument: %s\n\n", cmd);
        cli_usage(stderr);
        code = EXIT_USAGE;
    }
    curl_global_cleanup();
    return code;
}
