/*
 * kn_map — what the Neuron tools say, in kforge's terms (the neuron
 * backend's pure part: no process, no file).
 *
 *   kn_map_compile_error  the log of a failed NKI compile (neuronx-cc's
 *                         error lines, a Python traceback) to the error
 *                         object a simulator evaluation reports
 *                         ({"code", "file", "line", "api", "message"},
 *                         agent/ka_eval.c): code is the first NCC_ code in
 *                         the log (docs: compiler/error-codes/), else the
 *                         first bracketed older code ("[TEN404]"), else
 *                         "NCC_UNKNOWN"; file and line are the kernel
 *                         file's last location in it (the innermost frame
 *                         of the user's code), message the line naming the
 *                         code (or the last line of the log), prefixed
 *                         "kernel.py:LINE: " like sim_error_format's;
 *   kn_map_profile        neuron-explorer's summary-json and the measured
 *                         latency percentiles to the profile document the
 *                         simulator's timing evaluation returns (latency_ns,
 *                         floor_ns, bound_kind, bounds, summary with the
 *                         same neuron-explorer field names, findings,
 *                         lines): latency_ns is the median of the timed
 *                         runs; the bounds come from the target file's
 *                         peak rates like the simulator's (compute: the
 *                         op's FLOPs, else summary model_flops; necessary
 *                         IO: inputs_outputs_weights_size_bytes, else the
 *                         inputs' and outputs' bytes).  Findings and lines
 *                         stay empty: the instruction table is not mapped
 *                         yet (docs/neuron-backend.md).
 *
 * Ownership: results are new cJSON objects the caller frees.
 */
#ifndef KN_MAP_H
#define KN_MAP_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "agent/ka_lib.h"
#include "sim/sim_target.h"

cJSON *kn_map_compile_error(const char *log, const char *kernel_file);

/* summary: the summary-json document (a flat object of Summary fields, or
 * an object or one-element array holding it under "summary");
 * latency_us: {"p0".."p100"} of the timed runs (µs). */
cJSON *kn_map_profile(const cJSON *summary, const cJSON *latency_us, const ka_problem *pb, const sim_target *tgt,
                      double output_bytes);

/* The flat object of Summary fields inside a summary-json document, or NULL. */
const cJSON *kn_map_summary_fields(const cJSON *doc);

#endif
