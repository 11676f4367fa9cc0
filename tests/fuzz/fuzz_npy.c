/*
 * fuzz_npy — a .npy image as `kforge-sim run --input x=FILE.npy` and the
 * reference runner read it (sim_npy_parse).  The first byte picks the dtype
 * to convert to (or none); the rest is the file.
 *
 * Promises checked: no crash, no UB, no read past the image; nothing larger
 * than the byte limit is allocated; a refusal says why in UTF-8; what is
 * accepted has count == product of its shape, and its own .npy encoding
 * parses back to the same dtype, shape and bytes.
 */
#include "fuzz.h"

#include "kf_json.h"
#include "sim_npy.h"

#define FUZZ_NPY_MAX_BYTES ((uint64_t)1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kf_err e = KF_ERR_INIT;
    sim_npy_array a, b;
    int want;
    size_t bad = 0;

    if (size < 1)
        return 0;
    want = data[0] % (SIM_DT__COUNT + 1) == SIM_DT__COUNT ? -1 : (int)(data[0] % (SIM_DT__COUNT + 1));
    if (sim_npy_parse(data + 1, size - 1, want, FUZZ_NPY_MAX_BYTES, "fuzz.npy", &a, &e) != KF_OK) {
        FUZZ_CHECK(e.msg[0] != '\0', "refused without saying why");
        FUZZ_CHECK(kf_utf8_valid(e.msg, strlen(e.msg), &bad), "error not UTF-8 at %zu: %s", bad, e.msg);
        return 0;
    }
    {
        uint64_t n = 1;
        size_t bytes;
        kf_buf img = KF_BUF_INIT;

        for (int i = 0; i < a.ndim; i++)
            n *= a.shape[i];
        FUZZ_CHECK(n == a.count, "count %llu, shape product %llu", (unsigned long long)a.count,
                   (unsigned long long)n);
        FUZZ_CHECK(want < 0 || (int)a.dtype == want, "asked for dtype %d, got %d", want, (int)a.dtype);
        bytes = (size_t)a.count * sim_dtype_size(a.dtype);
        FUZZ_CHECK(bytes <= FUZZ_NPY_MAX_BYTES, "%zu bytes allocated past the limit", bytes);
        FUZZ_CHECK(sim_npy_encode(&img, a.dtype, a.ndim, a.shape, a.data, SIM_NPY_KEEP_DTYPE, &e) == KF_OK,
                   "cannot encode what was read: %s", e.msg);
        FUZZ_CHECK(sim_npy_parse(img.data, img.len, (int)a.dtype, FUZZ_NPY_MAX_BYTES, "again.npy", &b, &e) == KF_OK,
                   "its own encoding is refused: %s", e.msg);
        FUZZ_CHECK(b.dtype == a.dtype && b.ndim == a.ndim && b.count == a.count, "the array changed shape");
        FUZZ_CHECK(memcmp(a.shape, b.shape, sizeof(a.shape[0]) * (size_t)a.ndim) == 0, "the shape changed");
        FUZZ_CHECK(bytes == 0 || memcmp(a.data, b.data, bytes) == 0, "the bytes changed");
        sim_npy_array_release(&b);
        kf_buf_release(&img);
    }
    sim_npy_array_release(&a);
    return 0;
}
