/*
 * kf_upload — the artifacts and provenance a backend hands the worker,
 * turned into the reports of docs/protocol.md.
 *
 * A backend's iteration may carry "artifacts": [{"name", "content"}] (the
 * files kept for a new best: agent/ka_loop.h ka_artifacts), or
 * [{"name", "content_base64"}] for binary files (the neuron backend's
 * NEFF and NTFF), and its result
 * "provenance": {...}.  The worker takes them out of what it relays
 * (kf_upload_take_*), sends each file as its own report to
 * POST /v1/internal/jobs/{id}/artifacts (kf_upload_artifact_body: JSON with
 * the bytes in base64, so it travels through the same spool as every other
 * report and nothing is lost while the API is away), and the provenance
 * as the result report's "provenance" member, its "worker" set to this
 * worker (kf_finish_report.provenance_json, kf_finish.h).
 *
 * Ownership: take_* detach from the caller's object and hand the caller
 * what they took (cJSON_Delete / free); the bodies are heap strings the
 * caller frees.  Failure behaviour: a member of the wrong shape is dropped
 * (NULL), never sent half-formed.
 */
#ifndef KF_UPLOAD_H
#define KF_UPLOAD_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "kf_buf.h"

/* obj["artifacts"] detached: an array whose every element is
 * {"name": string, "content": string} or {"name": string,
 * "content_base64": string}, or NULL (absent or another shape,
 * which is dropped from obj all the same). */
cJSON *kf_upload_take_artifacts(cJSON *obj);
/* {"attempt","lease_token","worker","seq","name","final","content_base64"}
 * for one element of such an array. */
char *kf_upload_artifact_body(int attempt, const char *lease_token, const char *worker, int seq, bool final,
                              const cJSON *file);
/* result["provenance"] detached, with "worker" set to worker, as JSON
 * text; NULL when absent or not an object. */
char *kf_upload_take_provenance(cJSON *result, const char *worker);
/* Standard base64 with padding (RFC 4648) of n bytes, appended to out. */
void kf_upload_base64(const void *data, size_t n, kf_buf *out);

#endif
