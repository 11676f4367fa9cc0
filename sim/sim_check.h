/*
 * sim_check — validate a kernel's outputs against a NumPy reference.
 *
 * Two layers:
 *   1. sim_check_reference(): run a reference function (a .py file defining
 *      a function, by default named like the kernel's entry) in the embedded
 *      CPython of the current process, on the kernel's inputs.  Inputs reach
 *      it as NumPy arrays: float32/int/uint/bool as themselves; bfloat16,
 *      float16, tfloat32 and fp8 as float32 arrays holding exactly the same
 *      values.  Kernel kwargs are passed on when the function's signature
 *      names them (or takes **kwargs).  It may return one array or a tuple;
 *      float results become float32 arrays, integer and bool results int32.
 *      Call it only inside a sandboxed child: it runs user code.
 *   2. sim_check_compare(): compare one kernel output with one reference
 *      array in full, element by element, in double precision:
 *        |got - want| <= atol + rtol * |want|
 *      NaN in the reference matches only NaN; +-Inf only the same Inf; NaN or
 *      Inf in the output where the reference is finite is a mismatch, counted
 *      apart (NaN usually means an element the kernel never wrote: new
 *      memory is NaN-filled).  Shapes must be equal.
 *   (sim_eval.h runs a kernel and its reference in a sandbox with these.)
 *
 * Default tolerances by the kernel output's dtype (sim_check_default_tol):
 *   float32 rtol=atol=1e-4   fp32 compute, reference in float64: room for
 *                            accumulation order over K ~ 10^3..10^4 terms
 *   tfloat32 1e-3            10-bit mantissa on the PE
 *   float16  5e-3            half ulp 2^-11 = 4.9e-4, plus a few roundings
 *                            of intermediate 16-bit tiles
 *   bfloat16 2e-2            half ulp 2^-8 = 3.9e-3; kernels round
 *                            intermediates to bf16 a handful of times
 *   fp8 e4m3/e4m3fn 1.25e-1, e5m2 2.5e-1  (one ulp of 3 / 2 mantissa bits)
 *   integers and bool        exact
 *
 * Ownership: arrays returned are owned by the caller (free each .data, then
 * the array: sim_check_arrays_free).  Failures are kf_codes with messages a
 * user acts on.
 */
#ifndef SIM_CHECK_H
#define SIM_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kf_error.h"
#include "sim_run.h"

typedef struct sim_check_tol {
    double rtol, atol;
} sim_check_tol;

sim_check_tol sim_check_default_tol(sim_dtype dt);

typedef struct sim_check_cmp {
    bool     pass;
    uint64_t count;          /* elements compared */
    uint64_t bad;            /* elements outside tolerance (including NaN/Inf ones) */
    uint64_t got_nan, got_inf;
    double   max_abs, max_rel;   /* over elements where both are finite */
    uint64_t worst;          /* flat index of the worst element (largest excess over tolerance) */
    double   worst_got, worst_want;
    char     msg[512];       /* one line: "ok" or what is wrong, with the worst index */
} sim_check_cmp;

void sim_check_compare(const sim_array *got, const sim_array *want, sim_check_tol tol,
                       sim_check_cmp *c);

/* "(128, 64)" (NumPy's form: "(4,)" for one dimension) for an array's shape. */
void sim_check_format_shape(const sim_array *a, char *buf, size_t len);
/* "[3, 17]" for flat index i of an array's shape. */
void sim_check_format_index(const sim_array *a, uint64_t i, char *buf, size_t len);

kf_code sim_check_reference(const char *path, const char *entry, const sim_array *inputs,
                            size_t n_inputs, const char *kwargs_json, sim_array **outs,
                            size_t *n_outs, kf_err *err);

/* The same with positional arguments laid out as sim_run_opts.args says
 * (n_args 0: the inputs alone); JSON arrays reach the reference as tuples,
 * objects as dicts. */
kf_code sim_check_reference_args(const char *path, const char *entry, const sim_array *inputs,
                                 size_t n_inputs, const sim_run_arg *args, size_t n_args,
                                 const char *kwargs_json, sim_array **outs, size_t *n_outs, kf_err *err);

/* Whether the reference function would receive any of the keyword
 * arguments named in names_json (a JSON array of names): its signature
 * names one, or it takes **kwargs.  When it does not, its results do not
 * depend on them (the agent then computes it once per input set).  Call it
 * after a sim_check_reference() of the same process, inside a sandboxed
 * child (it imports the reference's file); true whenever it cannot tell. */
bool sim_check_reference_takes(const char *path, const char *entry, const char *names_json);

/* Free arrays returned by sim_check_reference (NULL-safe). */
void sim_check_arrays_free(sim_array *a, size_t n);

#endif
