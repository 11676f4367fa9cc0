/* nki_mmq — see nki_mmq.h. */
#include "nki_mmq.h"

#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "sim_numerics.h"

static struct {
    simc_store *st;        /* the store the run adds to; NULL when empty */
    int64_t     off, ldc;  /* first element of the region and its row stride */
    int64_t     m, n;      /* region shape */
    int64_t     k;         /* contraction rows queued */
    bool        acc;       /* the run adds to the region (else it overwrites it) */
    float      *a, *b;     /* (k, m) and (k, n), row-major */
    int64_t     cap;       /* rows a and b hold */
} q;

static void settle(simc_store *s, bool drop)
{
    if (s != q.st) {           /* not ours: nothing is queued on it */
        s->pending = false;
        return;
    }
    if (drop) {
        q.st->pending = false;
        q.st = NULL;
        q.k = 0;
        return;
    }
    nki_mmq_flush();
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

static void grow(int64_t rows)
{
    int64_t cap = q.cap ? q.cap : 512;
    while (cap < rows)
        cap *= 2;
    if (cap == q.cap)
        return;
    /* the queued rows are kept: a run keeps growing until its flush */
    q.a = kf_realloc(q.a, (size_t)cap * (size_t)q.m * sizeof(float));
    q.b = kf_realloc(q.b, (size_t)cap * (size_t)q.n * sizeof(float));
    q.cap = cap;
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
    if (q.st && (q.st != st || q.off != off || q.ldc != ldc || q.m != M || q.n != N || !acc ||
                 q.k + K > NKI_MMQ_MAX_K))
        nki_mmq_flush();
    if (!q.st) {
        /* buffers are sized by rows of the current shape: a new shape
         * starts them again */
        if (q.m != M || q.n != N) {
            free(q.a);
            free(q.b);
            q.a = q.b = NULL;
            q.cap = 0;
        }
        q.st = st;
        q.off = off;
        q.ldc = ldc;
        q.m = M;
        q.n = N;
        q.k = 0;
        q.acc = acc;
    }
    grow(q.k + K);
    gather_operand(a, q.a + q.k * M);
    gather_operand(b, q.b + q.k * N);
    q.k += K;
    st->pending = true;
}

void nki_mmq_reset(void)
{
    if (q.st)
        q.st->pending = false;
    free(q.a);
    free(q.b);
    memset(&q, 0, sizeof(q));
}
