/*
 * sim_npy — NumPy .npy files in C, and the element codecs kforge-sim needs
 * to move values between dtypes.
 *
 * Reading (sim_npy_parse / sim_npy_read) accepts format versions 1.0, 2.0
 * and 3.0, little-endian ('<', '|', or '=' on this little-endian host), C
 * order only, and these descrs:
 *
 *   '<f4' float32   '<f2' float16   '<V2' / '|V2' bfloat16   '<f8' float64*
 *   '|i1' '<i2' '<i4' '<i8'*  int8/16/32(/64)   '|u1' '<u2' '<u4' uint8/16/32
 *   '|b1' bool
 *
 * bfloat16 convention: NumPy has no bfloat16; ml_dtypes' bfloat16 arrays are
 * saved by np.save with descr '<V2', so a 2-byte void is read as bfloat16
 * raw bits.  (*) float64 and int64 files have no simulator dtype: they are
 * converted to float32 (round to nearest even) and int32 (values must fit)
 * unless a dtype hint says otherwise.  A hint (`want` >= 0) converts any
 * numeric file to that dtype: floats round to nearest even, integers must be
 * in range of the target, so `--input x=x.npy:bf16` turns a float32 file
 * into bfloat16.
 *
 * Writing (sim_npy_encode / sim_npy_write) produces version 1.0 (2.0 when the
 * header needs it) with the header padded to 64 bytes.  float32, float16,
 * ints, uints and bool keep their dtype.  bfloat16, tfloat32 and fp8 are
 * written as float32 (exact widening, loadable by any NumPy) unless
 * SIM_NPY_KEEP_DTYPE is set: then bfloat16 is '<V2' raw bits (load with
 * `np.load(p).view(ml_dtypes.bfloat16)`), fp8 is '|V1' raw bits, tfloat32
 * stays '<f4'.
 *
 * Untrusted input: every header field is bounded (header <= 64 KiB, ndim <=
 * SIM_NPY_MAX_DIMS, each dim < 2^40, payload <= `max_bytes`), the element
 * count times the item size is computed with overflow checks and must equal
 * the payload length exactly, and a file is checked against its size before
 * anything is allocated.  Failures return KF_INVALID (bad content) or KF_IO
 * (cannot read/write) with a message naming the file and the field.
 *
 * Ownership: arrays returned in `sim_npy_array.data` are heap memory owned by
 * the caller (sim_npy_array_release frees them; NULL-safe).
 */
#ifndef SIM_NPY_H
#define SIM_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "kf_buf.h"
#include "kf_error.h"
#include "sim_record.h"

enum {
    SIM_NPY_MAX_DIMS = 8,
    SIM_NPY_MAX_HEADER = 65536,
};

/* Write flags. */
enum {
    SIM_NPY_KEEP_DTYPE = 1u << 0,   /* bf16 as '<V2', fp8 as '|V1' */
};

/* A dense, C-order array of one simulator dtype. */
typedef struct sim_npy_array {
    sim_dtype dtype;
    int       ndim;                      /* 0 = scalar */
    uint64_t  shape[SIM_NPY_MAX_DIMS];
    uint64_t  count;                     /* product of shape (1 for a scalar) */
    void     *data;                      /* count * sim_dtype_size(dtype) bytes */
} sim_npy_array;

void sim_npy_array_release(sim_npy_array *a);

/* Element count of a shape with overflow check: 0 on success, -1 when the
 * product of dims times `itemsize` exceeds `max_bytes` (or overflows). */
int sim_npy_count(int ndim, const uint64_t *shape, unsigned itemsize, uint64_t max_bytes,
                  uint64_t *count);

/* Parse a whole .npy image held in memory.  `want` is a sim_dtype to convert
 * to, or -1 to keep the file's dtype.  `what` names the source in messages. */
kf_code sim_npy_parse(const void *buf, size_t len, int want, uint64_t max_bytes,
                      const char *what, sim_npy_array *out, kf_err *err);

/* Read a .npy file (see sim_npy_parse). */
kf_code sim_npy_read(const char *path, int want, uint64_t max_bytes, sim_npy_array *out,
                     kf_err *err);

/* Append the .npy image of an array to `out`. */
kf_code sim_npy_encode(kf_buf *out, sim_dtype dt, int ndim, const uint64_t *shape,
                       const void *data, unsigned flags, kf_err *err);

/* Write a .npy file (created or truncated, mode 0644). */
kf_code sim_npy_write(const char *path, sim_dtype dt, int ndim, const uint64_t *shape,
                      const void *data, unsigned flags, kf_err *err);

/* Element codecs.  sim_npy_load_elem decodes element i of a buffer of dtype
 * dt to a double (exact for every supported dtype).  sim_npy_store_elem
 * encodes a double: floats round to nearest even (through float32 for
 * bf16/fp16/fp8), integers truncate toward zero and saturate at the dtype's
 * range, bool stores v != 0. */
double sim_npy_load_elem(sim_dtype dt, const void *data, uint64_t i);
void sim_npy_store_elem(sim_dtype dt, void *data, uint64_t i, double v);
/* The same for n elements from index i0, through float32 (float dtypes
 * only, exact for them: the same values as the per-element calls), with
 * inline loops for fp32 and bf16. */
void sim_npy_load_f32(sim_dtype dt, const void *data, uint64_t i0, float *out, uint64_t n);
void sim_npy_store_f32(sim_dtype dt, void *data, uint64_t i0, const float *in, uint64_t n);

/* Scalar conversions used by the codecs (exposed for tests and benches). */
uint16_t sim_npy_f32_to_bf16(float f);
float sim_npy_bf16_to_f32(uint16_t h);
uint16_t sim_npy_f32_to_f16(float f);
float sim_npy_f16_to_f32(uint16_t h);

int sim_npy_dtype_is_float(sim_dtype dt);

#endif
