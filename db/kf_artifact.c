/* kf_artifact — content-addressed artifact store and retention (see kf_artifact.h). */
#include "kf_artifact.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "kf_alloc.h"
#include "kf_db.h"
#include "kf_fs.h"

enum { KF_ART_PG = 1, KF_ART_DIR };

struct kf_artifact_store {
    int  kind;
    char dir[PATH_MAX - 80];   /* room for /ab/cd/<sha>.tmp.XXXXXX */
};

/* zlib level 3: most of level 6's ratio on JSON at about twice its speed
 * (bench/artifact_bench.c). */
#define KF_ART_ZLEVEL 3

kf_code kf_artifact_store_open(const char *spec, kf_artifact_store **out, kf_err *err)
{
    kf_artifact_store *s;

    *out = NULL;
    if (!spec || !*spec || strcmp(spec, "pg") == 0) {
        s = kf_calloc(1, sizeof(*s));
        s->kind = KF_ART_PG;
        *out = s;
        return KF_OK;
    }
    if (strncmp(spec, "dir:", 4) != 0)
        return kf_err_set(err, KF_CONFIG,
                          "KFORGE_ARTIFACT_STORE=\"%s\" is not a store: use \"pg\" (the default) or \"dir:/ABSOLUTE/PATH\"",
                          spec);
    if (spec[4] != '/')
        return kf_err_set(err, KF_CONFIG, "KFORGE_ARTIFACT_STORE=\"%s\": the folder must be an absolute path", spec);
    s = kf_calloc(1, sizeof(*s));
    s->kind = KF_ART_DIR;
    if (strlen(spec + 4) >= sizeof(s->dir)) {
        free(s);
        return kf_err_set(err, KF_CONFIG, "KFORGE_ARTIFACT_STORE: the folder path is too long");
    }
    snprintf(s->dir, sizeof(s->dir), "%s", spec + 4);
    if (kf_mkdir_p(s->dir, 0700) != 0) {
        kf_code rc = kf_err_set(err, KF_IO, "cannot create the artifact folder %s: %s; create it or fix its permissions",
                                s->dir, strerror(errno));
        free(s);
        return rc;
    }
    *out = s;
    return KF_OK;
}

void kf_artifact_store_free(kf_artifact_store *s)
{
    free(s);
}

const char *kf_artifact_store_kind(const kf_artifact_store *s)
{
    return s->kind == KF_ART_PG ? "pg" : "dir";
}

void kf_artifact_sha256_hex(const void *p, size_t n, char out[65])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[SHA256_DIGEST_LENGTH];

    SHA256(p, n, md);
    for (size_t i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
}

bool kf_artifact_sha_valid(const char *s)
{
    size_t i = 0;

    if (!s)
        return false;
    for (; s[i]; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')) || i >= 64)
            return false;
    return i == 64;
}

/* ---- zlib codec ------------------------------------------------------------ */

bool kf_artifact_deflate(const void *data, size_t n, kf_buf *out)
{
    uLongf cap = compressBound((uLong)n);

    kf_buf_reset(out);
    if ((uLong)n != n)
        return false;
    kf_buf_grow(out, cap);
    if (compress2((Bytef *)out->data, &cap, (const Bytef *)data, (uLong)n, KF_ART_ZLEVEL) != Z_OK || cap >= n)
        return false;
    out->len = cap;
    out->data[cap] = '\0';
    return true;
}

kf_code kf_artifact_inflate(const void *data, size_t n, uint64_t size, kf_buf *out, kf_err *err)
{
    uLongf got = (uLongf)size;
    size_t base = out->len;

    if ((uint64_t)(uLongf)size != size || (uLong)n != n)
        return kf_err_set(err, KF_INTERNAL, "an artifact of %llu bytes is too large for zlib here",
                          (unsigned long long)size);
    kf_buf_grow(out, (size_t)size);
    if (uncompress((Bytef *)out->data + base, &got, (const Bytef *)data, (uLong)n) != Z_OK || got != size) {
        out->data[base] = '\0';
        return kf_err_set(err, KF_INTERNAL, "a stored artifact does not inflate to its recorded size (corrupt row)");
    }
    out->len = base + (size_t)size;
    out->data[out->len] = '\0';
    return KF_OK;
}

/* ---- PostgreSQL backend ------------------------------------------------------ */

static kf_code kf_art_pg_fail(PGconn *c, PGresult *r, kf_err *err)
{
    const char *msg = r ? PQresultErrorMessage(r) : PQerrorMessage(c);
    kf_code rc = kf_pg_transient(c, r) ? KF_UNAVAILABLE : KF_DB;

    kf_err_set(err, rc, "PostgreSQL %s (artifact store): %.*s",
               rc == KF_UNAVAILABLE ? "is unavailable or the transaction must be retried" : "refused the statement",
               (int)strcspn(msg, "\n"), msg);
    PQclear(r);
    return rc;
}

static kf_code kf_art_pg_put(PGconn *c, const void *data, size_t n, const char *sha, kf_err *err)
{
    kf_buf z = KF_BUF_INIT;
    bool packed = kf_artifact_deflate(data, n, &z);
    char size[24];
    const char *params[4] = { sha, size, packed ? "zlib" : "raw", packed ? z.data : data };
    int lengths[4] = { 0, 0, 0, (int)(packed ? z.len : n) };
    int formats[4] = { 0, 0, 0, 1 };
    PGresult *r;

    if ((packed ? z.len : n) > INT_MAX) {
        kf_buf_release(&z);
        return kf_err_set(err, KF_TOO_LARGE, "an artifact of %zu bytes is too large for the PostgreSQL store", n);
    }
    snprintf(size, sizeof(size), "%zu", n);
    /* A content stored again only has its touched_at refreshed (the
     * retention grace); its bytes are the same by construction. */
    r = PQexecParams(c,
                     "INSERT INTO artifact_blobs (sha256, size, codec, data) VALUES ($1, $2::bigint, $3, $4) "
                     "ON CONFLICT (sha256) DO UPDATE SET touched_at = now()",
                     4, NULL, params, lengths, formats, 0);
    kf_buf_release(&z);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        return kf_art_pg_fail(c, r, err);
    PQclear(r);
    return KF_OK;
}

static uint64_t kf_art_be64(const char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | (unsigned char)p[i];
    return v;
}

static kf_code kf_art_pg_get(PGconn *c, const char *sha, uint64_t off, uint64_t len, kf_buf *out, uint64_t *size,
                             kf_err *err)
{
    const char *params[1] = { sha };
    PGresult *r = PQexecParams(c, "SELECT size, codec, data FROM artifact_blobs WHERE sha256 = $1", 1, NULL, params,
                               NULL, NULL, 1);
    uint64_t sz;
    bool zlib;
    kf_buf whole = KF_BUF_INIT;
    const char *bytes;
    size_t nbytes;

    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return kf_art_pg_fail(c, r, err);
    if (PQntuples(r) == 0) {
        PQclear(r);
        return kf_err_set(err, KF_NOT_FOUND, "no stored artifact %s", sha);
    }
    if (PQgetlength(r, 0, 0) != 8) {
        PQclear(r);
        return kf_err_set(err, KF_DB, "artifact_blobs.size is not a bigint: is migration 0009 applied?");
    }
    sz = kf_art_be64(PQgetvalue(r, 0, 0));
    zlib = strcmp(PQgetvalue(r, 0, 1), "zlib") == 0;
    bytes = PQgetvalue(r, 0, 2);
    nbytes = (size_t)PQgetlength(r, 0, 2);
    if (zlib) {
        kf_code rc = kf_artifact_inflate(bytes, nbytes, sz, &whole, err);
        if (rc) {
            PQclear(r);
            return rc;
        }
        bytes = whole.data;
        nbytes = whole.len;
    }
    if (nbytes != sz) {
        PQclear(r);
        return kf_err_set(err, KF_INTERNAL, "stored artifact %s has %zu bytes, not its recorded %llu", sha, nbytes,
                          (unsigned long long)sz);
    }
    *size = sz;
    if (off < sz) {
        uint64_t n = len > sz - off ? sz - off : len;
        kf_buf_add(out, bytes + off, (size_t)n);
    }
    kf_buf_release(&whole);
    PQclear(r);
    return KF_OK;
}

/* ---- folder backend --------------------------------------------------------- */

static void kf_art_path(const kf_artifact_store *s, const char *sha, char *out, size_t cap, bool folder_only)
{
    if (folder_only)
        snprintf(out, cap, "%s/%.2s/%.2s", s->dir, sha, sha + 2);
    else
        snprintf(out, cap, "%s/%.2s/%.2s/%s", s->dir, sha, sha + 2, sha);
}

static kf_code kf_art_fsync_dir(const char *dir, kf_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        kf_code rc = kf_err_set(err, KF_IO, "cannot sync the artifact folder %s: %s", dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    close(fd);
    return KF_OK;
}

static kf_code kf_art_dir_put(kf_artifact_store *s, const void *data, size_t n, const char *sha, kf_err *err)
{
    char folder[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX + 16];
    const char *p = data;
    size_t done = 0;
    int fd;

    kf_art_path(s, sha, folder, sizeof(folder), true);
    kf_art_path(s, sha, path, sizeof(path), false);
    if (utimensat(AT_FDCWD, path, NULL, 0) == 0)
        return KF_OK;   /* stored before: touched */
    if (kf_mkdir_p(folder, 0700) != 0)
        return kf_err_set(err, KF_IO, "cannot create the artifact folder %s: %s", folder, strerror(errno));
    snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path);
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return kf_err_set(err, KF_IO, "cannot write in the artifact folder %s: %s", folder, strerror(errno));
    while (done < n) {
        ssize_t w = write(fd, p + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    if (done != n || fsync(fd) != 0) {
        kf_code rc = kf_err_set(err, KF_IO, "cannot write %s: %s (is the disk full?)", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return rc;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        kf_code rc = kf_err_set(err, KF_IO, "cannot store %s: %s", path, strerror(errno));
        unlink(tmp);
        return rc;
    }
    return kf_art_fsync_dir(folder, err);
}

static kf_code kf_art_dir_get(kf_artifact_store *s, const char *sha, uint64_t off, uint64_t len, kf_buf *out,
                              uint64_t *size, kf_err *err)
{
    char path[PATH_MAX];
    struct stat st;
    int fd;
    uint64_t n, done = 0;
    size_t base = out->len;

    kf_art_path(s, sha, path, sizeof(path), false);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT)
            return kf_err_set(err, KF_NOT_FOUND, "no stored artifact %s", sha);
        return kf_err_set(err, KF_IO, "cannot read %s: %s", path, strerror(errno));
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kf_err_set(err, KF_IO, "%s is not a regular file; remove it", path);
    }
    *size = (uint64_t)st.st_size;
    n = off >= *size ? 0 : (len > *size - off ? *size - off : len);
    kf_buf_grow(out, (size_t)n);
    while (done < n) {
        ssize_t got = pread(fd, out->data + base + done, (size_t)(n - done), (off_t)(off + done));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            kf_code rc = kf_err_set(err, KF_IO, "cannot read %s: %s", path, got < 0 ? strerror(errno) : "it shrank");
            close(fd);
            out->data[base] = '\0';
            return rc;
        }
        done += (uint64_t)got;
    }
    close(fd);
    out->len = base + (size_t)n;
    out->data[out->len] = '\0';
    return KF_OK;
}

/* ---- interface ----------------------------------------------------------------- */

kf_code kf_artifact_put(kf_artifact_store *s, PGconn *c, const void *data, size_t n, char sha[65], kf_err *err)
{
    kf_artifact_sha256_hex(data, n, sha);
    if (s->kind == KF_ART_PG)
        return kf_art_pg_put(c, data, n, sha, err);
    return kf_art_dir_put(s, data, n, sha, err);
}

kf_code kf_artifact_get(kf_artifact_store *s, PGconn *c, const char *sha, uint64_t off, uint64_t len, kf_buf *out,
                        uint64_t *size, kf_err *err)
{
    if (!kf_artifact_sha_valid(sha))
        return kf_err_set(err, KF_NOT_FOUND, "an artifact is named by 64 lower-case hex digits (its SHA-256)");
    if (s->kind == KF_ART_PG)
        return kf_art_pg_get(c, sha, off, len, out, size, err);
    return kf_art_dir_get(s, sha, off, len, out, size, err);
}

/* A folder content no link references and untouched for grace_s: removed.
 * True when it went. */
static bool kf_art_dir_drop(kf_artifact_store *s, const char *sha, int grace_s)
{
    char path[PATH_MAX];
    struct stat st;

    kf_art_path(s, sha, path, sizeof(path), false);
    if (lstat(path, &st) != 0 || st.st_mtime > time(NULL) - grace_s)
        return false;
    return unlink(path) == 0;
}

kf_code kf_artifact_retain(kf_artifact_store *s, PGconn *c, int days, int grace_s, long *links, long *blobs,
                           kf_err *err)
{
    char d[16], g[16];
    const char *p[2] = { d, g };
    PGresult *r;

    *links = *blobs = 0;
    snprintf(d, sizeof(d), "%d", days);
    snprintf(g, sizeof(g), "%d", grace_s);
    /* Links of jobs finished long enough ago, the final set excepted. */
    r = PQexecParams(c,
                     "DELETE FROM artifacts a USING jobs j WHERE a.job_id = j.id AND NOT a.final "
                     "AND j.finished_at < now() - make_interval(days => $1::int) RETURNING a.sha256",
                     1, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        return kf_art_pg_fail(c, r, err);
    *links = PQntuples(r);
    if (s->kind == KF_ART_DIR && *links > 0) {
        /* the contents those links pointed at that no other link references */
        kf_buf arr = KF_BUF_INIT;
        const char *ap[1];
        PGresult *o;
        kf_buf_adds(&arr, "{");
        for (int i = 0; i < PQntuples(r); i++)
            kf_buf_addf(&arr, "%s%s", i ? "," : "", PQgetvalue(r, i, 0));
        kf_buf_adds(&arr, "}");
        ap[0] = arr.data;
        o = PQexecParams(c,
                         "SELECT DISTINCT s FROM unnest($1::text[]) s "
                         "WHERE NOT EXISTS (SELECT 1 FROM artifacts a WHERE a.sha256 = s) "
                         "AND NOT EXISTS (SELECT 1 FROM kernel_library l WHERE l.source_sha256 = s)",
                         1, NULL, ap, NULL, NULL, 0);
        kf_buf_release(&arr);
        if (PQresultStatus(o) != PGRES_TUPLES_OK) {
            PQclear(r);
            return kf_art_pg_fail(c, o, err);
        }
        for (int i = 0; i < PQntuples(o); i++)
            if (kf_art_dir_drop(s, PQgetvalue(o, i, 0), grace_s))
                (*blobs)++;
        PQclear(o);
    }
    PQclear(r);
    if (s->kind != KF_ART_PG)
        return KF_OK;
    r = PQexecParams(c,
                     "DELETE FROM artifact_blobs b WHERE touched_at < now() - make_interval(secs => $1::int) "
                     "AND NOT EXISTS (SELECT 1 FROM artifacts a WHERE a.sha256 = b.sha256) "
                     "AND NOT EXISTS (SELECT 1 FROM kernel_library l WHERE l.source_sha256 = b.sha256)",
                     1, NULL, p + 1, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        return kf_art_pg_fail(c, r, err);
    *blobs = strtol(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    return KF_OK;
}
