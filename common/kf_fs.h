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
 *
 * kf_fs_data_dir() finds one of kforge's data folders (migrations, kernels,
 * targets) beside the running binary: for each of `rels` (paths relative to
 * the binary's folder, tried in order: "../share/kforge/NAME" for `make
 * install`'s layout, "../../NAME" for a build tree's build/bin) the first
 * that is a folder is written to out (len bytes) and returned.  NULL when
 * none is (or /proc/self/exe cannot be read); out is the caller's.
 *
 * kf_fs_read_file() reads a whole file into a NUL-terminated string the
 * caller frees, growing the buffer as it reads (a bound-sized buffer for
 * every small file costs more than the file).  NULL with err set: KF_IO
 * when it cannot be opened or read (a folder is not readable as a file),
 * KF_TOO_LARGE when it holds more than max bytes.
 */
#ifndef KF_FS_H
#define KF_FS_H

#include <sys/types.h>

#include <stddef.h>

#include "kf_error.h"

int kf_mkdir_p(const char *path, mode_t mode);
const char *kf_fs_data_dir(const char *const *rels, int n_rels, char *out, size_t len);
char *kf_fs_read_file(const char *path, size_t max, kf_err *err);

#endif
