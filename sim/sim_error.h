/*
 * sim_error — the simulator's compile-like errors.
 *
 * When a kernel breaks a rule of the NeuronCore (a partition dimension over
 * 128, a PSUM tile over one bank, SBUF over capacity, a shape mismatch, an
 * operand in the wrong memory, an API kforge does not implement) or raises a
 * Python exception, the run stops with one sim_error: a stable code from
 * SIM_ERROR_MAP, the kernel source file and line that made the call, the
 * rule that was broken and the values that broke it.  The codes and their
 * rule text are declared once here; docs/sim-errors.md lists them and a unit
 * test keeps the two in sync.
 *
 * Ownership: sim_error is a plain value (fixed-size buffers, no heap).
 */
#ifndef SIM_ERROR_H
#define SIM_ERROR_H

#include <stdbool.h>

/*      code                   rule (what the kernel must respect) */
#define SIM_ERROR_MAP(XX)                                                                          \
    XX(NONE,               "no error")                                                             \
    XX(PYTHON,             "the kernel raised a Python exception")                                 \
    XX(SYNTAX,             "the kernel file must be valid Python")                                 \
    XX(ENTRY,              "the entry function must exist in the kernel file and be callable")     \
    XX(ARGS,               "the kernel must be called with the arguments it declares")             \
    XX(UNSUPPORTED_API,    "the kernel may only use the NKI API kforge implements")                \
    XX(PARTITION_LIMIT,    "the partition dimension of an on-chip tensor must be at most 128")     \
    XX(PARTITION_START,    "an engine access must start at partition 0 (over 64 partitions), 0 or 64 (33 to 64), or 0/32/64/96 (up to 32)") \
    XX(PSUM_TILE,          "a PSUM tile must fit one 2 KiB bank per partition")                    \
    XX(PSUM_CAPACITY,      "live PSUM tiles must fit the 8 banks (16 KiB) per partition")          \
    XX(SBUF_CAPACITY,      "live SBUF tiles must fit the target's bytes per partition")            \
    XX(SHAPE_MISMATCH,     "operand shapes must agree as the instruction requires")                \
    XX(WRONG_BUFFER,       "each operand must live in the memory the instruction reads or writes") \
    XX(MATMUL_LIMIT,       "matmul tiles must respect K <= 128, M <= 128, N <= 512")               \
    XX(DTYPE,              "dtypes must be ones the instruction accepts")                          \
    XX(INDEX_OUT_OF_BOUNDS, "every index must fall inside the tensor's dimension")                 \
    XX(BAD_INDEX,          "an index must be an int, slice, ellipsis, nl.ds or an affine index expression") \
    XX(BAD_ARGUMENT,       "an argument must have the type and value range the API documents")     \
    XX(OUTPUT,             "the kernel must return HBM tensors (one or a tuple)")                  \
    XX(LIMIT,              "the kernel must stay within the simulator's resource limits")

typedef enum sim_error_code {
#define XX(id, rule) SIM_E_##id,
    SIM_ERROR_MAP(XX)
#undef XX
    SIM_E__COUNT
} sim_error_code;

typedef struct sim_error {
    sim_error_code code;    /* SIM_E_NONE when nothing failed */
    char  file[256];        /* kernel source file of the call ("" if unknown) */
    int   line;             /* its line, 0 if unknown */
    char  func[64];         /* the Python function that made the call */
    char  api[64];          /* the NKI call, e.g. "nisa.nc_matmul" ("" if none) */
    char  values[512];      /* the values that broke the rule, e.g. "partition dimension 256 > 128" */
} sim_error;

const char *sim_error_name(sim_error_code c);   /* "PARTITION_LIMIT" */
const char *sim_error_rule(sim_error_code c);   /* the rule text above */

void sim_error_clear(sim_error *e);

/* One line a user can act on:
 * "kernel.py:12: error SIM_E_PARTITION_LIMIT in nl.ndarray: the partition
 *  dimension ... at most 128 (partition dimension 256 > 128)". */
void sim_error_format(const sim_error *e, char *buf, unsigned len);

#endif
