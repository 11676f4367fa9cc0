/* kf_fs — see kf_fs.h. */
#include "kf_fs.h"

#include "kf_buf.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static int kf_mkdir_one(const char *path, mode_t mode)
{
    return mkdir(path, mode) == 0 || errno == EEXIST ? 0 : -1;
}

int kf_mkdir_p(const char *path, mode_t mode)
{
    char tmp[PATH_MAX];
    size_t n = strlen(path);
    struct stat st;

    if (n == 0 || n >= sizeof(tmp))
        return (errno = ENAMETOOLONG), -1;
    memcpy(tmp, path, n + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (kf_mkdir_one(tmp, mode) < 0)
            return -1;
        *p = '/';
    }
    if (kf_mkdir_one(tmp, mode) < 0)
        return -1;
    if (stat(tmp, &st) < 0)
        return -1;
    if (!S_ISDIR(st.st_mode))
        return (errno = ENOTDIR), -1;
    return 0;
}

const char *kf_fs_data_dir(const char *const *rels, int n_rels, char *out, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    char *slash;
    struct stat st;

    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    for (int i = 0; i < n_rels; i++) {
        int w = snprintf(out, len, "%s/%s", exe, rels[i]);
        if (w > 0 && (size_t)w < len && stat(out, &st) == 0 && S_ISDIR(st.st_mode))
            return out;
    }
    return NULL;
}

char *kf_fs_read_file(const char *path, size_t max, kf_err *err)
{
    FILE *f = fopen(path, "rb");
    kf_buf b = KF_BUF_INIT;
    char chunk[16384];
    size_t n;

    if (!f) {
        kf_err_set(err, KF_IO, "cannot read '%s': %s", path, strerror(errno));
        return NULL;
    }
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (b.len + n > max) {
            fclose(f);
            kf_buf_release(&b);
            kf_err_set(err, KF_TOO_LARGE, "'%s' is larger than %zu bytes", path, max);
            return NULL;
        }
        kf_buf_add(&b, chunk, n);
    }
    if (ferror(f)) {
        int e = errno;
        fclose(f);
        kf_buf_release(&b);
        kf_err_set(err, KF_IO, "cannot read '%s': %s", path, strerror(e));
        return NULL;
    }
    fclose(f);
    if (!b.data)
        kf_buf_adds(&b, "");
    return kf_buf_detach(&b);
}
