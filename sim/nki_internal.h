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
 *
 * Files: nki_core.c (run context, errors, locations, argument parsing,
 * the Python-lifetime SBUF/PSUM placement the timing model reads; what
 * fits is decided by liveness in sim_live.c), nki_tensor.c (the tensor
 * type and its views),
 * nki_index.c (legacy index expressions, predicates, mgrid), nki_exec.c
 * (operands, reads/writes, promotion, assignment, instruction emission),
 * nki_lang.c (nki.language), nki_isa.c (nki.isa), nki_module.c (module
 * objects, dtypes, buffers, decorators, registration).  Numerics live in
 * sim_numerics.c and storage/views/conversions in sim_core.c.
 */
#ifndef NKI_INTERNAL_H
#define NKI_INTERNAL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>

#include "sim_core.h"
#include "sim_numerics.h"
#include "sim_error.h"
#include "sim_record.h"

/* ===== run context ===== */

/* HBM the kernel may allocate in one run (outputs and scratch tensors):
 * 16 GiB, far above any tier-1 kernel; the sandbox's memory limit applies
 * on top. */
#define SIM_HBM_LIMIT_BYTES ((uint64_t)16 << 30)
/* Elements one call may process at once (DMAs between HBM tensors, index
 * grids of masks): 2^28, far above any tile; bounds the FP32 scratch. */
#define NKI_MAX_OP_ELEMS ((int64_t)1 << 28)

enum { NKI_LOC_CACHE = 256 };

/* Tiles held by live Python references at once may take this many times
 * a memory's capacity (the arenas' bound): the compiler's liveness decides
 * what fits (sim_live.h); this only bounds the simulator's own memory. */
#define NKI_HELD_FACTOR 8

typedef struct nki_iv {          /* an on-chip allocation interval [off, off+len) */
    uint64_t off, len;
} nki_iv;

typedef struct nki_arena {       /* first-fit placement by Python lifetime (for timing) */
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
    float             *scratch[8];
    size_t             scratch_cap[8];
    /* direct-mapped cache (code object, instruction offset) -> location id */
    const void        *loc_code[NKI_LOC_CACHE];
    int                loc_lasti[NKI_LOC_CACHE];
    uint32_t           loc_id[NKI_LOC_CACHE];
    uint64_t           calls;         /* NKI calls made */
    uint64_t           hbm_bytes;     /* HBM tensors allocated by the kernel (inputs excluded) */
} nki_ctx;

extern nki_ctx *nki_cur;

/* First-fit allocation of len bytes per partition that does not straddle a
 * `window`-byte boundary (PSUM banks; 0 = none); -1 when it does not fit. */
int nki_arena_alloc(nki_arena *a, uint64_t len, uint64_t window, uint64_t *off);

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

/* An int (not a bool) from a Python object: 1 and *out set, or 0. */
int nki_get_int(PyObject *o, int64_t *out);
/* 0 inside a kernel run; -1 with RuntimeError raised outside one. */
int nki_need_run(const char *api);
/* Argument parsing for METH_FASTCALL|METH_KEYWORDS: names[] lists every
 * parameter in positional order; out[] receives borrowed refs or NULL.
 * Names starting with '*' are accepted and ignored.  Returns -1 (error
 * raised) on unknown keywords or too many positionals. */
int nki_parse(const char *api, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
              const char *const *names, int n_names, PyObject **out);
#define NKI_NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))
/* A PyMethodDef's function and flags for a vectorcall-style (fastcall with
 * keywords) implementation: the method tables of nki_isa/lang/module.c. */
#define FASTKW(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL | METH_KEYWORDS

/* ===== tensors ===== */

/* The per-dimension indices of a view made by index expressions: source
 * dimension d is indexed by c[d] + sum_k coef[d][k] * g_k over the view's
 * first gnd (grid) dimensions when expr[d], else stays in range by
 * construction.  Lets bounds be checked per dimension (a column index past
 * the end can still land inside the tensor's storage). */
typedef struct nki_oob_map {
    int      ndim, gnd;
    int64_t  size[SIMC_MAX_DIMS];
    int64_t  c[SIMC_MAX_DIMS];
    int64_t  coef[SIMC_MAX_DIMS][SIMC_MAX_DIMS];
    bool     expr[SIMC_MAX_DIMS];
    simc_view v;             /* the view the map describes */
} nki_oob_map;

/* An allocation hint: buffer=ncc.sbuf.mod_alloc(...) / ncc.psum.mod_alloc(...)
 * or ncc.sbuf/psum.alloc(func), func(block index tuple, partitions, bytes
 * per partition) returning (partition, byte) for SBUF and (bank, partition,
 * byte) for PSUM
 * (modulo allocation of a tensor's blocks, the leading dims before the
 * partition dim).  Block index i goes to bank base_bank + lin(i % bank_tiles)
 * (PSUM), partition base_partition + lin(i % par_tiles) * partitions and
 * byte base_addr + lin(i % free_tiles) * block bytes. */
typedef struct nki_hint {
    bool     set;
    int      n_bank, n_par, n_free;
    int64_t  base_bank, base_addr, base_partition;
    int64_t  bank_tiles[SIMC_MAX_DIMS], par_tiles[SIMC_MAX_DIMS], free_tiles[SIMC_MAX_DIMS];
    PyObject *func;       /* alloc(func): the kernel's allocation function (owned by
                             the buffer object carrying the hint), else NULL */
    char     text[160];   /* the call as the kernel wrote it, for messages */
} nki_hint;

typedef struct nki_tensor {
    PyObject_HEAD
    simc_view v;
    int       pdim;       /* partition dim of an on-chip view; -1 for HBM */
    bool      oob;        /* some element lies outside the tensor (index expressions
                             under a mask); checked per element when used */
    bool      mm_result;  /* a legacy matmul result tile (PSUM += accumulates) */
    int64_t   mm_insn;    /* mm_result: index of the MATMUL instruction that wrote it */
    char      oob_msg[96];
    nki_oob_map *oob_map; /* oob views made by index expressions: their per-dimension
                             indices (NULL otherwise; owned) */
} nki_tensor;

extern PyTypeObject nki_TensorType;
#define nki_tensor_check(o) PyObject_TypeCheck((o), &nki_TensorType)

/* A new tensor viewing `st` (takes a new reference on st). */
nki_tensor *nki_tensor_view(simc_store *st, const simc_view *v, int pdim);
/* Allocate a new on-chip tile or HBM tensor; checks partition/PSUM limits and
 * capacity.  NULL with the error raised on failure. */
nki_tensor *nki_tensor_alloc(sim_mem mem, sim_dtype dt, int ndim, const int64_t *shape,
                             int pdim, const char *name, const char *api);
/* Same, with psum_banks: a PSUM tensor placed with address= may span whole
 * banks (each matmul into it must still stay inside one bank); hint (may be
 * NULL): an allocation hint, checked against the tensor (a hint that does
 * not fit is SIM_E_BAD_ARGUMENT naming it). */
nki_tensor *nki_tensor_alloc_ex(sim_mem mem, sim_dtype dt, int ndim, const int64_t *shape,
                                int pdim, const char *name, const char *api, bool psum_banks,
                                const nki_hint *hint);
/* Borrow the tensor in obj or fail with BAD_ARGUMENT naming `what`. */
nki_tensor *nki_as_tensor(PyObject *obj, const char *api, const char *what);
/* Check the deferred bounds of an index-expression view under an optional
 * dense mask over its shape; -1 with the error raised. */
int nki_check_bounds(nki_tensor *t, const uint8_t *mask, const char *api);

/* An indirect DMA access `x[idx, ...]` (x in HBM, idx an SBUF integer tile
 * of one index per partition): row p is row idx[p] of x's dimension `dim`.
 * `base` is the access with that dimension's stride 0 (row p at offset 0).
 * Not a tensor: only nl.load, nl.store and nisa.dma_copy take it. */
typedef struct nki_indirect {
    PyObject_HEAD
    nki_tensor *base;        /* owned */
    nki_tensor *index;       /* owned */
    int64_t     row_stride;  /* elements between rows of the indexed dimension */
    int64_t     nrows;       /* its size: indices must lie in [0, nrows) */
    int         dim;         /* which dimension of x the tile indexes */
} nki_indirect;
extern PyTypeObject nki_IndirectType;
#define nki_indirect_check(o) (Py_TYPE(o) == &nki_IndirectType)
/* Gather (scatter false: tile = ia) or scatter (ia = tile) whole rows by
 * DMA with the index values (numerics on): an index outside [0, nrows) is
 * SIM_E_INDEX_OUT_OF_BOUNDS naming it, or skipped with skip (oob_mode=skip).
 * mask (row-major over the access's shape, may be NULL; legacy mask=):
 * only selected elements move, and a row with none selected is not moved
 * and its index not checked.  Records one DMA_COPY (HBM side: one
 * descriptor per moved row) that also reads the index tile.  -1 with the
 * error raised. */
int nki_indirect_move(const char *api, nki_indirect *ia, nki_tensor *tile, bool scatter, bool skip,
                      const uint8_t *mask);

/* ===== index expressions (legacy nl.arange / nl.mgrid) ===== */

typedef struct nki_index {       /* c + sum_k coef[k] * g_k over a grid of `shape` */
    PyObject_HEAD
    int     ndim;
    int64_t shape[SIMC_MAX_DIMS];
    int64_t coef[SIMC_MAX_DIMS];
    int64_t c;
    uint32_t axes;               /* bit k: the expression ranges over grid axis k (also a
                                    size-1 range such as mgrid's 0:1): the axes an index
                                    uses are the tile's dims (nki_tensor.c) */
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
/* Whether mask is a predicate whose shape broadcasts to (nd, shape)
 * (right-aligned, each dimension equal or 1): which of an instruction's
 * spaces (its result or its inputs) a legacy mask= is over. */
bool nki_pred_fits(PyObject *mask, int nd, const int64_t *shape);

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
/* Whether NumPy has a dtype for dt: not bfloat16, tfloat32 or the fp8
 * types, which NumPy knows only through ml_dtypes (not shipped here). */
bool nki_dtype_has_numpy(sim_dtype dt);

/* Resolve an op value (nl.add, np.add, np.max, "add", ...) by its name;
 * SIMN_OP_NONE with the error raised when unknown.  `none_ok`: None ->
 * SIMN_OP_NONE without error. */
simn_op nki_op_from(PyObject *obj, const char *api, const char *what, bool none_ok);

/* ===== engines and buffers ===== */

typedef struct nki_buffer_obj {
    PyObject_HEAD
    int mem;        /* sim_mem */
    int shared;     /* shared_hbm */
    const char *name;
    nki_hint hint;  /* set on the buffer a mod_alloc(...) call returns */
} nki_buffer_obj;
extern PyTypeObject nki_BufferType;
/* Memory for a buffer= argument (None -> SBUF); -1 with the error raised. */
int nki_buffer_from(PyObject *obj, const char *api, bool *shared);
/* The allocation hint a buffer= argument carries, or NULL. */
const nki_hint *nki_buffer_hint(PyObject *obj);

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

/* ===== modules (nki_module.c) ===== */

/* Create the nki / neuronxcc modules and put them in sys.modules; -1 on error. */
int nki_modules_install(void);
/* Per-target values (tile_size.total_available_sbuf_size). */
int nki_modules_configure(const simc_target *tgt);
/* Borrowed singleton for a buffer. */
PyObject *nki_buffer_singleton(int mem, int shared);
/* True when `module` is a legacy (neuronxcc) module (tile-returning nisa). */
bool nki_module_is_legacy(PyObject *module);
/* The Python function under a @nki.jit wrapper (borrowed), or obj itself. */
PyObject *nki_kernel_func(PyObject *obj);
/* Shared by the module getattr hooks: raise SIM_E_UNSUPPORTED_API. */
PyObject *nki_unsupported(const char *module, const char *name);
/* PEP 562 module __getattr__ of every nki module (unsupported API). */
PyObject *nki_mod_getattr(PyObject *m, PyObject *name);
/* A contextlib.nullcontext() for scheduling hints (nl.no_reorder() and the
 * module-level no_reorder()): the simulator issues in program order anyway. */
PyObject *nki_nullcontext(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

/* ===== nki.language (nki_lang.c) and nki.isa (nki_isa.c) ===== */

extern PyMethodDef nki_language_methods[];
extern PyMethodDef nki_isa_methods[];
extern PyNumberMethods nki_tensor_as_number;
PyObject *nki_tensor_richcompare(PyObject *a, PyObject *b, int op);
int nki_tensor_ass_subscript(PyObject *self, PyObject *key, PyObject *value);
/* Reduction axes of v (an int or a sequence; None = all free axes) into
 * red[]; the partition axis cannot be reduced.  -1 with the error raised. */
int nki_parse_axes(PyObject *axis, const simc_view *v, int pdim, bool *red, const char *api);
/* Reduce v over red[] axes with op into out[] (row-major over the kept
 * axes); returns the number of outputs.  Values only with numerics on. */
int64_t nki_reduce_vals(simn_op op, const simc_view *in, const bool *red, float *out, int slot);
/* A legacy reduction under mask_obj (mask=) into vals (row-major over
 * out): a mask over the result selects the results written; one over the
 * input (the instruction's iteration space) leaves unselected inputs out
 * of each result and writes the results that had any (in_t's index
 * expression bounds are checked under it).  *wmask is the write mask over
 * out (NULL: all).  -1 with the error raised. */
int nki_reduce_masked(simn_op op, const char *api, nki_tensor *in_t, const bool *red,
                      PyObject *mask_obj, const simc_view *out, float *vals, uint8_t **wmask);
/* The partition-start rule (neuron-hardware.md §1c): an engine access of n
 * partitions starts at 0 (n > 64), 0 or 64 (33..64) or 0/32/64/96 (n <= 32).
 * -1 with SIM_E_PARTITION_START naming the operand `what` otherwise. */
int nki_partition_start(const nki_tensor *t, const char *api, const char *what);
/* dst (+)= stat.T @ mov on the Tensor engine with the checks and the record;
 * accumulate: -1 overwrite, 0 PSUM rule, 1 accumulate.  -1 on error. */
int nki_matmul(const char *api, nki_tensor *dst, nki_tensor *stat, nki_tensor *mov, int accumulate,
               bool stat_is_mk, bool is_transpose);
/* nki_matmul with `rows` contraction rows per partition (FP8 double_row:
 * rows = 2, stat (K, 2, M) and mov (K, 2, N), dst[m, n] = sum over k and r
 * of stat[k, r, m] * mov[k, r, n] in fp32; the instruction carries
 * SIM_F_DOUBLE_ROW and 2 * (2K) * M * N FLOPs in the time of one K-row
 * multiply).  The caller checks the double_row rules (nki_isa.c). */
int nki_matmul_rows(const char *api, nki_tensor *dst, nki_tensor *stat, nki_tensor *mov,
                    int accumulate, bool stat_is_mk, bool is_transpose, int rows);
nki_tensor *nki_matmul_tile_rows(const char *api, nki_tensor *stat, nki_tensor *mov,
                                 bool stat_is_mk, PyObject *mask_obj, int rows);
/* A new PSUM fp32 tile holding stat.T @ mov (legacy value-returning form);
 * under mask_obj (mask=, may be NULL) only the selected elements count as
 * written when the tile is assigned or accumulated (nki_sel_mask). */
nki_tensor *nki_matmul_tile(const char *api, nki_tensor *stat, nki_tensor *mov, bool stat_is_mk,
                            PyObject *mask_obj);
/* dst = src transposed (P, F) -> (F, P) on the Tensor or Vector engine. */
int nki_transpose(const char *api, nki_tensor *dst, nki_tensor *src, sim_engine eng);
/* The permutation a DMA transpose applies to an ndim-D source (the result's
 * axis i is the source's axis perm[i]): (1, 0), (2, 1, 0), (3, 1, 2, 0);
 * NULL for other ranks. */
const int *nki_dma_perm(int ndim);
/* dst = src permuted by nki_dma_perm (2- to 4-D; shapes checked by the
 * caller), written under mask (row-major over dst) and recorded as one
 * DMA_TRANSPOSE (nl.load_transpose2d, nisa.dma_transpose). */
void nki_dma_transpose(nki_tensor *dst, const nki_tensor *src, const uint8_t *mask);

/* ===== execution helpers (nki_exec.c) ===== */

/* An operand of an elementwise op: a tensor view or an FP32 scalar. */
typedef struct nki_opnd {
    nki_tensor *t;     /* borrowed, NULL for a scalar */
    float       s;
    bool        s_int; /* the scalar was a Python int (promotes as int32, else fp32) */
    int64_t     si;    /* s_int: its exact value (integer ALU path) */
} nki_opnd;

/* Integer path (exact integer data, see simc_gather_i64): an operand is
 * integer when it is a tensor of an integer dtype or a Python int. */
bool nki_opnd_is_int(const nki_opnd *o);
/* nki_read / nki_read_opnd / nki_write with int64 values (same slots). */
int64_t *nki_read_i64(const simc_view *v, int slot);
int64_t *nki_read_opnd_i64(const nki_opnd *o, int nd, const int64_t *shape, int slot);
void nki_write_i64(const simc_view *v, const int64_t *vals, const uint8_t *mask);
/* Move src's values into dst under mask (may be NULL): byte for byte when
 * simc_copy_raw can, exactly through int64 when both dtypes are integer,
 * else through fp32.  Numerics off: only the accumulation/selection state. */
void nki_copy_vals(const simc_view *dst, const simc_view *src, const uint8_t *mask);

/* Parse a tensor or a Python number; -1 with the error raised. */
int nki_opnd_from(PyObject *obj, const char *api, const char *what, nki_opnd *o);
/* Partition count and free elements of a view (on-chip: dim `pdim`). */
int64_t nki_view_parts(const nki_tensor *t);
/* Broadcast view `in` (right-aligned) to nd/shape into *out; false if it
 * does not broadcast. */
bool nki_bcast(const simc_view *in, int nd, const int64_t *shape, simc_view *out);
/* Two views of the same elements of the same store in the same order. */
bool nki_same_view(const simc_view *a, const simc_view *b);
/* Read a view as FP32 row-major into scratch slot (numerics on only);
 * reading PSUM closes its accumulation (also with numerics off). */
float *nki_read(const simc_view *v, int slot);
/* Read an operand broadcast to shape into a scratch slot. */
float *nki_read_opnd(const nki_opnd *o, int nd, const int64_t *shape, int slot);
/* Write FP32 row-major values into v (mask may be NULL); no-op without data.
 * A masked write into a fresh result tile remembers what it wrote
 * (nki_store_select). */
void nki_write(const simc_view *v, const float *vals, const uint8_t *mask);
/* Legacy masked results (`dst[...] = op(..., mask=m)` leaves the rest of dst
 * alone): a masked producer of a fresh tile (nki_new_tile) marks the
 * elements it wrote (mask row-major over v); the first instruction recorded
 * into the store keeps the mark, any later one drops it
 * (nki_store_written, called by nki_emit); nki_sel_mask gives, row-major
 * over sv, the elements of sv so written AND'ed with mask (scratch `slot`),
 * or mask itself when the store has no mark. */
void nki_store_select(const simc_view *v, const uint8_t *mask);
void nki_store_written(simc_store *st);
/* For legacy ops that compute their whole fresh result tile: mark the
 * elements mask_obj (mask=) selects as the ones written, before the op
 * records its instruction.  -1 with the error raised on a bad mask. */
int nki_legacy_mask(PyObject *mask_obj, nki_tensor *tile, const char *api);
const uint8_t *nki_sel_mask(const simc_view *sv, const uint8_t *mask, int slot);
/* Append an instruction with its operand regions; NULL views are skipped. */
sim_insn *nki_emit(sim_opcode op, sim_engine eng, const simc_view *dst, const simc_view *s0,
                   const simc_view *s1, const simc_view *s2);
/* Allocate a new tile (legacy results): SBUF/PSUM, partition dim first. */
nki_tensor *nki_new_tile(sim_mem mem, sim_dtype dt, int nd, const int64_t *shape, const char *api);
/* dtype= argument or `dflt` when absent/None; -1 with the error raised. */
int nki_dtype_arg(PyObject *obj, sim_dtype dflt, const char *api);
/* Promote two operand dtypes (nki-subset.md: float wins over int, mixed
 * floats widen to fp32, Python scalars count as fp32 (float) or int32 (int)). */
sim_dtype nki_promote(const nki_opnd *a, const nki_opnd *b);
/* Copy src (tensor or scalar, broadcast) into dst view with cast and mask;
 * records `op` on `eng`.  -1 with the error raised. */
int nki_assign(nki_tensor *dst, PyObject *src, const uint8_t *mask, const char *api);

/* Release a store's on-chip accounting when the last view goes away. */
void nki_store_release(simc_store *st);

#endif
