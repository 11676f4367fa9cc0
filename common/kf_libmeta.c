/* kf_libmeta — kforge's kernel library folder and its KFORGE blocks
 * (see kf_libmeta.h). */
#include "kf_libmeta.h"
#include "kf_fs.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"

enum { KF_LIBMETA_MAX_FILE = 1 << 20 };

static bool kf_libmeta_is_dir(const char *p)
{
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *kf_libmeta_dir(void)
{
    static char buf[PATH_MAX];
    static const char *const rels[] = { "../../kernels", "../share/kforge/kernels" };
    const char *cfg = kf_config_str(KF_CFG_KERNELS_DIR);

    if (cfg && *cfg)
        return cfg;
    if (kf_libmeta_is_dir("kernels"))
        return "kernels";
    return kf_fs_data_dir(rels, 2, buf, sizeof(buf));
}

char *kf_libmeta_read_file(const char *path, kf_err *err)
{
    return kf_fs_read_file(path, KF_LIBMETA_MAX_FILE, err);
}

kf_code kf_libmeta_from_text(const char *text, const char *what, cJSON **meta, kf_err *err)
{
    const char *p = text, *start = NULL;
    int depth = 0;
    char q = 0;

    *meta = NULL;
    while ((p = strstr(p, "KFORGE")) != NULL) {
        bool line_start = p == text || p[-1] == '\n';
        const char *s = p + 6;
        p = s;
        if (!line_start)
            continue;
        while (*s == ' ')
            s++;
        if (*s != '=')
            continue;
        s++;
        while (*s == ' ')
            s++;
        if (*s == '{') {
            start = s;
            break;
        }
    }
    if (!start)
        return kf_err_set(err, KF_NOT_FOUND, "%s has no module-level KFORGE = {...} block", what);
    for (p = start; *p; p++) {
        if (q) {
            if (*p == '\\' && p[1])
                p++;
            else if (*p == q)
                q = 0;
            continue;
        }
        if (*p == '"' || *p == '\'')
            q = *p;
        else if (*p == '{' || *p == '[')
            depth++;
        else if (*p == '}' || *p == ']') {
            if (--depth == 0)
                break;
        }
    }
    if (!*p)
        return kf_err_set(err, KF_INVALID, "%s: the KFORGE block is not closed", what);
    *meta = cJSON_ParseWithLength(start, (size_t)(p - start + 1));
    if (!*meta || !cJSON_IsObject(*meta)) {
        cJSON_Delete(*meta);
        *meta = NULL;
        return kf_err_set(err, KF_INVALID,
                          "%s: the KFORGE block must be a JSON-compatible dict (double-quoted strings, "
                          "numbers, lists, dicts; no trailing commas)", what);
    }
    return KF_OK;
}

kf_code kf_libmeta_read(const char *path, cJSON **meta, kf_err *err)
{
    char *text = kf_libmeta_read_file(path, err);
    kf_code rc;
    if (!text)
        return err->code;
    rc = kf_libmeta_from_text(text, path, meta, err);
    free(text);
    return rc;
}

static int kf_libmeta_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

kf_code kf_libmeta_index(const char *dir, cJSON **index, kf_err *err)
{
    DIR *d;
    struct dirent *de;
    char *names[256];
    size_t n = 0;
    cJSON *arr;

    *index = NULL;
    if (!dir)
        dir = kf_libmeta_dir();
    if (!dir)
        return kf_err_set(err, KF_NOT_FOUND, "kforge's kernel library was not found: set KFORGE_KERNELS_DIR "
                                             "to the kernels/ folder");
    d = opendir(dir);
    if (!d)
        return kf_err_set(err, KF_IO, "cannot list the kernel library '%s': %s", dir, strerror(errno));
    while ((de = readdir(d)) != NULL && n < 256) {
        size_t len = strlen(de->d_name);
        if (len > 3 && strcmp(de->d_name + len - 3, ".py") == 0 && de->d_name[0] != '.')
            names[n++] = kf_strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(names[0]), kf_libmeta_cmp);
    arr = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        cJSON *meta = NULL;
        kf_err e2 = { 0 };
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        free(names[i]);
        if (kf_libmeta_read(path, &meta, &e2) != KF_OK)
            continue;
        cJSON_AddStringToObject(meta, "path", path);
        cJSON_AddItemToArray(arr, meta);
    }
    *index = arr;
    return KF_OK;
}
