/*
 * kforge-sim — run NKI kernels on kforge's NeuronCore simulator.
 *
 * Subcommands live in one table (cmds[]): a name, a one-line summary, a
 * usage text and a function taking the remaining argv.  This file parses
 * the flags and wires the parts: `run` is sim_run_cli_run (sim_run_cli.h),
 * which evaluates one kernel in a sandboxed child, writes its outputs as
 * .npy, prints a one-screen summary (or --json) and, with --check, compares
 * every output with a NumPy reference; `profile` is sim_profile_cli_main.
 *
 * Exit codes: 0 ran (and passed --check), 1 an output does not match the
 * reference, 2 the kernel failed (simulator error, crash, limit), 3 usage
 * error (bad options, unreadable input, broken reference file).
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kf_alloc.h"
#include "kf_config.h"
#include "kf_log.h"
#include "kf_num.h"
#include "sim_numerics.h"
#include "sim_profile_cli.h"
#include "sim_run_cli.h"

enum {
    EXIT_PASS = SIM_RUN_PASS,
    EXIT_MISMATCH = SIM_RUN_MISMATCH,
    EXIT_KERNEL = SIM_RUN_KERNEL,
    EXIT_USAGE = SIM_RUN_USAGE,
};

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
    "  --threads N           numerics threads: tile products and long elementwise ops are\n"
    "                        split across them, values identical for any N (default\n"
    "                        KFORGE_SIM_THREADS; 0 = the CPUs this process may use, at most 8)\n"
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

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "kforge-sim run: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(kforge-sim run --help lists the options)\n");
    return EXIT_USAGE;
}

static int parse_long(const char *s, long lo, long hi, long *v)
{
    return kf_num_long(s, lo, hi, v, NULL) == KF_OK ? 0 : -1;
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

static int cmd_run(int argc, char **argv)
{
    enum { O_ENTRY = 256, O_TARGET, O_INPUT, O_GRID, O_KWARGS, O_OUTDIR, O_CHECK, O_REFENTRY,
           O_NONUM, O_TIMEOUT, O_CPU, O_MEMORY, O_JSON, O_KEEP, O_SAVE, O_RTOL, O_ATOL, O_HELP,
           O_ARG, O_PATH, O_NOSTUBS, O_THREADS };
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
        { "no-stubs", no_argument, NULL, O_NOSTUBS },     { "threads", required_argument, NULL, O_THREADS },
        { NULL, 0, NULL, 0 },
    };
    sim_run_cli_args a;
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
    a.threads = kf_config_int(KF_CFG_SIM_THREADS);

    optind = 1;
    opterr = 0;
    rc = -1;
    while (rc < 0 && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
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
        case O_THREADS:
            if (parse_long(optarg, 0, SIMN_MAX_THREADS, &a.threads) < 0)
                rc = usage_error("--threads '%s' must be 0 (the CPUs available) to 8", optarg);
            break;
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
            double v = 0;
            if (kf_num_double(optarg, 0, HUGE_VAL, &v, NULL) != KF_OK)
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
        rc = sim_run_cli_run(&a);
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
