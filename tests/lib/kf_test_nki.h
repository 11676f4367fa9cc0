/*
 * kf_test_nki — run a small NKI kernel in this process, for the
 * simulator's unit tests (test_nki*.c): the kernel as source text (or a
 * file), its record, outputs and error in one struct.
 *
 * Ownership: kt_run_done() releases what a run made (outputs, record);
 * inputs stay the caller's.  Nothing fails here: the run's own result is
 * in r->rc, r->serr and r->err for the test to check.
 */
#ifndef KF_TEST_NKI_H
#define KF_TEST_NKI_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/sim_run.h"

typedef struct kt_result {
    kf_code    rc;
    sim_array *out;
    size_t     n_out;
    sim_record rec;
    sim_error  serr;
    kf_err     err;
} kt_result;

/* Run with a copy of *o whose entry defaults to "k" and target to "trn2":
 * src as the file `file`, or o->source_path when src is NULL. */
void kt_run_opts(kt_result *r, const sim_run_opts *o, const char *src, const char *file, const sim_array *in, size_t n);

/* Run `entry` of src on trn2, on an SPMD grid g0 x g1 (0 x 0: no grid). */
void kt_run(kt_result *r, const char *src, const char *entry, const sim_array *in, size_t n, int g0, int g1,
            bool numerics);

void kt_run_done(kt_result *r);

#endif
