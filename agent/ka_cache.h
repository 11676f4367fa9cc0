/*
 * ka_cache — the agent's evaluation cache: timing-only simulator results
 * and validation verdicts under a SHA-256 hex key that ka_loop builds from
 * the kernel source, the entry, the settings, the inputs (names, dtypes,
 * shapes), the target's description and the simulator build
 * (ka_cache_identity()); a verdict's key also holds the reference, the
 * seeds, the inputs' spread and the tolerances.
 *
 * Always in memory.  With a folder (ka_cache_open) also on disk, so later
 * runs, and other processes of the same machine, reuse evaluations: a
 * timing-only result and a verdict on seeded inputs are deterministic, so
 * a stored one is as good as a new run.
 *
 * On disk an entry is <dir>/v1/<first 2 hex>/<key>.json holding
 * {"key": KEY, "result": {...}}, written to a temporary file and renamed,
 * so readers never see half an entry.  ka_cache_open() trims the folder to
 * max_entries (oldest first).  Deleting the folder at any time is safe.
 *
 * Failure behaviour: the disk is an optimisation.  An unreadable, corrupt
 * or foreign entry is a miss (and is removed); a failed write keeps the
 * result in memory only and logs one warning per cache.  Only
 * ka_cache_open() fails, when the folder cannot be created (KF_IO, with
 * the path and the reason).
 *
 * Ownership: the cache keeps its own copies of what is put; ka_cache_get()
 * returns a pointer owned by the cache, valid until ka_cache_free()
 * (NULL-safe).  Not thread-safe: one cache per thread or process.
 */
#ifndef KA_CACHE_H
#define KA_CACHE_H

#include <cjson/cJSON.h>

#include "kf_error.h"

typedef struct ka_cache ka_cache;

/* Entries kept on disk when the caller gives no limit. */
#define KA_CACHE_DEFAULT_MAX 10000

ka_cache *ka_cache_new(void);                           /* memory only */
ka_cache *ka_cache_open(const char *dir, long max_entries, kf_err *err);
void ka_cache_free(ka_cache *c);

const cJSON *ka_cache_get(ka_cache *c, const char *key);
void ka_cache_put(ka_cache *c, const char *key, const cJSON *val);

unsigned long ka_cache_hits(const ka_cache *c);         /* lookups answered (memory or disk) */
unsigned long ka_cache_disk_hits(const ka_cache *c);    /* of which from the folder */
unsigned long ka_cache_size(const ka_cache *c);         /* entries in memory */
const char *ka_cache_dir(const ka_cache *c);            /* NULL: memory only */

/* SHA-256 (hex) of the running executable, computed once: the simulator
 * build that produced a result.  "unknown" if it cannot be read. */
const char *ka_cache_identity(void);

#endif
