/*
 * kf_artifact — the artifact store: content-addressed bytes (SHA-256)
 * behind one interface, and the retention of a job's artifact links
 * (docs/runs.md "Artifacts"; the `artifacts` and `artifact_blobs` tables of
 * migration 0009).
 *
 * Backends, chosen by KFORGE_ARTIFACT_STORE (kf_artifact_store_open):
 *   "" or "pg"  PostgreSQL: one artifact_blobs row per content, the bytes
 *               zlib-compressed (kept raw when compression does not make
 *               them smaller), in the caller's connection and transaction;
 *   "dir:PATH"  a folder: PATH/ab/cd/<sha256>, written to a temporary name
 *               in the same folder, fsynced, renamed and the folder fsynced,
 *               so a content is either wholly there or absent.  Kept raw, so
 *               a range is read with one pread.
 * put() is idempotent: the same bytes give the same name and are stored
 * once; storing them again refreshes their "touched" time (the row's
 * touched_at, the file's mtime), which retention's grace period reads.
 *
 * The links (which job, attempt, iteration and name point at a content)
 * are rows of `artifacts`, written by the API's upload route.  Retention
 * (kf_artifact_retain, run by the scheduler) deletes the links of jobs that
 * finished more than `days` ago except the final set (final = true: the
 * kernel and documents of the job's result stay), then the content no link
 * references any more and that was not touched within grace_s (an upload
 * in flight writes its content before its link).  A content a kernel
 * library entry names (kernel_library.source_sha256, migration 0013) is
 * referenced too and stays.
 *
 * Ownership: a store is made by open() and freed by kf_artifact_store_free()
 * (NULL-safe); it holds only its settings, so one store may serve many
 * threads, each with its own PGconn.  get() appends to the caller's buffer.
 * Failure behaviour: errors are values: KF_CONFIG for a bad store setting
 * (saying what to set), KF_NOT_FOUND for an unknown content, KF_IO for a
 * folder that cannot be written or read (the message names the path),
 * KF_UNAVAILABLE when PostgreSQL is unreachable, KF_DB for another failed
 * statement, KF_INTERNAL when zlib fails.  Nothing is left half written.
 */
#ifndef KF_ARTIFACT_H
#define KF_ARTIFACT_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kf_buf.h"
#include "kf_error.h"

typedef struct kf_artifact_store kf_artifact_store;

#define KF_ARTIFACT_TO_END UINT64_MAX

/* "" or "pg": PostgreSQL; "dir:PATH" (PATH absolute; created 0700 when
 * missing). */
kf_code kf_artifact_store_open(const char *spec, kf_artifact_store **out, kf_err *err);
void kf_artifact_store_free(kf_artifact_store *s);
/* "pg" or "dir". */
const char *kf_artifact_store_kind(const kf_artifact_store *s);

/* Lower-case hex SHA-256 of n bytes. */
void kf_artifact_sha256_hex(const void *p, size_t n, char out[65]);
/* 64 lower-case hex digits. */
bool kf_artifact_sha_valid(const char *s);

/* Store n bytes; sha (65 bytes) gets their SHA-256.  c: the caller's
 * connection (used by the pg backend only; may be NULL for dir). */
kf_code kf_artifact_put(kf_artifact_store *s, PGconn *c, const void *data, size_t n, char sha[65], kf_err *err);
/* Append bytes [off, off+len) of a content to out (clipped to its end;
 * len KF_ARTIFACT_TO_END: to the end); *size gets the content's size. */
kf_code kf_artifact_get(kf_artifact_store *s, PGconn *c, const char *sha, uint64_t off, uint64_t len, kf_buf *out,
                        uint64_t *size, kf_err *err);
/* Retention (see above).  days >= 1; *links and *blobs count what went. */
kf_code kf_artifact_retain(kf_artifact_store *s, PGconn *c, int days, int grace_s, long *links, long *blobs,
                           kf_err *err);

/* The zlib codec of the pg backend, for its tests and the benchmark:
 * compress n bytes into out (replacing its content); false when the
 * result would not be smaller (store raw). */
bool kf_artifact_deflate(const void *data, size_t n, kf_buf *out);
/* Inflate into out exactly `size` bytes; KF_INTERNAL for corrupt input. */
kf_code kf_artifact_inflate(const void *data, size_t n, uint64_t size, kf_buf *out, kf_err *err);

#endif
