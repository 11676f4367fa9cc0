/*
 * sim_eval — one evaluation of a kernel (and its NumPy reference) in a
 * sandbox: the unit of work of kforge-sim run, the corpus test and the
 * worker's validator.
 *
 * The sandbox exposes, read-only, the kernel file, the reference file and
 * the import roots of run.paths (folders, whole), and nothing else of the
 * caller's files.
 *
 * sim_check_evaluate() runs sim_sandbox_run() with sim_check_eval_child: the
 * child runs the kernel with sim_run_kernel(), then (if asked) the reference
 * with sim_check_reference(), and sends the outputs, the reference results
 * and a JSON summary (the simulator error if any, instruction counts by
 * engine, DMA traffic, FLOPs, timings) back to the parent, which decodes
 * them into a sim_eval.  A crash, a limit or a simulator error is a result
 * (kernel_ok false, error says why), never a failure of the caller.
 *
 * Ownership: a sim_eval owns its sandbox result; outputs and refs point
 * into it.  sim_eval_release() frees everything (NULL-safe).
 */
#ifndef SIM_EVAL_H
#define SIM_EVAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kf_error.h"
#include "sim_check.h"
#include "sim_error.h"
#include "sim_isa.h"
#include "sim_run.h"
#include "sim_sandbox.h"

typedef struct sim_eval_spec {
    sim_run_opts     run;
    const sim_array *inputs;
    size_t           n_inputs;
    const char      *ref_path;      /* NULL: no reference */
    const char      *ref_entry;     /* NULL: run.entry */
} sim_eval_spec;

/* The sandbox function of an evaluation (child side). */
kf_code sim_check_eval_child(void *spec, sim_sandbox_out *out, kf_err *err);

typedef struct sim_eval {
    sim_sandbox_result sb;          /* status, reason, log, resources */
    bool       kernel_ok;           /* the kernel ran and returned outputs */
    sim_error  serr;                /* the simulator error when it did not (code NONE otherwise) */
    char       error[1024];         /* one-line error (sim error formatted, crash or limit reason) */
    sim_array *outputs;             /* points into sb.arrays */
    size_t     n_outputs;
    sim_array *refs;                /* points into sb.arrays */
    size_t     n_refs;
    bool       ref_failed;
    char       ref_error[1024];
    uint64_t   insns, by_engine[SIM_ENG__COUNT], dma_count, dma_bytes, flops;
    double     kernel_seconds, ref_seconds;
    char       blas[32];            /* OpenBLAS kernels the numerics used ("Haswell", "SkylakeX";
                                       "none": the plain C loop; "": numerics off) */
} sim_eval;

/* Run one evaluation in a sandbox.  KF_OK whenever the evaluation happened
 * (look at ev->kernel_ok / ev->sb.status); KF_INTERNAL when it could not be
 * started. */
kf_code sim_check_evaluate(const sim_sandbox_limits *lim, const sim_eval_spec *spec, sim_eval *ev,
                           kf_err *err);

void sim_eval_release(sim_eval *ev);

#endif
