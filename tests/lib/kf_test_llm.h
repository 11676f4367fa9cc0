/*
 * kf_test_llm — a scripted OpenAI-compatible chat-completions server for
 * tests: real HTTP on 127.0.0.1 (libmicrohttpd, a thread per connection),
 * answering POST /v1/chat/completions from a script of steps, one step per
 * request in order.
 *
 * A step is an HTTP status with extra header lines and a body, sent after
 * a delay (a slow model), or KF_TEST_LLM_DROP: the connection is closed
 * with no reply (a crashed endpoint).  When the script is spent the server
 * answers 500 {"error": {"message": "script exhausted"}}, so a test that
 * asks more than it scripted sees it.  Every request's body and
 * Authorization header are kept for assertions; other paths get 404.
 *
 * kf_test_llm_content() and kf_test_llm_tool() build the bodies of real
 * chat completions (with usage) for the common steps.
 *
 * Ownership: kf_test_llm_stop() stops the server and frees it; strings
 * returned are the caller's (free).  The test fails when the server
 * cannot start.
 */
#ifndef KF_TEST_LLM_H
#define KF_TEST_LLM_H

#define KF_TEST_LLM_DROP (-1)

typedef struct kf_test_llm kf_test_llm;

kf_test_llm *kf_test_llm_start(void);
void kf_test_llm_stop(kf_test_llm *s);

/* "http://127.0.0.1:PORT/v1" (owned by the server). */
const char *kf_test_llm_url(const kf_test_llm *s);

/* Append a step.  headers: "Name: value" lines separated by '\n', or NULL. */
void kf_test_llm_push(kf_test_llm *s, int status, const char *headers, int delay_ms, const char *body);

/* A 200 step's body: an assistant message with this content, finish_reason
 * "stop", usage {prompt, completion}. Caller frees. */
char *kf_test_llm_content(const char *content, int prompt_tokens, int completion_tokens);
/* A 200 step's body: one tool call (id, name, arguments as the JSON string
 * the protocol carries), finish_reason "tool_calls". Caller frees. */
char *kf_test_llm_tool(const char *id, const char *name, const char *arguments, int prompt_tokens,
                       int completion_tokens);

/* Requests received so far, and request i's body / Authorization header
 * (NULL when absent).  Caller frees. */
int kf_test_llm_requests(kf_test_llm *s);
char *kf_test_llm_request(kf_test_llm *s, int i);
char *kf_test_llm_auth(kf_test_llm *s, int i);

#endif
