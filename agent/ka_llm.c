/* ka_llm — an OpenAI-compatible chat-completions client (see ka_llm.h). */
#include "ka_llm.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ka_schema.h"
#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_json.h"

enum { LLM_KEY_MAX = 4096, LLM_REPLY_DEPTH = 64, LLM_ERRMSG_MAX = 300 };

static double llm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void llm_sleep_ms(unsigned ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- configuration ------------------------------------------------------------------ */

kf_code ka_llm_cfg_from_env(ka_llm_cfg *cfg, kf_err *err)
{
    const char *url = kf_config_str(KF_CFG_LLM_URL), *model = kf_config_str(KF_CFG_LLM_MODEL);
    const char *key = kf_config_str(KF_CFG_LLM_API_KEY_FILE), *field = kf_config_str(KF_CFG_LLM_MAX_TOKENS_FIELD);

    memset(cfg, 0, sizeof(*cfg));
    if (!url[0] || !model[0])
        return kf_err_set(err, KF_CONFIG,
                          "the LLM planner needs KFORGE_LLM_URL (an OpenAI-compatible base URL, e.g. "
                          "http://127.0.0.1:8000/v1) and KFORGE_LLM_MODEL (the model's name)");
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
        return kf_err_set(err, KF_CONFIG, "KFORGE_LLM_URL must start with http:// or https://");
    if (strlen(url) >= sizeof(cfg->url) || strlen(model) >= sizeof(cfg->model) || strlen(key) >= sizeof(cfg->key_file))
        return kf_err_set(err, KF_CONFIG, "KFORGE_LLM_URL, KFORGE_LLM_MODEL or KFORGE_LLM_API_KEY_FILE is too long");
    if (strcmp(field, "max_completion_tokens") != 0 && strcmp(field, "max_tokens") != 0)
        return kf_err_set(err, KF_CONFIG, "KFORGE_LLM_MAX_TOKENS_FIELD must be max_completion_tokens or max_tokens");
    snprintf(cfg->url, sizeof(cfg->url), "%s", url);
    snprintf(cfg->model, sizeof(cfg->model), "%s", model);
    snprintf(cfg->key_file, sizeof(cfg->key_file), "%s", key);
    snprintf(cfg->max_tokens_field, sizeof(cfg->max_tokens_field), "%s", field);
    cfg->timeout_ms = (unsigned)kf_config_int(KF_CFG_LLM_TIMEOUT_S) * 1000u;
    cfg->connect_timeout_ms = cfg->timeout_ms < 10000 ? cfg->timeout_ms : 10000;
    cfg->retries = (int)kf_config_int(KF_CFG_LLM_RETRIES);
    cfg->backoff_ms = 500;
    cfg->backoff_max_ms = 20000;
    cfg->max_completion_tokens = 4096;
    return KF_OK;
}

void ka_llm_init(ka_llm *c, const ka_llm_cfg *cfg, int64_t budget_tokens)
{
    memset(c, 0, sizeof(*c));
    c->cfg = *cfg;
    if (!c->cfg.max_tokens_field[0])
        snprintf(c->cfg.max_tokens_field, sizeof(c->cfg.max_tokens_field), "max_completion_tokens");
    c->budget_tokens = budget_tokens > 0 ? budget_tokens : 0;
    c->rng = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid() ^ (uint64_t)(uintptr_t)c ^ 0x9e3779b97f4a7c15ull;
    c->curl = curl_easy_init();
}

void ka_llm_release(ka_llm *c)
{
    cJSON_Delete(c->replay);
    c->replay = NULL;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    c->curl = NULL;
}

int64_t ka_llm_used(const ka_llm *c)
{
    return c->used_prompt + c->used_completion;
}

void ka_llm_reply_release(ka_llm_reply *r)
{
    if (!r)
        return;
    free(r->content);
    for (int i = 0; i < r->n_calls; i++)
        free(r->calls[i].arguments);
    cJSON_Delete(r->message);
    free(r->raw);
    memset(r, 0, sizeof(*r));
}

/* ---- backoff ------------------------------------------------------------------------- */

static uint64_t llm_rand(ka_llm *c)
{
    uint64_t x = c->rng ? c->rng : 0x2545f4914f6cdd1dull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->rng = x;
    return x * 0x2545f4914f6cdd1dull;
}

unsigned ka_llm_backoff_ms(ka_llm *c, int attempt)
{
    double base = c->cfg.backoff_ms ? c->cfg.backoff_ms : 500, cap = c->cfg.backoff_max_ms ? c->cfg.backoff_max_ms : 20000;
    double w = base * ldexp(1.0, attempt < 30 ? attempt : 30);
    double f = 0.5 + 0.5 * (double)(llm_rand(c) >> 11) / 9007199254740992.0;

    if (w > cap)
        w = cap;
    return (unsigned)(w * f);
}

long long ka_llm_retry_after_ms(const char *value, long long now)
{
    const char *p = value;
    char *end;
    double s;
    time_t t;

    while (*p == ' ' || *p == '\t')
        p++;
    if (*p >= '0' && *p <= '9') {
        errno = 0;
        s = strtod(p, &end);
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')
            end++;
        if (errno || *end || !isfinite(s) || s < 0 || s > 1e9)
            return -1;
        return (long long)(s * 1000.0);
    }
    t = curl_getdate(p, NULL);
    if (t == (time_t)-1)
        return -1;
    return t <= now ? 0 : ((long long)t - now) * 1000;
}

/* ---- one HTTP exchange ------------------------------------------------------------ */

typedef struct llm_xfer {
    kf_buf body;
    bool   too_long;
    long long retry_after_ms;     /* -1: none named */
} llm_xfer;

static size_t llm_write(char *p, size_t size, size_t n, void *ud)
{
    llm_xfer *x = ud;
    size_t len = size * n;

    if (x->body.len + len > KA_LLM_MAX_REPLY) {
        x->too_long = true;
        return 0;
    }
    kf_buf_add(&x->body, p, len);
    return len;
}

static size_t llm_header(char *p, size_t size, size_t n, void *ud)
{
    llm_xfer *x = ud;
    size_t len = size * n;
    char line[256];
    const char *colon;

    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0)
        x->retry_after_ms = -1;   /* a new response (after a 100 Continue) */
    if (len >= sizeof(line))
        return len;
    memcpy(line, p, len);
    line[len] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    colon = strchr(line, ':');
    if (!colon)
        return len;
    if (strncasecmp(line, "retry-after-ms:", 15) == 0) {
        char *end;
        double v;
        errno = 0;
        v = strtod(colon + 1, &end);
        if (!errno && end != colon + 1 && isfinite(v) && v >= 0 && v <= 1e12)
            x->retry_after_ms = (long long)v;
    } else if (strncasecmp(line, "retry-after:", 12) == 0 && x->retry_after_ms < 0) {
        x->retry_after_ms = ka_llm_retry_after_ms(colon + 1, (long long)time(NULL));
    }
    return len;
}

/* The first line of what n bytes of key hold (trailing whitespace cut);
 * what: the key's origin, for messages. */
static kf_code llm_key_line(char *key, ssize_t n, const char *what, kf_err *err)
{
    size_t len;

    if (n < 0)
        return kf_err_set(err, KF_CONFIG, "cannot read the API key %s: %s", what, strerror(errno));
    key[n] = '\0';
    len = strcspn(key, "\r\n");
    while (len && (key[len - 1] == ' ' || key[len - 1] == '\t'))
        len--;
    key[len] = '\0';
    if (!len || strspn(key, " \t") == len)
        return kf_err_set(err, KF_CONFIG, "the API key %s is empty", what);
    return KF_OK;
}

/* The key file's first line (trailing whitespace cut) into key. */
static kf_code llm_read_key(const char *path, char *key, size_t cap, kf_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    char what[4200];
    struct stat st;
    ssize_t n;

    snprintf(what, sizeof(what), "file %s (KFORGE_LLM_API_KEY_FILE)", path);
    if (fd < 0)
        return kf_err_set(err, KF_CONFIG, "cannot read the API key file %s (KFORGE_LLM_API_KEY_FILE): %s", path,
                          strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kf_err_set(err, KF_CONFIG, "the API key file %s (KFORGE_LLM_API_KEY_FILE) is not a regular file", path);
    }
    n = read(fd, key, cap - 1);
    close(fd);
    return llm_key_line(key, n, what, err);
}

/* Every occurrence of key in s[0..len) overwritten with '*'. */
static void llm_redact(char *s, size_t len, const char *key)
{
    size_t k = strlen(key);

    if (!s || k < 4)
        return;
    for (char *p = s; (size_t)(p - s) + k <= len && (p = memmem(p, len - (size_t)(p - s), key, k)) != NULL; p += k)
        memset(p, '*', k);
}

static void llm_wipe(char *p, size_t n)
{
    volatile char *v = p;
    while (n--)
        *v++ = 0;
}

/* The server's error message of a non-200 body, cut and UTF-8 clean, or "". */
static void llm_server_msg(const char *body, size_t len, char *out, size_t cap, char *code, size_t code_cap)
{
    cJSON *j = NULL;
    const cJSON *e, *m, *c;

    out[0] = '\0';
    code[0] = '\0';
    if (kf_json_parse(body, len, LLM_REPLY_DEPTH, &j, NULL) != KF_OK)
        return;
    e = cJSON_GetObjectItemCaseSensitive(j, "error");
    m = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "message") : e;
    c = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "code") : NULL;
    if (!cJSON_IsString(c) && cJSON_IsObject(e))
        c = cJSON_GetObjectItemCaseSensitive(e, "type");
    if (m && cJSON_IsString(m))
        kf_utf8_copy(out, cap, m->valuestring);
    if (c && cJSON_IsString(c))
        kf_utf8_copy(code, code_cap, c->valuestring);
    cJSON_Delete(j);
}

/* ---- the reply ------------------------------------------------------------------------ */

static bool llm_name_ok(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= 64 && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

static int64_t llm_usage_field(const cJSON *u, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(u, name);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 1e12)
        return -1;
    return (int64_t)v->valuedouble;
}

/* What a failed parse had set, freed (the transfer's fields stay). */
static void llm_parse_undo(ka_llm_reply *r)
{
    free(r->content);
    r->content = NULL;
    for (int i = 0; i < r->n_calls; i++)
        free(r->calls[i].arguments);
    memset(r->calls, 0, sizeof(r->calls));
    r->n_calls = 0;
}

kf_code ka_llm_reply_parse(const char *body, size_t len, ka_llm_reply *out, kf_err *err)
{
    cJSON *j = NULL, *msg_out, *calls_out = NULL;
    const cJSON *choices, *ch, *msg, *content, *calls, *call, *fr, *usage;
    kf_err pe = KF_ERR_INIT;
    int64_t pt, ct;
    size_t est = 0;

    if (len > KA_LLM_MAX_REPLY)
        return kf_err_set(err, KF_INVALID, "the reply is longer than %u bytes", KA_LLM_MAX_REPLY);
    if (kf_json_parse(body, len, LLM_REPLY_DEPTH, &j, &pe) != KF_OK)
        return kf_err_set(err, KF_INVALID, "the reply is not JSON: %s", pe.msg);
    choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    ch = cJSON_IsArray(choices) ? cJSON_GetArrayItem(choices, 0) : NULL;
    msg = cJSON_IsObject(ch) ? cJSON_GetObjectItemCaseSensitive(ch, "message") : NULL;
    if (!cJSON_IsObject(msg)) {
        cJSON_Delete(j);
        return kf_err_set(err, KF_INVALID, "the reply has no choices[0].message object: not a chat completion");
    }
    content = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (content && !cJSON_IsString(content) && !cJSON_IsNull(content)) {
        cJSON_Delete(j);
        return kf_err_set(err, KF_INVALID, "choices[0].message.content is neither a string nor null");
    }
    calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    if (calls && !cJSON_IsArray(calls) && !cJSON_IsNull(calls)) {
        cJSON_Delete(j);
        return kf_err_set(err, KF_INVALID, "choices[0].message.tool_calls is not an array");
    }
    msg_out = cJSON_CreateObject();
    cJSON_AddStringToObject(msg_out, "role", "assistant");
    if (content && cJSON_IsString(content)) {
        out->content = kf_strdup(content->valuestring);
        est += strlen(content->valuestring);
        cJSON_AddStringToObject(msg_out, "content", content->valuestring);
    } else {
        cJSON_AddNullToObject(msg_out, "content");
    }
    if (!cJSON_IsArray(calls))
        calls = NULL;
    cJSON_ArrayForEach(call, calls)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(call, "id");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        const cJSON *name = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
        const cJSON *args = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "arguments") : NULL;
        ka_llm_call *cl;
        cJSON *co, *fo;

        if (out->n_calls == KA_LLM_MAX_CALLS)
            break;   /* the rest are dropped: the message sent back holds only these */
        if (!fn || !name || !cJSON_IsObject(fn) || !cJSON_IsString(name)) {
            llm_parse_undo(out);
            cJSON_Delete(msg_out);
            cJSON_Delete(calls_out);
            cJSON_Delete(j);
            return kf_err_set(err, KF_INVALID, "tool_calls[%d] has no function.name", out->n_calls);
        }
        cl = &out->calls[out->n_calls];
        if (cJSON_IsString(id) && id->valuestring[0] && strlen(id->valuestring) < sizeof(cl->id))
            snprintf(cl->id, sizeof(cl->id), "%s", id->valuestring);
        else
            snprintf(cl->id, sizeof(cl->id), "call_%d", out->n_calls);
        if (llm_name_ok(name->valuestring))
            snprintf(cl->name, sizeof(cl->name), "%s", name->valuestring);
        /* arguments: a JSON string by the protocol; some servers send the object itself */
        if (args && cJSON_IsString(args))
            cl->arguments = kf_strdup(args->valuestring);
        else if (args && cJSON_IsObject(args))
            cl->arguments = kf_json_print(args);
        else
            cl->arguments = kf_strdup("");
        est += strlen(cl->arguments);
        out->n_calls++;
        if (!calls_out)
            calls_out = cJSON_CreateArray();
        co = cJSON_CreateObject();
        cJSON_AddStringToObject(co, "id", cl->id);
        cJSON_AddStringToObject(co, "type", "function");
        fo = cJSON_AddObjectToObject(co, "function");
        cJSON_AddStringToObject(fo, "name", cl->name[0] ? cl->name : "invalid_tool_name");
        cJSON_AddStringToObject(fo, "arguments", cl->arguments);
        cJSON_AddItemToArray(calls_out, co);
    }
    if (calls_out)
        cJSON_AddItemToObject(msg_out, "tool_calls", calls_out);
    out->message = msg_out;
    fr = cJSON_GetObjectItemCaseSensitive(ch, "finish_reason");
    if (cJSON_IsString(fr))
        kf_utf8_copy(out->finish_reason, sizeof(out->finish_reason), fr->valuestring);
    usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
    pt = llm_usage_field(usage, "prompt_tokens");
    ct = llm_usage_field(usage, "completion_tokens");
    out->usage_estimated = pt < 0 || ct < 0;
    out->prompt_tokens = pt < 0 ? 0 : pt;
    out->completion_tokens = ct < 0 ? (int64_t)(est / 4 + 1) : ct;
    cJSON_Delete(j);
    return KF_OK;
}

/* ---- arguments ---------------------------------------------------------------------- */

/* The first number of v that is not finite (1e400 parses as infinity). */
static bool llm_all_finite(const cJSON *v)
{
    const cJSON *c;

    if (cJSON_IsNumber(v))
        return isfinite(v->valuedouble);
    cJSON_ArrayForEach(c, v)
    {
        if (!llm_all_finite(c))
            return false;
    }
    return true;
}

kf_code ka_llm_args_parse(const char *text, size_t len, const cJSON *schema, cJSON **out, kf_err *err)
{
    kf_err pe = KF_ERR_INIT;
    char msg[400];
    size_t i = 0;

    *out = NULL;
    if (len > KA_LLM_MAX_ARGS)
        return kf_err_set(err, KF_INVALID, "the arguments are %zu bytes; at most %u are taken", len, KA_LLM_MAX_ARGS);
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n'))
        i++;
    if (i == len) {
        *out = cJSON_CreateObject();
    } else if (kf_json_parse(text, len, KA_LLM_ARGS_DEPTH, out, &pe) != KF_OK) {
        return kf_err_set(err, KF_INVALID, "the arguments are not valid JSON: %s", pe.msg);
    }
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return kf_err_set(err, KF_INVALID, "the arguments must be a JSON object");
    }
    if (!llm_all_finite(*out)) {   /* the depth is bounded by KA_LLM_ARGS_DEPTH */
        cJSON_Delete(*out);
        *out = NULL;
        return kf_err_set(err, KF_INVALID, "the arguments hold a number too large for a double");
    }
    if (schema && !ka_schema_check(schema, *out, "", msg, sizeof(msg))) {
        cJSON_Delete(*out);
        *out = NULL;
        return kf_err_set(err, KF_INVALID, "the arguments break the tool's schema: %s", msg);
    }
    return KF_OK;
}

/* ---- replay --------------------------------------------------------------------------- */

kf_code ka_llm_replay_load(ka_llm *c, const char *path, kf_err *err)
{
    FILE *f = fopen(path, "rb");
    cJSON *turns;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0;

    if (!f)
        return kf_err_set(err, KF_IO, "cannot read the transcript %s: %s", path, strerror(errno));
    turns = cJSON_CreateArray();
    while ((n = getline(&line, &cap, f)) > 0) {
        cJSON *t = NULL;
        const cJSON *r, *e;
        kf_err pe = KF_ERR_INIT;
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        if (n == 0)
            continue;
        if (kf_json_parse(line, (size_t)n, LLM_REPLY_DEPTH, &t, &pe) != KF_OK) {
            free(line);
            fclose(f);
            cJSON_Delete(turns);
            return kf_err_set(err, KF_INVALID, "%s:%d: not JSON: %s", path, lineno, pe.msg);
        }
        r = cJSON_GetObjectItemCaseSensitive(t, "reply");
        e = cJSON_GetObjectItemCaseSensitive(t, "error");
        if (!cJSON_IsObject(t) || !(cJSON_IsString(r) || cJSON_IsNull(r)) || (e && !cJSON_IsString(e)) ||
            (cJSON_IsNull(r) && !e)) {
            cJSON_Delete(t);
            free(line);
            fclose(f);
            cJSON_Delete(turns);
            return kf_err_set(err, KF_INVALID, "%s:%d: not a transcript turn (\"reply\": a string, or null with \"error\")",
                              path, lineno);
        }
        cJSON_AddItemToArray(turns, t);
    }
    free(line);
    fclose(f);
    cJSON_Delete(c->replay);
    c->replay = turns;
    c->replay_next = 0;
    return KF_OK;
}

/* The next recorded turn as the answer of a call. */
static kf_code llm_replay_turn(ka_llm *c, ka_llm_reply *out, kf_err *err)
{
    const cJSON *t = cJSON_GetArrayItem(c->replay, c->replay_next);
    const cJSON *r, *e;
    kf_err pe = KF_ERR_INIT;

    out->attempts = 1;
    if (!t) {
        snprintf(out->error, sizeof(out->error), "replay_end");
        return kf_err_set(err, KF_UNAVAILABLE, "the transcript has no more turns (%d replayed)", c->replay_next);
    }
    c->replay_next++;
    r = cJSON_GetObjectItemCaseSensitive(t, "reply");
    e = cJSON_GetObjectItemCaseSensitive(t, "error");
    if (cJSON_IsString(r))
        out->raw = kf_strdup(r->valuestring);
    if (cJSON_IsString(e) && e->valuestring[0]) {
        kf_utf8_copy(out->error, sizeof(out->error), e->valuestring);
        return kf_err_set(err, KF_UNAVAILABLE, "replayed turn %d: the call failed then (%s)", c->replay_next,
                          out->error);
    }
    out->http_status = 200;
    if (ka_llm_reply_parse(out->raw, strlen(out->raw), out, &pe) != KF_OK) {
        snprintf(out->error, sizeof(out->error), "bad_reply");
        return kf_err_set(err, KF_INVALID, "replayed turn %d: %s", c->replay_next, pe.msg);
    }
    return KF_OK;
}

/* ---- the call ------------------------------------------------------------------------ */

static char *llm_request_body(const ka_llm *c, const cJSON *messages, const cJSON *tools, const char *tool_choice,
                              int64_t max_tokens)
{
    cJSON *req = cJSON_CreateObject();
    char *s;

    cJSON_AddStringToObject(req, "model", c->cfg.model);
    cJSON_AddItemToObject(req, "messages", cJSON_Duplicate(messages, true));
    if (tools && cJSON_GetArraySize(tools) > 0) {
        cJSON_AddItemToObject(req, "tools", cJSON_Duplicate(tools, true));
        if (tool_choice)
            cJSON_AddStringToObject(req, "tool_choice", tool_choice);
    }
    if (max_tokens > 0)
        cJSON_AddNumberToObject(req, c->cfg.max_tokens_field, (double)max_tokens);
    s = kf_json_print(req);
    cJSON_Delete(req);
    return s;
}

typedef enum { LLM_DONE, LLM_RETRY, LLM_STOP } llm_next;

static kf_code llm_fail(ka_llm_reply *out, const char *word, kf_err *err, kf_code code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static kf_code llm_fail(ka_llm_reply *out, const char *word, kf_err *err, kf_code code, const char *fmt, ...)
{
    char msg[sizeof(err->msg)];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(out->error, sizeof(out->error), "%s", word);
    return kf_err_set(err, code, "%s", msg);
}

/* One HTTP exchange on handle h: the body (cut at KA_LLM_MAX_REPLY), the
 * Retry-After, curl's code and the status; every occurrence of key in
 * the body overwritten. */
static void llm_exchange(const ka_llm *c, CURL *h, const char *url, const char *body, size_t body_len,
                         struct curl_slist *hdrs, const char *key, llm_xfer *x, CURLcode *cc, long *status)
{
    *status = 0;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)c->cfg.timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->cfg.connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, llm_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, llm_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
    if (key[0]) {
        curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        curl_easy_setopt(h, CURLOPT_XOAUTH2_BEARER, key);
    }
    *cc = curl_easy_perform(h);
    curl_easy_setopt(h, CURLOPT_XOAUTH2_BEARER, NULL);   /* frees libcurl's copy of the key */
    if (*cc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    llm_redact(x->body.data, x->body.len, key);
}

/* The courier's header on its pipe (host order: the same binary reads it). */
typedef struct llm_courier_hdr {
    int32_t  kind;           /* 0: the exchange ran; 1: the key could not be read (body: why) */
    int32_t  cc;             /* CURLcode */
    int64_t  status;
    int64_t  retry_after_ms;
    uint32_t too_long;
    uint32_t len;            /* body bytes that follow */
} llm_courier_hdr;

static bool llm_write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

/* The child of one courier attempt: never returns. */
static _Noreturn void llm_courier_child(const ka_llm *c, int wfd, const char *url, const char *body, size_t body_len,
                                        struct curl_slist *hdrs)
{
    char key[LLM_KEY_MAX];
    llm_courier_hdr h;
    llm_xfer x = { KF_BUF_INIT, false, -1 };
    kf_err ke = KF_ERR_INIT;
    CURLcode cc = CURLE_OK;
    long status = 0;
    CURL *ch;

    memset(&h, 0, sizeof(h));
    if (llm_key_line(key, pread(c->cfg.key_fd, key, sizeof(key) - 1, 0), "handed to this process", &ke) != KF_OK) {
        h.kind = 1;
        h.len = (uint32_t)strlen(ke.msg);
        _exit(llm_write_all(wfd, &h, sizeof(h)) && llm_write_all(wfd, ke.msg, h.len) ? 0 : 3);
    }
    ch = curl_easy_init();
    if (!ch) {
        llm_wipe(key, sizeof(key));
        h.cc = CURLE_FAILED_INIT;
        _exit(llm_write_all(wfd, &h, sizeof(h)) ? 0 : 3);
    }
    llm_exchange(c, ch, url, body, body_len, hdrs, key, &x, &cc, &status);
    llm_wipe(key, sizeof(key));
    h.cc = (int32_t)cc;
    h.status = status;
    h.retry_after_ms = x.retry_after_ms;
    h.too_long = x.too_long;
    h.len = (uint32_t)x.body.len;
    if (!llm_write_all(wfd, &h, sizeof(h)) || (x.body.len && !llm_write_all(wfd, x.body.data, x.body.len)))
        _exit(3);
    _exit(0);
}

/* One attempt through a child made for it (cfg.key_fd): the reply as
 * llm_exchange gives it; a child that ends without one is a receive
 * error.  KF_CONFIG when the key cannot be read, KF_INTERNAL when no child
 * can be started. */
static kf_code llm_courier(const ka_llm *c, const char *url, const char *body, size_t body_len,
                           struct curl_slist *hdrs, llm_xfer *x, CURLcode *cc, long *status, kf_err *err)
{
    int fds[2];
    pid_t pid;
    kf_buf in = KF_BUF_INIT;
    char chunk[65536];
    llm_courier_hdr h;
    ssize_t n;
    int st;

    *cc = CURLE_RECV_ERROR;
    *status = 0;
    if (pipe2(fds, O_CLOEXEC) != 0)
        return kf_err_set(err, KF_INTERNAL, "cannot make a pipe for the LLM request: %s", strerror(errno));
    pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return kf_err_set(err, KF_INTERNAL, "cannot fork for the LLM request: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        llm_courier_child(c, fds[1], url, body, body_len, hdrs);
    }
    close(fds[1]);
    while ((n = read(fds[0], chunk, sizeof(chunk))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || in.len + (size_t)n > sizeof(h) + KA_LLM_MAX_REPLY)
            break;
        kf_buf_add(&in, chunk, (size_t)n);
    }
    close(fds[0]);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (in.len >= sizeof(h)) {
        memcpy(&h, in.data, sizeof(h));
        if (h.len == in.len - sizeof(h) && h.len <= KA_LLM_MAX_REPLY) {
            if (h.kind == 1) {
                kf_err_set(err, KF_CONFIG, "%.*s", (int)h.len, in.data + sizeof(h));
                kf_buf_release(&in);
                return KF_CONFIG;
            }
            *cc = (CURLcode)h.cc;
            *status = (long)h.status;
            x->retry_after_ms = h.retry_after_ms;
            x->too_long = h.too_long != 0;
            if (h.len)
                kf_buf_add(&x->body, in.data + sizeof(h), h.len);
        }
    }
    kf_buf_release(&in);
    return KF_OK;
}

kf_code ka_llm_chat(ka_llm *c, const cJSON *messages, const cJSON *tools, const char *tool_choice,
                    ka_llm_reply *out, kf_err *err)
{
    char url[1100], key[LLM_KEY_MAX], smsg[LLM_ERRMSG_MAX], scode[64], last[1700] = "";
    const char *last_word = "unreachable";
    kf_code last_code = KF_UNAVAILABLE, rc = KF_OK;
    int64_t max_tokens = c->cfg.max_completion_tokens, est;
    struct curl_slist *hdrs = NULL;
    double t0 = llm_now();
    char *body;
    size_t body_len;

    memset(out, 0, sizeof(*out));
    if (!c->curl)
        return llm_fail(out, "unreachable", err, KF_INTERNAL, "libcurl could not start a session");
    body = llm_request_body(c, messages, tools, tool_choice, 0);
    est = (int64_t)(strlen(body) / 4 + 1);
    free(body);
    if (c->budget_tokens) {
        int64_t left = c->budget_tokens - ka_llm_used(c) - est;
        if (left <= 0)
            return llm_fail(out, "budget", err, KF_UNPROCESSABLE,
                            "the LLM token budget is spent: %lld of %lld used, and the next prompt is about %lld tokens",
                            (long long)ka_llm_used(c), (long long)c->budget_tokens, (long long)est);
        if (max_tokens <= 0 || left < max_tokens)
            max_tokens = left;
    }
    if (c->replay) {
        rc = llm_replay_turn(c, out, err);
        goto counted;
    }
    body = llm_request_body(c, messages, tools, tool_choice, max_tokens);
    body_len = strlen(body);
    snprintf(url, sizeof(url), "%s%schat/completions", c->cfg.url,
             c->cfg.url[0] && c->cfg.url[strlen(c->cfg.url) - 1] == '/' ? "" : "/");
    hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    hdrs = curl_slist_append(hdrs, "Accept: application/json");
    hdrs = curl_slist_append(hdrs, "Expect:");

    for (int attempt = 0;; attempt++) {
        llm_xfer x = { KF_BUF_INIT, false, -1 };
        CURLcode cc = CURLE_OK;
        long status = 0;
        llm_next next = LLM_RETRY;
        unsigned wait_ms;

        key[0] = '\0';
        if (c->cfg.key_fd > 2) {
            /* the key never enters this process: a child made for this
             * attempt reads it, sends the request and hands back the reply */
            rc = llm_courier(c, url, body, body_len, hdrs, &x, &cc, &status, err);
            if (rc != KF_OK) {
                snprintf(out->error, sizeof(out->error), "%s", rc == KF_CONFIG ? "config" : "unreachable");
                kf_buf_release(&x.body);
                break;
            }
        } else {
            if (c->cfg.key_file[0]) {
                rc = llm_read_key(c->cfg.key_file, key, sizeof(key), err);
                if (rc != KF_OK) {
                    snprintf(out->error, sizeof(out->error), "config");
                    break;
                }
            }
            llm_exchange(c, c->curl, url, body, body_len, hdrs, key, &x, &cc, &status);
        }
        out->attempts = attempt + 1;
        out->http_status = status;
        free(out->raw);
        out->raw = x.body.len ? kf_strndup(x.body.data, x.body.len) : NULL;

        if (x.too_long) {
            last_word = "bad_reply", last_code = KF_INVALID;
            snprintf(last, sizeof(last), "the endpoint's reply is longer than %u bytes", KA_LLM_MAX_REPLY);
            next = LLM_STOP;
        } else if (cc == CURLE_OPERATION_TIMEDOUT) {
            last_word = "timeout", last_code = KF_TIMEOUT;
            snprintf(last, sizeof(last), "no reply from %s within %u ms", url, c->cfg.timeout_ms);
        } else if (cc != CURLE_OK) {
            last_word = "unreachable", last_code = KF_UNAVAILABLE;
            snprintf(last, sizeof(last), "cannot reach %s: %s", url, curl_easy_strerror(cc));
        } else if (status == 200) {
            kf_err pe = KF_ERR_INIT;
            if (ka_llm_reply_parse(x.body.data ? x.body.data : "", x.body.len, out, &pe) == KF_OK) {
                next = LLM_DONE;
            } else {
                last_word = "bad_reply", last_code = KF_INVALID;
                snprintf(last, sizeof(last), "%s", pe.msg);
                next = LLM_STOP;
            }
        } else {
            llm_server_msg(x.body.data ? x.body.data : "", x.body.len, smsg, sizeof(smsg), scode, sizeof(scode));
            llm_redact(smsg, strlen(smsg), key);
            snprintf(last, sizeof(last), "%s answered HTTP %ld%s%s", url, status, smsg[0] ? ": " : "", smsg);
            if (status == 429) {
                last_word = "rate_limited", last_code = KF_UNAVAILABLE;
                if (strstr(scode, "insufficient_quota") || x.retry_after_ms > KA_LLM_RETRY_AFTER_MAX_MS) {
                    last_word = "quota";
                    next = LLM_STOP;
                }
            } else if (status >= 500 || status == 408 || status == 409) {
                last_word = "server_error", last_code = KF_UNAVAILABLE;
            } else {
                last_word = "refused";
                last_code = status == 401 || status == 403 ? KF_UNAUTHORIZED : KF_INVALID;
                next = LLM_STOP;
            }
        }
        llm_wipe(key, sizeof(key));
        kf_buf_release(&x.body);
        if (next == LLM_DONE) {
            rc = KF_OK;
            break;
        }
        if (next == LLM_STOP || attempt >= c->cfg.retries) {
            if (next != LLM_STOP && attempt > 0)
                snprintf(last + strlen(last), sizeof(last) - strlen(last), " (after %d attempts)", attempt + 1);
            rc = llm_fail(out, last_word, err, last_code, "%s", last);
            break;
        }
        wait_ms = ka_llm_backoff_ms(c, attempt);
        if (x.retry_after_ms >= 0 && x.retry_after_ms <= KA_LLM_RETRY_AFTER_MAX_MS)
            wait_ms = (unsigned)x.retry_after_ms;
        llm_sleep_ms(wait_ms);
    }
    curl_slist_free_all(hdrs);
    free(body);
counted:
    out->seconds = llm_now() - t0;
    if (rc == KF_OK) {
        if (out->usage_estimated)
            out->prompt_tokens = est;
        c->used_prompt += out->prompt_tokens;
        c->used_completion += out->completion_tokens;
        c->calls++;
    }
    return rc;
}
