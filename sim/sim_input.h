/*
 * sim_input — kernel inputs from the command line: .npy files or seeded
 * random arrays, as `kforge-sim run --input SPEC` and the test corpus give
 * them.
 *
 *   NAME=PATH.npy[:DTYPE]
 *       read with sim_npy (DTYPE converts, e.g. float32 file -> bf16)
 *   NAME=shape:D0xD1x...:DTYPE[:seed=N][:dist=normal|uniform]
 *                             [:mean=M][:std=S][:lo=L][:hi=H]
 *       a seeded, deterministic random array.
 *
 * DTYPE: float32|fp32|f32, bfloat16|bf16, float16|fp16|f16, float8_e4m3|fp8_e4m3,
 * float8_e5m2|fp8_e5m2, float8_e4m3fn|fp8_e4m3fn, int8|16|32, uint8|16|32, bool.
 * (float8_e4m3 is IEEE-style with infinities, max 240; float8_e4m3fn has no
 * infinities, max 448.)
 *
 * The generator (documented so anyone can reproduce an input): xoshiro256**
 * seeded by four successive outputs of splitmix64(seed) (default seed 0).
 * Each 64-bit draw x gives u = (x >> 11) * 2^-53 in [0,1).
 *   normal (default for floats, mean 0, std 1): Box-Muller on two draws,
 *     u1 = 1 - u(x1) in (0,1], u2 = u(x2): r = sqrt(-2 ln u1),
 *     elements 2k and 2k+1 are mean + std*r*cos(2 pi u2) and mean + std*r*sin(2 pi u2);
 *   uniform (floats, default lo=-1 hi=1; giving lo= or hi= without dist=
 *     selects it): lo + (hi - lo) * u;
 *   integers (always uniform, inclusive [lo, hi]; default -8..8 signed,
 *     0..16 unsigned, 0..1 bool): lo + floor(u * (hi - lo + 1)).
 * Values are computed in double, rounded to float32, then stored in the
 * dtype with round-to-nearest-even (sim_npy_store_elem).
 *
 * Failures return KF_INVALID with a message that quotes the spec and says
 * what to write instead; KF_IO/KF_TOO_LARGE from reading files.
 */
#ifndef SIM_INPUT_H
#define SIM_INPUT_H

#include <stdint.h>

#include "kf_error.h"
#include "sim_npy.h"
#include "sim_run.h"

typedef enum sim_dist {
    SIM_DIST_NORMAL = 0,
    SIM_DIST_UNIFORM,
} sim_dist;

typedef struct sim_random_spec {
    uint64_t seed;
    sim_dist dist;
    double   mean, std;       /* normal */
    double   lo, hi;          /* uniform; integers */
    int      have_lo, have_hi;
} sim_random_spec;

/* Defaults: seed 0, normal(0, 1) for floats, the integer ranges above. */
void sim_random_spec_default(sim_random_spec *r);

/* Fill `out` (allocated here) with a random array. */
kf_code sim_input_random(sim_dtype dt, int ndim, const uint64_t *shape,
                         const sim_random_spec *r, uint64_t max_bytes, sim_npy_array *out,
                         kf_err *err);

/* Parse "NAME=..." (see above) and produce the array.  *name is a heap copy
 * of NAME (caller frees).  `seed_offset` is added to the spec's seed, so a
 * caller can draw several input sets from one spec (the corpus test does). */
kf_code sim_input_parse(const char *spec, uint64_t seed_offset, uint64_t max_bytes, char **name,
                        sim_npy_array *out, kf_err *err);

/* sim_input_parse into a kernel argument: out's name, dtype, shape and
 * data (owned by out; sim_array_release frees it) come from the spec.
 * Failures as sim_input_parse; out is left zeroed. */
kf_code sim_input_array(const char *spec, uint64_t max_bytes, sim_array *out, kf_err *err);

/* Dtype from a user-facing name or alias ("bf16"); -1 when unknown. */
int sim_input_dtype(const char *s);

/* The xoshiro256** stream (exposed for the tests and the benchmark). */
typedef struct sim_rng {
    uint64_t s[4];
} sim_rng;

void sim_rng_seed(sim_rng *g, uint64_t seed);
uint64_t sim_rng_next(sim_rng *g);

#endif
