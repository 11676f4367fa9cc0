/* ka_cache — the agent's evaluation cache (see ka_cache.h). */
#include "ka_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_fs.h"
#include "kf_log.h"

/* An entry larger than this is kept in memory only (results are a few KiB). */
#define KA_CACHE_MAX_ENTRY_BYTES (4L << 20)

typedef struct ka_cache_ent {
    char   key[65];
    cJSON *val;
} ka_cache_ent;

struct ka_cache {
    ka_cache_ent *e;
    size_t        n, cap;
    unsigned long hits, disk_hits;
    char         *dir;          /* <folder>/v1, NULL: memory only */
    int           warned;
};

ka_cache *ka_cache_new(void)
{
    return kf_calloc(1, sizeof(ka_cache));
}

void ka_cache_free(ka_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++)
        cJSON_Delete(c->e[i].val);
    free(c->e);
    free(c->dir);
    free(c);
}

unsigned long ka_cache_hits(const ka_cache *c)
{
    return c ? c->hits : 0;
}

unsigned long ka_cache_disk_hits(const ka_cache *c)
{
    return c ? c->disk_hits : 0;
}

unsigned long ka_cache_size(const ka_cache *c)
{
    return c ? (unsigned long)c->n : 0;
}

const char *ka_cache_dir(const ka_cache *c)
{
    return c ? c->dir : NULL;
}

/* ---- identity of the simulator build -------------------------------------- */

static char ka_identity[65] = "unknown";
static pthread_once_t ka_identity_once = PTHREAD_ONCE_INIT;

static void ka_identity_compute(void)
{
    unsigned char buf[1 << 16], md[32];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    ssize_t n = 0;
    bool ok = ctx && fd >= 0 && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;

    while (ok && (n = read(fd, buf, sizeof(buf))) > 0)
        ok = EVP_DigestUpdate(ctx, buf, (size_t)n) == 1;
    if (ok && n == 0 && EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 && mdlen == 32) {
        for (size_t i = 0; i < 32; i++)
            snprintf(ka_identity + 2 * i, 3, "%02x", md[i]);
    }
    if (fd >= 0)
        close(fd);
    EVP_MD_CTX_free(ctx);
}

const char *ka_cache_identity(void)
{
    pthread_once(&ka_identity_once, ka_identity_compute);
    return ka_identity;
}

/* ---- disk ----------------------------------------------------------------- */

static bool ka_key_ok(const char *key)
{
    size_t n = strlen(key);
    if (n != 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f')))
            return false;
    return true;
}

static int ka_mkdir(const char *p)
{
    return mkdir(p, 0700) == 0 || errno == EEXIST ? 0 : -1;
}


typedef struct ka_file {
    char  *path;
    time_t mtime;
} ka_file;

static int ka_file_cmp(const void *a, const void *b)
{
    const ka_file *x = a, *y = b;
    return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

/* Keep at most max entries: when over, remove the oldest down to 90%. */
static void ka_cache_trim(const char *dir, long max)
{
    ka_file *files = NULL;
    size_t n = 0, cap = 0;
    DIR *top = opendir(dir);
    struct dirent *d;

    if (!top)
        return;
    while ((d = readdir(top)) != NULL) {
        char *sub;
        DIR *sd;
        struct dirent *f;

        if (strlen(d->d_name) != 2 || d->d_name[0] == '.')
            continue;
        sub = kf_asprintf("%s/%s", dir, d->d_name);
        sd = opendir(sub);
        while (sd && (f = readdir(sd)) != NULL) {
            struct stat st;
            char *p;
            if (f->d_name[0] == '.')
                continue;
            p = kf_asprintf("%s/%s", sub, f->d_name);
            if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) {
                free(p);
                continue;
            }
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                files = kf_realloc(files, cap * sizeof(*files));
            }
            files[n].path = p;
            files[n++].mtime = st.st_mtime;
        }
        if (sd)
            closedir(sd);
        free(sub);
    }
    closedir(top);
    if ((long)n > max) {
        size_t keep = (size_t)(max - max / 10), drop = n - keep;
        qsort(files, n, sizeof(*files), ka_file_cmp);
        for (size_t i = 0; i < drop; i++)
            unlink(files[i].path);
        kf_log_info("evaluation cache trimmed dir=%s removed=%zu kept=%zu", dir, drop, keep);
    }
    for (size_t i = 0; i < n; i++)
        free(files[i].path);
    free(files);
}

ka_cache *ka_cache_open(const char *dir, long max_entries, kf_err *err)
{
    ka_cache *c;
    char *v1;

    if (!dir || !*dir) {
        kf_err_set(err, KF_INVALID, "evaluation cache: the folder name is empty");
        return NULL;
    }
    v1 = kf_asprintf("%s/v1", dir);
    if (kf_mkdir_p(v1, 0700) < 0) {
        kf_err_set(err, KF_IO, "evaluation cache: cannot create the folder '%s' (%s): set KFORGE_CACHE_DIR "
                   "to a writable folder, or leave it empty for a cache in memory only", v1, strerror(errno));
        free(v1);
        return NULL;
    }
    ka_cache_trim(v1, max_entries > 0 ? max_entries : KA_CACHE_DEFAULT_MAX);
    c = ka_cache_new();
    c->dir = v1;
    return c;
}

static char *ka_entry_path(const ka_cache *c, const char *key)
{
    return kf_asprintf("%s/%.2s/%s.json", c->dir, key, key);
}

/* The stored result of key, or NULL (a bad entry is removed). */
static cJSON *ka_disk_get(const ka_cache *c, const char *key)
{
    char *path = ka_entry_path(c, key), *text = NULL;
    cJSON *doc = NULL, *val = NULL;
    const cJSON *k;
    struct stat st;
    FILE *f = fopen(path, "rb");

    if (!f)
        goto out;
    if (fstat(fileno(f), &st) != 0 || st.st_size <= 0 || st.st_size > KA_CACHE_MAX_ENTRY_BYTES)
        goto bad;
    text = kf_malloc((size_t)st.st_size + 1);
    if (fread(text, 1, (size_t)st.st_size, f) != (size_t)st.st_size)
        goto bad;
    text[st.st_size] = '\0';
    doc = cJSON_Parse(text);
    k = cJSON_GetObjectItemCaseSensitive(doc, "key");
    if (!cJSON_IsString(k) || strcmp(k->valuestring, key) != 0 ||
        !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(doc, "result")))
        goto bad;
    val = cJSON_DetachItemFromObjectCaseSensitive(doc, "result");
    goto out;
bad:
    kf_log_warn("evaluation cache entry unreadable; removed path=%s", path);
    unlink(path);
out:
    if (f)
        fclose(f);
    cJSON_Delete(doc);
    free(text);
    free(path);
    return val;
}

static void ka_disk_put(ka_cache *c, const char *key, const cJSON *val)
{
    char *path = ka_entry_path(c, key), *sub = kf_asprintf("%s/%.2s", c->dir, key);
    char *tmp = kf_asprintf("%s.%ld.tmp", path, (long)getpid());
    cJSON *doc = cJSON_CreateObject();
    char *text;
    FILE *f = NULL;
    bool ok = false;

    cJSON_AddStringToObject(doc, "key", key);
    cJSON_AddItemToObject(doc, "result", cJSON_Duplicate(val, true));
    text = cJSON_PrintUnformatted(doc);
    if (!text || (long)strlen(text) > KA_CACHE_MAX_ENTRY_BYTES) {
        ok = true;   /* too large to be worth keeping: memory only, not a failure */
        goto out;
    }
    if (ka_mkdir(sub) < 0 || !(f = fopen(tmp, "wb")))
        goto out;
    ok = fwrite(text, 1, strlen(text), f) == strlen(text);
    ok = fclose(f) == 0 && ok;
    f = NULL;
    ok = ok && rename(tmp, path) == 0;
out:
    if (!ok) {
        if (!c->warned)
            kf_log_warn("evaluation cache: cannot write to %s (%s); keeping results in memory only",
                        c->dir, strerror(errno));
        c->warned = 1;
        unlink(tmp);
    }
    cJSON_Delete(doc);
    free(text);
    free(tmp);
    free(sub);
    free(path);
}

/* ---- lookups ---------------------------------------------------------------- */

static void ka_mem_put(ka_cache *c, const char *key, cJSON *owned)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->e = kf_realloc(c->e, c->cap * sizeof(*c->e));
    }
    snprintf(c->e[c->n].key, sizeof(c->e[0].key), "%s", key);
    c->e[c->n++].val = owned;
}

const cJSON *ka_cache_get(ka_cache *c, const char *key)
{
    cJSON *v;

    for (size_t i = 0; i < c->n; i++) {
        if (strcmp(c->e[i].key, key) == 0) {
            c->hits++;
            return c->e[i].val;
        }
    }
    if (!c->dir || !ka_key_ok(key) || !(v = ka_disk_get(c, key)))
        return NULL;
    ka_mem_put(c, key, v);
    c->hits++;
    c->disk_hits++;
    return v;
}

void ka_cache_put(ka_cache *c, const char *key, const cJSON *val)
{
    ka_mem_put(c, key, cJSON_Duplicate(val, true));
    if (c->dir && ka_key_ok(key))
        ka_disk_put(c, key, val);
}
