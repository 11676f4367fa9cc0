/*
 * ka_lib — kforge's kernel library (kernels/, one .py per op) and the tuning problem a
 * job or the CLI describes.
 *
 * Every library template declares itself in its own file with a module-level
 * `KFORGE = {...}` literal that is both a Python dict and JSON (strings,
 * numbers, lists, objects): op, entry, reference (the NumPy function in the
 * same file), inputs (name, dims as names, optional std of the random
 * inputs: a number or an expression over the dims), supports (conditions on the
 * dims), reference_shapes, test_shapes, tunables ({NAME: {values, default,
 * addresses: {finding: "up"|"down"|"any"}}}) and constraints (ka_expr.h
 * expressions over tunables, dims, DTYPE_BYTES, SBUF_BYTES and PMAX).  The
 * file is the single source of truth: the index is parsed from the files.
 *
 * Where the library is: KFORGE_KERNELS_DIR, else ./kernels, else
 * <exe>/../../kernels (the source tree), else <exe>/../share/kforge/kernels.
 *
 * A ka_problem is one kernel to evaluate (source file, entry, reference,
 * inputs, target); a ka_space is what may be tuned (tunables with their
 * values, the findings each addresses, constraints, and the environment the
 * constraints read).  Both own their heap (ka_problem_release,
 * ka_space_release; NULL-safe).  Failures are kf_codes with messages a user
 * acts on: unknown op (with the list of ops), shapes the template cannot
 * serve (naming the condition), malformed KFORGE blocks (naming the file).
 */
#ifndef KA_LIB_H
#define KA_LIB_H

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "kf_error.h"
#include "sim/sim_record.h"

enum {
    KA_MAX_INPUTS = 16,
    KA_MAX_DIMS = 8,
    KA_MAX_TUNABLES = 16,
    KA_MAX_ENV = 48,
};

typedef struct ka_input {
    char      name[64];
    sim_dtype dtype;
    int       ndim;
    int64_t   shape[KA_MAX_DIMS];
    double    std;                  /* random inputs: normal(0, std) */
} ka_input;

typedef struct ka_problem {
    char     op[64];                /* library op, "" for a user kernel */
    char     source_path[PATH_MAX];
    char     entry[128];
    char     ref_path[PATH_MAX];    /* "" when there is no reference */
    char     ref_entry[128];
    char     target[16];
    ka_input inputs[KA_MAX_INPUTS];
    int      n_inputs;
    cJSON   *fixed_kwargs;          /* object of kwargs that are not tuned, or NULL */
    /* The op's own TensorE FLOPs (KFORGE "flops", an expression over the
     * dims), so the floor is the op's and not raised by extra matmuls a
     * kernel chooses to do; unset (user kernels): the kernel's own FLOPs. */
    double   op_flops;
    bool     op_flops_set;
} ka_problem;

typedef struct ka_tunable {
    char   name[64];
    cJSON *values;                  /* array (owned) */
    int    n_values;
    int    def;                     /* index of the default value */
    cJSON *addresses;               /* {finding: "up"|"down"|"any"} (owned) or NULL */
} ka_tunable;

typedef struct ka_env_entry {
    char   name[64];
    double value;
} ka_env_entry;

typedef struct ka_space {
    ka_tunable   t[KA_MAX_TUNABLES];
    int          n;
    cJSON       *constraints;       /* array of strings (owned) or NULL */
    ka_env_entry env[KA_MAX_ENV];   /* dims, DTYPE_BYTES, SBUF_BYTES, PMAX */
    int          n_env;
} ka_space;

/* The library folder (static string), or NULL when none is found. */
const char *ka_lib_dir(void);

/* Read the KFORGE block of a kernel file (*meta: owned cJSON object), or
 * of source text. KF_NOT_FOUND when there is none. */
kf_code ka_lib_read_meta(const char *path, cJSON **meta, kf_err *err);
kf_code ka_lib_meta_from_text(const char *text, const char *what, cJSON **meta, kf_err *err);

/* Every op of the library, as a JSON array of the KFORGE objects with a
 * "path" member added (owned). */
kf_code ka_lib_index(const char *dir, cJSON **index, kf_err *err);

/* Find `op` in the library: *meta (owned) and its file path. */
kf_code ka_lib_find(const char *dir, const char *op, cJSON **meta, char *path, size_t path_len,
                    kf_err *err);

/* Bind a template to shapes (one per input, in order; fewer when the rest
 * follow from the named dims), a dtype and a target: fills the problem and
 * the space and checks the template's `supports` conditions.  The template's
 * inputs are checked first: each needs a "name" and 1..KA_MAX_DIMS "dims"
 * (KF_INVALID naming the file otherwise). */
kf_code ka_lib_bind(const cJSON *meta, const char *path, const int64_t (*shapes)[KA_MAX_DIMS],
                    const int *ndims, int n_shapes, sim_dtype dtype, const char *target,
                    ka_problem *pb, ka_space *sp, kf_err *err);

/* A space from a user's tunables ({"NAME": [values...]}), optionally with
 * the declarations of a KFORGE block in the user's source (addresses,
 * constraints, defaults).  Env gets DTYPE_BYTES/SBUF_BYTES/PMAX, the
 * block's dim names bound to the inputs by position, and the first input's
 * dims as D0, D1, ... */
kf_code ka_space_from_tunables(const cJSON *tunables, const cJSON *meta, const ka_problem *pb,
                               ka_space *sp, kf_err *err);

/* Environment for a target and dtype (SBUF bytes per partition from the
 * target file). */
kf_code ka_space_set_target(ka_space *sp, const char *target, sim_dtype dtype, kf_err *err);
void ka_space_env_set(ka_space *sp, const char *name, double v);

/* Check the constraints for a setting (value index per tunable): *ok false
 * with *why naming the first failed constraint. */
kf_code ka_space_legal(const ka_space *sp, const int *idx, bool *ok, const char **why, kf_err *err);

/* The setting as a kwargs JSON object (tunables + the problem's fixed
 * kwargs), a heap string. */
char *ka_space_kwargs(const ka_space *sp, const int *idx, const cJSON *fixed);

/* {"NAME": value, ...} for a setting (owned). */
cJSON *ka_space_params(const ka_space *sp, const int *idx);

void ka_space_release(ka_space *sp);
void ka_problem_release(ka_problem *pb);

#endif
