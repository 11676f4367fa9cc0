/*
 * sandbox_bench — what the evaluation sandbox costs per evaluation.
 *
 *   sandbox_bench [ROUNDS] [EVALS]
 *
 * Side by side in one run, alternating round by round so that both see the
 * same machine: a trivial evaluation (the child sends one small JSON
 * document) under KFORGE_SANDBOX=unconfined, which is the isolation
 * evaluations had before the strict sandbox (fork, rlimits, a network
 * namespace and a socket/fork filter), and under the strict sandbox (user,
 * mount, PID, network, IPC and UTS namespaces, the tmpfs root and its
 * mounts, the identity change, the seccomp allowlist).  Prints the median
 * and p99 wall time of each and the difference, which is what the sandbox
 * adds (target: <= 20 ms at the median), then the median of a real
 * evaluation (tests/kernels/current/tensor_add.py on 256x1024 fp32 inputs,
 * strict) to set the cost against.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "kf_config.h"
#include "kf_num.h"
#include "sim/sim_eval.h"
#include "sim/sim_sandbox.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static kf_code trivial_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    (void)arg; (void)err;
    sim_sandbox_send_json(out, "{\"ok\":true}");
    return KF_OK;
}

/* CPU seconds of this process and its reaped children so far. */
static double cpu_s(void)
{
    struct rusage a, b;
    getrusage(RUSAGE_SELF, &a);
    getrusage(RUSAGE_CHILDREN, &b);
    return (double)(a.ru_utime.tv_sec + a.ru_stime.tv_sec + b.ru_utime.tv_sec + b.ru_stime.tv_sec) +
           (double)(a.ru_utime.tv_usec + a.ru_stime.tv_usec + b.ru_utime.tv_usec + b.ru_stime.tv_usec) / 1e6;
}

static int set_mode(const char *mode)
{
    kf_err err = KF_ERR_INIT;
    setenv("KFORGE_SANDBOX", mode, 1);
    if (kf_config_load(&err) != KF_OK) {
        fprintf(stderr, "sandbox_bench: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static double one_trivial(const char *mode, double *cpu)
{
    double c0 = cpu_s();
    sim_sandbox_limits lim;
    sim_sandbox_result r;
    kf_err err = KF_ERR_INIT;
    double t0;

    memset(&lim, 0, sizeof(lim));
    lim.cpu_seconds = 10;
    lim.wall_ms = 10000;
    lim.memory_mib = 1024;
    if (set_mode(mode) < 0)
        exit(2);
    t0 = now_s();
    if (sim_sandbox_run(&lim, trivial_fn, NULL, &r, &err) != KF_OK || r.status != SIM_SB_OK) {
        fprintf(stderr, "sandbox_bench: %s evaluation failed: %s %s\n", mode, err.msg, r.reason);
        exit(1);
    }
    t0 = now_s() - t0;
    *cpu += cpu_s() - c0;
    sim_sandbox_result_release(&r);
    return t0;
}

/* A numeric argument read whole (kf_num_long), or exit 2 saying which. */
static long sbb_arg(const char *s, long lo, long hi, const char *what)
{
    kf_err e = KF_ERR_INIT;
    long v;

    if (kf_num_long(s, lo, hi, &v, &e) != KF_OK) {
        fprintf(stderr, "sandbox_bench: %s: %s\n", what, e.msg);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? (int)sbb_arg(argv[1], 1, 1000000, "ROUNDS") : 200;
    int evals = argc > 2 ? (int)sbb_arg(argv[2], 1, 1000000, "EVALS") : 20;
    double *un, *st, *ev, un_cpu = 0, st_cpu = 0, warm = 0;
    sim_array in[2];
    sim_eval_spec spec;
    sim_sandbox_limits lim;

    if (rounds < 10 || evals < 3) {
        fprintf(stderr, "usage: sandbox_bench [ROUNDS >= 10] [EVALS >= 3]\n");
        return 2;
    }
    un = calloc((size_t)rounds, sizeof(*un));
    st = calloc((size_t)rounds, sizeof(*st));
    ev = calloc((size_t)evals, sizeof(*ev));
    for (int i = 0; i < 5; i++) {        /* warm the page cache and the allocator */
        one_trivial("unconfined", &warm);
        one_trivial("strict", &warm);
    }
    for (int i = 0; i < rounds; i++) {
        if (i % 2) {
            un[i] = one_trivial("unconfined", &un_cpu);
            st[i] = one_trivial("strict", &st_cpu);
        } else {
            st[i] = one_trivial("strict", &st_cpu);
            un[i] = one_trivial("unconfined", &un_cpu);
        }
    }

    memset(in, 0, sizeof(in));
    for (int k = 0; k < 2; k++) {
        snprintf(in[k].name, sizeof(in[k].name), "%s", k ? "b_input" : "a_input");
        in[k].dtype = SIM_DT_FLOAT32;
        in[k].ndim = 2;
        in[k].shape[0] = 256;
        in[k].shape[1] = 1024;
        in[k].data = calloc((size_t)256 * 1024, sizeof(float));
        for (int j = 0; j < 256 * 1024; j++)
            ((float *)in[k].data)[j] = (float)(j % 97) * 0.01f * (float)(k + 1);
    }
    memset(&spec, 0, sizeof(spec));
    spec.run.source_path = "tests/kernels/current/tensor_add.py";
    spec.run.entry = "tensor_add";
    spec.run.target = "trn2";
    spec.run.grid[0] = 2;
    spec.run.grid[1] = 2;
    spec.run.numerics = true;
    spec.inputs = in;
    spec.n_inputs = 2;
    memset(&lim, 0, sizeof(lim));
    lim.cpu_seconds = 60;
    lim.wall_ms = 60000;
    lim.memory_mib = 4096;
    if (set_mode("strict") < 0)
        return 2;
    for (int i = 0; i < evals; i++) {
        sim_eval e;
        kf_err err = KF_ERR_INIT;
        double t0 = now_s();
        if (sim_check_evaluate(&lim, &spec, &e, &err) != KF_OK || !e.kernel_ok) {
            fprintf(stderr, "sandbox_bench: the tensor_add evaluation failed: %s %s\n", err.msg, e.error);
            return 1;
        }
        ev[i] = now_s() - t0;
        sim_eval_release(&e);
    }

    double un50 = pct(un, rounds, 0.5), un99 = pct(un, rounds, 0.99);
    double st50 = pct(st, rounds, 0.5), st99 = pct(st, rounds, 0.99);
    double ev50 = pct(ev, evals, 0.5);
    printf("   trivial evaluation, %d rounds each, alternating:\n", rounds);
    printf("     before (unconfined: fork, rlimits, netns, socket filter): median %.2f ms, p99 %.2f ms\n",
           un50 * 1e3, un99 * 1e3);
    printf("     after  (strict sandbox):                                   median %.2f ms, p99 %.2f ms\n",
           st50 * 1e3, st99 * 1e3);
    printf("     the sandbox adds %.2f ms at the median, %.2f ms at p99 (target <= 20 ms)\n", (st50 - un50) * 1e3,
           (st99 - un99) * 1e3);
    printf("     CPU per evaluation (caller + children): before %.2f ms, after %.2f ms, added %.2f ms\n",
           un_cpu / rounds * 1e3, st_cpu / rounds * 1e3, (st_cpu - un_cpu) / rounds * 1e3);
    printf("   a real evaluation (tensor_add 256x1024 fp32, 2x2 grid, strict), %d runs: median %.1f ms;\n"
           "     the sandbox's share of it: %.1f%%\n", evals, ev50 * 1e3, (st50 - un50) / ev50 * 100.0);
    for (int k = 0; k < 2; k++)
        free(in[k].data);
    free(un);
    free(st);
    free(ev);
    return 0;
}
