/* kf_test_llm — a scripted chat-completions server (see kf_test_llm.h). */
#include "kf_test_llm.h"

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_json.h"
#include "kf_test.h"

enum { LLM_MAX_STEPS = 64, LLM_MAX_REQS = 64 };

typedef struct llm_step {
    int   status, delay_ms;
    char *headers, *body;
} llm_step;

struct kf_test_llm {
    struct MHD_Daemon *d;
    char               url[64];
    pthread_mutex_t    mu;
    llm_step           steps[LLM_MAX_STEPS];
    int                n_steps, next;
    char              *req_body[LLM_MAX_REQS], *req_auth[LLM_MAX_REQS];
    int                n_reqs;
};

typedef struct llm_conn {
    kf_buf body;
} llm_conn;

static enum MHD_Result llm_send(struct MHD_Connection *c, int status, const char *headers, const char *body)
{
    /* MUST_COPY: MHD copies the bytes and never writes through the pointer */
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)(uintptr_t)body, /* NOLINT(performance-no-int-to-ptr) */
                                                             MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ok;

    MHD_add_response_header(r, "Content-Type", "application/json");
    for (const char *p = headers; p && *p;) {
        size_t len = strcspn(p, "\n");
        char line[512];
        char *colon;
        if (len < sizeof(line)) {
            memcpy(line, p, len);
            line[len] = '\0';
            colon = strchr(line, ':');
            if (colon) {
                *colon = '\0';
                MHD_add_response_header(r, line, colon + 1 + strspn(colon + 1, " "));
            }
        }
        p += len + (p[len] == '\n');
    }
    ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result llm_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                   const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    kf_test_llm *s = cls;
    llm_conn *cn = *con_cls;
    llm_step st = { 500, 0, NULL, NULL };
    const char *auth;
    bool have = false;

    (void)version;
    if (!cn) {
        cn = kf_calloc(1, sizeof(*cn));
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_size) {
        kf_buf_add(&cn->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, "POST") != 0 || strcmp(url, "/v1/chat/completions") != 0)
        return llm_send(c, 404, NULL, "{\"error\":{\"message\":\"not found\"}}");
    auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    pthread_mutex_lock(&s->mu);
    if (s->n_reqs < LLM_MAX_REQS) {
        s->req_body[s->n_reqs] = kf_strndup(cn->body.data ? cn->body.data : "", cn->body.len);
        s->req_auth[s->n_reqs] = auth ? kf_strdup(auth) : NULL;
        s->n_reqs++;
    }
    if (s->next < s->n_steps) {
        st = s->steps[s->next++];
        have = true;
    }
    pthread_mutex_unlock(&s->mu);
    if (!have)
        return llm_send(c, 500, NULL, "{\"error\":{\"message\":\"script exhausted\",\"type\":\"server_error\"}}");
    if (st.delay_ms > 0)
        kf_test_sleep_ms(st.delay_ms);
    if (st.status == KF_TEST_LLM_DROP)
        return MHD_NO;
    return llm_send(c, st.status, st.headers, st.body ? st.body : "");
}

static void llm_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode tc)
{
    llm_conn *cn = *con_cls;

    (void)cls, (void)c, (void)tc;
    if (cn) {
        kf_buf_release(&cn->body);
        free(cn);
        *con_cls = NULL;
    }
}

kf_test_llm *kf_test_llm_start(void)
{
    kf_test_llm *s = kf_calloc(1, sizeof(*s));
    int port = kf_test_free_port();

    pthread_mutex_init(&s->mu, NULL);
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, (uint16_t)port, NULL,
                            NULL, llm_handler, s, MHD_OPTION_NOTIFY_COMPLETED, llm_done, s, MHD_OPTION_END);
    cr_assert_not_null(s->d, "the scripted LLM server cannot listen on 127.0.0.1:%d", port);
    snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d/v1", port);
    return s;
}

void kf_test_llm_stop(kf_test_llm *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->d);
    for (int i = 0; i < s->n_steps; i++) {
        free(s->steps[i].headers);
        free(s->steps[i].body);
    }
    for (int i = 0; i < s->n_reqs; i++) {
        free(s->req_body[i]);
        free(s->req_auth[i]);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

const char *kf_test_llm_url(const kf_test_llm *s)
{
    return s->url;
}

void kf_test_llm_push(kf_test_llm *s, int status, const char *headers, int delay_ms, const char *body)
{
    pthread_mutex_lock(&s->mu);
    cr_assert_lt(s->n_steps, LLM_MAX_STEPS, "too many scripted steps");
    s->steps[s->n_steps++] = (llm_step){ status, delay_ms, headers ? kf_strdup(headers) : NULL,
                                         body ? kf_strdup(body) : NULL };
    pthread_mutex_unlock(&s->mu);
}

static char *llm_completion(cJSON *msg, const char *finish, int pt, int ct)
{
    cJSON *o = cJSON_CreateObject(), *choices = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
    cJSON *u;
    char *text;

    cJSON_AddStringToObject(o, "id", "chatcmpl-test");
    cJSON_AddStringToObject(o, "object", "chat.completion");
    cJSON_AddStringToObject(o, "model", "scripted");
    cJSON_AddNumberToObject(ch, "index", 0);
    cJSON_AddItemToObject(ch, "message", msg);
    cJSON_AddStringToObject(ch, "finish_reason", finish);
    cJSON_AddItemToArray(choices, ch);
    u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", pt);
    cJSON_AddNumberToObject(u, "completion_tokens", ct);
    cJSON_AddNumberToObject(u, "total_tokens", pt + ct);
    text = kf_json_print(o);
    cJSON_Delete(o);
    return text;
}

char *kf_test_llm_content(const char *content, int prompt_tokens, int completion_tokens)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "content", content);
    return llm_completion(m, "stop", prompt_tokens, completion_tokens);
}

char *kf_test_llm_tool(const char *id, const char *name, const char *arguments, int prompt_tokens,
                       int completion_tokens)
{
    cJSON *m = cJSON_CreateObject(), *calls, *call, *fn;

    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddNullToObject(m, "content");
    calls = cJSON_AddArrayToObject(m, "tool_calls");
    call = cJSON_CreateObject();
    cJSON_AddStringToObject(call, "id", id);
    cJSON_AddStringToObject(call, "type", "function");
    fn = cJSON_AddObjectToObject(call, "function");
    cJSON_AddStringToObject(fn, "name", name);
    cJSON_AddStringToObject(fn, "arguments", arguments);
    cJSON_AddItemToArray(calls, call);
    return llm_completion(m, "tool_calls", prompt_tokens, completion_tokens);
}

int kf_test_llm_requests(kf_test_llm *s)
{
    int n;
    pthread_mutex_lock(&s->mu);
    n = s->n_reqs;
    pthread_mutex_unlock(&s->mu);
    return n;
}

char *kf_test_llm_request(kf_test_llm *s, int i)
{
    char *r = NULL;
    pthread_mutex_lock(&s->mu);
    if (i >= 0 && i < s->n_reqs)
        r = kf_strdup(s->req_body[i]);
    pthread_mutex_unlock(&s->mu);
    return r;
}

char *kf_test_llm_auth(kf_test_llm *s, int i)
{
    char *r = NULL;
    pthread_mutex_lock(&s->mu);
    if (i >= 0 && i < s->n_reqs && s->req_auth[i])
        r = kf_strdup(s->req_auth[i]);
    pthread_mutex_unlock(&s->mu);
    return r;
}
