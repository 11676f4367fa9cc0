/*
 * sim_record — the instruction record: what a kernel did, in program order.
 *
 * The functional simulator appends one sim_insn per NeuronCore instruction
 * an NKI call turns into (an nl.load is one DMA_COPY per queue split; an
 * nc_matmul is one MATMUL; ...).  Each instruction names its engine, its
 * operands as memory regions (which allocation, which partitions, which
 * bytes), element counts, dtypes, FLOPs and the kernel source line that
 * issued it.  The timing model and the profiler read only this record:
 * they never re-run Python and never look at tensor values, so a record
 * made with numerics off (timing-only mode) times exactly like one made
 * with numerics on.
 *
 * Ownership: a sim_record owns its instruction array, its allocation table
 * and its interned strings (source files, tensor names).  sim_record_init()
 * sets up an empty record; sim_record_release() frees everything and leaves
 * it empty.  Appends cannot fail (allocation aborts on OOM) and cost an
 * amortised O(1) copy of a fixed-size struct.
 */
#ifndef SIM_RECORD_H
#define SIM_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "sim_isa.h"

/* Where an allocation lives. */
typedef enum sim_mem {
    SIM_MEM_HBM = 0,
    SIM_MEM_SBUF,
    SIM_MEM_PSUM,
} sim_mem;

/* Element types, with their sizes in sim_dtype_size(). */
#define SIM_DTYPE_MAP(XX)                      \
    XX(FLOAT32,      "float32",      4)        \
    XX(BFLOAT16,     "bfloat16",     2)        \
    XX(FLOAT16,      "float16",      2)        \
    XX(TFLOAT32,     "tfloat32",     4)        \
    XX(FLOAT8_E4M3,  "float8_e4m3",  1)        \
    XX(FLOAT8_E5M2,  "float8_e5m2",  1)        \
    XX(INT32,        "int32",        4)        \
    XX(UINT32,       "uint32",       4)        \
    XX(INT16,        "int16",        2)        \
    XX(UINT16,       "uint16",       2)        \
    XX(INT8,         "int8",         1)        \
    XX(UINT8,        "uint8",        1)        \
    XX(BOOL,         "bool_",        1)        \
    XX(FLOAT8_E4M3FN, "float8_e4m3fn", 1)

typedef enum sim_dtype {
#define XX(id, name, size) SIM_DT_##id,
    SIM_DTYPE_MAP(XX)
#undef XX
    SIM_DT__COUNT
} sim_dtype;

/* One allocation: an HBM tensor (kernel argument, output, ndarray in HBM)
 * or an on-chip tile.  Ids are dense indexes into sim_record.allocs and are
 * never reused within a record, so a region's `alloc` identifies storage
 * even after the tile died. */
typedef struct sim_alloc {
    uint32_t id;
    uint8_t  mem;             /* sim_mem */
    uint8_t  dtype;           /* sim_dtype */
    uint8_t  is_input;        /* kernel argument read by the kernel */
    uint8_t  is_output;       /* returned by the kernel */
    uint32_t partitions;      /* on-chip: partition count; HBM: 1 */
    uint64_t bytes_per_part;  /* on-chip: bytes per partition; HBM: total bytes */
    uint64_t sbuf_offset;     /* on-chip: byte offset in each partition chosen by the allocator */
    uint32_t name;            /* interned string id (tensor name or ""), see sim_record_str */
    uint32_t born;            /* index of the first instruction after allocation */
    uint32_t died;            /* index of the first instruction after release, UINT32_MAX if live */
    /* On-chip only.  born/died/sbuf_offset above follow the Python object
     * (allocated when created, released when dropped; first fit, never
     * refused): the timing model's buffer rotation reads them.  The fields
     * below are the compiler-like view that decides capacity (sim_live.h):
     * a tile lives from the first instruction that touches it to the last
     * one, and is placed by that liveness. */
    uint32_t loc;             /* source location of the allocating call (sim_record_loc) */
    uint32_t api;             /* interned name of the allocating call ("nl.ndarray") */
    uint32_t live_first;      /* first instruction touching it (if none: born) */
    uint32_t live_last;       /* last instruction touching it (if none: died - 1, or born) */
    uint64_t reserve;         /* bytes per partition the placement takes (rounded, whole banks) */
    uint64_t live_offset;     /* byte offset of the liveness placement (sim_live_plan) */
    uint64_t hint_offset;     /* SIM_PLACE_FIXED: the offset an allocation hint asks for */
    uint32_t born_seq;        /* allocations and releases recorded before its allocation */
    uint32_t died_seq;        /* ... before its release (UINT32_MAX while live) */
    uint8_t  place;           /* sim_place: constraints on the placement */
    uint8_t  live_used;       /* some instruction touches it (else it lives while Python
                                 holds it: born_seq..died_seq) */
    uint8_t  pad2_[2];
    uint32_t blocks;          /* on-chip: logical tiles of a tensor with block dims (legacy
                                 nl.par_dim), each bytes_per_part / blocks bytes; 0 or 1:
                                 one tile.  The compiler places and reuses each separately. */
} sim_alloc;

/* How an on-chip allocation may be placed (sim_alloc.place). */
typedef enum sim_place {
    SIM_PLACE_ANY = 0,        /* anywhere (SBUF; 4-byte granules) */
    SIM_PLACE_IN_BANK,        /* PSUM: inside one 2 KiB bank, never straddling two */
    SIM_PLACE_BANKS,          /* PSUM: whole banks from a bank boundary */
    SIM_PLACE_FIXED,          /* at hint_offset (ncc.*.mod_alloc, address=) */
} sim_place;

/* One operand: the bytes an instruction reads or writes in an allocation.
 * For on-chip memory, [part_lo, part_lo+part_count) are the partitions and
 * [byte_lo, byte_hi) the byte range within each partition; for HBM,
 * part_count is 1 and [byte_lo, byte_hi) the range within the tensor. */
typedef struct sim_region {
    uint32_t alloc;           /* sim_alloc id */
    uint8_t  mem;             /* copy of the allocation's sim_mem */
    uint8_t  dtype;           /* element type as accessed */
    uint16_t part_lo;
    uint16_t part_count;
    uint16_t pad_;
    uint64_t byte_lo, byte_hi;
    uint64_t bytes;           /* bytes actually touched (all partitions) */
    uint32_t elems_per_part;  /* elements touched per partition (free size) */
    uint32_t contig_bytes;    /* longest contiguous run per partition, bytes */
    int32_t  inner_stride;    /* innermost stride in bytes (stride penalty > 16 B) */
    uint32_t descriptors;     /* DMA: number of contiguous chunks (descriptors) */
} sim_region;

enum {
    SIM_INSN_MAX_SRC = 3,
    SIM_INSN_MAX_DST = 2,
};

/* Instruction flags. */
enum {
    SIM_F_ACCUMULATE = 1u << 0,  /* matmul accumulates into PSUM (not first write) */
    SIM_F_MASKED     = 1u << 1,  /* legacy mask= reduced the work */
    SIM_F_FP32_PE    = 1u << 2,  /* matmul operands fp32 (4x slower on PE) */
    SIM_F_TRANSPOSE  = 1u << 3,  /* is_transpose / transpose semantics */
    SIM_F_CAST       = 1u << 4,  /* output dtype differs from input (DMA cast) */
    SIM_F_QUEUE      = 1u << 5,  /* DMA: `queue` was chosen by the kernel (otherwise the
                                    timing model assigns queues round-robin) */
    SIM_F_IMM        = 1u << 6,  /* MEMSET: `imm` holds the fill value (sim_lower compares
                                    repeats of a constant) */
    SIM_F_DOUBLE_ROW = 1u << 7,  /* MATMUL: FP8 perf_mode=double_row (two contraction rows
                                    per partition; mm_k counts partitions, flops both rows) */
};

typedef struct sim_insn {
    uint16_t  opcode;         /* sim_opcode */
    uint8_t   engine;         /* sim_engine actually used (engine= may override) */
    uint8_t   flags;          /* SIM_F_* */
    uint8_t   nsrc, ndst;
    uint16_t  queue;          /* DMA: queue index; otherwise 0 */
    uint32_t  loc;            /* source location id (sim_record_loc) */
    uint32_t  spmd;           /* SPMD program index that issued it */
    uint32_t  partitions;     /* partitions the engine processes */
    uint64_t  elems_per_part; /* free-size elements processed per partition */
    uint64_t  flops;          /* useful FLOPs (model_flops contribution) */
    uint32_t  mm_k, mm_m, mm_n; /* matmul: contraction (partitions), stationary free, moving free */
    uint8_t   act_func;       /* activation function id (for table-switch costs); 0 = none */
    uint8_t   pad_[3];
    uint32_t  imm;            /* SIM_F_IMM: the fill value's float32 bits */
    sim_region src[SIM_INSN_MAX_SRC];
    sim_region dst[SIM_INSN_MAX_DST];
} sim_insn;

/* A source location: file (interned) and line of the kernel's code. */
typedef struct sim_loc {
    uint32_t file;            /* interned string id */
    uint32_t line;
    uint32_t func;            /* interned function name */
} sim_loc;

typedef struct sim_record {
    sim_insn  *insns;
    size_t     n_insns, cap_insns;
    sim_alloc *allocs;
    size_t     n_allocs, cap_allocs;
    sim_loc   *locs;
    size_t     n_locs, cap_locs;
    char     **strs;          /* interned strings, id = index */
    size_t     n_strs, cap_strs;
    char       target[16];    /* "trn2" */
    uint32_t   spmd_programs; /* grid size of the launch */
    uint32_t   n_events;      /* allocations and releases so far (sim_alloc.born_seq) */
} sim_record;

void sim_record_init(sim_record *r, const char *target);
void sim_record_release(sim_record *r);

/* Append and return a zeroed instruction slot to fill (valid until the next
 * append). */
sim_insn *sim_record_append(sim_record *r);

/* Register an allocation; returns its id. */
uint32_t sim_record_alloc(sim_record *r, sim_mem mem, sim_dtype dt, uint32_t partitions,
                          uint64_t bytes_per_part, const char *name);
/* Mark an allocation released at the current instruction index. */
void sim_record_free(sim_record *r, uint32_t alloc_id);

/* Give a MEMSET its fill value (sets SIM_F_IMM and `imm`). */
void sim_insn_set_imm(sim_insn *in, double value);

/* Intern a string / a source location (deduplicated). */
uint32_t sim_record_str(sim_record *r, const char *s);
uint32_t sim_record_loc(sim_record *r, const char *file, uint32_t line, const char *func);

const char *sim_dtype_name(sim_dtype dt);
unsigned sim_dtype_size(sim_dtype dt);
int sim_dtype_from_name(const char *name);   /* -1 when unknown */

#endif
