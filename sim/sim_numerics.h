/*
 * sim_numerics — the arithmetic the NeuronCore engines perform, in FP32.
 *
 * SIMN_OP_MAP declares every ALU, activation and reduction function the
 * `nki` face accepts as an operator value (nl.add, nl.exp, np.max, ...);
 * simn_alu/simn_act evaluate one element in FP32 (as Vector, Scalar and
 * GpSimd do), and simn_matmul computes a tile product with OpenBLAS sgemm
 * (loaded at run time with the CPU's core type, one BLAS thread)
 * (the Tensor engine accumulates in FP32, so an FP32 GEMM over the operands
 * converted to FP32 is exact to the engine's arithmetic up to summation order).
 *
 * Threads: simn_set_threads starts a small worker pool; the vector calls
 * and simn_matmul then split their work across it (elements, or column
 * blocks of the product).  Every output element is computed by exactly one
 * thread in the same order as with one thread, so values are bit-identical
 * whatever the thread count.
 *
 * Ownership and failure: pure functions over caller buffers; nothing fails.
 * Shared buffers: a call's inputs and outputs belong to the calling (tracer)
 * thread; workers only read the inputs and write disjoint ranges of the
 * outputs while the call runs, and the call returns after every worker has
 * finished its part (the pool mutex orders their writes before the return).
 * Workers own nothing; all calls except simn_parallel's parts and task
 * functions are made from one thread (the tracer).  A pool does not
 * survive fork (the child runs with one thread until simn_set_threads).
 */
#ifndef SIM_NUMERICS_H
#define SIM_NUMERICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* ALU and activation functions.  kind: 2 binary, 1 unary, 3 reduction. */
#define SIMN_OP_MAP(XX)                                   \
    XX(ADD, "add", 2)                                     \
    XX(SUBTRACT, "subtract", 2)                           \
    XX(MULTIPLY, "multiply", 2)                           \
    XX(DIVIDE, "divide", 2)                               \
    XX(MAXIMUM, "maximum", 2)                             \
    XX(MINIMUM, "minimum", 2)                             \
    XX(POWER, "power", 2)                                 \
    XX(EQUAL, "equal", 2)                                 \
    XX(NOT_EQUAL, "not_equal", 2)                         \
    XX(LESS, "less", 2)                                   \
    XX(LESS_EQUAL, "less_equal", 2)                       \
    XX(GREATER, "greater", 2)                             \
    XX(GREATER_EQUAL, "greater_equal", 2)                 \
    XX(LOGICAL_AND, "logical_and", 2)                     \
    XX(LOGICAL_OR, "logical_or", 2)                       \
    XX(LOGICAL_XOR, "logical_xor", 2)                     \
    XX(BITWISE_AND, "bitwise_and", 2)                     \
    XX(BITWISE_OR, "bitwise_or", 2)                       \
    XX(BITWISE_XOR, "bitwise_xor", 2)                     \
    XX(LEFT_SHIFT, "left_shift", 2)                       \
    XX(RIGHT_SHIFT, "right_shift", 2)                     \
    XX(MOD, "mod", 2)                                     \
    XX(COPY, "copy", 1)                                   \
    XX(IDENTITY, "identity", 1)                           \
    XX(EXP, "exp", 1)                                     \
    XX(LOG, "log", 1)                                     \
    XX(SQRT, "sqrt", 1)                                   \
    XX(RSQRT, "rsqrt", 1)                                 \
    XX(SQUARE, "square", 1)                               \
    XX(ABS, "abs", 1)                                     \
    XX(NEGATIVE, "negative", 1)                           \
    XX(RECIPROCAL, "reciprocal", 1)                       \
    XX(TANH, "tanh", 1)                                   \
    XX(SIGMOID, "sigmoid", 1)                             \
    XX(RELU, "relu", 1)                                   \
    XX(SILU, "silu", 1)                                   \
    XX(GELU, "gelu", 1)                                   \
    XX(GELU_APPRX_TANH, "gelu_apprx_tanh", 1)             \
    XX(SIN, "sin", 1)                                     \
    XX(COS, "cos", 1)                                     \
    XX(SIGN, "sign", 1)                                   \
    XX(ERF, "erf", 1)                                     \
    XX(SOFTPLUS, "softplus", 1)                           \
    XX(CEIL, "ceil", 1)                                   \
    XX(FLOOR, "floor", 1)                                 \
    XX(TRUNC, "trunc", 1)                                 \
    XX(ARCTAN, "arctan", 1)                               \
    XX(GELU_APPRX_SIGMOID, "gelu_apprx_sigmoid", 1)       \
    XX(GELU_APPRX_SIGMOID_DX, "gelu_apprx_sigmoid_dx", 1) \
    XX(GELU_DX, "gelu_dx", 1)                             \
    XX(SILU_DX, "silu_dx", 1)                             \
    XX(ERF_DX, "erf_dx", 1)                               \
    XX(MISH, "mish", 1)                                   \
    XX(SUM, "sum", 3)                                     \
    XX(MAX, "max", 3)                                     \
    XX(MIN, "min", 3)                                     \
    XX(MEAN, "mean", 3)                                   \
    XX(PROD, "prod", 3)                                   \
    XX(VAR, "var", 3)                                     \
    XX(ALL, "all", 3)

typedef enum simn_op {
    SIMN_OP_NONE = 0,
#define XX(id, name, kind) SIMN_OP_##id,
    SIMN_OP_MAP(XX)
#undef XX
    SIMN_OP__COUNT
} simn_op;

const char *simn_op_name(simn_op op);     /* "add" */
int simn_op_kind(simn_op op);             /* 1 unary, 2 binary, 3 reduction, 0 none */
/* The binary ALU meaning of an op used to combine values (sum/mean -> add,
 * max -> maximum, prod -> multiply, ...); unary ops have none (NONE). */
simn_op simn_op_binary(simn_op op);
/* The identity element of a binary combining op (add 0, max -inf, ...). */
float simn_op_identity(simn_op op);

float simn_alu(simn_op op, float a, float b);
float simn_act(simn_op op, float x);

/* out[i] = a[i] op b[i] (b_stride 0 broadcasts one value). */
void simn_alu_vec(simn_op op, const float *a, const float *b, int64_t b_stride, float *out,
                  int64_t n);
/* Integer ALU (the engines' int path: bitwise ops on the bit pattern,
 * arithmetic and comparisons exact, two's complement wrap when stored):
 * true and *out set when op has an integer form (add, subtract, multiply,
 * maximum, minimum, comparisons, logical and bitwise ops, shifts, mod with a
 * nonzero divisor); false for ops that stay floating point (divide, power,
 * activations). */
bool simn_alu_i64(simn_op op, int64_t a, int64_t b, int64_t *out);
/* True when op has an integer form for some operands (see simn_alu_i64). */
bool simn_op_has_int(simn_op op);
void simn_act_vec(simn_op op, const float *x, float *out, int64_t n);

/* C[M,N] = A[K,M]^T @ B[K,N] (+ beta * C), row-major FP32 with leading
 * dimensions lda/ldb/ldc (the Tensor engine's stationary/moving
 * convention).  trans_a: A is given as [M,K] instead.  beta is 0
 * (overwrite) or 1 (accumulate). */
void simn_matmul(int M, int N, int K, const float *A, int64_t lda, int trans_a, const float *B,
                 int64_t ldb, float *C, int64_t ldc, float beta);

/* At most this many numerics threads (the tracer counts as one). */
#define SIMN_MAX_THREADS 8

/* Use n threads for the numerics (n - 1 workers); n < 1: simn_default_threads().
 * Returns the count in effect (fewer when threads cannot be created, e.g.
 * under RLIMIT_NPROC; values do not change, only the speed). */
int simn_set_threads(int n);
/* Join the workers (back to one thread). */
void simn_stop_threads(void);
/* The thread count in effect (1 before simn_set_threads). */
int simn_threads(void);
/* The CPUs this process may run on (sched_getaffinity), 1..SIMN_MAX_THREADS. */
int simn_default_threads(void);

/* Run fn(arg, part, nparts) for part 0..nparts-1 (nparts capped at
 * simn_threads()) on the calling thread and the workers; returns when all
 * parts are done.  Parts must write disjoint memory. */
typedef void (*simn_part_fn)(void *arg, int part, int nparts);
void simn_parallel(simn_part_fn fn, void *arg, int nparts);

/* Asynchronous tasks: work the tracer hands to the pool and does not wait
 * for (nki_mmq's accumulating products).  A task is owned by its submitter,
 * which must not touch it, nor the memory its fn writes, until
 * simn_task_wait returns (or simn_task_done says so).  Tasks with the same
 * `key` run one at a time in submission order; tasks with different keys
 * may run at once, on different threads.  A task's fn runs on a worker or on
 * the tracer while it waits, never inside another task, and must not call
 * simn_parallel (use simn_matmul_serial).  Without workers (one thread)
 * simn_task_submit runs the task before returning.  Everything submitted
 * must be waited for before simn_set_threads/simn_stop_threads (which run
 * what is still queued, in order, on the caller). */
typedef struct simn_task simn_task;
struct simn_task {
    void (*fn)(simn_task *t);
    const void *key;
    simn_task *next;          /* the pool's queue link */
    atomic_int state;         /* SIMN_TASK_* */
};
enum { SIMN_TASK_IDLE, SIMN_TASK_QUEUED, SIMN_TASK_RUNNING, SIMN_TASK_DONE };

void simn_task_submit(simn_task *t);
/* Returns when t has run (at once for a task never submitted).  Meanwhile
 * the caller runs queued tasks submitted no later than t itself, so a wait
 * never takes longer than the work ahead of t. */
void simn_task_wait(simn_task *t);
static inline bool simn_task_done(const simn_task *t)
{
    int st = atomic_load_explicit(&t->state, memory_order_acquire);
    return st == SIMN_TASK_IDLE || st == SIMN_TASK_DONE;
}
/* Runs one queued task that may run now on the calling thread and returns
 * true; false when none may (the queue is empty, or every queued task waits
 * for a running one of its key): then it waits until some running task
 * finishes (at once when none runs). */
bool simn_task_help(void);

/* simn_matmul on the calling thread only, the same values (the same
 * column blocks, in order): for tasks. */
void simn_matmul_serial(int M, int N, int K, const float *A, int64_t lda, int trans_a,
                        const float *B, int64_t ldb, float *C, int64_t ldc, float beta);

/* Load OpenBLAS (once; see sim_numerics.c for the core-type choice) and
 * use one BLAS thread: tile products are small, so one thread does them
 * with the least overhead and a fixed summation order.  -1 when OpenBLAS
 * cannot be loaded (matmuls then use a plain C loop, correct but slow). */
int simn_init(void);
/* The BLAS kernel in use ("SkylakeX", "Haswell", ... or "none"). */
const char *simn_blas_name(void);

#endif
