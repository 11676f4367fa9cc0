/*
 * sim_run_cli — what `kforge-sim run` does once its flags are parsed
 * (libkfsim.a; sim/main.c parses the flags and calls sim_run_cli_run).
 *
 * sim_run_cli_run() evaluates one kernel in a sandboxed child
 * (sim_check_evaluate) on the given .npy inputs, writes every output as
 * .npy under out_dir (and the inputs too with save_inputs), prints a
 * one-screen summary (or, with json, one JSON document) and, with a
 * reference file, compares every output with the NumPy reference.
 * --arg values and --path import roots (slots, paths) go to the run as
 * sim_run_opts.args and .paths; no_stubs turns the harness-library stubs
 * off (sim_run.h).
 *
 * Ownership: the caller owns every string in the arguments; nothing is
 * kept after the call.
 *
 * Failure: the exit status says what happened, and the message is printed
 * (stderr for a kernel failure, stdout otherwise; in the JSON document with
 * json): SIM_RUN_PASS ran (and matched the reference), SIM_RUN_MISMATCH an
 * output differs from the reference, SIM_RUN_KERNEL the kernel failed
 * (simulator error, crash, limit), SIM_RUN_USAGE an unreadable input, an
 * unwritable out_dir or a broken reference file.
 */
#ifndef SIM_RUN_CLI_H
#define SIM_RUN_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "sim_run.h"

enum { SIM_RUN_PASS = 0, SIM_RUN_MISMATCH = 1, SIM_RUN_KERNEL = 2, SIM_RUN_USAGE = 3 };

typedef struct sim_run_cli_args {
    const char *kernel, *entry, *target, *out_dir, *ref, *ref_entry, *kwargs;
    char      **inputs;
    size_t      n_inputs;
    sim_run_arg *slots;           /* --input (json NULL) and --arg, in order */
    size_t      n_slots;
    bool        any_arg, no_stubs;
    const char *paths[SIM_RUN_MAX_PATHS + 1];
    size_t      n_paths;
    int         grid[3];
    bool        no_numerics, json, keep_dtype, save_inputs;
    double      rtol, atol;        /* < 0: default by dtype */
    long        timeout_s, cpu_s, memory_mib;
    long        threads;              /* numerics threads (sim_run_opts.threads) */
} sim_run_cli_args;

int sim_run_cli_run(const sim_run_cli_args *a);

#endif
