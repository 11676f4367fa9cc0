#include "kf_test_http.h"
#include "kf_alloc.h"
#include "kf_buf.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static pthread_once_t kf_http_once = PTHREAD_ONCE_INIT;

static void kf_http_global_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static size_t kf_http_collect(char *p, size_t size, size_t n, void *ud)
{
    kf_buf_add(ud, p, size * n);
    return size * n;
}

/* libcurl passes every header line of every response (redirects, 100
 * Continue); keep only the last block. */
static size_t kf_http_collect_header(char *p, size_t size, size_t n, void *ud)
{
    kf_buf *b = ud;
    if (n * size >= 5 && strncmp(p, "HTTP/", 5) == 0)
        kf_buf_reset(b);
    kf_buf_add(b, p, size * n);
    return size * n;
}

long kf_http_request(const char *method, const char *url, const char *token, const char *const *headers,
                     const char *body, size_t body_len, kf_http_resp *out)
{
    CURL *c;
    CURLcode rc;
    struct curl_slist *hl = NULL;
    kf_buf hb = KF_BUF_INIT, bb = KF_BUF_INIT;
    char *auth = NULL;

    pthread_once(&kf_http_once, kf_http_global_init);
    memset(out, 0, sizeof(*out));
    c = curl_easy_init();
    if (!c) {
        snprintf(out->error, sizeof(out->error), "curl_easy_init failed");
        return 0;
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, kf_http_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &bb);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, kf_http_collect_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &hb);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    if (token) {
        auth = kf_asprintf("Authorization: Bearer %s", token);
        hl = curl_slist_append(hl, auth);
    }
    /* An empty "Expect:" stops curl from waiting for 100 Continue. */
    hl = curl_slist_append(hl, "Expect:");
    for (size_t i = 0; headers && headers[i]; i++)
        hl = curl_slist_append(hl, headers[i]);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    if (body) {
        if (body_len == (size_t)-1)
            body_len = strlen(body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    rc = curl_easy_perform(c);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    } else {
        out->status = 0;
        snprintf(out->error, sizeof(out->error), "%s %s: %s", method, url, curl_easy_strerror(rc));
    }
    out->body_len = bb.len;
    out->body = kf_buf_detach(&bb);
    out->headers = kf_buf_detach(&hb);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    free(auth);
    return out->status;
}

long kf_http_json(const char *method, const char *url, const char *token, const char *body, kf_http_resp *out)
{
    static const char *const hdrs[] = { "Content-Type: application/json", NULL };
    return kf_http_request(method, url, token, body ? hdrs : NULL, body, (size_t)-1, out);
}

char *kf_http_header(const kf_http_resp *r, const char *name)
{
    size_t n = strlen(name);
    const char *p = r->headers;

    while (p && *p) {
        const char *eol = strstr(p, "\r\n");
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len > n && strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;
            const char *e = p + len;
            while (v < e && (*v == ' ' || *v == '\t'))
                v++;
            while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
                e--;
            return kf_strndup(v, (size_t)(e - v));
        }
        p = eol ? eol + 2 : p + len;
    }
    return NULL;
}

void kf_http_resp_release(kf_http_resp *r)
{
    if (!r)
        return;
    free(r->headers);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

bool kf_http_wait_status(const char *url, long status, int timeout_ms)
{
    struct timespec ts;
    long long end;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    end = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + timeout_ms;
    for (;;) {
        kf_http_resp r;
        long got = kf_http_request("GET", url, NULL, NULL, NULL, 0, &r);
        kf_http_resp_release(&r);
        if (got == status)
            return true;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if ((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 >= end)
            return false;
        ts.tv_sec = 0;
        ts.tv_nsec = 50 * 1000000L;
        nanosleep(&ts, NULL);
    }
}

int kf_http_raw_connect(int port)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

char *kf_http_raw_read(int fd, int timeout_ms, bool *closed)
{
    kf_buf b = KF_BUF_INIT;
    struct timespec ts;
    long long end;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    end = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + timeout_ms;
    *closed = false;
    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        char chunk[4096];
        long long left;
        ssize_t n;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        left = end - ((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            break;
        n = recv(fd, chunk, sizeof(chunk), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *closed = true;
            break;
        }
        kf_buf_add(&b, chunk, (size_t)n);
    }
    return kf_buf_detach(&b);
}

long kf_http_raw(int port, const char *req, size_t len, int timeout_ms, char **reply)
{
    int fd = kf_http_raw_connect(port);
    long status = 0;
    bool closed;
    char *text;

    if (reply)
        *reply = NULL;
    if (fd < 0)
        return 0;
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    text = kf_http_raw_read(fd, timeout_ms, &closed);
    close(fd);
    if (strncmp(text, "HTTP/1.", 7) == 0 && strlen(text) > 12)
        status = strtol(text + 9, NULL, 10);
    if (reply)
        *reply = text;
    else
        free(text);
    return status;
}
