/*
 * kn_selftest — `kforge-worker --self-test`: the neuron backend's
 * first-machine checklist (docs/neuron-backend.md), run once by an
 * operator on a new Trn/Inf worker.
 *
 * It runs the neuron backend itself, in this process, on a tiny kernel (a
 * 128 x 512 float32 add, one tile) as an untuned optimize job for
 * `target`: device runner found, device health, compile, validation of
 * the device's outputs against the NumPy reference (3 seeds, every
 * element), latency percentiles, the profile's Summary fields, the
 * artifacts (NEFF over its 1024-byte header, NTFF) and the provenance
 * versions; and prints one line per item, "[ ok ] ..." or "[FAIL] ..."
 * with what was seen.  Needs the configuration (KFORGE_NEURON_*) and a
 * machine that can build the evaluation sandbox; needs no API, Redis or
 * token.
 *
 * Returns 0 when every item passed, 1 otherwise.
 */
#ifndef KN_SELFTEST_H
#define KN_SELFTEST_H

#include <stdio.h>

int kn_selftest_run(FILE *out, const char *target);

#endif
