/* cli_http — the CLI's HTTP exchanges (see cli_http.h). */
#include "cli_http.h"

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_config.h"

void cli_resp_release(cli_resp *r)
{
    kf_buf_release(&r->body);
}

static size_t cli_write(char *p, size_t size, size_t n, void *ud)
{
    kf_buf_add(ud, p, size * n);
    return size * n;
}

/* A handle for path with the token, and the headers to free afterwards. */
static CURL *cli_handle(const char *method, const char *path, struct curl_slist **h, cli_resp *r)
{
    CURL *c = curl_easy_init();
    char *url = kf_asprintf("%s%s", kf_config_str(KF_CFG_API_URL), path);

    r->status = 0;
    r->err[0] = '\0';
    if (*kf_config_str(KF_CFG_TOKEN)) {
        char *auth = kf_asprintf("Authorization: Bearer %s", kf_config_str(KF_CFG_TOKEN));
        *h = curl_slist_append(*h, auth);
        free(auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->err);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    free(url);
    return c;
}

static int cli_perform(CURL *c, struct curl_slist *h, cli_resp *r)
{
    CURLcode rc;

    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    if (rc != CURLE_OK && !r->err[0])
        snprintf(r->err, sizeof(r->err), "%s", curl_easy_strerror(rc));
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc == CURLE_OK ? 0 : -1;
}

int cli_http(const char *method, const char *path, const char *body, const char *idem_key, cli_resp *r)
{
    struct curl_slist *h = NULL;
    CURL *c = cli_handle(method, path, &h, r);

    if (idem_key) {
        char *idem = kf_asprintf("Idempotency-Key: \"%s\"", idem_key);
        h = curl_slist_append(h, idem);
        free(idem);
    }
    if (body)
        h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, cli_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r->body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    }
    if (cli_perform(c, h, r) != 0)
        return -1;
    return 0;
}

typedef struct cli_dl {
    CURL       *c;
    FILE       *out;
    EVP_MD_CTX *md;
    long long   bytes, max;
    cli_resp   *r;
    bool        too_large, write_failed;
} cli_dl;

static size_t cli_dl_write(char *p, size_t size, size_t n, void *ud)
{
    cli_dl *d = ud;
    long status = 0;

    curl_easy_getinfo(d->c, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300) {
        kf_buf_add(&d->r->body, p, size * n);
        return size * n;
    }
    if (d->bytes + (long long)(size * n) > d->max) {
        d->too_large = true;
        return 0;
    }
    if (fwrite(p, 1, size * n, d->out) != size * n) {
        d->write_failed = true;
        return 0;
    }
    EVP_DigestUpdate(d->md, p, size * n);
    d->bytes += (long long)(size * n);
    return size * n;
}

int cli_http_download(const char *path, FILE *out, long long max_bytes, char *sha256_hex, long long *bytes,
                      cli_resp *r)
{
    struct curl_slist *h = NULL;
    CURL *c = cli_handle("GET", path, &h, r);
    cli_dl d = { c, out, EVP_MD_CTX_new(), 0, max_bytes, r, false, false };
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    int rc;

    if (!d.md)
        abort();
    EVP_DigestInit_ex(d.md, EVP_sha256(), NULL);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, cli_dl_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &d);
    rc = cli_perform(c, h, r);
    if (d.too_large)
        snprintf(r->err, sizeof(r->err), "the artifact is larger than the %lld bytes its listing gave", max_bytes);
    else if (d.write_failed)
        snprintf(r->err, sizeof(r->err), "cannot write the downloaded bytes (disk full?)");
    EVP_DigestFinal_ex(d.md, md, &mdlen);
    EVP_MD_CTX_free(d.md);
    for (unsigned int i = 0; i < mdlen && i < 32; i++)
        snprintf(sha256_hex + 2 * (size_t)i, 3, "%02x", md[i]);
    *bytes = d.bytes;
    return rc;
}

typedef struct cli_sse_ctx {
    CURL          *c;
    cli_stream_io *io;
    cli_resp      *r;
} cli_sse_ctx;

static kf_code cli_sse_count(void *ud, const kf_sse_event *ev, kf_err *err)
{
    cli_stream_io *io = ud;
    io->events++;
    return io->cb(io->ud, ev, err);
}

static size_t cli_sse_write(char *p, size_t size, size_t n, void *ud)
{
    cli_sse_ctx *s = ud;
    long status = 0;

    curl_easy_getinfo(s->c, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300) {
        if (s->r->body.len < 65536)
            kf_buf_add(&s->r->body, p, size * n);
        return size * n;
    }
    s->io->rc = kf_sse_feed(s->io->parser, p, size * n, cli_sse_count, s->io, &s->io->err);
    return s->io->rc == KF_OK && !s->io->stop ? size * n : 0;
}

int cli_http_stream(const char *path, cli_stream_io *io, cli_resp *r)
{
    struct curl_slist *h = NULL;
    CURL *c = cli_handle("GET", path, &h, r);
    cli_sse_ctx s = { c, io, r };
    const char *last = kf_sse_last_id(io->parser);

    io->events = 0;
    io->stop = false;
    io->rc = KF_OK;
    kf_err_clear(&io->err);
    h = curl_slist_append(h, "Accept: text/event-stream");
    if (*last) {
        char *hdr = kf_asprintf("Last-Event-ID: %s", last);
        h = curl_slist_append(h, hdr);
        free(hdr);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, cli_sse_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    if (io->max_seconds > 0)
        curl_easy_setopt(c, CURLOPT_TIMEOUT, io->max_seconds);
    if (io->idle_seconds > 0) {
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, io->idle_seconds);
    }
    return cli_perform(c, h, r);
}

cli_follow_end cli_http_follow(const char *path, const char *what, time_t deadline, cli_stream_io *io)
{
    int failures = 0;

    for (;;) {
        cli_resp r = CLI_RESP_INIT;
        long left = (long)(deadline - time(NULL)), ms;
        int rc;

        if (left <= 0)
            return CLI_FOLLOW_TIMEOUT;
        io->max_seconds = left;
        rc = cli_http_stream(path, io, &r);
        if (io->stop) {
            cli_resp_release(&r);
            return CLI_FOLLOW_ENDED;
        }
        if (rc == 0 && r.status >= 400 && r.status != 503) {
            cli_print_problem(&r);
            cli_resp_release(&r);
            return CLI_FOLLOW_REFUSED;
        }
        if (io->rc != KF_OK) {
            fprintf(stderr, "kforge: the event stream of %s: %s\n", what, io->err.msg);
            cli_resp_release(&r);
            return CLI_FOLLOW_REFUSED;
        }
        failures = io->events > 0 ? 1 : failures + 1;
        if (failures > 10) {
            if (rc != 0)
                cli_print_unreachable(&r);
            else
                fprintf(stderr, "kforge: the event stream of %s keeps closing without an end (HTTP %ld)\n", what,
                        r.status);
            cli_resp_release(&r);
            return rc != 0 ? CLI_FOLLOW_UNREACHABLE : CLI_FOLLOW_REFUSED;
        }
        cli_resp_release(&r);
        ms = kf_sse_retry_ms(io->parser);
        if (ms < 0)
            ms = 500L * (failures < 10 ? failures : 10);
        if (ms > 30000)
            ms = 30000;
        usleep((useconds_t)ms * 1000);
        kf_sse_restart(io->parser);
    }
}

void cli_print_unreachable(const cli_resp *r)
{
    fprintf(stderr, "kforge: cannot reach %s: %s (is kforge-api running? set KFORGE_API_URL)\n",
            kf_config_str(KF_CFG_API_URL), r->err);
}

void cli_print_problem(const cli_resp *r)
{
    cJSON *j = cJSON_Parse(r->body.data);
    const cJSON *title = cJSON_GetObjectItemCaseSensitive(j, "title");
    const cJSON *detail = cJSON_GetObjectItemCaseSensitive(j, "detail");
    const cJSON *errs = cJSON_GetObjectItemCaseSensitive(j, "errors"), *e;

    if (cJSON_IsString(title))
        fprintf(stderr, "kforge: %ld %s%s%s\n", r->status, title->valuestring, cJSON_IsString(detail) ? ": " : "",
                cJSON_IsString(detail) ? detail->valuestring : "");
    else
        fprintf(stderr, "kforge: HTTP %ld: %.500s\n", r->status, r->body.data);
    cJSON_ArrayForEach(e, errs)
    {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "field");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        fprintf(stderr, "kforge:   %s: %s\n", cJSON_IsString(f) ? f->valuestring : "?",
                cJSON_IsString(m) ? m->valuestring : "?");
    }
    cJSON_Delete(j);
}
