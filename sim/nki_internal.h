/*
 * nki_internal — shared declarations of the `nki` Python face (nki_*.c).
 *
 * The face turns Python calls into simulator work: tensors are Python
 * objects over simc views (sim_core.h), every NKI call checks its operands,
 * computes values with numerics on, and appends instructions to the current
 * run's sim_record.  One run is active at a time (nki_cur, set by sim_run.c);
 * the interpreter is single-threaded.
 *
 * Errors: a broken rule fills nki_cur->serr (first error wins) with the
 * calling kernel line and raises nki.SimError; functions return NULL / -1
 * as CPython expects.
 */
#ifndef NKI_INTERNAL_H
#define NKI_INTERNAL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>

#include "sim_core.h"
#include "sim_error.h"
#include "sim_record.h"

/* ===== run context ===== */

typedef struct nki_iv {          /* an on-chip allocation interval [off, off+len) */
    uint64_t off, len;
} nki_iv;

typedef struct nki_arena {       /* first-fit allocator over one partition's bytes */
    nki_iv  *iv;
    size_t   n, cap;
    uint64_t used, capacity, peak;
} nki_arena;

typedef struct nki_ctx {
    sim_record        *rec;
    sim_error         *serr;
    const simc_target *tgt;
    bool               numerics;
    int                grid[3];       /* SPMD grid (1s when not SPMD) */
    int                grid_ndim;     /* 0 when not an SPMD launch */
    int                pid[3];        /* current program id */
    uint32_t           spmd_index;
    nki_arena          sbuf, psum;
    simc_store       **shared;        /* shared_hbm allocations, shared across programs */
    size_t             n_shared, cap_shared, shared_cursor;
    float              act_acc[SIMC_PMAX]; /* ScalarE reduce registers */
    float             *scratch[6];
    size_t             scratch_cap[6];
    void              *loc_code;      /* cache of the last (code object, line) -> loc */
    int                loc_line;
    uint32_t           loc_id;
    uint64_t           calls;         /* NKI calls made */
} nki_ctx;

extern nki_ctx *nki_cur;

/* Exception raised for simulator errors (nki.SimError). */
extern PyObject *nki_SimError;

/* Fill serr (if no error yet) with code, api and a formatted value text, the
 * calling frame's file:line, and raise nki.SimError.  Returns NULL. */
PyObject *nki_fail(sim_error_code code, const char *api, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Record location of the calling Python frame. */
uint32_t nki_loc(void);
/* Append an instruction with loc/spmd/engine filled. */
sim_insn *nki_insn(sim_opcode op);
/* Scratch fp32 buffer `slot` with room for n floats (valid until the next
 * call with the same slot). */
float *nki_scratch(int slot, int64_t n);

/* Argument parsing for METH_FASTCALL|METH_KEYWORDS: names[] lists every
 * parameter in positional order; out[] receives borrowed refs or NULL.
 * Names starting with '*' are accepted and ignored.  Returns -1 (error
 * raised) on unknown keywords or too many positionals. */
int nki_parse(const char *api, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
              const char *const *names, int n_names, PyObject **out);
#define NKI_NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ===== tensors ===== */

typedef struct nki_tensor {
    PyObject_HEAD
    simc_view v;
    int       pdim;       /* partition dim of an on-chip view; -1 for HBM */
    bool      oob;        /* some element lies outside the tensor (index expressions
                             under a mask); checked per element when used */
    bool      mm_result;  /* a legacy matmul result tile (PSUM += accumulates) */
    char      oob_msg[96];
} nki_tensor;

extern PyTypeObject nki_TensorType;
#define nki_tensor_check(o) PyObject_TypeCheck((o), &nki_TensorType)

/* A new tensor viewing `st` (takes a new reference on st). */
nki_tensor *nki_tensor_view(simc_store *st, const simc_view *v, int pdim);
/* Allocate a new on-chip tile or HBM tensor; checks partition/PSUM limits and
 * capacity.  NULL with the error raised on failure. */
nki_tensor *nki_tensor_alloc(sim_mem mem, sim_dtype dt, int ndim, const int64_t *shape,
                             int pdim, const char *name, const char *api);
/* Borrow the tensor in obj or fail with BAD_ARGUMENT naming `what`. */
nki_tensor *nki_as_tensor(PyObject *obj, const char *api, const char *what);
/* Check the deferred bounds of an index-expression view under an optional
 * dense mask over its shape; -1 with the error raised. */
int nki_check_bounds(nki_tensor *t, const uint8_t *mask, const char *api);

/* ===== index expressions (legacy nl.arange / nl.mgrid) ===== */

typedef struct nki_index {       /* c + sum_k coef[k] * g_k over a grid of `shape` */
    PyObject_HEAD
    int     ndim;
    int64_t shape[SIMC_MAX_DIMS];
    int64_t coef[SIMC_MAX_DIMS];
    int64_t c;
} nki_index;

typedef struct nki_pred {        /* a dense boolean over a grid (mask=, affine_select) */
    PyObject_HEAD
    int      ndim;
    int64_t  shape[SIMC_MAX_DIMS];
    uint8_t *data;
} nki_pred;

extern PyTypeObject nki_IndexType, nki_PredType, nki_MgridType, nki_MgridResultType;
PyObject *nki_index_new(int ndim, const int64_t *shape, const int64_t *coef, int64_t c);

/* Dense mask over `shape` from a mask object (nki_pred, bool or None).
 * *mask = NULL when everything is selected.  -1 with the error raised. */
int nki_mask_dense(PyObject *obj, int ndim, const int64_t *shape, const char *api,
                   uint8_t **mask);

/* ===== dtypes, ops ===== */

typedef struct nki_dtype_obj {
    PyObject_HEAD
    sim_dtype dt;
} nki_dtype_obj;

extern PyTypeObject nki_DtypeType;
PyObject *nki_dtype_get(sim_dtype dt);    /* borrowed singleton */
/* dtype from an object (nki dtype, str, numpy type or dtype); -1 with
 * SIM_E_DTYPE raised when unknown. */
int nki_dtype_from(PyObject *obj, const char *api);

/* ALU and activation functions.  kind: 2 binary, 1 unary, 3 reduction. */
#define NKI_OP_MAP(XX)                                    \
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
    XX(SUM, "sum", 3)                                     \
    XX(MAX, "max", 3)                                     \
    XX(MIN, "min", 3)                                     \
    XX(MEAN, "mean", 3)                                   \
    XX(PROD, "prod", 3)                                   \
    XX(VAR, "var", 3)                                     \
    XX(ALL, "all", 3)

typedef enum nki_op {
    NKI_OP_NONE = 0,
#define XX(id, name, kind) NKI_OP_##id,
    NKI_OP_MAP(XX)
#undef XX
    NKI_OP__COUNT
} nki_op;

/* Resolve an op value (nl.add, np.add, np.max, "add", ...); NKI_OP_NONE with
 * the error raised when unknown.  `none_ok`: None -> NKI_OP_NONE without error. */
nki_op nki_op_from(PyObject *obj, const char *api, const char *what, bool none_ok);
const char *nki_op_name(nki_op op);
int nki_op_kind(nki_op op);
/* The binary ALU meaning of an op (reductions: sum -> add, max -> maximum). */
nki_op nki_op_binary(nki_op op);
float nki_alu(nki_op op, float a, float b);
float nki_act(nki_op op, float x);

/* ===== engines and buffers ===== */

typedef struct nki_buffer_obj {
    PyObject_HEAD
    int mem;        /* sim_mem */
    int shared;     /* shared_hbm */
    const char *name;
} nki_buffer_obj;
extern PyTypeObject nki_BufferType;
/* Memory for a buffer= argument (None -> SBUF); -1 with the error raised. */
int nki_buffer_from(PyObject *obj, const char *api, bool *shared);

/* Engine for an engine= argument (None/unknown -> dflt). */
sim_engine nki_engine_from(PyObject *obj, sim_engine dflt);

typedef struct nki_pardim {      /* nl.par_dim(n) in a shape */
    PyObject_HEAD
    int64_t size;
} nki_pardim;
extern PyTypeObject nki_ParDimType;

/* Parse a shape (tuple/list of ints, at most one par_dim); returns ndim or
 * -1 with the error raised.  *pdim: index of the par_dim (0 if none). */
int nki_parse_shape(PyObject *obj, const char *api, int64_t *shape, int *pdim);
PyObject *nki_tensor_subscript(PyObject *self, PyObject *key);
PyObject *nki_broadcast_view(nki_tensor *t, PyObject *shape_obj, const char *api);

/* ===== modules ===== */

/* Method tables of nki.language and nki.isa (nki_ops.c). */
extern PyMethodDef nki_language_methods[];
extern PyMethodDef nki_isa_methods[];
/* Number protocol for tensors (nki_ops.c). */
extern PyNumberMethods nki_tensor_as_number;
PyObject *nki_tensor_richcompare(PyObject *a, PyObject *b, int op);
/* Type readiness and module construction (nki_module.c); returns -1 on error. */
int nki_modules_install(void);
/* Per-run values (tile_size.total_available_sbuf_size). */
int nki_modules_configure(const simc_target *tgt);
/* Call a kernel function for one program (used by the launcher and sim_run). */
PyObject *nki_kernel_func(PyObject *entry);

/* Release a store's on-chip accounting when the last view goes away. */
void nki_store_release(simc_store *st);

#endif
