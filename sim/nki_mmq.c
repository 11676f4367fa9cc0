/* nki_mmq — see nki_mmq.h. */
#include "nki_mmq.h"

#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "sim_numerics.h"

/* The run being queued. */
static struct {
    simc_store *st;        /* the store the run adds to; NULL when empty */
    int64_t     off, ldc;  /* first element of the region and its row stride */
    int64_t     m, n;      /* region shape */
    int64_t     k;         /* contraction rows queued */
    bool        acc;       /* the run adds to the region (else it overwrites it) */
    float      *a, *b;     /* (k, m) and (k, n), row-major */
    int64_t     a_cap, b_cap;   /* floats a and b hold */
} q;

/* A folded run: the task adding A^T B to an accumulator, and the PSUM
 * region that still reads as A^T B until it is read (computed then),
 * overwritten or freed. */
typedef struct mmq_job {
    simn_task   task;      /* the pool's handle (first member) */
    simc_store *x;         /* the accumulator's store; NULL once reaped */
    float      *c;         /* its first element ((m, n), row stride n) */
    int64_t     m, n, k;
    float      *a, *b;     /* the run's operands, owned */
    int64_t     a_cap, b_cap;
    simc_store *p;         /* the PSUM store holding A^T B lazily; NULL: none */
    int64_t     p_off, p_ldc;
    uint64_t    seq;       /* fold order */
} mmq_job;

static mmq_job jobs[NKI_MMQ_JOBS];
static uint64_t fold_seq, folds_total;

uint64_t nki_mmq_folds(void)
{
    return folds_total;
}

static bool job_outstanding(const mmq_job *j)
{
    return j->x && !simn_task_done(&j->task);
}

static void job_run(simn_task *t)
{
    mmq_job *j = (mmq_job *)(void *)t;   /* task is the first member */
    simn_matmul_serial((int)j->m, (int)j->n, (int)j->k, j->a, j->m, 0, j->b, j->n, j->c, j->n,
                       1.0f);
}

/* The PSUM region a folded run left behind, computed now: the product the
 * run's flush would have written (it overwrote the region). */
static void job_materialize(mmq_job *j)
{
    simc_store *p = j->p;
    if (!p)
        return;
    j->p = NULL;
    simn_matmul((int)j->m, (int)j->n, (int)j->k, j->a, j->m, 0, j->b, j->n,
                (float *)p->data + j->p_off, j->p_ldc, 0.0f);
}

static void settle(simc_store *s, bool drop)
{
    if (s == q.st) {
        if (drop) {
            q.st = NULL;
            q.k = 0;
        } else {
            nki_mmq_flush();
        }
    }
    for (int i = 0; i < NKI_MMQ_JOBS; i++) {
        mmq_job *j = &jobs[i];
        if (j->p == s) {
            if (drop)
                j->p = NULL;
            else
                job_materialize(j);
        }
        if (j->x == s) {   /* also when dropping: the task writes s's memory */
            simn_task_wait(&j->task);
            j->x = NULL;
        }
    }
    s->pending = false;
}

void nki_mmq_flush(void)
{
    simc_store *s = q.st;
    if (!s)
        return;
    q.st = NULL;               /* before the sgemm: nothing below re-enters */
    s->pending = false;
    simn_matmul((int)q.m, (int)q.n, (int)q.k, q.a, q.m, 0, q.b, q.n, (float *)s->data + q.off,
                q.ldc, q.acc ? 1.0f : 0.0f);
    q.k = 0;
}

static void grow_buf(float **buf, int64_t *cap, int64_t need, int64_t row)
{
    int64_t c = *cap ? *cap : 512 * row;
    while (c < need)
        c *= 2;
    if (c == *cap)
        return;
    /* the queued rows are kept: a run keeps growing until its flush */
    *buf = kf_realloc(*buf, (size_t)c * sizeof(float));
    *cap = c;
}

/* Operands of at least this many elements are converted by the numerics
 * pool's threads, a block of rows each (a hand-off costs microseconds). */
#define MMQ_SPLIT_ELEMS 32768

typedef struct gather_job {
    const simc_view *v;
    float *out;
} gather_job;

static void gather_part(void *arg, int part, int nparts)
{
    const gather_job *j = arg;
    simc_view sub = *j->v;
    int64_t rows = j->v->shape[0], r0 = rows * part / nparts, r1 = rows * (part + 1) / nparts;
    int64_t per_row = simc_view_elems(j->v) / rows;

    sub.shape[0] = r1 - r0;
    sub.offset += r0 * j->v->strides[0];
    simc_gather(&sub, j->out + r0 * per_row);
}

/* simc_gather(v, out), split by rows across the pool when v is large.  Only
 * for stores without PSUM accumulation bits: gathering writes nothing then,
 * so the parts share no state (the store is settled here, on the tracer). */
static void gather_operand(const simc_view *v, float *out)
{
    int threads = simn_threads();
    gather_job j = { v, out };

    simc_settle(v->st);
    if (threads < 2 || v->st->open || v->ndim < 2 || v->shape[0] < threads ||
        simc_view_elems(v) < MMQ_SPLIT_ELEMS) {
        simc_gather(v, out);
        return;
    }
    simn_parallel(gather_part, &j, threads);
}

void nki_mmq_add(simc_store *st, int64_t off, int64_t ldc, int64_t M, int64_t N, int64_t K,
                 const simc_view *a, const simc_view *b, bool acc)
{
    simc_settle_hook = settle;
    /* the run writes st's data without an accessor: a fresh tile's pattern
     * first, unless the run overwrites every element */
    if (st->unfilled) {
        if (!acc && off == 0 && ldc == N && M * N == st->nelem)
            st->unfilled = false;
        else
            simc_store_fill(st);
    }
    /* a folded run's region in st: overwritten whole by this run, or
     * computed first (the run adds to it, or covers only part of it) */
    for (int i = 0; i < NKI_MMQ_JOBS; i++) {
        mmq_job *j = &jobs[i];
        if (j->p != st)
            continue;
        if (!acc && j->p_off == off && j->p_ldc == ldc && j->m == M && j->n == N)
            j->p = NULL;
        else
            job_materialize(j);
    }
    if (q.st && (q.st != st || q.off != off || q.ldc != ldc || q.m != M || q.n != N || !acc ||
                 q.k + K > NKI_MMQ_MAX_K))
        nki_mmq_flush();
    if (!q.st) {
        q.st = st;
        q.off = off;
        q.ldc = ldc;
        q.m = M;
        q.n = N;
        q.k = 0;
        q.acc = acc;
    }
    grow_buf(&q.a, &q.a_cap, (q.k + K) * M, M);
    grow_buf(&q.b, &q.b_cap, (q.k + K) * N, N);
    gather_operand(a, q.a + q.k * M);
    gather_operand(b, q.b + q.k * N);
    q.k += K;
    st->pending = true;
}

/* A job slot for a fold: one whose task has run and whose PSUM region is
 * gone.  The tracer runs queued tasks (or waits for a running one) while
 * every slot is busy, and computes the oldest left-behind region when the
 * slots hold only those. */
static mmq_job *take_slot(void)
{
    for (;;) {
        mmq_job *oldest = NULL;
        bool outstanding = false;
        for (int i = 0; i < NKI_MMQ_JOBS; i++) {
            mmq_job *j = &jobs[i];
            if (job_outstanding(j)) {
                outstanding = true;
                continue;
            }
            if (!j->p) {
                j->x = NULL;
                return j;
            }
            if (!oldest || j->seq < oldest->seq)
                oldest = j;
        }
        if (outstanding)
            simn_task_help();
        else if (oldest)   /* always: no slot was free, so each holds a region */
            job_materialize(oldest);
    }
}

/* A view of exactly the elements [off, off + m * n) of an FP32 store in
 * row-major (m, n) order. */
static bool dense_region(const simc_view *v, int64_t m, int64_t n)
{
    return v->dtype == SIM_DT_FLOAT32 && v->ndim == 2 && v->shape[0] == m && v->shape[1] == n &&
           v->st->data && simc_view_contiguous(v) && simc_view_in_store(v);
}

bool nki_mmq_fold(const simc_view *x, const simc_view *p)
{
    simc_store *xs = x->st;
    mmq_job *j;
    float *ta, *tb;
    int64_t ca, cb;

    if (!q.st || p->st != q.st || q.acc || q.k * (q.m + q.n) > NKI_MMQ_FOLD_FLOATS ||
        q.ldc != q.n || p->offset != q.off || !dense_region(p, q.m, q.n) || xs == q.st ||
        xs->open || xs->borrowed || !dense_region(x, q.m, q.n))
        return false;
    simc_settle_hook = settle;
    if (xs->unfilled)          /* the task adds to what x holds */
        simc_store_fill(xs);
    j = take_slot();
    /* the run's operands move to the job; the queue takes the slot's old
     * buffers for its next run */
    ta = j->a, tb = j->b, ca = j->a_cap, cb = j->b_cap;
    j->a = q.a, j->b = q.b, j->a_cap = q.a_cap, j->b_cap = q.b_cap;
    q.a = ta, q.b = tb, q.a_cap = ca, q.b_cap = cb;
    j->x = xs;
    j->c = (float *)xs->data + x->offset;
    j->m = q.m;
    j->n = q.n;
    j->k = q.k;
    j->p = q.st;               /* stays pending: its region reads as A^T B */
    j->p_off = q.off;
    j->p_ldc = q.ldc;
    j->seq = ++fold_seq;
    j->task.fn = job_run;
    j->task.key = xs;
    q.st = NULL;
    q.k = 0;
    xs->pending = true;
    folds_total++;
    simn_task_submit(&j->task);
    return true;
}

void nki_mmq_reset(void)
{
    for (int i = 0; i < NKI_MMQ_JOBS; i++) {
        mmq_job *j = &jobs[i];
        if (j->x) {
            simn_task_wait(&j->task);
            j->x->pending = false;
        }
        if (j->p)
            j->p->pending = false;
        free(j->a);
        free(j->b);
    }
    memset(jobs, 0, sizeof(jobs));
    if (q.st)
        q.st->pending = false;
    free(q.a);
    free(q.b);
    memset(&q, 0, sizeof(q));
}
