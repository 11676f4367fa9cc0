/*
 * kf_batchspec — the body of POST /v1/batches (docs/batches.md), checked
 * and expanded into its jobs: a job template times a matrix of axes (op,
 * shapes, dtype, target), or the library form (every op of kforge's kernel
 * library at its declared shapes, on the targets asked for).
 *
 * Pure: no I/O.  The library form reads the library's index as the caller
 * gives it (common/kf_libmeta's kf_libmeta_index), so the parser can be
 * fuzzed (tests/fuzz/fuzz_batchspec.c) and unit-tested.
 *
 * Bounds: the number of jobs (the product of the axes' lengths, or ops x
 * targets x dtypes) is computed, without overflow, and checked against
 * the caller's limit before any job is built; an axis holds at most
 * KF_BATCH_MAX_AXIS values, no two the same.  op, shapes and dtype axes
 * are for generate templates only, so a template carrying a kernel's
 * source (up to 256 KiB) is copied at most once per target (4).
 *
 * Ownership: a kf_batchspec owns everything it points to; release it with
 * kf_batchspec_release() (NULL-safe, idempotent).
 * Failure behaviour: kf_batchspec_parse() returns false with the reasons
 * in fe (paths such as "matrix.op[2]" or "entries[17].spec.shapes[0]"; the
 * first entry that fails is reported, not every one); *out is then empty.
 * Exceeding the job limit is the field "matrix" (or "targets") with rule
 * "limit".
 */
#ifndef KF_BATCHSPEC_H
#define KF_BATCHSPEC_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "kf_json.h"
#include "kf_job.h"

#define KF_BATCH_MAX_AXIS        1024   /* values one axis may list */
#define KF_BATCH_MAX_NAME        128    /* bytes of a batch's name */
#define KF_BATCH_DEFAULT_PRIORITY 2     /* below an interactive job's default (5) */
#define KF_BATCH_MAX_PRIORITY    4      /* a batch never outranks interactive work's default */
#define KF_BATCH_DEFAULT_DTYPE   "bfloat16"   /* the library form's dtype when none is given */

/* One job of a batch, its place in the matrix and its match key. */
typedef struct kf_batch_entry {
    kf_job_request jr;      /* the job as POST /v1/jobs would accept it */
    char          *key;     /* "op|shape|dtype|target" (docs/batches.md) */
    cJSON         *coords;  /* {"seq","key","op","shape","dtype","target"} */
} kf_batch_entry;

typedef struct kf_batchspec {
    bool            library;    /* the library form */
    char           *name;       /* NULL when none was given */
    int             priority;   /* 0..KF_BATCH_MAX_PRIORITY */
    cJSON          *tmpl;       /* the template as it will be stored */
    cJSON          *matrix;     /* the axes as they will be stored */
    int             n;          /* entries */
    kf_batch_entry *entries;    /* in matrix order: the last axis varies fastest */
} kf_batchspec;

typedef struct kf_batchspec_limits {
    long         max_jobs;              /* KFORGE_MAX_BATCH_JOBS */
    int          default_max_attempts;  /* as POST /v1/jobs's */
    const cJSON *library;               /* kf_libmeta_index's array; NULL: no library here */
} kf_batchspec_limits;

/* Check body and expand it; see the header comment. */
bool kf_batchspec_parse(const cJSON *body, const kf_batchspec_limits *lim, kf_batchspec *out, kf_fields *fe);
void kf_batchspec_release(kf_batchspec *b);

/* The entries' keys sorted and joined by '\n' (caller frees): what the
 * batch's matrix_hash is the SHA-256 of, so two batches over the same
 * entries hash the same whatever order their axes were given in. */
char *kf_batchspec_keys(const kf_batchspec *b);

/* The shape signature of a list of shapes: [[4096,8192],[8192]] ->
 * "4096x8192,8192"; a scalar ([]) is "1".  Into out (cap bytes, cut
 * quietly); false when shapes is not an array of arrays of integers. */
bool kf_batchspec_shape_sig(const cJSON *shapes, char *out, size_t cap);

#endif
