/*
 * sim_profile_cli — `kforge-sim profile`; see sim_profile_cli.h.
 */
#include "sim_profile_cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kf_alloc.h"
#include "kf_fs.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "sim_input.h"
#include "sim_profile.h"
#include "sim_run.h"
#include "sim_sandbox.h"
#include "sim_trace.h"

enum { PCLI_OK = 0, PCLI_KERNEL = 2, PCLI_USAGE = 3, PCLI_MAX_INPUTS = 64, PCLI_MAX_ARGS = 128 };

const char sim_profile_cli_usage[] =
    "usage: kforge-sim profile KERNEL.py --entry NAME [options]\n"
    "\n"
    "Time one NKI kernel on a target's timing model and say why it is slow:\n"
    "summary (neuron-explorer field names), bounds (compute, memory, necessary IO,\n"
    "pipeline), ranked findings with their source lines, busiest lines.\n"
    "Writes DIR/profile.json, DIR/instructions.json and DIR/trace.json (open the\n"
    "trace in https://ui.perfetto.dev or chrome://tracing).\n"
    "\n"
    "  --entry NAME          kernel function (required)\n"
    "  --target T            trn1, inf2, trn2 (default), trn3 or any sim/targets/T.json\n"
    "  --input SPEC          an array argument, as for `kforge-sim run`\n"
    "                        (NAME=FILE.npy[:DTYPE] or NAME=shape:4096x512:bf16[:seed=N])\n"
    "  --arg NAME=JSON       a non-array argument (number, tuple as [..], object as {..});\n"
    "                        --input and --arg give the positional arguments in order\n"
    "  --grid G0[xG1[xG2]]   SPMD launch grid\n"
    "  --kwargs JSON         keyword arguments (tunables); a key may name a positional\n"
    "                        parameter --input/--arg leave out\n"
    "  --path DIR            an import root, read-only in the sandbox (as for run)\n"
    "  --no-stubs            no stubs for absent test-harness libraries (as for run)\n"
    "  --output-dir DIR      where the JSON files go (default: sim-profile)\n"
    "  --numerics            also compute values (default: timing-only; same times)\n"
    "  --timeout S           wall-clock limit (default KFORGE_SIM_TIMEOUT_S)\n"
    "  --memory MiB          memory limit (default KFORGE_SIM_MEMORY_MIB)\n"
    "  --json                print the profile document instead of the screen\n"
    "\n"
    "Exit status: 0 profiled, 2 kernel error, 3 usage error.\n";

typedef struct pcli_args {
    const char *kernel, *entry, *target, *out_dir, *kwargs;
    const char *inputs[PCLI_MAX_INPUTS];
    size_t      n_inputs;
    sim_run_arg slots[PCLI_MAX_ARGS];   /* --input (json NULL) and --arg, in order */
    size_t      n_slots;
    int         any_arg, no_stubs;
    const char *paths[SIM_RUN_MAX_PATHS + 1];
    size_t      n_paths;
    int         grid[3];
    int         numerics, json;
    long        timeout_s, memory_mib;
} pcli_args;

typedef struct pcli_child {
    const pcli_args *a;
    sim_array       *inputs;
} pcli_child;


static kf_code pcli_write_text(const char *path, const char *text, kf_err *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return kf_err_set(err, KF_IO, "cannot write '%s': %s", path, strerror(errno));
    fputs(text, f);
    if (fclose(f) != 0)
        return kf_err_set(err, KF_IO, "writing '%s' failed: %s", path, strerror(errno));
    return KF_OK;
}

/* Child side: run, time, send {"profile", "trace", "instructions",
 * "screen"}; the parent writes the files (the child sees none of the
 * caller's folders). */
static kf_code pcli_child_fn(void *arg, sim_sandbox_out *out, kf_err *err)
{
    pcli_child *c = arg;
    const pcli_args *a = c->a;
    sim_record rec;
    sim_run_opts o;
    sim_error serr;
    sim_array *outs = NULL;
    size_t n_outs = 0;
    sim_target tgt;
    sim_profile *p = NULL;
    char *json = NULL, *screen = NULL, *trace = NULL, *insns = NULL;
    size_t screen_len = 0, trace_len = 0, insns_len = 0;
    kf_code rc;

    sim_record_init(&rec, a->target);
    memset(&o, 0, sizeof(o));
    o.source_path = a->kernel;
    o.entry = a->entry;
    o.target = a->target;
    memcpy(o.grid, a->grid, sizeof(o.grid));
    o.numerics = a->numerics != 0;
    o.kwargs_json = a->kwargs;
    if (a->any_arg) {
        o.args = a->slots;
        o.n_args = a->n_slots;
    }
    o.paths = a->n_paths ? a->paths : NULL;
    o.no_stubs = a->no_stubs != 0;
    rc = sim_target_load(a->target, NULL, &tgt, err);
    if (rc)
        goto out;
    rc = sim_run_kernel(&o, c->inputs, a->n_inputs, &outs, &n_outs, &rec, &serr, err);
    if (rc)
        goto out;
    rc = sim_profile_build(&rec, &tgt, &p, err);
    if (rc)
        goto out;
    json = sim_profile_json(p);
    FILE *tf = open_memstream(&trace, &trace_len);
    rc = sim_trace_write(p, tf, err);
    fclose(tf);
    if (rc)
        goto out;
    FILE *inf = open_memstream(&insns, &insns_len);
    rc = sim_profile_write_instructions(p, inf, err);
    fclose(inf);
    if (rc)
        goto out;
    FILE *m = open_memstream(&screen, &screen_len);
    sim_profile_print(m, p);
    fclose(m);
    {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddItemToObject(doc, "profile", cJSON_Parse(json));
        cJSON_AddStringToObject(doc, "screen", screen);
        cJSON_AddStringToObject(doc, "profile_text", json);
        cJSON_AddStringToObject(doc, "trace", trace);
        cJSON_AddStringToObject(doc, "instructions", insns);
        char *txt = cJSON_PrintUnformatted(doc);
        sim_sandbox_send_json(out, txt);
        free(txt);
        cJSON_Delete(doc);
    }
out:
    for (size_t i = 0; i < n_outs; i++)
        sim_array_release(&outs[i]);
    free(outs);
    free(json);
    free(trace);
    free(insns);
    free(screen);
    sim_profile_free(p);
    sim_record_release(&rec);
    return rc;
}

static int pcli_parse_grid(const char *s, int g[3])
{
    int n = sscanf(s, "%dx%dx%d", &g[0], &g[1], &g[2]);
    if (n < 1)
        return -1;
    for (int i = 0; i < n; i++)
        if (g[i] < 1 || g[i] > 1024)
            return -1;
    for (int i = n; i < 3; i++)
        g[i] = 0;   /* not given: the grid's rank is n (nl.program_ndim), as for run */
    return 0;
}

static int pcli_parse(int argc, char **argv, pcli_args *a)
{
    enum { O_ENTRY = 256, O_TARGET, O_INPUT, O_GRID, O_KWARGS, O_OUT, O_NUM, O_TIMEOUT, O_MEM,
           O_JSON, O_HELP, O_ARG, O_PATH, O_NOSTUBS };
    static const struct option opts[] = {
        { "entry", required_argument, NULL, O_ENTRY },   { "target", required_argument, NULL, O_TARGET },
        { "input", required_argument, NULL, O_INPUT },   { "grid", required_argument, NULL, O_GRID },
        { "kwargs", required_argument, NULL, O_KWARGS }, { "output-dir", required_argument, NULL, O_OUT },
        { "numerics", no_argument, NULL, O_NUM },        { "timeout", required_argument, NULL, O_TIMEOUT },
        { "memory", required_argument, NULL, O_MEM },    { "json", no_argument, NULL, O_JSON },
        { "help", no_argument, NULL, O_HELP },           { "arg", required_argument, NULL, O_ARG },
        { "path", required_argument, NULL, O_PATH },     { "no-stubs", no_argument, NULL, O_NOSTUBS },
        { NULL, 0, NULL, 0 },
    };
    int c;
    char *end;

    memset(a, 0, sizeof(*a));
    a->target = "trn2";
    a->out_dir = "sim-profile";
    a->timeout_s = kf_config_int(KF_CFG_SIM_TIMEOUT_S);
    a->memory_mib = kf_config_int(KF_CFG_SIM_MEMORY_MIB);
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_ENTRY: a->entry = optarg; break;
        case O_TARGET: a->target = optarg; break;
        case O_INPUT:
            if (a->n_inputs == PCLI_MAX_INPUTS || a->n_slots == PCLI_MAX_ARGS) {
                fprintf(stderr, "kforge-sim profile: at most %d --input\n", PCLI_MAX_INPUTS);
                return -1;
            }
            a->inputs[a->n_inputs++] = optarg;
            a->slots[a->n_slots].name = optarg;
            a->slots[a->n_slots++].json = NULL;
            break;
        case O_ARG: {
            const char *eq = strchr(optarg, '=');
            cJSON *v = eq && eq != optarg ? cJSON_Parse(eq + 1) : NULL;
            if (!v || a->n_slots == PCLI_MAX_ARGS) {
                fprintf(stderr, "kforge-sim profile: --arg '%s' must look like NAME=JSON (a string needs "
                        "quotes), at most %d arguments\n", optarg, PCLI_MAX_ARGS);
                cJSON_Delete(v);
                return -1;
            }
            cJSON_Delete(v);
            a->slots[a->n_slots].name = optarg;
            a->slots[a->n_slots++].json = eq + 1;
            a->any_arg = 1;
            break;
        }
        case O_PATH: {
            struct stat st;
            if (a->n_paths == SIM_RUN_MAX_PATHS || stat(optarg, &st) < 0 || !S_ISDIR(st.st_mode)) {
                fprintf(stderr, "kforge-sim profile: --path '%s' is not a folder (at most %d)\n", optarg,
                        SIM_RUN_MAX_PATHS);
                return -1;
            }
            a->paths[a->n_paths++] = optarg;
            break;
        }
        case O_NOSTUBS: a->no_stubs = 1; break;
        case O_GRID:
            if (pcli_parse_grid(optarg, a->grid) < 0) {
                fprintf(stderr, "kforge-sim profile: --grid takes G0[xG1[xG2]] with 1..1024 each\n");
                return -1;
            }
            break;
        case O_KWARGS: a->kwargs = optarg; break;
        case O_OUT: a->out_dir = optarg; break;
        case O_NUM: a->numerics = 1; break;
        case O_JSON: a->json = 1; break;
        case O_TIMEOUT:
            a->timeout_s = strtol(optarg, &end, 10);
            if (*end || a->timeout_s < 1 || a->timeout_s > 86400) {
                fprintf(stderr, "kforge-sim profile: --timeout takes seconds, 1..86400\n");
                return -1;
            }
            break;
        case O_MEM:
            a->memory_mib = strtol(optarg, &end, 10);
            if (*end || a->memory_mib < 64 || a->memory_mib > 1048576) {
                fprintf(stderr, "kforge-sim profile: --memory takes MiB, 64..1048576\n");
                return -1;
            }
            break;
        case O_HELP: fputs(sim_profile_cli_usage, stdout); return 1;
        default: fputs(sim_profile_cli_usage, stderr); return -1;
        }
    }
    if (optind != argc - 1 || !a->entry) {
        fprintf(stderr, "kforge-sim profile: give one KERNEL.py and --entry NAME\n\n%s",
                sim_profile_cli_usage);
        return -1;
    }
    a->kernel = argv[optind];
    return 0;
}

int sim_profile_cli_main(int argc, char **argv)
{
    pcli_args a, real;
    char *real_kernel = NULL, *real_roots[SIM_RUN_MAX_PATHS] = { NULL };
    sim_array *inputs = NULL;
    sim_sandbox_limits lim;
    sim_sandbox_result res;
    pcli_child child;
    sim_target tgt;
    kf_err err = KF_ERR_INIT;
    int status = PCLI_OK, pr;

    memset(&res, 0, sizeof(res));
    if (kf_config_load(&err) != KF_OK) {
        fprintf(stderr, "kforge-sim profile: %s\n", err.msg);
        return PCLI_USAGE;
    }
    pr = pcli_parse(argc, argv, &a);
    if (pr != 0)
        return pr > 0 ? PCLI_OK : PCLI_USAGE;
    /* a bad target is a usage error, found before any user code runs */
    if (sim_target_load(a.target, NULL, &tgt, &err) != KF_OK) {
        fprintf(stderr, "kforge-sim profile: %s\n", err.msg);
        return PCLI_USAGE;
    }
    inputs = kf_calloc(a.n_inputs + 1, sizeof(*inputs));
    for (size_t i = 0; i < a.n_inputs; i++) {
        if (sim_input_array(a.inputs[i], (uint64_t)a.memory_mib << 20, &inputs[i], &err) != KF_OK) {
            fprintf(stderr, "kforge-sim profile: %s\n", err.msg);
            status = PCLI_USAGE;
            goto out;
        }
    }
    if (kf_mkdir_p(a.out_dir, 0755) < 0) {
        fprintf(stderr, "kforge-sim profile: cannot create output folder '%s': %s\n", a.out_dir,
                strerror(errno));
        status = PCLI_USAGE;
        goto out;
    }
    memset(&lim, 0, sizeof(lim));
    lim.cpu_seconds = (unsigned)a.timeout_s;
    lim.memory_mib = (unsigned)a.memory_mib;
    lim.wall_ms = (unsigned)(a.timeout_s * 1000);
    lim.max_result_bytes = 64u << 20;
    /* all the evaluation may read of the machine: the kernel and its import roots */
    const char *files[SIM_RUN_MAX_PATHS + 2] = { a.kernel };
    for (size_t i = 0; i < a.n_paths; i++)
        files[i + 1] = a.paths[i];
    lim.ro_paths = files;
    /* the child opens them where the sandbox mounts them */
    real = a;
    real.kernel = real_kernel = sim_sandbox_real_path(a.kernel);
    for (size_t i = 0; i < a.n_paths; i++)
        real.paths[i] = real_roots[i] = sim_sandbox_real_path(a.paths[i]);
    child.a = &real;
    child.inputs = inputs;
    if (sim_sandbox_run(&lim, pcli_child_fn, &child, &res, &err) != KF_OK) {
        fprintf(stderr, "kforge-sim profile: %s\n", err.msg);
        status = PCLI_KERNEL;
        goto out;
    }
    if (res.status != SIM_SB_OK || !res.json) {
        fprintf(stderr, "kforge-sim profile: the kernel failed (%s): %s\n",
                sim_sandbox_status_name(res.status), res.reason[0] ? res.reason : "no result");
        if (res.log && *res.log)
            fprintf(stderr, "%s", res.log);
        status = PCLI_KERNEL;
        goto out;
    }
    {
        cJSON *doc = cJSON_Parse(res.json);
        cJSON *prof = cJSON_GetObjectItem(doc, "profile");
        cJSON *screen = cJSON_GetObjectItem(doc, "screen");
        static const char *const docs[][2] = { { "profile_text", "profile.json" },
                                                { "trace", "trace.json" },
                                                { "instructions", "instructions.json" } };
        for (size_t i = 0; i < 3 && status == PCLI_OK; i++) {
            cJSON *t = cJSON_GetObjectItem(doc, docs[i][0]);
            char *path = kf_asprintf("%s/%s", a.out_dir, docs[i][1]);
            if (!cJSON_IsString(t) || pcli_write_text(path, t->valuestring, &err) != KF_OK) {
                fprintf(stderr, "kforge-sim profile: %s\n",
                        cJSON_IsString(t) ? err.msg : "the child sent a malformed profile");
                status = cJSON_IsString(t) ? PCLI_USAGE : PCLI_KERNEL;
            }
            free(path);
        }
        if (status != PCLI_OK) {
        } else if (a.json && prof) {
            char *txt = cJSON_Print(prof);
            puts(txt);
            free(txt);
        } else if (cJSON_IsString(screen)) {
            fputs(screen->valuestring, stdout);
            printf("files: %s/profile.json %s/instructions.json %s/trace.json\n", a.out_dir,
                   a.out_dir, a.out_dir);
        } else {
            fprintf(stderr, "kforge-sim profile: the child sent a malformed profile\n");
            status = PCLI_KERNEL;
        }
        cJSON_Delete(doc);
    }
out:
    free(real_kernel);
    for (size_t i = 0; i < SIM_RUN_MAX_PATHS; i++)
        free(real_roots[i]);
    if (inputs)
        for (size_t i = 0; i < a.n_inputs; i++)
            free(inputs[i].data);
    free(inputs);
    sim_sandbox_result_release(&res);
    return status;
}
