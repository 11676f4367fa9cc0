/*
 * kforge-sim — run NKI kernels on kforge's NeuronCore simulator.
 *
 * Subcommands live in one table (cmds[]): a name, a one-line summary, a
 * usage text and a function taking the remaining argv.  `run` evaluates one
 * kernel in a sandboxed child (sim_check_evaluate), writes its outputs as
 * .npy, prints a one-screen summary (or --json) and, with --check, compares
 * every output with a NumPy reference.
 *
 * Exit codes: 0 ran (and passed --check), 1 an output does not match the
 * reference, 2 the kernel failed (simulator error, crash, limit), 3 usage
 * error (bad options, unreadable input, broken reference file).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_log.h"
#include "sim_check.h"
#include "sim_eval.h"
#include "sim_input.h"
#include "sim_npy.h"
#include "sim_profile_cli.h"

enum { EXIT_PASS = 0, EXIT_MISMATCH = 1, EXIT_KERNEL = 2, EXIT_USAGE = 3 };

typedef struct sim_cmd {
    const char *name;
    const char *summary;
    const char *usage;
    int (*fn)(int argc, char **argv);
} sim_cmd;

static int cmd_run(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const char run_usage[] =
    "usage: kforge-sim run KERNEL.py --entry NAME [options]\n"
    "\n"
    "Run one NKI kernel (legacy neuronxcc.nki or current nki API) in a sandboxed\n"
    "child process, write its outputs as .npy and print a summary.\n"
    "\n"
    "  --entry NAME          kernel function to run (required)\n"
    "  --target T            trn1, inf2, trn2 (default) or trn3\n"
    "  --input SPEC          an array argument; --input and --arg together give the\n"
    "                        kernel's positional arguments, in the order given:\n"
    "                          NAME=FILE.npy[:DTYPE]        a NumPy file (DTYPE converts)\n"
    "                          NAME=shape:4096x512:bf16[:seed=N][:dist=normal|uniform]\n"
    "                               [:mean=M][:std=S][:lo=L][:hi=H]   seeded random data\n"
    "  --arg NAME=JSON       a non-array positional argument: a number, true/false,\n"
    "                        null, a string, an array (passed as a tuple, e.g. [128, 512])\n"
    "                        or an object (a dict whose keys also read as attributes)\n"
    "  --grid G0[xG1[xG2]]   SPMD launch grid, e.g. 2x4 (kernel[2, 4](...))\n"
    "  --kwargs JSON         keyword arguments for the kernel, e.g. '{\"TILE_F\": 512}';\n"
    "                        a key may name a positional parameter --input/--arg leave\n"
    "                        out (arrays in it are passed as tuples)\n"
    "  --path DIR            an import root (repeatable, at most 8): put first on\n"
    "                        sys.path and readable (read-only) in the sandbox, which\n"
    "                        otherwise shows the kernel no file but itself; a kernel\n"
    "                        under DIR is a module of its package (relative imports)\n"
    "  --no-stubs            do not stand in stubs for absent test-harness libraries\n"
    "                        (" SIM_RUN_STUBBED "):\n"
    "                        importing them fails; by default the import works and\n"
    "                        any use is SIM_E_UNSUPPORTED_API naming what was used\n"
    "  --output-dir DIR      where outputs go as NAME.npy (default: sim-out)\n"
    "  --keep-dtype          write bf16 outputs as '<V2' raw bits, fp8 as '|V1'\n"
    "                        (default: widened to float32)\n"
    "  --save-inputs         also write the inputs to DIR/inputs/NAME.npy\n"
    "  --check REF.py        compare every output with REF.py's function (same name as\n"
    "                        the entry unless --ref-entry); tolerances by output dtype:\n"
    "                        float32 1e-4, bfloat16 2e-2, float16 5e-3, ints exact\n"
    "  --ref-entry NAME      reference function name\n"
    "  --rtol X, --atol Y    override the tolerances\n"
    "  --no-numerics         timing-only run: trace and record, compute no values\n"
    "  --timeout S           wall-clock limit in seconds (default KFORGE_SIM_TIMEOUT_S)\n"
    "  --cpu S               CPU-time limit in seconds (default: the wall-clock limit)\n"
    "  --memory MiB          memory limit (default KFORGE_SIM_MEMORY_MIB)\n"
    "  --json                print one JSON document instead of the summary\n"
    "\n"
    "Exit status: 0 ran (and matched with --check), 1 mismatch, 2 kernel error\n"
    "(simulator error, crash, time or memory limit), 3 usage error.\n";

static const char help_usage[] = "usage: kforge-sim help [COMMAND]\n";

static const sim_cmd cmds[] = {
    { "run", "run one kernel, write its outputs, optionally check them", run_usage, cmd_run },
    { "profile", "time one kernel on a target: summary, bounds, findings, trace", sim_profile_cli_usage,
      sim_profile_cli_main },
    { "help", "show help for a command", help_usage, cmd_help },
};
#define N_CMDS (sizeof(cmds) / sizeof(cmds[0]))

static void print_main_usage(FILE *f)
{
    fprintf(f, "usage: kforge-sim COMMAND [options]\n\n"
               "Run NKI kernels on kforge's NeuronCore simulator (no Neuron device needed).\n\n"
               "commands:\n");
    for (size_t i = 0; i < N_CMDS; i++)
        fprintf(f, "  %-8s %s\n", cmds[i].name, cmds[i].summary);
    fprintf(f, "\n`kforge-sim COMMAND --help` shows a command's options.\n\n");
    kf_config_print_help(f, KF_USE_SIM);
}

static const sim_cmd *find_cmd(const char *name)
{
    for (size_t i = 0; i < N_CMDS; i++)
        if (strcmp(cmds[i].name, name) == 0)
            return &cmds[i];
    return NULL;
}

static int cmd_help(int argc, char **argv)
{
    const sim_cmd *c = argc > 1 ? find_cmd(argv[1]) : NULL;
    if (argc > 1 && !c) {
        fprintf(stderr, "kforge-sim: no command '%s'\n", argv[1]);
        return EXIT_USAGE;
    }
    if (c)
        fputs(c->usage, stdout);
    else
        print_main_usage(stdout);
    return EXIT_PASS;
}

/* ---- run ---------------------------------------------------------------- */

typedef struct run_args {
    const char *kernel, *entry, *target, *out_dir, *ref, *ref_entry, *kwargs;
    char      **inputs;
    size_t      n_inputs;
    sim_run_arg *slots;           /* --input (json NULL) and --arg, in order */
    size_t      n_slots;
    bool        any_arg, no_stubs;
    const char *paths[SIM_RUN_MAX_PATHS + 1];
    size_t      n_paths;
    int         grid[3];
    bool        no_numerics, json, keep_dtype, save_inputs;
    double      rtol, atol;        /* < 0: default by dtype */
    long        timeout_s, cpu_s, memory_mib;
} run_args;

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "kforge-sim run: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(kforge-sim run --help lists the options)\n");
    return EXIT_USAGE;
}

static int parse_long(const char *s, long lo, long hi, long *v)
{
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    return (errno || end == s || *end || *v < lo || *v > hi) ? -1 : 0;
}

static int parse_grid(const char *s, int grid[3])
{
    char buf[64], *tok, *save = NULL;
    int n = 0;
    if (strlen(s) >= sizeof(buf))
        return -1;
    memcpy(buf, s, strlen(s) + 1);
    for (tok = strtok_r(buf, "x,", &save); tok; tok = strtok_r(NULL, "x,", &save)) {
        long v;
        if (n == 3 || parse_long(tok, 1, 65536, &v) < 0)
            return -1;
        grid[n++] = (int)v;
    }
    return n ? 0 : -1;
}

static void file_name(const char *name, size_t idx, char *buf, size_t len)
{
    size_t o = 0;
    for (const char *p = name; *p && o + 1 < len; p++) {
        bool ok = *p == '_' || *p == '-' || *p == '.' || (*p >= '0' && *p <= '9') ||
                  (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z');
        char ch = '_';
        if (ok)
            ch = *p;
        buf[o++] = ch;
    }
    buf[o] = '\0';
    if (!o || buf[0] == '.')
        snprintf(buf, len, "out%zu", idx);
}

typedef struct stats {
    double min, max, mean;
    uint64_t nan, inf;
} stats;

static stats array_stats(const sim_array *a)
{
    stats s = { INFINITY, -INFINITY, 0, 0, 0 };
    uint64_t n = 1, finite = 0;
    for (int d = 0; d < a->ndim; d++)
        n *= (uint64_t)a->shape[d];
    double sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        double v = sim_npy_load_elem(a->dtype, a->data, i);
        if (isnan(v)) { s.nan++; continue; }
        if (isinf(v)) { s.inf++; continue; }
        if (v < s.min) s.min = v;
        if (v > s.max) s.max = v;
        sum += v;
        finite++;
    }
    s.mean = finite ? sum / (double)finite : NAN;
    if (!finite)
        s.min = s.max = NAN;
    return s;
}

static cJSON *shape_json(const sim_array *a)
{
    cJSON *s = cJSON_CreateArray();
    for (int i = 0; i < a->ndim; i++)
        cJSON_AddItemToArray(s, cJSON_CreateNumber((double)a->shape[i]));
    return s;
}

static int mkdir_p(const char *dir)
{
    char *p = kf_strdup(dir);
    int rc = 0;
    for (char *q = p + 1; *q; q++) {
        if (*q != '/')
            continue;
        *q = '\0';
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            rc = -1;
        *q = '/';
    }
    if (mkdir(p, 0755) < 0 && errno != EEXIST)
        rc = -1;
    free(p);
    return rc;
}

static int do_run(const run_args *a)
{
    sim_array *inputs = kf_calloc(a->n_inputs + 1, sizeof(*inputs));
    sim_eval ev;
    sim_eval_spec spec;
    sim_sandbox_limits lim;
    kf_err err = KF_ERR_INIT;
    cJSON *doc = cJSON_CreateObject(), *jout = NULL, *jchk = NULL;
    kf_buf text = KF_BUF_INIT;
    int status = EXIT_PASS;
    bool ev_done = false;

    memset(&ev, 0, sizeof(ev));
    /* inputs are read and generated here, before any user code runs */
    for (size_t i = 0; i < a->n_inputs; i++) {
        sim_npy_array arr;
        char *name = NULL;
        if (sim_input_parse(a->inputs[i], 0, (uint64_t)a->memory_mib << 20, &name, &arr, &err) != KF_OK) {
            fprintf(stderr, "kforge-sim run: %s\n", err.msg);
            status = EXIT_USAGE;
            goto out;
        }
        snprintf(inputs[i].name, sizeof(inputs[i].name), "%s", name);
        free(name);
        inputs[i].dtype = arr.dtype;
        inputs[i].ndim = arr.ndim;
        for (int d = 0; d < arr.ndim; d++)
            inputs[i].shape[d] = (int64_t)arr.shape[d];
        inputs[i].data = arr.data;
    }
    if (mkdir_p(a->out_dir) < 0) {
        fprintf(stderr, "kforge-sim run: cannot create output folder '%s': %s\n", a->out_dir,
                strerror(errno));
        status = EXIT_USAGE;
        goto out;
    }
    if (a->save_inputs) {
        char *dir = kf_asprintf("%s/inputs", a->out_dir);
        mkdir_p(dir);
        for (size_t i = 0; i < a->n_inputs; i++) {
            uint64_t shape[8];
            char *p = kf_asprintf("%s/%s.npy", dir, inputs[i].name);
            for (int d = 0; d < inputs[i].ndim; d++)
                shape[d] = (uint64_t)inputs[i].shape[d];
            if (sim_npy_write(p, inputs[i].dtype, inputs[i].ndim, shape, inputs[i].data,
                              a->keep_dtype ? SIM_NPY_KEEP_DTYPE : 0, &err) != KF_OK)
                fprintf(stderr, "kforge-sim run: %s\n", err.msg);
            free(p);
        }
        free(dir);
    }

    memset(&spec, 0, sizeof(spec));
    spec.run.source_path = a->kernel;
    spec.run.entry = a->entry;
    spec.run.target = a->target;
    memcpy(spec.run.grid, a->grid, sizeof(spec.run.grid));
    spec.run.numerics = !a->no_numerics;
    spec.run.kwargs_json = a->kwargs;
    if (a->any_arg) {
        spec.run.args = a->slots;
        spec.run.n_args = a->n_slots;
    }
    spec.run.paths = a->n_paths ? a->paths : NULL;
    spec.run.no_stubs = a->no_stubs;
    spec.inputs = inputs;
    spec.n_inputs = a->n_inputs;
    spec.ref_path = a->ref;
    spec.ref_entry = a->ref_entry;
    lim.cpu_seconds = (unsigned)a->cpu_s;
    lim.memory_mib = (unsigned)a->memory_mib;
    lim.wall_ms = (unsigned)(a->timeout_s * 1000);
    lim.max_result_bytes = ((size_t)a->memory_mib << 20) * 2;

    if (sim_check_evaluate(&lim, &spec, &ev, &err) != KF_OK) {
        fprintf(stderr, "kforge-sim run: %s\n", err.msg);
        status = EXIT_KERNEL;
        goto out;
    }
    ev_done = true;

    kf_buf_addf(&text, "kforge-sim run %s:%s on %s", a->kernel, a->entry, a->target);
    for (int g = 0; g < 3 && a->grid[g]; g++)
        kf_buf_addf(&text, "%s%d", g ? "x" : " grid ", a->grid[g]);
    kf_buf_addf(&text, "%s\n  sandbox: %s, %.2f s wall, %.2f s CPU, %.0f MiB peak\n",
                a->no_numerics ? " (no numerics)" : "", ev.sb.isolation, ev.sb.wall_seconds,
                ev.sb.cpu_seconds, (double)ev.sb.max_rss_kib / 1024.0);
    cJSON_AddStringToObject(doc, "kernel", a->kernel);
    cJSON_AddStringToObject(doc, "entry", a->entry);
    cJSON_AddStringToObject(doc, "target", a->target);
    cJSON *sb = cJSON_AddObjectToObject(doc, "sandbox");
    cJSON_AddStringToObject(sb, "status", sim_sandbox_status_name(ev.sb.status));
    cJSON_AddStringToObject(sb, "reason", ev.sb.reason);
    cJSON_AddStringToObject(sb, "isolation", ev.sb.isolation);
    cJSON_AddNumberToObject(sb, "wall_seconds", ev.sb.wall_seconds);
    cJSON_AddNumberToObject(sb, "cpu_seconds", ev.sb.cpu_seconds);
    cJSON_AddNumberToObject(sb, "max_rss_kib", (double)ev.sb.max_rss_kib);
    cJSON_AddNumberToObject(doc, "kernel_seconds", ev.kernel_seconds);

    if (!ev.kernel_ok) {
        cJSON *e = cJSON_AddObjectToObject(doc, "error");
        cJSON_AddStringToObject(e, "message", ev.error);
        if (ev.serr.code != SIM_E_NONE) {
            cJSON_AddStringToObject(e, "code", sim_error_name(ev.serr.code));
            cJSON_AddStringToObject(e, "file", ev.serr.file);
            cJSON_AddNumberToObject(e, "line", ev.serr.line);
            cJSON_AddStringToObject(e, "api", ev.serr.api);
            cJSON_AddStringToObject(e, "values", ev.serr.values);
            cJSON_AddStringToObject(e, "rule", sim_error_rule(ev.serr.code));
        }
        kf_buf_addf(&text, "error: %s\n", ev.error[0] ? ev.error : ev.sb.reason);
        status = EXIT_KERNEL;
        goto report;
    }

    /* outputs */
    jout = cJSON_AddArrayToObject(doc, "outputs");
    kf_buf_adds(&text, "  outputs:\n");
    for (size_t i = 0; i < ev.n_outputs; i++) {
        const sim_array *o = &ev.outputs[i];
        char fname[80], shp[96];
        uint64_t shape[8];
        stats st = array_stats(o);
        file_name(o->name, i, fname, sizeof(fname));
        for (size_t k = 0; k < i; k++)           /* two outputs with one name */
            if (strcmp(ev.outputs[k].name, o->name) == 0)
                snprintf(fname, sizeof(fname), "out%zu", i);
        char *path = kf_asprintf("%s/%s.npy", a->out_dir, fname);
        for (int d = 0; d < o->ndim; d++)
            shape[d] = (uint64_t)o->shape[d];
        if (sim_npy_write(path, o->dtype, o->ndim, shape, o->data,
                          a->keep_dtype ? SIM_NPY_KEEP_DTYPE : 0, &err) != KF_OK) {
            fprintf(stderr, "kforge-sim run: %s\n", err.msg);
            status = EXIT_USAGE;
        }
        sim_check_format_shape(o, shp, sizeof(shp));
        kf_buf_addf(&text, "    %-12s %-14s %-9s min %-11.5g max %-11.5g mean %-11.5g -> %s\n",
                    fname, shp, sim_dtype_name(o->dtype), st.min, st.max, st.mean, path);
        if (st.nan || st.inf)
            kf_buf_addf(&text, "    %-12s %llu NaN, %llu Inf (NaN: elements never written?)\n", "",
                        (unsigned long long)st.nan, (unsigned long long)st.inf);
        cJSON *jo = cJSON_CreateObject();
        cJSON_AddStringToObject(jo, "name", fname);
        cJSON_AddItemToObject(jo, "shape", shape_json(o));
        cJSON_AddStringToObject(jo, "dtype", sim_dtype_name(o->dtype));
        cJSON_AddNumberToObject(jo, "min", st.min);
        cJSON_AddNumberToObject(jo, "max", st.max);
        cJSON_AddNumberToObject(jo, "mean", st.mean);
        cJSON_AddNumberToObject(jo, "nan", (double)st.nan);
        cJSON_AddNumberToObject(jo, "inf", (double)st.inf);
        cJSON_AddStringToObject(jo, "file", path);
        cJSON_AddItemToArray(jout, jo);
        free(path);
    }
    kf_buf_addf(&text, "  instructions: %llu (", (unsigned long long)ev.insns);
    cJSON *ji = cJSON_AddObjectToObject(doc, "instructions");
    cJSON_AddNumberToObject(ji, "total", (double)ev.insns);
    for (int k = 0; k < SIM_ENG__COUNT; k++) {
        kf_buf_addf(&text, "%s%s %llu", k ? ", " : "", sim_engine_name((sim_engine)k),
                    (unsigned long long)ev.by_engine[k]);
        cJSON_AddNumberToObject(ji, sim_engine_name((sim_engine)k), (double)ev.by_engine[k]);
    }
    kf_buf_addf(&text, ")\n  DMA: %llu transfers, %.3f MiB; %.3g FLOPs; kernel %.3f s\n",
                (unsigned long long)ev.dma_count, (double)ev.dma_bytes / 1048576.0, (double)ev.flops,
                ev.kernel_seconds);
    cJSON *jd = cJSON_AddObjectToObject(doc, "dma");
    cJSON_AddNumberToObject(jd, "count", (double)ev.dma_count);
    cJSON_AddNumberToObject(jd, "bytes", (double)ev.dma_bytes);
    cJSON_AddNumberToObject(doc, "flops", (double)ev.flops);

    if (a->ref) {
        if (ev.ref_failed) {
            kf_buf_addf(&text, "error: %s\n", ev.ref_error);
            cJSON_AddStringToObject(doc, "ref_error", ev.ref_error);
            status = EXIT_USAGE;
            goto report;
        }
        kf_buf_addf(&text, "  check against %s:%s\n", a->ref, a->ref_entry ? a->ref_entry : a->entry);
        jchk = cJSON_AddArrayToObject(doc, "check");
        if (ev.n_refs != ev.n_outputs) {
            kf_buf_addf(&text, "    the kernel returned %zu outputs, the reference %zu\n", ev.n_outputs,
                        ev.n_refs);
            status = EXIT_MISMATCH;
        }
        for (size_t i = 0; i < ev.n_outputs && i < ev.n_refs; i++) {
            sim_check_tol tol = sim_check_default_tol(ev.outputs[i].dtype);
            sim_check_cmp c;
            char at[96], fname[80];
            if (a->rtol >= 0)
                tol.rtol = a->rtol;
            if (a->atol >= 0)
                tol.atol = a->atol;
            sim_check_compare(&ev.outputs[i], &ev.refs[i], tol, &c);
            file_name(ev.outputs[i].name, i, fname, sizeof(fname));
            kf_buf_addf(&text, "    %-12s %s  %s\n", fname, c.pass ? "PASS" : "FAIL", c.msg);
            if (!c.pass)
                status = EXIT_MISMATCH;
            sim_check_format_index(&ev.outputs[i], c.worst, at, sizeof(at));
            cJSON *jc = cJSON_CreateObject();
            cJSON_AddStringToObject(jc, "name", fname);
            cJSON_AddBoolToObject(jc, "pass", c.pass);
            cJSON_AddNumberToObject(jc, "elements", (double)c.count);
            cJSON_AddNumberToObject(jc, "mismatches", (double)c.bad);
            cJSON_AddNumberToObject(jc, "nan", (double)c.got_nan);
            cJSON_AddNumberToObject(jc, "inf", (double)c.got_inf);
            cJSON_AddNumberToObject(jc, "max_abs_err", c.max_abs);
            cJSON_AddNumberToObject(jc, "max_rel_err", c.max_rel);
            cJSON_AddStringToObject(jc, "worst_index", at);
            cJSON_AddNumberToObject(jc, "rtol", tol.rtol);
            cJSON_AddNumberToObject(jc, "atol", tol.atol);
            cJSON_AddStringToObject(jc, "message", c.msg);
            cJSON_AddItemToArray(jchk, jc);
        }
        kf_buf_addf(&text, "result: %s\n", status == EXIT_PASS ? "PASS" : "FAIL");
    }

report:
    if (ev_done && ev.sb.log && ev.sb.log[0]) {
        cJSON_AddStringToObject(doc, "log", ev.sb.log);
        kf_buf_addf(&text, "  kernel output (last %d bytes kept):\n%s%s", SIM_SANDBOX_LOG_TAIL, ev.sb.log,
                    ev.sb.log[strlen(ev.sb.log) - 1] == '\n' ? "" : "\n");
    }
    cJSON_AddNumberToObject(doc, "exit_code", status);
    cJSON_AddStringToObject(doc, "status", status == EXIT_PASS ? (a->ref ? "pass" : "ok")
                                           : status == EXIT_MISMATCH ? "mismatch"
                                           : status == EXIT_KERNEL ? "kernel_error" : "usage_error");
    if (a->json) {
        char *s = cJSON_Print(doc);
        puts(s);
        free(s);
    } else {
        fputs(text.data, status == EXIT_KERNEL ? stderr : stdout);
    }
out:
    if (ev_done)
        sim_eval_release(&ev);
    for (size_t i = 0; i < a->n_inputs; i++)
        free(inputs[i].data);
    free(inputs);
    cJSON_Delete(doc);
    kf_buf_release(&text);
    return status;
}

static int cmd_run(int argc, char **argv)
{
    enum { O_ENTRY = 256, O_TARGET, O_INPUT, O_GRID, O_KWARGS, O_OUTDIR, O_CHECK, O_REFENTRY,
           O_NONUM, O_TIMEOUT, O_CPU, O_MEMORY, O_JSON, O_KEEP, O_SAVE, O_RTOL, O_ATOL, O_HELP,
           O_ARG, O_PATH, O_NOSTUBS };
    static const struct option opts[] = {
        { "entry", required_argument, NULL, O_ENTRY },     { "target", required_argument, NULL, O_TARGET },
        { "input", required_argument, NULL, O_INPUT },     { "grid", required_argument, NULL, O_GRID },
        { "kwargs", required_argument, NULL, O_KWARGS },   { "output-dir", required_argument, NULL, O_OUTDIR },
        { "check", required_argument, NULL, O_CHECK },     { "ref-entry", required_argument, NULL, O_REFENTRY },
        { "no-numerics", no_argument, NULL, O_NONUM },     { "timeout", required_argument, NULL, O_TIMEOUT },
        { "cpu", required_argument, NULL, O_CPU },         { "memory", required_argument, NULL, O_MEMORY },
        { "json", no_argument, NULL, O_JSON },             { "keep-dtype", no_argument, NULL, O_KEEP },
        { "save-inputs", no_argument, NULL, O_SAVE },      { "rtol", required_argument, NULL, O_RTOL },
        { "atol", required_argument, NULL, O_ATOL },       { "help", no_argument, NULL, O_HELP },
        { "arg", required_argument, NULL, O_ARG },         { "path", required_argument, NULL, O_PATH },
        { "no-stubs", no_argument, NULL, O_NOSTUBS },
        { NULL, 0, NULL, 0 },
    };
    run_args a;
    int c, rc;
    kf_err err = KF_ERR_INIT;

    memset(&a, 0, sizeof(a));
    a.target = "trn2";
    a.out_dir = "sim-out";
    a.rtol = a.atol = -1;
    a.cpu_s = -1;
    a.inputs = kf_calloc((size_t)argc + 1, sizeof(char *));
    a.slots = kf_calloc((size_t)argc + 1, sizeof(*a.slots));
    if (kf_config_load(&err) != KF_OK) {
        fprintf(stderr, "kforge-sim: %s\n", err.msg);
        free(a.inputs);
        free(a.slots);
        return EXIT_USAGE;
    }
    a.timeout_s = kf_config_int(KF_CFG_SIM_TIMEOUT_S);
    a.memory_mib = kf_config_int(KF_CFG_SIM_MEMORY_MIB);

    optind = 1;
    opterr = 0;
    rc = -1;
    while (rc < 0 && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case O_ENTRY: a.entry = optarg; break;
        case O_TARGET: a.target = optarg; break;
        case O_INPUT:
            a.inputs[a.n_inputs++] = optarg;
            a.slots[a.n_slots].name = optarg;
            a.slots[a.n_slots++].json = NULL;
            break;
        case O_ARG: {
            const char *eq = strchr(optarg, '=');
            cJSON *v = eq ? cJSON_Parse(eq + 1) : NULL;
            if (!eq || eq == optarg)
                rc = usage_error("--arg '%s' must look like NAME=JSON, e.g. tile=[128, 512]", optarg);
            else if (!v)
                rc = usage_error("--arg '%s': the value is not JSON (a string needs quotes: "
                                 "name='\"text\"')", optarg);
            cJSON_Delete(v);
            a.slots[a.n_slots].name = optarg;
            a.slots[a.n_slots++].json = eq ? eq + 1 : optarg;
            a.any_arg = true;
            break;
        }
        case O_PATH: {
            struct stat st;
            if (a.n_paths == SIM_RUN_MAX_PATHS)
                rc = usage_error("--path '%s': at most 8 import roots", optarg);
            else if (stat(optarg, &st) < 0 || !S_ISDIR(st.st_mode))
                rc = usage_error("--path '%s' is not a folder", optarg);
            else
                a.paths[a.n_paths++] = optarg;
            break;
        }
        case O_NOSTUBS: a.no_stubs = true; break;
        case O_GRID:
            if (parse_grid(optarg, a.grid) < 0)
                rc = usage_error("--grid '%s' must look like 2x4 (1 to 3 positive sizes)", optarg);
            break;
        case O_KWARGS: {
            cJSON *k = cJSON_Parse(optarg);
            if (!cJSON_IsObject(k))
                rc = usage_error("--kwargs '%s' must be a JSON object, e.g. '{\"TILE_F\": 512}'", optarg);
            cJSON_Delete(k);
            a.kwargs = optarg;
            break;
        }
        case O_OUTDIR: a.out_dir = optarg; break;
        case O_CHECK: a.ref = optarg; break;
        case O_REFENTRY: a.ref_entry = optarg; break;
        case O_NONUM: a.no_numerics = true; break;
        case O_TIMEOUT:
            if (parse_long(optarg, 1, 86400, &a.timeout_s) < 0)
                rc = usage_error("--timeout '%s' must be whole seconds, 1..86400", optarg);
            break;
        case O_CPU:
            if (parse_long(optarg, 1, 86400, &a.cpu_s) < 0)
                rc = usage_error("--cpu '%s' must be whole seconds, 1..86400", optarg);
            break;
        case O_MEMORY:
            if (parse_long(optarg, 64, 1048576, &a.memory_mib) < 0)
                rc = usage_error("--memory '%s' must be MiB, 64..1048576", optarg);
            break;
        case O_JSON: a.json = true; break;
        case O_KEEP: a.keep_dtype = true; break;
        case O_SAVE: a.save_inputs = true; break;
        case O_RTOL: case O_ATOL: {
            double v = strtod(optarg, &end);
            if (end == optarg || *end || !(v >= 0) || !isfinite(v))
                rc = usage_error("tolerance '%s' must be a number >= 0", optarg);
            else if (c == O_RTOL)
                a.rtol = v;
            else
                a.atol = v;
            break;
        }
        case O_HELP:
            fputs(run_usage, stdout);
            rc = EXIT_PASS;
            break;
        default:
            rc = usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
            break;
        }
    }
    if (rc < 0) {
        if (optind == argc - 1)
            a.kernel = argv[optind];
        if (!a.kernel)
            rc = usage_error("%s", optind < argc - 1 ? "give exactly one KERNEL.py" : "give the KERNEL.py to run");
        else if (!a.entry)
            rc = usage_error("%s", "--entry NAME is required (the kernel function to run)");
        else if (a.ref_entry && !a.ref)
            rc = usage_error("%s", "--ref-entry needs --check REF.py");
    }
    if (rc < 0) {
        struct stat st;
        if (stat(a.kernel, &st) < 0 || !S_ISREG(st.st_mode))
            rc = usage_error("cannot read kernel file '%s'", a.kernel);
        else if (a.ref && (stat(a.ref, &st) < 0 || !S_ISREG(st.st_mode)))
            rc = usage_error("cannot read reference file '%s'", a.ref);
    }
    if (rc < 0) {
        if (a.cpu_s < 0)
            a.cpu_s = a.timeout_s;
        rc = do_run(&a);
    }
    free(a.inputs);
    free(a.slots);
    return rc;
}

int main(int argc, char **argv)
{
    const sim_cmd *c;

    kf_log_init("sim", getenv("KFORGE_LOG_LEVEL"));
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        print_main_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : EXIT_PASS;
    }
    c = find_cmd(argv[1]);
    if (!c) {
        fprintf(stderr, "kforge-sim: no command '%s'\n\n", argv[1]);
        print_main_usage(stderr);
        return EXIT_USAGE;
    }
    return c->fn(argc - 1, argv + 1);
}
