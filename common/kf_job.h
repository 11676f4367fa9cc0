/*
 * kf_job — the job model: kinds, states, targets, and the validation of a
 * job request (the API) and of a queue payload (the worker).
 *
 * A request is the JSON a client POSTs to /v1/jobs: the envelope (kind,
 * target, backend, priority, budget, goal, labels, max_attempts) plus the
 * kind's own fields, either at the top level or inside a "spec" object (not
 * both).  kf_job_request_parse() checks every field, refuses unknown ones,
 * fills in defaults, and records each violation in a kf_fields list.
 *
 * The payload is what goes on the Redis queue (docs/protocol.md):
 * {"id","kind","target","backend","spec","budget","goal"}.  The API and the
 * scheduler's relay build it with kf_job_payload_build(); the worker reads
 * it with kf_job_payload_parse(), which validates the spec with the same
 * rules the API applied.
 *
 * Ownership: kf_job_request and kf_job_payload own their cJSON members;
 * release them with the matching *_release() (NULL-safe, idempotent).
 */
#ifndef KF_JOB_H
#define KF_JOB_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "kf_error.h"
#include "kf_json.h"

typedef enum kf_job_kind {
    KF_KIND_NONE = 0,
    KF_KIND_GENERATE,
    KF_KIND_OPTIMIZE,
    KF_KIND_PROFILE,
    KF_KIND_VALIDATE,
    KF_KIND_DIAG,
} kf_job_kind;

/* Limits of the request (also in api/openapi.json and the README). */
#define KF_JOB_MAX_SOURCE_BYTES  262144        /* source, reference: 256 KiB */
#define KF_JOB_MAX_INPUTS        16
#define KF_JOB_MAX_DIMS          8
#define KF_JOB_MAX_DIM           (1LL << 31)   /* one dimension, elements */
/* One tensor's bytes (elements x the dtype's size), and all of a job's
 * tensors together: 256 GiB, more than any Neuron device's HBM (trn2: 96
 * GiB), so no real kernel meets it, while every product of dimensions
 * stays far inside int64_t. */
#define KF_JOB_MAX_TENSOR_BYTES  (1ULL << 38)
#define KF_JOB_MAX_TUNABLES      16
#define KF_JOB_MAX_TUNABLE_VALUES 64
#define KF_JOB_MAX_SHAPES        16
#define KF_JOB_MAX_LABELS        16
#define KF_JOB_MAX_LABEL_VALUE   256
#define KF_JOB_MAX_SLEEP_MS      600000
#define KF_JOB_MAX_LLM_TOKENS    1000000000LL  /* budget.llm_tokens: prompt + completion */

const char *kf_job_kind_name(kf_job_kind k);       /* "diag"; "" for NONE */
kf_job_kind kf_job_kind_parse(const char *s);      /* KF_KIND_NONE if unknown */

/* NULL-terminated lists of accepted names. */
extern const char *const kf_job_targets[];         /* trn1 inf2 trn2 trn3 */
extern const char *const kf_job_backends[];        /* sim neuron diag */
extern const char *const kf_job_states[];          /* queued running retrying succeeded failed cancelled dead */
extern const char *const kf_job_dtypes[];
extern const char *const kf_job_planners[];        /* guided llm: spec.planner of generate / optimize */

bool kf_job_state_valid(const char *s);
/* succeeded, failed, cancelled, dead. */
bool kf_job_state_terminal(const char *s);

/* The diag kind's spec, decoded. */
typedef struct kf_job_diag {
    int64_t sleep_ms;   /* 0..600000 */
    bool    fail;       /* finish with an error */
    bool    crash;      /* abort the worker process */
    int     exit_code;  /* reported with a failure, 0..255 */
} kf_job_diag;

typedef struct kf_job_request {
    kf_job_kind kind;
    const char *target;     /* static string from kf_job_targets */
    const char *backend;    /* static string from kf_job_backends */
    int         priority;   /* 0..9, default 5 */
    int         max_attempts;
    cJSON      *spec;       /* the kind's fields, defaults filled in */
    cJSON      *budget;     /* {"iterations": n, "seconds": n, "llm_tokens"?: n} */
    cJSON      *goal;       /* {} or {"latency_ns": x} or {"fraction_of_bound": x} */
    cJSON      *labels;     /* string → string */
} kf_job_request;

/* Validate a parsed request body.  Returns true when it is valid (fe->n ==
 * 0); req is filled only then.  default_max_attempts applies when the
 * request has none (clamped to 1..20). */
bool kf_job_request_parse(const cJSON *body, int default_max_attempts, kf_job_request *req, kf_fields *fe);
void kf_job_request_release(kf_job_request *req);

/* Validate the kind-specific fields in `spec` (an object); used by both the
 * request and the payload parsers.  Paths are prefixed with `parent`. */
void kf_job_spec_check(kf_job_kind kind, const cJSON *spec, const char *parent, kf_fields *fe);

/* The queue payload, from the job row's columns (spec/budget/goal are JSON
 * texts, embedded as they are: they come from PostgreSQL jsonb or the API's
 * own printing, and the worker parses and checks the whole payload).
 * Returns a string the caller frees, or NULL when one of the texts is not a
 * JSON object {...} (the message in err). */
char *kf_job_payload_build(const char *id, const char *kind, const char *target, const char *backend,
                           const char *spec_json, const char *budget_json, const char *goal_json, kf_err *err);

typedef struct kf_job_payload {
    char        id[37];
    kf_job_kind kind;
    char        target[8];
    char        backend[8];
    cJSON      *spec;
    cJSON      *budget;
    cJSON      *goal;
    kf_job_diag diag;      /* when kind == KF_KIND_DIAG */
} kf_job_payload;

/* Parse and validate a queue payload; KF_INVALID naming the first bad field. */
kf_code kf_job_payload_parse(const char *json, kf_job_payload *out, kf_err *err);
void kf_job_payload_release(kf_job_payload *p);

/* True when s is a canonical lowercase or uppercase UUID text (8-4-4-4-12). */
bool kf_uuid_valid(const char *s);

/* A new job id: a time-ordered UUID version 7 (RFC 9562: 48 bits of Unix
 * milliseconds, 12 bits of sub-millisecond clock, 62 random bits from the
 * kernel), lowercase text.  Ids made later sort later, so the primary key
 * grows at its right edge instead of at a random leaf.  False (out left
 * empty) only when the kernel gives no random bytes. */
bool kf_uuid_v7(char out[37]);

#endif
