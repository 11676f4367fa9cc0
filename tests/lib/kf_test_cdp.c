/* kf_test_cdp — Chrome DevTools Protocol over --remote-debugging-pipe (see
 * kf_test_cdp.h). */
#include "kf_test_cdp.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"

struct kf_cdp {
    pid_t  pid;
    int    wfd, rfd;           /* the browser's fd 3 (commands), fd 4 (answers) */
    char  *in;                 /* bytes read, not yet a whole message */
    size_t in_len, in_cap;
    int    next_id;
    char  *session;            /* the page's sessionId (flat mode) */
    bool   loaded;             /* a Page.loadEventFired since the last navigate */
    kf_buf errors;
};

static long long cdp_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void cdp_why(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cdp_why(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;

    if (!why || cap == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
}

char *kf_cdp_find_browser(void)
{
    static const char *const names[] = { "/usr/bin/chromium", "/usr/bin/chromium-browser", NULL };
    const char *env = getenv("KFORGE_CHROMIUM");

    if (env && *env)
        return access(env, X_OK) == 0 ? kf_strdup(env) : NULL;
    for (int i = 0; names[i]; i++)
        if (access(names[i], X_OK) == 0)
            return kf_strdup(names[i]);
    return NULL;
}

/* Record one error the page produced. */
static void cdp_note_error(kf_cdp *c, const char *kind, const char *text)
{
    kf_buf_addf(&c->errors, "%s: %s\n", kind, text ? text : "(no text)");
}

static const char *cdp_str(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* An event: remember errors and the load event. */
static void cdp_event(kf_cdp *c, const cJSON *msg)
{
    const char *method = cdp_str(msg, "method");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(msg, "params");

    if (!method || !p)
        return;
    if (strcmp(method, "Page.loadEventFired") == 0) {
        c->loaded = true;
    } else if (strcmp(method, "Runtime.consoleAPICalled") == 0) {
        const char *type = cdp_str(p, "type");
        if (type && (strcmp(type, "error") == 0 || strcmp(type, "assert") == 0)) {
            char *args = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(p, "args"));
            cdp_note_error(c, "console.error", args);
            free(args);
        }
    } else if (strcmp(method, "Runtime.exceptionThrown") == 0) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(p, "exceptionDetails");
        const cJSON *ex = cJSON_GetObjectItemCaseSensitive(d, "exception");
        const char *desc = cdp_str(ex, "description");
        cdp_note_error(c, "exception", desc ? desc : cdp_str(d, "text"));
    } else if (strcmp(method, "Log.entryAdded") == 0) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(p, "entry");
        const char *level = cdp_str(e, "level");
        if (level && strcmp(level, "error") == 0) {
            char line[1200];
            snprintf(line, sizeof(line), "%s (%s)", cdp_str(e, "text") ? cdp_str(e, "text") : "",
                     cdp_str(e, "url") ? cdp_str(e, "url") : "no url");
            cdp_note_error(c, "log", line);
        }
    }
}

/* The next whole message (caller deletes), waiting until deadline; NULL
 * when the browser closed the pipe or the time is up. */
static cJSON *cdp_read(kf_cdp *c, long long deadline)
{
    for (;;) {
        char *nul = c->in_len ? memchr(c->in, '\0', c->in_len) : NULL;
        if (nul) {
            size_t n = (size_t)(nul - c->in);
            cJSON *msg = cJSON_ParseWithLength(c->in, n);
            memmove(c->in, nul + 1, c->in_len - n - 1);
            c->in_len -= n + 1;
            if (msg)
                return msg;
            continue;
        }
        long long left = deadline - cdp_now_ms();
        struct pollfd pfd = { c->rfd, POLLIN, 0 };
        if (left <= 0)
            return NULL;
        int pr = poll(&pfd, 1, (int)(left > 1000 ? 1000 : left));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue;
        if (c->in_cap - c->in_len < 65536) {
            c->in_cap = c->in_cap * 2 + 65536;
            c->in = kf_realloc(c->in, c->in_cap);
        }
        ssize_t got = read(c->rfd, c->in + c->in_len, c->in_cap - c->in_len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return NULL;
        c->in_len += (size_t)got;
    }
}

static bool cdp_write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Send a command (to the page's session when to_page) and wait for its answer. */
static cJSON *cdp_send(kf_cdp *c, bool to_page, const char *method, cJSON *params, int timeout_ms, char *why,
                       size_t cap)
{
    cJSON *msg = cJSON_CreateObject();
    int id = ++c->next_id;
    long long deadline = cdp_now_ms() + timeout_ms;
    char *text;
    bool ok;

    cJSON_AddNumberToObject(msg, "id", id);
    cJSON_AddStringToObject(msg, "method", method);
    cJSON_AddItemToObject(msg, "params", params ? params : cJSON_CreateObject());
    if (to_page && c->session)
        cJSON_AddStringToObject(msg, "sessionId", c->session);
    text = cJSON_PrintUnformatted(msg);
    cJSON_Delete(msg);
    ok = cdp_write_all(c->wfd, text, strlen(text) + 1);   /* the NUL ends the message */
    free(text);
    if (!ok) {
        cdp_why(why, cap, "%s: the browser's pipe is closed (did it exit? see its log)", method);
        return NULL;
    }
    for (;;) {
        cJSON *in = cdp_read(c, deadline);
        const cJSON *rid;
        if (!in) {
            cdp_why(why, cap, "%s: no answer within %d ms", method, timeout_ms);
            return NULL;
        }
        rid = cJSON_GetObjectItemCaseSensitive(in, "id");
        if (!cJSON_IsNumber(rid)) {
            cdp_event(c, in);
            cJSON_Delete(in);
            continue;
        }
        if (rid->valueint != id) {
            cJSON_Delete(in);
            continue;
        }
        {
            const cJSON *err = cJSON_GetObjectItemCaseSensitive(in, "error");
            cJSON *res;
            if (err) {
                char *e = cJSON_PrintUnformatted(err);
                cdp_why(why, cap, "%s: %s", method, e);
                free(e);
                cJSON_Delete(in);
                return NULL;
            }
            res = cJSON_DetachItemFromObjectCaseSensitive(in, "result");
            cJSON_Delete(in);
            return res ? res : cJSON_CreateObject();
        }
    }
}

cJSON *kf_cdp_call(kf_cdp *c, const char *method, cJSON *params, int timeout_ms, char *why, size_t cap)
{
    return cdp_send(c, true, method, params, timeout_ms, why, cap);
}

static void cdp_child(const char *browser, const char *profile_dir, const char *log_path, int width, int height,
                      int cmd_fd, int out_fd)
{
    char udd[600], size[64];
    int lfd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int a = fcntl(cmd_fd, F_DUPFD, 10), b = fcntl(out_fd, F_DUPFD, 10);

    setpgid(0, 0);
    if (lfd < 0 || a < 0 || b < 0 || dup2(a, 3) < 0 || dup2(b, 4) < 0)
        _exit(126);
    dup2(lfd, 1);
    dup2(lfd, 2);
    for (int fd = 5; fd < 1024; fd++)
        close(fd);
    snprintf(udd, sizeof(udd), "--user-data-dir=%s", profile_dir);
    snprintf(size, sizeof(size), "--window-size=%d,%d", width, height);
    setenv("HOME", profile_dir, 1);
    setenv("XDG_CONFIG_HOME", profile_dir, 1);
    setenv("XDG_CACHE_HOME", profile_dir, 1);
    {
        /* --no-sandbox only as root, where Chromium refuses to start with
         * its sandbox; the page it opens is the dashboard under test. */
        const char *argv[] = { browser, "--headless", "--remote-debugging-pipe", udd, size,
                               "--no-first-run", "--no-default-browser-check", "--disable-gpu",
                               "--disable-extensions", "--disable-background-networking", "--disable-sync",
                               "--disable-component-update", "--mute-audio", "--hide-scrollbars",
                               "--disable-dev-shm-usage", geteuid() == 0 ? "--no-sandbox" : NULL, NULL };
        execv(browser, (char *const *)(void *)argv);
    }
    _exit(127);
}

kf_cdp *kf_cdp_start(const char *browser, const char *profile_dir, const char *log_path, int width, int height,
                     char *why, size_t cap)
{
    int to_b[2], from_b[2];
    kf_cdp *c;
    cJSON *res, *p;
    const char *tid;
    char *target;

    signal(SIGPIPE, SIG_IGN);
    mkdir(profile_dir, 0700);
    if (pipe(to_b) != 0 || pipe(from_b) != 0) {
        cdp_why(why, cap, "pipe: %s", strerror(errno));
        return NULL;
    }
    c = kf_calloc(1, sizeof(*c));
    kf_buf_init(&c->errors);
    c->pid = fork();
    if (c->pid == 0)
        cdp_child(browser, profile_dir, log_path, width, height, to_b[0], from_b[1]);
    close(to_b[0]);
    close(from_b[1]);
    c->wfd = to_b[1];
    c->rfd = from_b[0];
    fcntl(c->wfd, F_SETFD, FD_CLOEXEC);
    fcntl(c->rfd, F_SETFD, FD_CLOEXEC);
    if (c->pid < 0) {
        cdp_why(why, cap, "fork: %s", strerror(errno));
        kf_cdp_stop(c);
        return NULL;
    }
    p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "url", "about:blank");
    res = cdp_send(c, false, "Target.createTarget", p, 30000, why, cap);
    tid = cdp_str(res, "targetId");
    if (!tid) {
        cJSON_Delete(res);
        kf_cdp_stop(c);
        return NULL;
    }
    target = kf_strdup(tid);
    cJSON_Delete(res);
    p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "targetId", target);
    cJSON_AddBoolToObject(p, "flatten", 1);
    res = cdp_send(c, false, "Target.attachToTarget", p, 10000, why, cap);
    free(target);
    if (!cdp_str(res, "sessionId")) {
        cJSON_Delete(res);
        kf_cdp_stop(c);
        return NULL;
    }
    c->session = kf_strdup(cdp_str(res, "sessionId"));
    cJSON_Delete(res);
    for (int i = 0; i < 3; i++) {
        static const char *const domains[] = { "Runtime.enable", "Log.enable", "Page.enable" };
        res = kf_cdp_call(c, domains[i], NULL, 10000, why, cap);
        if (!res) {
            kf_cdp_stop(c);
            return NULL;
        }
        cJSON_Delete(res);
    }
    return c;
}

void kf_cdp_stop(kf_cdp *c)
{
    if (!c)
        return;
    if (c->wfd > 0)
        close(c->wfd);
    if (c->rfd > 0)
        close(c->rfd);
    if (c->pid > 0) {
        int st;
        long long until = cdp_now_ms() + 5000;
        kill(-c->pid, SIGTERM);
        kill(c->pid, SIGTERM);
        while (waitpid(c->pid, &st, WNOHANG) == 0) {
            if (cdp_now_ms() > until) {
                kill(-c->pid, SIGKILL);
                kill(c->pid, SIGKILL);
                waitpid(c->pid, &st, 0);
                break;
            }
            usleep(20000);
        }
    }
    free(c->in);
    free(c->session);
    kf_buf_release(&c->errors);
    free(c);
}

bool kf_cdp_navigate(kf_cdp *c, const char *url, int timeout_ms, char *why, size_t cap)
{
    cJSON *p = cJSON_CreateObject(), *res;
    long long deadline = cdp_now_ms() + timeout_ms;

    cJSON_AddStringToObject(p, "url", url);
    c->loaded = false;
    res = kf_cdp_call(c, "Page.navigate", p, timeout_ms, why, cap);
    if (!res)
        return false;
    if (cdp_str(res, "errorText")) {
        cdp_why(why, cap, "navigate %s: %s", url, cdp_str(res, "errorText"));
        cJSON_Delete(res);
        return false;
    }
    cJSON_Delete(res);
    while (!c->loaded) {
        cJSON *ev = cdp_read(c, deadline);
        if (!ev) {
            cdp_why(why, cap, "navigate %s: no load event within %d ms", url, timeout_ms);
            return false;
        }
        cdp_event(c, ev);
        cJSON_Delete(ev);
    }
    return true;
}

cJSON *kf_cdp_eval(kf_cdp *c, const char *expr, int timeout_ms, char *why, size_t cap)
{
    cJSON *p = cJSON_CreateObject(), *res, *val;
    const cJSON *exc;

    cJSON_AddStringToObject(p, "expression", expr);
    cJSON_AddBoolToObject(p, "awaitPromise", 1);
    cJSON_AddBoolToObject(p, "returnByValue", 1);
    res = kf_cdp_call(c, "Runtime.evaluate", p, timeout_ms, why, cap);
    if (!res)
        return NULL;
    exc = cJSON_GetObjectItemCaseSensitive(res, "exceptionDetails");
    if (exc) {
        const cJSON *ex = cJSON_GetObjectItemCaseSensitive(exc, "exception");
        cdp_why(why, cap, "%s threw %s", expr,
                cdp_str(ex, "description") ? cdp_str(ex, "description") : cdp_str(exc, "text") ? cdp_str(exc, "text") : "");
        cJSON_Delete(res);
        return NULL;
    }
    val = cJSON_DetachItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "result"), "value");
    cJSON_Delete(res);
    return val ? val : cJSON_CreateNull();
}

double kf_cdp_eval_num(kf_cdp *c, const char *expr)
{
    char why[256];
    cJSON *v = kf_cdp_eval(c, expr, 10000, why, sizeof(why));
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;

    cJSON_Delete(v);
    return d;
}

char *kf_cdp_eval_str(kf_cdp *c, const char *expr)
{
    char why[256];
    cJSON *v = kf_cdp_eval(c, expr, 10000, why, sizeof(why));
    char *s = cJSON_IsString(v) ? kf_strdup(v->valuestring) : NULL;

    cJSON_Delete(v);
    return s;
}

bool kf_cdp_wait(kf_cdp *c, const char *expr, int timeout_ms)
{
    long long deadline = cdp_now_ms() + timeout_ms;

    do {
        char why[256];
        cJSON *v = kf_cdp_eval(c, expr, 5000, why, sizeof(why));
        bool yes = cJSON_IsTrue(v);
        cJSON_Delete(v);
        if (yes)
            return true;
        usleep(100000);
    } while (cdp_now_ms() < deadline);
    return false;
}

bool kf_cdp_screenshot(kf_cdp *c, const char *path, char *why, size_t cap)
{
    cJSON *p = cJSON_CreateObject(), *res;
    const char *b64;
    unsigned char *png;
    size_t n;
    int len;
    FILE *f;

    cJSON_AddStringToObject(p, "format", "png");
    /* The whole page, not only the viewport: its size from the layout. */
    res = kf_cdp_call(c, "Page.getLayoutMetrics", NULL, 10000, why, cap);
    {
        const cJSON *sz = cJSON_GetObjectItemCaseSensitive(res, "cssContentSize");
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(sz, "width"), *hh = cJSON_GetObjectItemCaseSensitive(sz, "height");
        if (cJSON_IsNumber(w) && cJSON_IsNumber(hh) && w->valuedouble > 0 && hh->valuedouble > 0) {
            cJSON *clip = cJSON_AddObjectToObject(p, "clip");
            cJSON_AddNumberToObject(clip, "x", 0);
            cJSON_AddNumberToObject(clip, "y", 0);
            cJSON_AddNumberToObject(clip, "width", w->valuedouble);
            cJSON_AddNumberToObject(clip, "height", hh->valuedouble > 8000 ? 8000 : hh->valuedouble);
            cJSON_AddNumberToObject(clip, "scale", 1);
            cJSON_AddBoolToObject(p, "captureBeyondViewport", 1);
        }
    }
    cJSON_Delete(res);
    res = kf_cdp_call(c, "Page.captureScreenshot", p, 30000, why, cap);
    b64 = cdp_str(res, "data");
    if (!b64) {
        cJSON_Delete(res);
        return false;
    }
    n = strlen(b64);
    png = kf_malloc(n / 4 * 3 + 4);
    len = EVP_DecodeBlock(png, (const unsigned char *)b64, (int)n);
    if (len < 0) {
        cdp_why(why, cap, "screenshot: bad base64");
        free(png);
        cJSON_Delete(res);
        return false;
    }
    /* EVP_DecodeBlock counts the padding's zero bytes too. */
    while (n > 0 && b64[n - 1] == '=') {
        len--;
        n--;
    }
    f = fopen(path, "wb");
    if (!f || fwrite(png, 1, (size_t)len, f) != (size_t)len) {
        cdp_why(why, cap, "cannot write %s", path);
        if (f)
            fclose(f);
        free(png);
        cJSON_Delete(res);
        return false;
    }
    fclose(f);
    free(png);
    cJSON_Delete(res);
    return true;
}

const char *kf_cdp_errors(const kf_cdp *c)
{
    return c->errors.data ? c->errors.data : "";
}
