/*
 * kf_libmeta — kforge's kernel library as data: where its folder is, and
 * the KFORGE block each template declares (op, entry, inputs, tunables,
 * reference_shapes...; docs/agent.md).  Pure reading, no simulator: the
 * agent binds templates to shapes (agent/ka_lib.h), kforge-api lists the
 * library's ops for POST /v1/batches {"library": "all"}.
 *
 * Ownership: kf_libmeta_dir() returns a static string; every cJSON and
 * char * handed back is the caller's (cJSON_Delete, free).
 * Failure behaviour: errors are values (KF_NOT_FOUND no folder or no
 * KFORGE block, KF_IO unreadable, KF_TOO_LARGE a file over 1 MiB,
 * KF_INVALID a block that is not JSON), with a message naming the file.
 * A template whose block cannot be read is left out of the index.
 */
#ifndef KF_LIBMETA_H
#define KF_LIBMETA_H

#include <cjson/cJSON.h>

#include "kf_error.h"

/* The library folder: KFORGE_KERNELS_DIR, else ./kernels, else beside the
 * binary (../../kernels from build/bin, ../share/kforge/kernels); NULL
 * when none is found. */
const char *kf_libmeta_dir(void);

/* A whole file of at most 1 MiB, NUL-terminated (caller frees); NULL with
 * err (may be NULL) set otherwise. */
char *kf_libmeta_read_file(const char *path, kf_err *err);

/* The module-level KFORGE = {...} block of a template's text (what: the
 * name used in messages), or of a file, as an owned cJSON object. */
kf_code kf_libmeta_from_text(const char *text, const char *what, cJSON **meta, kf_err *err);
kf_code kf_libmeta_read(const char *path, cJSON **meta, kf_err *err);

/* Every template of dir (NULL: kf_libmeta_dir()) in file-name order, as a
 * JSON array of their KFORGE objects with a "path" member added (owned). */
kf_code kf_libmeta_index(const char *dir, cJSON **index, kf_err *err);

#endif
