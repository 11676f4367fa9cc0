/* sim_numerics — FP32 element arithmetic and tile matmul (see sim_numerics.h). */
#include "sim_numerics.h"

#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int kind;
} simn_ops[] = {
    { "none", 0 },
#define XX(id, name, kind) { name, kind },
    SIMN_OP_MAP(XX)
#undef XX
};

const char *simn_op_name(simn_op op)
{
    return (unsigned)op < SIMN_OP__COUNT ? simn_ops[op].name : "?";
}

int simn_op_kind(simn_op op)
{
    return (unsigned)op < SIMN_OP__COUNT ? simn_ops[op].kind : 0;
}

simn_op simn_op_binary(simn_op op)
{
    switch (op) {
    case SIMN_OP_SUM: case SIMN_OP_MEAN: case SIMN_OP_VAR: return SIMN_OP_ADD;
    case SIMN_OP_MAX: return SIMN_OP_MAXIMUM;
    case SIMN_OP_MIN: return SIMN_OP_MINIMUM;
    case SIMN_OP_PROD: return SIMN_OP_MULTIPLY;
    case SIMN_OP_ALL: return SIMN_OP_LOGICAL_AND;
    default: return simn_op_kind(op) == 2 ? op : SIMN_OP_NONE;
    }
}

float simn_op_identity(simn_op op)
{
    switch (simn_op_binary(op)) {
    case SIMN_OP_MAXIMUM: return -INFINITY;
    case SIMN_OP_MINIMUM: return INFINITY;
    case SIMN_OP_MULTIPLY: case SIMN_OP_LOGICAL_AND: return 1.0f;
    default: return 0.0f;
    }
}

static float b2f(bool x)
{
    return x ? 1.0f : 0.0f;
}

static int32_t as_int(float x)
{
    if (isnan(x))
        return 0;
    if (x >= 2147483647.0f)
        return INT32_MAX;
    if (x <= -2147483648.0f)
        return INT32_MIN;
    return (int32_t)x;
}

float simn_alu(simn_op op, float a, float b)
{
    switch (op) {
    case SIMN_OP_ADD: return a + b;
    case SIMN_OP_SUBTRACT: return a - b;
    case SIMN_OP_MULTIPLY: return a * b;
    case SIMN_OP_DIVIDE: return a / b;
    case SIMN_OP_MAXIMUM: return (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b);
    case SIMN_OP_MINIMUM: return (isnan(a) || isnan(b)) ? NAN : (a < b ? a : b);
    case SIMN_OP_POWER: return powf(a, b);
    case SIMN_OP_EQUAL: return b2f(a == b);
    case SIMN_OP_NOT_EQUAL: return b2f(a != b);
    case SIMN_OP_LESS: return b2f(a < b);
    case SIMN_OP_LESS_EQUAL: return b2f(a <= b);
    case SIMN_OP_GREATER: return b2f(a > b);
    case SIMN_OP_GREATER_EQUAL: return b2f(a >= b);
    case SIMN_OP_LOGICAL_AND: return b2f((a != 0) && (b != 0));
    case SIMN_OP_LOGICAL_OR: return b2f((a != 0) || (b != 0));
    case SIMN_OP_LOGICAL_XOR: return b2f((a != 0) != (b != 0));
    case SIMN_OP_BITWISE_AND: return (float)(as_int(a) & as_int(b));
    case SIMN_OP_BITWISE_OR: return (float)(as_int(a) | as_int(b));
    case SIMN_OP_BITWISE_XOR: return (float)(as_int(a) ^ as_int(b));
    case SIMN_OP_LEFT_SHIFT: return (float)(int32_t)((uint32_t)as_int(a) << (as_int(b) & 31));
    case SIMN_OP_RIGHT_SHIFT: return (float)(as_int(a) >> (as_int(b) & 31));
    case SIMN_OP_MOD: return fmodf(a, b);
    default: {
        simn_op bin = simn_op_binary(op);
        return bin != SIMN_OP_NONE && bin != op ? simn_alu(bin, a, b) : NAN;
    }
    }
}

bool simn_op_has_int(simn_op op)
{
    int64_t r;
    simn_op bin = simn_op_binary(op);
    return simn_alu_i64(bin != SIMN_OP_NONE ? bin : op, 1, 1, &r);
}

bool simn_alu_i64(simn_op op, int64_t a, int64_t b, int64_t *out)
{
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    switch (op) {
    case SIMN_OP_ADD: *out = (int64_t)(ua + ub); return true;
    case SIMN_OP_SUBTRACT: *out = (int64_t)(ua - ub); return true;
    case SIMN_OP_MULTIPLY: *out = (int64_t)(ua * ub); return true;
    case SIMN_OP_MAXIMUM: *out = a > b ? a : b; return true;
    case SIMN_OP_MINIMUM: *out = a < b ? a : b; return true;
    case SIMN_OP_EQUAL: *out = a == b; return true;
    case SIMN_OP_NOT_EQUAL: *out = a != b; return true;
    case SIMN_OP_LESS: *out = a < b; return true;
    case SIMN_OP_LESS_EQUAL: *out = a <= b; return true;
    case SIMN_OP_GREATER: *out = a > b; return true;
    case SIMN_OP_GREATER_EQUAL: *out = a >= b; return true;
    case SIMN_OP_LOGICAL_AND: *out = a && b; return true;
    case SIMN_OP_LOGICAL_OR: *out = a || b; return true;
    case SIMN_OP_LOGICAL_XOR: *out = (a != 0) != (b != 0); return true;
    case SIMN_OP_BITWISE_AND: *out = (int64_t)(ua & ub); return true;
    case SIMN_OP_BITWISE_OR: *out = (int64_t)(ua | ub); return true;
    case SIMN_OP_BITWISE_XOR: *out = (int64_t)(ua ^ ub); return true;
    /* shifts act on the 32-bit register: left shift wraps, right shift is
     * arithmetic on the value (logical for values read from uint32) */
    case SIMN_OP_LEFT_SHIFT: *out = (int64_t)(int32_t)(uint32_t)((uint32_t)ua << (ub & 31)); return true;
    case SIMN_OP_RIGHT_SHIFT: *out = a >> (ub & 31); return true;
    case SIMN_OP_MOD:
        if (b == 0)
            return false;
        *out = (b == -1) ? 0 : a % b;   /* sign of the dividend, like fmodf */
        return true;
    default: {
        simn_op bin = simn_op_binary(op);
        return bin != SIMN_OP_NONE && bin != op && simn_alu_i64(bin, a, b, out);
    }
    }
}

float simn_act(simn_op op, float x)
{
    switch (op) {
    case SIMN_OP_COPY: case SIMN_OP_IDENTITY: return x;
    case SIMN_OP_EXP: return expf(x);
    case SIMN_OP_LOG: return logf(x);
    case SIMN_OP_SQRT: return sqrtf(x);
    case SIMN_OP_RSQRT: return 1.0f / sqrtf(x);
    case SIMN_OP_SQUARE: return x * x;
    case SIMN_OP_ABS: return fabsf(x);
    case SIMN_OP_NEGATIVE: return -x;
    case SIMN_OP_RECIPROCAL: return 1.0f / x;
    case SIMN_OP_TANH: return tanhf(x);
    case SIMN_OP_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case SIMN_OP_RELU: return x > 0 ? x : 0.0f;
    case SIMN_OP_SILU: return x / (1.0f + expf(-x));
    case SIMN_OP_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678f));
    case SIMN_OP_GELU_APPRX_TANH:
        return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
    case SIMN_OP_SIN: return sinf(x);
    case SIMN_OP_COS: return cosf(x);
    case SIMN_OP_SIGN: return x > 0 ? 1.0f : x < 0 ? -1.0f : 0.0f;
    case SIMN_OP_ERF: return erff(x);
    case SIMN_OP_SOFTPLUS: return log1pf(expf(x));
    case SIMN_OP_CEIL: return ceilf(x);
    case SIMN_OP_FLOOR: return floorf(x);
    case SIMN_OP_TRUNC: return truncf(x);
    case SIMN_OP_ARCTAN: return atanf(x);
    /* GELU's sigmoid approximation x * sigmoid(1.702 x) and derivatives */
    case SIMN_OP_GELU_APPRX_SIGMOID: return x / (1.0f + expf(-1.702f * x));
    case SIMN_OP_GELU_APPRX_SIGMOID_DX: {
        float s = 1.0f / (1.0f + expf(-1.702f * x));
        return s + 1.702f * x * s * (1.0f - s);
    }
    case SIMN_OP_GELU_DX:   /* Phi(x) + x phi(x) */
        return 0.5f * (1.0f + erff(x * 0.70710678f)) + x * 0.39894228f * expf(-0.5f * x * x);
    case SIMN_OP_SILU_DX: {
        float s = 1.0f / (1.0f + expf(-x));
        return s * (1.0f + x * (1.0f - s));
    }
    case SIMN_OP_ERF_DX: return 1.12837917f * expf(-x * x);   /* 2 / sqrt(pi) */
    case SIMN_OP_MISH: return x * tanhf(log1pf(expf(x)));
    default: return NAN;
    }
}

static void alu_range(simn_op op, const float *a, const float *b, int64_t b_stride, float *out,
                      int64_t n)
{
    switch (op) {
    case SIMN_OP_ADD:
        for (int64_t i = 0; i < n; i++)
            out[i] = a[i] + b[i * b_stride];
        return;
    case SIMN_OP_SUBTRACT:
        for (int64_t i = 0; i < n; i++)
            out[i] = a[i] - b[i * b_stride];
        return;
    case SIMN_OP_MULTIPLY:
        for (int64_t i = 0; i < n; i++)
            out[i] = a[i] * b[i * b_stride];
        return;
    case SIMN_OP_DIVIDE:
        for (int64_t i = 0; i < n; i++)
            out[i] = a[i] / b[i * b_stride];
        return;
    case SIMN_OP_MAXIMUM:   /* simn_alu's expressions, inline */
        for (int64_t i = 0; i < n; i++) {
            float x = a[i], y = b[i * b_stride];
            out[i] = (isnan(x) || isnan(y)) ? NAN : (x > y ? x : y);
        }
        return;
    case SIMN_OP_MINIMUM:
        for (int64_t i = 0; i < n; i++) {
            float x = a[i], y = b[i * b_stride];
            out[i] = (isnan(x) || isnan(y)) ? NAN : (x < y ? x : y);
        }
        return;
    default:
        for (int64_t i = 0; i < n; i++)
            out[i] = simn_alu(op, a[i], b[i * b_stride]);
        return;
    }
}

static void act_range(simn_op op, const float *x, float *out, int64_t n)
{
    switch (op) {   /* the common ones inline (simn_act's expressions) */
    case SIMN_OP_EXP:
        for (int64_t i = 0; i < n; i++)
            out[i] = expf(x[i]);
        return;
    case SIMN_OP_COPY: case SIMN_OP_IDENTITY:
        if (out != x)
            memmove(out, x, (size_t)n * sizeof(float));
        return;
    case SIMN_OP_RECIPROCAL:
        for (int64_t i = 0; i < n; i++)
            out[i] = 1.0f / x[i];
        return;
    case SIMN_OP_SQUARE:
        for (int64_t i = 0; i < n; i++)
            out[i] = x[i] * x[i];
        return;
    case SIMN_OP_RSQRT:
        for (int64_t i = 0; i < n; i++)
            out[i] = 1.0f / sqrtf(x[i]);
        return;
    default:
        for (int64_t i = 0; i < n; i++)
            out[i] = simn_act(op, x[i]);
        return;
    }
}

/* Element ranges of one vector call, one per part (elements are
 * independent, so the split cannot change a value). */
typedef struct vec_job {
    simn_op op;
    const float *a, *b;
    int64_t b_stride, n;
    float *out;
    bool unary;
} vec_job;

static void vec_part(void *arg, int part, int nparts)
{
    const vec_job *j = arg;
    int64_t lo = j->n * part / nparts, hi = j->n * (part + 1) / nparts;
    if (j->unary)
        act_range(j->op, j->a + lo, j->out + lo, hi - lo);
    else
        alu_range(j->op, j->a + lo, j->b + lo * j->b_stride, j->b_stride, j->out + lo, hi - lo);
}

/* Elementwise calls shorter than this stay on the calling thread (a
 * hand-off costs a few microseconds). */
#define SIMN_VEC_SPLIT 32768

void simn_alu_vec(simn_op op, const float *a, const float *b, int64_t b_stride, float *out,
                  int64_t n)
{
    vec_job j = { op, a, b, b_stride, n, out, false };
    simn_parallel(vec_part, &j, n >= SIMN_VEC_SPLIT ? simn_threads() : 1);
}

void simn_act_vec(simn_op op, const float *x, float *out, int64_t n)
{
    vec_job j = { op, x, NULL, 0, n, out, true };
    simn_parallel(vec_part, &j, n >= SIMN_VEC_SPLIT ? simn_threads() : 1);
}

/* ===== worker threads =====
 *
 * One job at a time, posted by the tracer thread (simn_parallel) and split
 * into parts that the tracer and the workers claim under the pool mutex.
 * The job's buffers belong to the poster for the whole call: it returns
 * only when every part has finished, so no worker touches them after.
 * Workers spin briefly on the published generation before sleeping on the
 * condition variable, as tile products follow each other closely.
 *
 * Between jobs, workers run queued tasks (simn_task_submit): a task is
 * claimed under the mutex by the first thread free to run it, one task per
 * key at a time.  A job posted while a worker runs a task does not wait for
 * it: the poster claims the parts nobody takes. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    pthread_t tid[SIMN_MAX_THREADS];
    int nworkers;                 /* running workers (threads - 1) */
    int threads;                  /* the configured count (simn_set_threads) */
    unsigned long gen;            /* job generation, under mu */
    atomic_ulong gen_pub;         /* the same, for spinning without mu */
    simn_part_fn fn;              /* the job, under mu */
    void *arg;
    int nparts, next_part, pending;
    atomic_int pending_pub;
    int sleepers;                 /* workers waiting on go, under mu */
    bool poster_waits;            /* the poster waits on done, under mu */
    bool stop;
    bool atfork;
    /* Tasks (simn_task_submit): queued ones in submission order, the keys
     * of the running ones, and the tracer waiting for one to finish; all
     * under mu (tq_pub mirrors the queue's length for spinning workers). */
    simn_task *tq_head, *tq_tail;
    atomic_int tq_pub;
    const void *running[SIMN_MAX_THREADS];
    int nrunning;
    pthread_cond_t task_done;
    int task_waiters;
} pool = { .mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER,
           .done = PTHREAD_COND_INITIALIZER, .task_done = PTHREAD_COND_INITIALIZER, .threads = 1 };

#define SIMN_SPIN 4000   /* pause instructions: tens of microseconds */

static void spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claim and run parts of generation g until none is left. */
static void run_parts(unsigned long g)
{
    for (;;) {
        simn_part_fn fn;
        void *arg;
        int part, nparts;

        pthread_mutex_lock(&pool.mu);
        if (pool.gen != g || pool.next_part >= pool.nparts) {
            pthread_mutex_unlock(&pool.mu);
            return;
        }
        part = pool.next_part++;
        nparts = pool.nparts;
        fn = pool.fn;
        arg = pool.arg;
        pthread_mutex_unlock(&pool.mu);
        fn(arg, part, nparts);
        pthread_mutex_lock(&pool.mu);
        if (--pool.pending == 0 && pool.poster_waits)
            pthread_cond_signal(&pool.done);
        atomic_store_explicit(&pool.pending_pub, pool.pending, memory_order_release);
        pthread_mutex_unlock(&pool.mu);
    }
}

static bool key_running(const void *key)
{
    for (int i = 0; i < pool.nrunning; i++)
        if (pool.running[i] == key)
            return true;
    return false;
}

/* Under mu: take the first queued task that may run now (no running task
 * and no earlier queued task has its key), looking no further than `last`
 * (NULL: the whole queue); NULL when there is none. */
static simn_task *claim_task(const simn_task *last)
{
    simn_task *prev = NULL;
    if (pool.nrunning >= SIMN_MAX_THREADS)
        return NULL;
    for (simn_task *t = pool.tq_head; t; prev = t, t = t->next) {
        bool blocked = key_running(t->key);
        for (const simn_task *e = pool.tq_head; !blocked && e != t; e = e->next)
            blocked = e->key == t->key;
        if (!blocked) {
            if (prev)
                prev->next = t->next;
            else
                pool.tq_head = t->next;
            if (pool.tq_tail == t)
                pool.tq_tail = prev;
            t->next = NULL;
            atomic_store_explicit(&pool.tq_pub, atomic_load(&pool.tq_pub) - 1,
                                  memory_order_release);
            pool.running[pool.nrunning++] = t->key;
            atomic_store_explicit(&t->state, SIMN_TASK_RUNNING, memory_order_relaxed);
            return t;
        }
        if (t == last)
            break;
    }
    return NULL;
}

/* Run a task claim_task gave us (without mu).  Once its state says done
 * the submitter may reuse it: nothing here touches it after that. */
static void run_task(simn_task *t)
{
    const void *key = t->key;
    t->fn(t);
    pthread_mutex_lock(&pool.mu);
    for (int i = 0; i < pool.nrunning; i++)
        if (pool.running[i] == key) {
            pool.running[i] = pool.running[--pool.nrunning];
            break;
        }
    atomic_store_explicit(&t->state, SIMN_TASK_DONE, memory_order_release);
    if (pool.task_waiters > 0)
        pthread_cond_broadcast(&pool.task_done);
    if (pool.sleepers > 0 && pool.tq_head)   /* a task of the same key may run now */
        pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.mu);
}

/* Workers run the tracer's parallel parts first (it waits for them), then
 * queued tasks; they spin briefly before sleeping on `go`. */
static void *worker_main(void *unused)
{
    unsigned long seen = 0;
    (void)unused;
    for (;;) {
        simn_task *t = NULL;
        unsigned long g = seen;
        for (int i = 0; i < SIMN_SPIN &&
                        atomic_load_explicit(&pool.gen_pub, memory_order_acquire) == seen &&
                        atomic_load_explicit(&pool.tq_pub, memory_order_acquire) == 0; i++)
            spin_pause();
        pthread_mutex_lock(&pool.mu);
        for (;;) {
            if (pool.stop) {
                pthread_mutex_unlock(&pool.mu);
                return NULL;
            }
            if (pool.gen != seen) {
                g = pool.gen;
                break;
            }
            if ((t = claim_task(NULL)))
                break;
            pool.sleepers++;
            pthread_cond_wait(&pool.go, &pool.mu);
            pool.sleepers--;
        }
        pthread_mutex_unlock(&pool.mu);
        if (t) {
            run_task(t);
        } else {
            seen = g;
            run_parts(g);
        }
    }
}

void simn_task_submit(simn_task *t)
{
    if (pool.nworkers == 0) {
        atomic_store_explicit(&t->state, SIMN_TASK_RUNNING, memory_order_relaxed);
        t->fn(t);
        atomic_store_explicit(&t->state, SIMN_TASK_DONE, memory_order_release);
        return;
    }
    pthread_mutex_lock(&pool.mu);
    t->next = NULL;
    atomic_store_explicit(&t->state, SIMN_TASK_QUEUED, memory_order_relaxed);
    if (pool.tq_tail)
        pool.tq_tail->next = t;
    else
        pool.tq_head = t;
    pool.tq_tail = t;
    atomic_store_explicit(&pool.tq_pub, atomic_load(&pool.tq_pub) + 1, memory_order_release);
    if (pool.sleepers > 0)
        pthread_cond_signal(&pool.go);
    pthread_mutex_unlock(&pool.mu);
}

/* Under mu: sleep until a running task finishes. */
static void wait_task_done(void)
{
    pool.task_waiters++;
    pthread_cond_wait(&pool.task_done, &pool.mu);
    pool.task_waiters--;
}

void simn_task_wait(simn_task *t)
{
    while (!simn_task_done(t)) {
        simn_task *x = NULL;
        pthread_mutex_lock(&pool.mu);
        if (atomic_load_explicit(&t->state, memory_order_relaxed) == SIMN_TASK_QUEUED)
            x = claim_task(t);
        if (!x && !simn_task_done(t))
            wait_task_done();
        pthread_mutex_unlock(&pool.mu);
        if (x)
            run_task(x);
    }
}

bool simn_task_help(void)
{
    simn_task *x;
    pthread_mutex_lock(&pool.mu);
    x = claim_task(NULL);
    if (!x && pool.nrunning > 0)
        wait_task_done();
    pthread_mutex_unlock(&pool.mu);
    if (x)
        run_task(x);
    return x != NULL;
}

/* A forked child has the tracer thread only: forget the workers. */
static void pool_after_fork(void)
{
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.go, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.nworkers = 0;
    pool.threads = 1;
    pool.stop = false;
    pool.pending = pool.nparts = pool.next_part = 0;
    pool.sleepers = 0;
    pool.poster_waits = false;
    atomic_store(&pool.pending_pub, 0);
    /* tasks are never outstanding across a fork (the simulator forks its
     * sandbox before it traces): the child starts with an empty queue */
    pthread_cond_init(&pool.task_done, NULL);
    pool.tq_head = pool.tq_tail = NULL;
    atomic_store(&pool.tq_pub, 0);
    pool.nrunning = 0;
    pool.task_waiters = 0;
}

static void pool_stop(void)
{
    pthread_mutex_lock(&pool.mu);
    pool.stop = true;
    pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.mu);
    for (int i = 0; i < pool.nworkers; i++)
        pthread_join(pool.tid[i], NULL);
    pool.nworkers = 0;
    pool.stop = false;
    /* what is still queued runs here, in order (the workers are gone) */
    for (simn_task *t; (t = pool.tq_head);) {
        pool.tq_head = t->next;
        if (!pool.tq_head)
            pool.tq_tail = NULL;
        t->next = NULL;
        atomic_store(&pool.tq_pub, atomic_load(&pool.tq_pub) - 1);
        atomic_store_explicit(&t->state, SIMN_TASK_RUNNING, memory_order_relaxed);
        t->fn(t);
        atomic_store_explicit(&t->state, SIMN_TASK_DONE, memory_order_release);
    }
}

int simn_set_threads(int n)
{
    if (n < 1)
        n = simn_default_threads();
    if (n > SIMN_MAX_THREADS)
        n = SIMN_MAX_THREADS;
    if (!pool.atfork) {
        if (pthread_atfork(NULL, NULL, pool_after_fork) != 0)
            n = 1;
        pool.atfork = true;
    }
    if (pool.nworkers != n - 1)
        pool_stop();
    while (pool.nworkers < n - 1) {
        if (pthread_create(&pool.tid[pool.nworkers], NULL, worker_main, NULL) != 0)
            break;   /* fewer threads (RLIMIT_NPROC): same values, slower */
        pool.nworkers++;
    }
    pool.threads = pool.nworkers + 1;
    return pool.threads;
}

void simn_stop_threads(void)
{
    pool_stop();
    pool.threads = 1;
}

int simn_threads(void)
{
    return pool.threads;
}

int simn_default_threads(void)
{
    cpu_set_t set;
    int n;
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return 1;
    n = CPU_COUNT(&set);
    return n < 1 ? 1 : n > SIMN_MAX_THREADS ? SIMN_MAX_THREADS : n;
}

void simn_parallel(simn_part_fn fn, void *arg, int nparts)
{
    unsigned long g;
    if (nparts > pool.threads)
        nparts = pool.threads;
    if (nparts <= 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&pool.mu);
    pool.fn = fn;
    pool.arg = arg;
    pool.nparts = nparts;
    pool.next_part = 0;
    pool.pending = nparts;
    atomic_store_explicit(&pool.pending_pub, nparts, memory_order_release);
    g = ++pool.gen;
    atomic_store_explicit(&pool.gen_pub, g, memory_order_release);
    if (pool.sleepers > 0)   /* spinning workers see gen_pub: no futex call */
        pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.mu);
    run_parts(g);
    for (int i = 0; i < SIMN_SPIN &&
                    atomic_load_explicit(&pool.pending_pub, memory_order_acquire) > 0; i++)
        spin_pause();
    pthread_mutex_lock(&pool.mu);
    pool.poster_waits = true;
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.mu);
    pool.poster_waits = false;
    pthread_mutex_unlock(&pool.mu);
}

/* OpenBLAS is loaded at run time (not linked) so that its core type can be
 * chosen first: its DYNAMIC_ARCH detection falls back to the SSE3
 * "Prescott" kernels on CPUs it does not know by model number (common in
 * VMs), about 6x slower than the AVX2/AVX-512 kernels those CPUs run.  When
 * OPENBLAS_CORETYPE is unset, the core type is picked from the CPU's
 * feature flags; setting it in the environment overrides the choice. */
typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE,
                         const enum CBLAS_TRANSPOSE, const blasint, const blasint, const blasint,
                         const float, const float *, const blasint, const float *, const blasint,
                         const float, float *, const blasint);
typedef void (*threads_fn)(int);
typedef char *(*corename_fn)(void);

static sgemm_fn blas_sgemm;
static corename_fn blas_corename;
static int blas_state;   /* 0 not tried, 1 loaded, -1 failed */

static void sym_fn(void *h, const char *name, void *fn, size_t size)
{
    void *sym = h ? dlsym(h, name) : NULL;
    if (sym && size == sizeof(sym))
        memcpy(fn, &sym, size);
    else
        memset(fn, 0, size);
}

static const char *cpu_coretype(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    return NULL;   /* let OpenBLAS decide */
}

int simn_init(void)
{
    static const char *const libs[] = { "libopenblas.so.0", "libopenblasp-r0.3.21.so",
                                        "libopenblas.so" };
    void *h = NULL;
    threads_fn set_threads;
    const char *core;

    if (blas_state)
        return blas_state > 0 ? 0 : -1;
    core = cpu_coretype();
    if (core && !getenv("OPENBLAS_CORETYPE"))
        setenv("OPENBLAS_CORETYPE", core, 0);
    /* One thread from the start: no idle pool spinning next to the tracer. */
    if (!getenv("OPENBLAS_NUM_THREADS"))
        setenv("OPENBLAS_NUM_THREADS", "1", 0);
    for (size_t i = 0; !h && i < sizeof(libs) / sizeof(libs[0]); i++)
        h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
    /* POSIX: a function pointer from dlsym is copied, not cast */
    sym_fn(h, "cblas_sgemm", &blas_sgemm, sizeof(blas_sgemm));
    sym_fn(h, "openblas_set_num_threads", &set_threads, sizeof(set_threads));
    sym_fn(h, "openblas_get_corename", &blas_corename, sizeof(blas_corename));
    if (!blas_sgemm) {
        blas_state = -1;
        return -1;
    }
    if (set_threads)
        set_threads(1);
    blas_state = 1;
    return 0;
}

const char *simn_blas_name(void)
{
    if (blas_state <= 0)
        return "none";
    return blas_corename ? blas_corename() : "OpenBLAS";
}

static void matmul_range(int M, int N, int K, const float *A, int64_t lda, int trans_a,
                         const float *B, int64_t ldb, float *C, int64_t ldc, float beta)
{
    if (K <= 0 || !blas_sgemm) {
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                float acc = beta != 0.0f ? C[m * ldc + n] : 0.0f;
                for (int k = 0; k < K; k++)
                    acc += (trans_a ? A[m * lda + k] : A[k * lda + m]) * B[k * ldb + n];
                C[m * ldc + n] = acc;
            }
        return;
    }
    blas_sgemm(CblasRowMajor, trans_a ? CblasNoTrans : CblasTrans, CblasNoTrans, M, N, K, 1.0f, A,
               (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
}

/* A tile product is computed in blocks of SIMN_MM_COLS output columns, one
 * sgemm call each, whatever the thread count; threads take whole blocks.
 * The blocks are fixed so that every output element's summation order is
 * the same for any number of threads (OpenBLAS's Haswell kernel orders a
 * dot product differently for different call widths; its SkylakeX kernel
 * does not, and runs 256-column calls faster than 512-column ones). */
typedef struct mm_job {
    int M, N, K, trans_a;
    const float *A, *B;
    int64_t lda, ldb, ldc;
    float *C;
    float beta;
} mm_job;

#define SIMN_MM_COLS 256

static void mm_part(void *arg, int part, int nparts)
{
    const mm_job *j = arg;
    int blocks = (j->N + SIMN_MM_COLS - 1) / SIMN_MM_COLS;
    for (int b = blocks * part / nparts; b < blocks * (part + 1) / nparts; b++) {
        int lo = b * SIMN_MM_COLS, w = j->N - lo < SIMN_MM_COLS ? j->N - lo : SIMN_MM_COLS;
        matmul_range(j->M, w, j->K, j->A, j->lda, j->trans_a, j->B + lo, j->ldb, j->C + lo,
                     j->ldc, j->beta);
    }
}

/* Products with fewer multiply-adds than this stay on the calling thread. */
#define SIMN_MM_SPLIT (1 << 20)

void simn_matmul_serial(int M, int N, int K, const float *A, int64_t lda, int trans_a,
                        const float *B, int64_t ldb, float *C, int64_t ldc, float beta)
{
    mm_job j = { M, N, K, trans_a, A, B, lda, ldb, ldc, C, beta };
    if (M > 0 && N > 0)
        mm_part(&j, 0, 1);
}

void simn_matmul(int M, int N, int K, const float *A, int64_t lda, int trans_a, const float *B,
                 int64_t ldb, float *C, int64_t ldc, float beta)
{
    mm_job j = { M, N, K, trans_a, A, B, lda, ldb, ldc, C, beta };
    int parts = (N + SIMN_MM_COLS - 1) / SIMN_MM_COLS;
    if (M <= 0 || N <= 0)
        return;
    if ((int64_t)M * N * (K > 0 ? K : 1) < SIMN_MM_SPLIT)
        parts = 1;
    simn_parallel(mm_part, &j, parts);
}
