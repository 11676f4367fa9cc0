/*
 * ka_llm — a client of an OpenAI-compatible chat-completions endpoint with
 * tool calls (vLLM, Ollama, llama.cpp, LiteLLM gateways, hosted
 * providers), over libcurl.  docs/llm.md is the user's guide.
 *
 * One call, ka_llm_chat(), POSTs {url}/chat/completions with
 *   {"model", "messages", "tools"?: [{"type":"function","function":{"name",
 *    "description","parameters"}}], "tool_choice"?, <max tokens field>?}
 * and reads choices[0].message.content, .message.tool_calls[{id,
 * function:{name, arguments}}], choices[0].finish_reason and usage
 * {prompt_tokens, completion_tokens}.  The assistant message is also kept
 * as sent (ka_llm_reply.message), to be appended to the conversation
 * before the tool results.
 *
 * Retries: a connection error, a request that takes longer than the
 * timeout, HTTP 408, 409, 429 and 5xx are tried again up to cfg.retries
 * times, after base * 2^attempt ms (capped at backoff_max_ms) times a
 * random factor in [0.5, 1) (jitter); a `retry-after-ms` or `Retry-After`
 * header (seconds or an HTTP date) replaces that wait when it is between 0
 * and 60 s.  A 429 whose Retry-After is longer, or whose error code says
 * the quota is spent (insufficient_quota), is not retried.  Other 4xx
 * (bad request, bad key) are not retried either.
 *
 * Budget: ka_llm.budget_tokens (0: none) bounds prompt + completion tokens
 * over every call of the client; before each call the prompt's size is
 * estimated (bytes / 4) and the call is refused without a request when the
 * tokens used plus that estimate reach the budget; the reply length asked
 * for is at most what remains.  Tokens are counted from each reply's
 * usage (the estimate when a server sends none).
 *
 * The API key: read from cfg.key_file (or cfg.key_fd, see there) for each request, sent as
 * "Authorization: Bearer", its copies in this process wiped after the
 * request; it is never logged, never part of an error message or a reply
 * kept here, and never put in the environment (so a sandboxed child, which
 * gets an allowlisted environment, cannot see it).  Verbose curl output is
 * never turned on.
 *
 * Untrusted replies: the body is parsed with kf_json_parse (UTF-8, depth,
 * duplicate members), bounded at KA_LLM_MAX_REPLY bytes; tool-call
 * arguments are text the caller parses with ka_llm_args_parse against the
 * tool's schema (ka_schema.h), so a model's nonsense becomes a message it
 * can be shown, not a failure of the caller.
 *
 * Failure: ka_llm_chat returns KF_OK with a reply, or a code with the
 * reason in err and in reply->error (a stable word, for stop reasons and
 * transcripts): "budget" (KF_UNPROCESSABLE: no request was sent),
 * "unreachable" (KF_UNAVAILABLE: connection errors to the last retry),
 * "timeout" (KF_TIMEOUT), "rate_limited" and "server_error"
 * (KF_UNAVAILABLE: 429 / 5xx to the last retry), "quota" (KF_UNAVAILABLE,
 * not retried), "refused" (KF_INVALID or KF_UNAUTHORIZED: another 4xx, the
 * server's message quoted), "bad_reply" (KF_INVALID: not JSON, no choices,
 * a malformed tool call, too long).  The reply's attempts, http_status,
 * seconds and raw body are set in every case (raw: NULL when none came).
 *
 * Ownership: ka_llm owns its curl handle (ka_llm_init / ka_llm_release);
 * a reply owns its strings and trees (ka_llm_reply_release, NULL-safe).
 * Not thread-safe: one client per thread.  Needs curl_global_init().
 */
#ifndef KA_LLM_H
#define KA_LLM_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "kf_error.h"

#define KA_LLM_MAX_REPLY (8u << 20)      /* bytes of one response body */
#define KA_LLM_MAX_ARGS (1u << 20)       /* bytes of one tool call's arguments */
#define KA_LLM_MAX_CALLS 16              /* tool calls taken from one reply */
#define KA_LLM_ARGS_DEPTH 16             /* nesting of a tool call's arguments */
#define KA_LLM_RETRY_AFTER_MAX_MS 60000  /* a longer Retry-After is a stop */

typedef struct ka_llm_cfg {
    char     url[1024];            /* base URL: POST {url}/chat/completions */
    char     model[256];
    char     key_file[4096];       /* "": no Authorization header */
    char     max_tokens_field[32]; /* "max_completion_tokens" or "max_tokens" */
    unsigned timeout_ms;           /* one request, connecting included */
    unsigned connect_timeout_ms;
    int      retries;              /* after the first attempt */
    unsigned backoff_ms;           /* first wait before a retry */
    unsigned backoff_max_ms;       /* cap of a wait (Retry-After too) */
    int      max_completion_tokens; /* asked for each reply; 0: not sent (the server's default) */
    /* > 2: the key is read (pread at offset 0, first line) from this
     * descriptor, never from key_file, and only by a child forked for each
     * attempt, which sends the request, overwrites the key in the reply and
     * hands the reply back on a pipe before it exits: the calling process
     * never holds the key, so nothing it forks later (a sandboxed
     * evaluation) can find it in its memory.  The worker's job process
     * runs this way (docs/security.md). */
    int      key_fd;
} ka_llm_cfg;

/* The configuration from KFORGE_LLM_* (kf_config_load() done): KF_CONFIG
 * when KFORGE_LLM_URL or KFORGE_LLM_MODEL is empty, the URL is not http(s),
 * or the max-tokens field is neither name.  Backoff 500 ms .. 20 s,
 * 4096 completion tokens. */
kf_code ka_llm_cfg_from_env(ka_llm_cfg *cfg, kf_err *err);

typedef struct ka_llm {
    ka_llm_cfg cfg;
    int64_t    budget_tokens;      /* 0: no budget */
    int64_t    used_prompt, used_completion;
    int        calls;              /* requests answered with a reply */
    uint64_t   rng;                /* jitter */
    void      *curl;               /* CURL *, reused across calls */
    cJSON     *replay;             /* ka_llm_replay_load: the recorded turns, or NULL */
    int        replay_next;
} ka_llm;

void ka_llm_init(ka_llm *c, const ka_llm_cfg *cfg, int64_t budget_tokens);
void ka_llm_release(ka_llm *c);

/* Replay a transcript instead of asking the endpoint: path is a JSONL
 * file of turns as ka_plan_llm writes them (each line an object with
 * "reply": the raw response body or null, and "error": the ka_llm error
 * word of a failed call).  Each ka_llm_chat then takes the next turn: its
 * reply is parsed as a response would be (usage counted, the budget
 * enforced), its error returned as that failure (KF_UNAVAILABLE), and past
 * the last turn the call fails with "replay_end" (KF_UNAVAILABLE).  No
 * request is sent and no key is read.  KF_IO / KF_INVALID when the file
 * cannot be read or a line is not such an object. */
kf_code ka_llm_replay_load(ka_llm *c, const char *path, kf_err *err);

/* Tokens used so far (prompt + completion). */
int64_t ka_llm_used(const ka_llm *c);

typedef struct ka_llm_call {
    char  id[128];
    char  name[65];               /* [a-zA-Z0-9_-]{1,64}; "" when the model sent another */
    char *arguments;              /* the text the model sent (a JSON document, unparsed) */
} ka_llm_call;

typedef struct ka_llm_reply {
    char        *content;         /* NULL when none (tool calls only) */
    ka_llm_call  calls[KA_LLM_MAX_CALLS];
    int          n_calls;
    char         finish_reason[32];
    int64_t      prompt_tokens, completion_tokens;
    bool         usage_estimated; /* the server sent no usage */
    cJSON       *message;         /* the assistant message to append to the conversation */
    char        *raw;             /* the last response body, NULL when none came */
    long         http_status;     /* of the last attempt; 0: none */
    int          attempts;
    double       seconds;         /* the whole call, waits included */
    char         error[24];       /* "" on success, else the reason word */
} ka_llm_reply;

void ka_llm_reply_release(ka_llm_reply *r);

/* messages: the conversation (borrowed); tools: the tools' array in the
 * request's form (borrowed, NULL: none); tool_choice: "auto", "none",
 * "required" or NULL (not sent: some servers ignore it). */
kf_code ka_llm_chat(ka_llm *c, const cJSON *messages, const cJSON *tools, const char *tool_choice,
                    ka_llm_reply *out, kf_err *err);

/* Parse a response body into out (content, calls, finish reason, usage,
 * message): what ka_llm_chat does with a 200.  KF_INVALID with the reason
 * when it is not a chat completion. */
kf_code ka_llm_reply_parse(const char *body, size_t len, ka_llm_reply *out, kf_err *err);

/* A tool call's arguments: at most KA_LLM_MAX_ARGS bytes of strict JSON
 * (kf_json_parse, depth KA_LLM_ARGS_DEPTH) that is an object with finite
 * numbers only (1e400 would be infinity), checked
 * against the tool's parameters schema (NULL: any object; "" counts as
 * {}).  KF_INVALID with a message meant for the model otherwise. */
kf_code ka_llm_args_parse(const char *text, size_t len, const cJSON *schema, cJSON **out, kf_err *err);

/* The wait before retry `attempt` (0-based) when the server named none:
 * base * 2^attempt capped, times a factor in [0.5, 1). */
unsigned ka_llm_backoff_ms(ka_llm *c, int attempt);

/* A Retry-After value: delta-seconds or an HTTP date (now: the current
 * time, seconds).  -1 when it is neither. */
long long ka_llm_retry_after_ms(const char *value, long long now);

#endif
