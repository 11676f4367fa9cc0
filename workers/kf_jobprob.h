/*
 * kf_jobprob — what the user-kernel backends (sim, neuron) share of a
 * job: its kernel, reference and inputs as a ka_problem, written to the
 * job's private folder, and file hashes for provenance.
 *
 * Every shape is checked again here rather than trusted to the API's
 * validation (kf_job_spec_check).  Errors are KF_UNPROCESSABLE with a
 * message naming the input (the job is wrong) or KF_IO (the folder).
 */
#ifndef KF_JOBPROB_H
#define KF_JOBPROB_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "kf_error.h"
#include "kf_job.h"
#include "agent/ka_lib.h"

/* o[k] when it is a string, else NULL. */
const char *kf_jobprob_str(const cJSON *o, const char *k);
/* Lower-case hex SHA-256 of a file into out[65]; false when unreadable. */
bool kf_jobprob_sha256(const char *path, char out[65]);
/* text written to dir/name; the path in path[len]. */
kf_code kf_jobprob_write(const char *dir, const char *name, const char *text, char *path, size_t len, kf_err *err);
/* Dimension k of input `what`: a whole number of 1..KF_JOB_MAX_DIM, at
 * most KA_MAX_DIMS dimensions. */
kf_code kf_jobprob_dim(const cJSON *d, int k, int64_t *out, const char *what, kf_err *err);
/* spec.source (and spec.reference) as dir/kernel.py (dir/reference.py),
 * spec.entry and spec.inputs into *pb; `backend` names the backend in
 * messages. */
kf_code kf_jobprob_user(const kf_job_payload *job, const char *dir, const char *backend, ka_problem *pb, kf_err *err);

#endif
