/* kf_test_nki — see kf_test_nki.h. */
#include "kf_test_nki.h"

#include <stdlib.h>
#include <string.h>

void kt_run_opts(kt_result *r, const sim_run_opts *o, const char *src, const char *file, const sim_array *in, size_t n)
{
    sim_run_opts c = *o;

    memset(r, 0, sizeof(*r));
    if (!c.entry)
        c.entry = "k";
    if (!c.target)
        c.target = "trn2";
    sim_record_init(&r->rec, c.target);
    if (src)
        r->rc = sim_run_source(&c, src, file, in, n, &r->out, &r->n_out, &r->rec, &r->serr, &r->err);
    else
        r->rc = sim_run_kernel(&c, in, n, &r->out, &r->n_out, &r->rec, &r->serr, &r->err);
}

void kt_run(kt_result *r, const char *src, const char *entry, const sim_array *in, size_t n, int g0, int g1,
            bool numerics)
{
    sim_run_opts o;

    memset(&o, 0, sizeof(o));
    o.entry = entry;
    o.grid[0] = g0;
    o.grid[1] = g1;
    o.numerics = numerics;
    kt_run_opts(r, &o, src, "kernel.py", in, n);
}

void kt_run_done(kt_result *r)
{
    for (size_t i = 0; i < r->n_out; i++)
        sim_array_release(&r->out[i]);
    free(r->out);
    sim_record_release(&r->rec);
}
