/* kf_report — HTTP reports to the API and the on-disk spool (kf_report.h). */
#include "kf_report.h"

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_log.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SPOOL_MAX_FILE (32u << 20)

struct kf_report {
    CURL              *curl;
    char              *base;
    struct curl_slist *headers;
    int                timeout_ms;
    char               problem[64];   /* type slug of the last answer */
};

struct kf_spool {
    char *dir;
    int   lock_fd;
    int   seq;
};

/* ---- HTTP ----------------------------------------------------------- */

static size_t rep_collect(char *p, size_t size, size_t n, void *ud)
{
    kf_buf *b = ud;
    size_t len = size * n;
    if (b->len < 4096)
        kf_buf_add(b, p, len < 4096 - b->len ? len : 4096 - b->len);
    return len;
}

kf_report *kf_report_new(const char *api_url, const char *token, int timeout_ms)
{
    kf_report *r = kf_calloc(1, sizeof(*r));
    size_t n = strlen(api_url);
    char *auth;

    while (n > 0 && api_url[n - 1] == '/')
        n--;
    r->base = kf_strndup(api_url, n);
    r->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
    auth = kf_asprintf("Authorization: Bearer %s", token ? token : "");
    r->headers = curl_slist_append(NULL, auth);
    r->headers = curl_slist_append(r->headers, "Content-Type: application/json");
    r->headers = curl_slist_append(r->headers, "Expect:");
    free(auth);
    r->curl = curl_easy_init();
    if (!r->curl || !r->headers) {
        kf_report_free(r);
        return NULL;
    }
    return r;
}

void kf_report_free(kf_report *r)
{
    if (!r)
        return;
    if (r->curl)
        curl_easy_cleanup(r->curl);
    curl_slist_free_all(r->headers);
    free(r->base);
    free(r);
}

/* Remember the problem type of an answer body ("" if none). */
static void rep_note_problem(kf_report *r, const kf_buf *resp)
{
    static const char pre[] = "urn:kforge:problem:";
    cJSON *j = resp->len ? cJSON_ParseWithLength(resp->data, resp->len) : NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");

    r->problem[0] = '\0';
    if (cJSON_IsString(t) && strncmp(t->valuestring, pre, sizeof(pre) - 1) == 0)
        snprintf(r->problem, sizeof(r->problem), "%s", t->valuestring + sizeof(pre) - 1);
    cJSON_Delete(j);
}

static long rep_request(kf_report *r, const char *path, const char *body, kf_buf *resp, char *cerr)
{
    char *url = kf_asprintf("%s%s", r->base, path);
    long status = 0;
    CURLcode rc;

    curl_easy_reset(r->curl);
    curl_easy_setopt(r->curl, CURLOPT_URL, url);
    if (body) {
        curl_easy_setopt(r->curl, CURLOPT_POST, 1L);
        curl_easy_setopt(r->curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(r->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    curl_easy_setopt(r->curl, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(r->curl, CURLOPT_TIMEOUT_MS, (long)r->timeout_ms);
    curl_easy_setopt(r->curl, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(r->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(r->curl, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(r->curl, CURLOPT_WRITEFUNCTION, rep_collect);
    curl_easy_setopt(r->curl, CURLOPT_WRITEDATA, resp);
    rc = curl_easy_perform(r->curl);
    if (rc == CURLE_OK)
        curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &status);
    else if (!cerr[0])
        snprintf(cerr, CURL_ERROR_SIZE, "%s", curl_easy_strerror(rc));
    rep_note_problem(r, resp);
    free(url);
    return status;
}

long kf_report_post(kf_report *r, const char *path, const char *body, char *errbuf, size_t errlen)
{
    char cerr[CURL_ERROR_SIZE] = "";
    kf_buf resp = KF_BUF_INIT;
    long status = rep_request(r, path, body, &resp, cerr);

    if (errbuf && errlen) {
        if (status == 0)
            snprintf(errbuf, errlen, "%s", cerr);
        else
            snprintf(errbuf, errlen, "%.200s", resp.data ? resp.data : "");
    }
    kf_buf_release(&resp);
    return status;
}

long kf_report_get(kf_report *r, const char *path, char *body, size_t len)
{
    char cerr[CURL_ERROR_SIZE] = "";
    kf_buf resp = KF_BUF_INIT;
    long status = rep_request(r, path, NULL, &resp, cerr);

    if (body && len)
        snprintf(body, len, "%s", status == 0 ? cerr : resp.data ? resp.data : "");
    kf_buf_release(&resp);
    return status;
}

const char *kf_report_problem(const kf_report *r)
{
    return r->problem;
}

bool kf_report_final(long status, const char *problem)
{
    if (status >= 200 && status < 300)
        return true;
    if (status == 403 && problem && strcmp(problem, "not-lease-holder") == 0)
        return true;
    if (status == 0 || status >= 500 || status == 408 || status == 429 || status == 401 || status == 403)
        return false;
    return true;
}

char *kf_report_token_read(const char *path, kf_err *err)
{
    struct stat st;
    kf_buf b = KF_BUF_INIT;
    char chunk[512];
    ssize_t n;
    char *tok = NULL;
    size_t i = 0, end;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

    if (fd < 0) {
        kf_err_set(err, KF_CONFIG, "cannot read the token file %s (KFORGE_TOKEN_FILE): %s", path, strerror(errno));
        return NULL;
    }
    /* fstat the open file: what is checked is what is read. */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        kf_err_set(err, KF_CONFIG, "the token file %s (KFORGE_TOKEN_FILE) is not a regular file", path);
        goto out;
    }
    if (st.st_uid != geteuid()) {
        kf_err_set(err, KF_CONFIG,
                   "the token file %s is owned by uid %u, not by this worker's user (uid %u): "
                   "chown %u %s (a token others own may be swapped under the worker)",
                   path, (unsigned)st.st_uid, (unsigned)geteuid(), (unsigned)geteuid(), path);
        goto out;
    }
    if (st.st_mode & 077) {
        kf_err_set(err, KF_CONFIG,
                   "the token file %s has mode %04o: other users may read it; run chmod 600 %s (or 400)",
                   path, (unsigned)(st.st_mode & 07777), path);
        goto out;
    }
    while ((n = read(fd, chunk, sizeof(chunk))) > 0 && b.len < 4096)
        kf_buf_add(&b, chunk, (size_t)n);
    if (n < 0) {
        kf_err_set(err, KF_CONFIG, "cannot read the token file %s: %s", path, strerror(errno));
        goto out;
    }
    end = b.len;
    while (i < end && (b.data[i] == ' ' || b.data[i] == '\t' || b.data[i] == '\n' || b.data[i] == '\r'))
        i++;
    while (end > i && (b.data[end - 1] == ' ' || b.data[end - 1] == '\t' || b.data[end - 1] == '\n' ||
                       b.data[end - 1] == '\r'))
        end--;
    if (end == i || end - i > 256 || memchr(b.data + i, '\n', end - i)) {
        kf_err_set(err, KF_CONFIG,
                   "the token file %s must hold one token on one line (as `kforge-api token create --role worker` "
                   "prints it)", path);
        goto out;
    }
    tok = kf_strndup(b.data + i, end - i);
out:
    if (b.data)
        explicit_bzero(b.data, b.cap);
    kf_buf_release(&b);
    explicit_bzero(chunk, sizeof(chunk));
    close(fd);
    return tok;
}

/* ---- spool ---------------------------------------------------------- */

static int spool_mkdirs(const char *dir)
{
    char *p = kf_strdup(dir);
    int rc = 0;

    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            rc = -1;
        *s = '/';
    }
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
        rc = -1;
    free(p);
    return rc;
}

kf_spool *kf_spool_open(const char *dir, kf_err *err)
{
    kf_spool *s;
    char *lock;

    if (!dir || !*dir) {
        kf_err_set(err, KF_CONFIG, "KFORGE_SPOOL_DIR is empty; set it to a folder the worker can write");
        return NULL;
    }
    if (spool_mkdirs(dir) != 0) {
        kf_err_set(err, KF_CONFIG, "cannot create the spool folder %s: %s (check KFORGE_SPOOL_DIR)", dir,
                   strerror(errno));
        return NULL;
    }
    s = kf_calloc(1, sizeof(*s));
    s->dir = kf_strdup(dir);
    lock = kf_asprintf("%s/.lock", dir);
    s->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    free(lock);
    if (s->lock_fd < 0) {
        kf_err_set(err, KF_CONFIG, "cannot write in the spool folder %s: %s (check KFORGE_SPOOL_DIR)", dir,
                   strerror(errno));
        kf_spool_free(s);
        return NULL;
    }
    return s;
}

void kf_spool_free(kf_spool *s)
{
    if (!s)
        return;
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    free(s->dir);
    free(s);
}

static int spool_write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

kf_code kf_spool_put(kf_spool *s, const char *path, const char *body, char *name_out, size_t name_len,
                     kf_err *err)
{
    struct timespec ts;
    char name[96];
    char *tmp, *final;
    int fd, dfd;
    kf_code rc = KF_OK;

    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(name, sizeof(name), "%lld%09ld-%d-%06d.rpt", (long long)ts.tv_sec, ts.tv_nsec, (int)getpid(),
             s->seq++ % 1000000);
    tmp = kf_asprintf("%s/.%s.tmp", s->dir, name);
    final = kf_asprintf("%s/%s", s->dir, name);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || spool_write_all(fd, path, strlen(path)) != 0 || spool_write_all(fd, "\n", 1) != 0 ||
        spool_write_all(fd, body, strlen(body)) != 0 || fsync(fd) != 0) {
        rc = kf_err_set(err, KF_IO, "cannot write a report to the spool %s: %s (disk full or not writable?)",
                        s->dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        unlink(tmp);
        goto out;
    }
    close(fd);
    if (rename(tmp, final) != 0) {
        rc = kf_err_set(err, KF_IO, "cannot rename %s in the spool: %s", tmp, strerror(errno));
        unlink(tmp);
        goto out;
    }
    dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    if (name_out && name_len)
        snprintf(name_out, name_len, "%s", name);
out:
    free(tmp);
    free(final);
    return rc;
}

static int spool_is_report(const struct dirent *d)
{
    size_t n = strlen(d->d_name);
    return d->d_name[0] != '.' && n > 4 && strcmp(d->d_name + n - 4, ".rpt") == 0;
}

static char *spool_read(const char *file, size_t *len)
{
    FILE *f = fopen(file, "rb");
    kf_buf b = KF_BUF_INIT;
    char chunk[8192];
    size_t n;

    if (!f)
        return NULL;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0 && b.len < SPOOL_MAX_FILE)
        kf_buf_add(&b, chunk, n);
    fclose(f);
    *len = b.len;
    return kf_buf_detach(&b);
}

kf_code kf_spool_flush(kf_spool *s, kf_report *r, int *pending, kf_err *err)
{
    struct dirent **list = NULL;
    int n, i, left = 0;

    *pending = 0;
    while (flock(s->lock_fd, LOCK_EX) != 0) {
        if (errno != EINTR)
            return kf_err_set(err, KF_IO, "cannot lock the spool %s: %s", s->dir, strerror(errno));
    }
    n = scandir(s->dir, &list, spool_is_report, alphasort);
    if (n < 0) {
        flock(s->lock_fd, LOCK_UN);
        return kf_err_set(err, KF_IO, "cannot read the spool %s: %s", s->dir, strerror(errno));
    }
    for (i = 0; i < n; i++) {
        char *file = kf_asprintf("%s/%s", s->dir, list[i]->d_name);
        size_t len = 0;
        char *text = spool_read(file, &len);
        char *nl = text ? strchr(text, '\n') : NULL;
        char why[256] = "";
        long status;

        if (!nl) {
            /* Cannot happen for files we wrote (rename is atomic); keep it for a person to look at. */
            kf_log_error("unreadable spool file kept for inspection file=%s", file);
            char *bad = kf_asprintf("%s.bad", file);
            (void)rename(file, bad);
            free(bad);
            free(text);
            free(file);
            continue;
        }
        *nl = '\0';
        status = kf_report_post(r, text, nl + 1, why, sizeof(why));
        if (kf_report_final(status, kf_report_problem(r))) {
            if (status >= 300)
                kf_log_warn("spooled report ended by the API path=%s status=%ld detail=\"%s\"", text, status, why);
            else
                kf_log_info("spooled report delivered path=%s status=%ld", text, status);
            unlink(file);
            free(text);
            free(file);
            continue;
        }
        kf_log_debug("spooled report not accepted yet path=%s status=%ld detail=\"%s\"", text, status, why);
        free(text);
        free(file);
        left = n - i;
        break;
    }
    for (i = 0; i < n; i++)
        free(list[i]);
    free(list);
    flock(s->lock_fd, LOCK_UN);
    *pending = left;
    return KF_OK;
}

bool kf_spool_has(const kf_spool *s, const char *name)
{
    char *file = kf_asprintf("%s/%s", s->dir, name);
    bool there = access(file, F_OK) == 0;
    free(file);
    return there;
}

int kf_spool_count(const kf_spool *s)
{
    DIR *d = opendir(s->dir);
    struct dirent *e;
    int n = 0;

    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL)
        n += spool_is_report(e);
    closedir(d);
    return n;
}

long kf_spool_deliver(kf_spool *s, kf_report *r, const char *path, const char *body, char *name_out,
                      size_t name_len, bool (*give_up)(void *ctx), void *ctx)
{
    kf_err err = KF_ERR_INIT;
    char why[256] = "";
    int pending = 0;
    long st;

    if (name_out && name_len)
        name_out[0] = '\0';
    if (kf_spool_count(s) > 0)
        kf_spool_flush(s, r, &pending, &err);
    if (pending == 0) {
        st = kf_report_post(r, path, body, why, sizeof(why));
        if (kf_report_final(st, kf_report_problem(r))) {
            if (st >= 300)
                kf_log_info("report refused by the API path=%s status=%ld detail=\"%s\"", path, st, why);
            return st;
        }
        kf_log_warn("API did not accept the report; spooling it path=%s status=%ld detail=\"%s\"", path, st, why);
    }
    while (kf_spool_put(s, path, body, name_out, name_len, &err) != KF_OK) {
        bool stop = false;
        kf_log_error("%s; retrying in 1 s", err.msg);
        /* A second in slices, so a give-up (a drain that ran out) ends it early. */
        for (int i = 0; i < 50 && !stop; i++) {
            const struct timespec slice = { 0, 20 * 1000000L };
            nanosleep(&slice, NULL);
            stop = give_up && give_up(ctx);
        }
        if (stop)
            break;
    }
    return -1;
}
