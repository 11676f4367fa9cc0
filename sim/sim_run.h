/*
 * sim_run — run one NKI kernel in the functional simulator.
 *
 * The kernel file is executed in an embedded CPython (initialised once per
 * process, single-threaded) whose `nki`, `nki.language`, `nki.isa`, ... and
 * legacy `neuronxcc.nki.*` modules are implemented in C over the simulator
 * core.  Python traces (loops, helpers); every NKI call checks its operands,
 * computes values (unless numerics is off) and appends instructions to the
 * caller's sim_record.
 *
 * Failure: a kernel that breaks a NeuronCore rule or raises returns KF_INVALID
 * with `serr` filled (stable code, file:line, rule, values) and err->msg a
 * one-line summary; an input whose shape sim_array_check refuses returns
 * KF_INVALID or KF_TOO_LARGE, and a problem on kforge's side (unreadable
 * file, interpreter start-up) another kf_code, both with serr->code ==
 * SIM_E_NONE.
 *
 * Ownership: inputs are borrowed for the call and never written (a kernel
 * that writes an input writes a private copy).  On success *outputs is a
 * fresh array of *n_outputs sim_arrays that the caller releases with
 * sim_array_release() each and free() for the array.  On failure *outputs is
 * NULL.  The record is appended to, never reset.
 */
#ifndef SIM_RUN_H
#define SIM_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kf_error.h"
#include "sim_error.h"
#include "sim_record.h"

typedef struct sim_array {            /* a host array (kernel input or output) */
    char      name[64];
    sim_dtype dtype;
    int       ndim;
    int64_t   shape[8];
    void     *data;                   /* owned by the array, row-major, dtype-sized elements (bf16/fp16/fp8 as raw bits) */
} sim_array;

/* The bytes one host array (a kernel input or output, a reference's
 * result) may hold: 16 GiB, the HBM the simulator models.  The sandbox's
 * memory limit applies on top. */
#define SIM_ARRAY_MAX_BYTES ((uint64_t)16 << 30)

/* Free the data and zero the struct (NULL-safe, idempotent). */
void sim_array_release(sim_array *a);
/* Number of elements (product of the shape; 1 for ndim 0), or -1 when the
 * shape is none an array can have: ndim outside 0..8, a negative
 * dimension, or a product that overflows int64_t (simc_shape_elems). */
int64_t sim_array_elems(const sim_array *a);
/* Check an array's dtype and shape before its data is allocated or
 * trusted: KF_OK with *elems (when not NULL) the element count; KF_INVALID
 * for an unknown dtype, a rank outside 0..8 or a negative dimension;
 * KF_TOO_LARGE when the elements times the dtype's size pass `max_bytes`
 * (or overflow).  Messages name the array and its shape. */
kf_code sim_array_check(const sim_array *a, uint64_t max_bytes, int64_t *elems, kf_err *err);

/* One positional argument of the entry (see sim_run_opts.args). */
typedef struct sim_run_arg {
    const char *name;                 /* the user's label, for messages */
    const char *json;                 /* NULL: the next array of `inputs`; otherwise a JSON value:
                                       * number, true/false, null, string, array (a tuple, nested
                                       * arrays nested tuples) or object (a dict whose keys also
                                       * read as attributes) */
} sim_run_arg;

typedef struct sim_run_opts {
    const char *source_path;          /* kernel .py file */
    const char *entry;                /* function name */
    const char *target;               /* trn1|inf2|trn2|trn3 */
    int         grid[3];              /* SPMD launch grid; {0} = not an SPMD launch */
    bool        numerics;             /* false: timing-only (no values computed; outputs NaN-filled) */
    int         threads;              /* numerics threads (tile products and long elementwise calls
                                       * split across them; values identical for any count);
                                       * 0 = the CPUs available (sched_getaffinity), at most
                                       * SIMN_MAX_THREADS; fewer under the sandbox's thread limit */
    const char *kwargs_json;          /* extra keyword args for the kernel (tunables) as a JSON object, or NULL;
                                       * a key may name a positional parameter the args leave out */
    const sim_run_arg *args;          /* the positional arguments in order, or NULL: the inputs alone */
    size_t      n_args;               /* its slots with json NULL must number n_inputs */
    const char *const *paths;         /* NULL-terminated import roots put first on sys.path, or NULL; a
                                       * kernel file under one is a module of the package its folders
                                       * name there (relative imports work) */
    bool        no_stubs;             /* true: the test-harness libraries (SIM_RUN_STUBBED) are not
                                       * stood in for: importing an absent one fails as in Python */
} sim_run_opts;

/* The top-level modules a stub stands in for when they are not installed:
 * importing them (and any submodule) works, using anything from them is
 * SIM_E_UNSUPPORTED_API naming the module and attribute. */
#define SIM_RUN_STUBBED "torch, torch_xla, torch_neuronx, transformers, scipy, loguru"
/* At most this many sim_run_opts.paths (each is a read-only mount in the sandbox). */
#define SIM_RUN_MAX_PATHS 8

/* Run one kernel: inputs in (positional, in order), outputs out (the kernel's
 * return value(s)), the instruction record filled.  Errors: compile-like
 * errors with a stable code (sim_error.h), source file:line, the rule and
 * the values. */
kf_code sim_run_kernel(const sim_run_opts *o, const sim_array *inputs, size_t n_inputs,
                       sim_array **outputs, size_t *n_outputs, sim_record *rec, sim_error *serr,
                       kf_err *err);

/* Same as sim_run_kernel with the kernel given as source text; `filename`
 * is the name frames and errors report (for tests and tools). */
kf_code sim_run_source(const sim_run_opts *o, const char *source, const char *filename,
                       const sim_array *inputs, size_t n_inputs, sim_array **outputs,
                       size_t *n_outputs, sim_record *rec, sim_error *serr, kf_err *err);

/* Finalize the embedded interpreter (call once at process exit; optional). */
void sim_run_shutdown(void);

#endif
