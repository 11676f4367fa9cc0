/*
 * fuzz_input_spec — an `--input` spec of `kforge-sim run` and `kforge tune`
 * (sim_input_parse): NAME=shape:D0xD1:DTYPE[:seed=N][:dist=..][:mean=..]...
 *
 * File specs (NAME=PATH.npy) are left out: their path is the caller's own
 * file, and the .npy reader has a harness of its own (fuzz_npy).
 *
 * Promises checked: no crash, no UB; nothing past the byte limit is
 * allocated; a refusal says why (in UTF-8 when
 * the input was UTF-8); an accepted spec names a Python
 * identifier, its count is the product of its shape, and parsing it again
 * draws the very same bytes (the generator is documented as deterministic).
 */
#include "fuzz.h"

#include "kf_json.h"
#include "sim_input.h"

#define FUZZ_INPUT_MAX_BYTES ((uint64_t)1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *spec = fuzz_cstr(data, size), *name = NULL, *name2 = NULL;
    const char *eq = strchr(spec, '=');
    kf_err e = KF_ERR_INIT;
    sim_npy_array a, b;
    size_t bad = 0;

    if (eq && strncmp(eq + 1, "shape:", 6) != 0) {
        free(spec);
        return 0;
    }
    if (sim_input_parse(spec, 0, FUZZ_INPUT_MAX_BYTES, &name, &a, &e) != KF_OK) {
        FUZZ_CHECK(e.msg[0] != '\0', "refused without saying why");
        FUZZ_CHECK(!kf_utf8_valid(spec, strlen(spec), NULL) || kf_utf8_valid(e.msg, strlen(e.msg), &bad),
                   "error about UTF-8 input not UTF-8 at %zu: %s", bad, e.msg);
        FUZZ_CHECK(name == NULL, "a refused spec left a name behind");
        free(spec);
        return 0;
    }
    {
        uint64_t n = 1;
        size_t bytes;

        FUZZ_CHECK(name && kf_ident_valid(name, 255, NULL), "accepted input name '%s'", name ? name : "(null)");
        for (int i = 0; i < a.ndim; i++)
            n *= a.shape[i];
        FUZZ_CHECK(n == a.count, "count %llu, shape product %llu", (unsigned long long)a.count,
                   (unsigned long long)n);
        bytes = (size_t)a.count * sim_dtype_size(a.dtype);
        FUZZ_CHECK(bytes <= FUZZ_INPUT_MAX_BYTES, "%zu bytes allocated past the limit", bytes);
        FUZZ_CHECK(sim_input_parse(spec, 0, FUZZ_INPUT_MAX_BYTES, &name2, &b, &e) == KF_OK, "accepted once only: %s",
                   e.msg);
        FUZZ_CHECK(b.dtype == a.dtype && b.count == a.count && (bytes == 0 || memcmp(a.data, b.data, bytes) == 0),
                   "the same spec drew different arrays");
        sim_npy_array_release(&b);
        free(name2);
    }
    sim_npy_array_release(&a);
    free(name);
    free(spec);
    return 0;
}
