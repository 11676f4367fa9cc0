/*
 * kf_fs — file-system helpers shared by the binaries and libraries.
 *
 * kf_mkdir_p() is `mkdir -p`: it creates every missing folder of `path`
 * with `mode` (before the umask) and accepts the ones that exist.
 *
 * Ownership: nothing is kept; `path` is the caller's.  Failure: -1 with
 * errno set (ENAMETOOLONG for a path of PATH_MAX or more, ENOTDIR when
 * `path` exists and is not a folder, mkdir's own errors otherwise); 0 when
 * `path` is a folder afterwards.
 */
#ifndef KF_FS_H
#define KF_FS_H

#include <sys/types.h>

int kf_mkdir_p(const char *path, mode_t mode);

#endif
