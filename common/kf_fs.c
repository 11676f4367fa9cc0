/* kf_fs — see kf_fs.h. */
#include "kf_fs.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

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
