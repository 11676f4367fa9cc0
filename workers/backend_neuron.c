/*
 * backend_neuron — the `neuron` backend: profile, validate and optimize
 * (one evaluation, no tunables) jobs on a NeuronCore of this machine
 * (Trn/Inf with the Neuron SDK), through the device tools of
 * docs/neuron-backend.md:
 *
 *   KFORGE_NEURON_RUNNER   kforge's device runner: `health`, `versions`,
 *                          `compile` (the NKI standalone compile path with
 *                          KFORGE_NEURON_CC, NKI_DEBUG_INFO=1 for the source
 *                          map, NEURON_PLATFORM_TARGET_OVERRIDE=<target>;
 *                          keeps the NEFF) and `run` (loads the NEFF on
 *                          NEURON_RT_VISIBLE_CORES=KFORGE_NEURON_CORE, runs
 *                          it on .npy inputs, writes the outputs as .npy,
 *                          times warm-up and repeated runs);
 *   KFORGE_NEURON_EXPLORER `capture -n NEFF -s NTFF` and `view -n NEFF -s
 *                          NTFF --output-format summary-json`.
 *
 * One job:
 *   1. the device's health (`runner health`): a wedged device or runtime
 *      ends the attempt as retryable (KF_UNAVAILABLE) before anything runs,
 *      and the worker, which checks health between jobs
 *      (kf_backend.health), stops leasing until it is healthy again;
 *   2. compile for the job's target; a compile error is the simulator's
 *      kind of error (kn_map_compile_error: NCC_ code, file, line), not
 *      retryable;
 *   3. validate: for each of the 3 seeds of ka_validate_once, the seeded
 *      inputs (ka_eval_inputs, bit for bit the simulator path's) run on the
 *      device, and the outputs go to a sandboxed validation child that runs
 *      the NumPy reference on the same inputs and compares every element
 *      (ka_eval_run with out_in: same tolerances, NaN/Inf rules, checks);
 *   4. latency: 5 warm-up runs and KFORGE_NEURON_BENCH_ITERS timed runs of
 *      the first seed's inputs, percentiles p0..p100;
 *   5. profile: neuron-explorer capture, then view summary-json, mapped
 *      onto the simulator's profile document (kn_map_profile);
 *   6. artifacts: kernel.py, kernel.neff, profile.ntff, summary.json; the
 *      result's provenance names the compiler, runtime and driver versions,
 *      the NeuronCore and the NEFF's SHA-256;
 *   7. calibration: the simulator times the same kernel on the same inputs'
 *      shapes and target (a sandboxed timing evaluation, as the sim backend
 *      runs it), and the result's "calibration" holds the record of the
 *      device's numbers next to it (kn_calib), with the device's
 *      Instruction rows from `neuron-explorer view --output-format json`
 *      when the tool gives them; the API stores it (migration 0014).  When
 *      the simulator cannot time the kernel the job keeps its device
 *      numbers, without a record (a warning in the log).
 * A device tool that ends with the runner's "device unavailable" status
 * (75), is killed, or reaches KFORGE_NEURON_TIMEOUT_S while running on the
 * device means a wedged device: retryable.  The user's kernel is executed
 * only by the device tools, each under kn_tool's limits, and its reference
 * only in the sandbox (ka_eval).
 */
#include "kf_backend.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_jobprob.h"
#include "kf_log.h"
#include "kf_upload.h"
#include "kn_calib.h"
#include "kn_map.h"
#include "kn_tool.h"
#include "agent/ka_eval.h"
#include "agent/ka_iter.h"
#include "agent/ka_loop.h"
#include "sim/sim_check.h"
#include "sim/sim_npy.h"
#include "sim/sim_record.h"
#include "sim/sim_target.h"

enum {
    BN_SEEDS = 3,
    BN_WARMUP = 5,
    BN_EXIT_UNAVAILABLE = 75,      /* the runner's "device unavailable" (EX_TEMPFAIL) */
    BN_MAX_ARGS = 16 + 2 * KA_MAX_INPUTS,
    BN_ARTIFACT_MAX = 4 << 20,     /* a binary artifact, before base64 (the job frame is 16 MiB) */
};

static const char *const neuron_kinds[] = { "optimize", "profile", "validate", NULL };

typedef struct bn_job {
    const kf_job_payload   *job;
    const kf_backend_hooks *hooks;
    char                    dir[PATH_MAX];
    char                    core[16];
    unsigned                timeout_s;
    ka_problem              pb;
} bn_job;

static bool bn_cancelled(void *ctx)
{
    const bn_job *j = ctx;
    return j && j->hooks && j->hooks->cancelled && j->hooks->cancelled(j->hooks->ctx);
}

/* One device tool in the job's folder, with the Neuron environment. */
static kf_code bn_tool(bn_job *j, const char *const *argv, kn_tool_result *r, kf_err *err)
{
    /* the runner's two Python environments (nki and nrtpy cannot share
     * one), passed through from the worker's own environment when set */
    static const char *const pass[] = { "NEURON_RUNNER_NKI_PYTHON", "NEURON_RUNNER_NRTPY_PYTHON", NULL };
    char *env[8];
    int n = 0;
    kn_tool_opts o;
    kf_code rc;

    env[n++] = kf_asprintf("NEURON_RT_VISIBLE_CORES=%s", j ? j->core : "0");
    env[n++] = kf_asprintf("NEURON_PLATFORM_TARGET_OVERRIDE=%s", j ? j->job->target : "");
    env[n++] = kf_strdup("NKI_DEBUG_INFO=1");
    env[n++] = kf_asprintf("NEURON_CC=%s", kf_config_str(KF_CFG_NEURON_CC));
    env[n++] = kf_strdup("PYTHONDONTWRITEBYTECODE=1");
    for (int i = 0; pass[i]; i++) {
        const char *v = getenv(pass[i]);
        if (v && *v)
            env[n++] = kf_asprintf("%s=%s", pass[i], v);
    }
    env[n] = NULL;
    memset(&o, 0, sizeof(o));
    o.argv = argv;
    o.env = (const char *const *)env;
    o.cwd = j ? j->dir : "/";
    o.timeout_s = j ? j->timeout_s : 60;
    o.cancelled = bn_cancelled;
    o.ctx = j;
    rc = kn_tool_run(&o, r, err);
    for (int i = 0; env[i]; i++)
        free(env[i]);
    return rc;
}

/* The last non-empty line of a tool's stderr (its message), into buf. */
static const char *bn_tail(const char *text, char *buf, size_t len)
{
    const char *e = text ? text + strlen(text) : NULL, *b;
    size_t n;
    buf[0] = '\0';
    if (!e)
        return buf;
    while (e > text && (e[-1] == '\n' || e[-1] == ' '))
        e--;
    b = e;
    while (b > text && b[-1] != '\n')
        b--;
    n = (size_t)(e - b) < len - 1 ? (size_t)(e - b) : len - 1;
    memcpy(buf, b, n);
    buf[n] = '\0';
    return buf;
}

/* A device tool ended without doing its work: cancelled, the device
 * unusable (75, a kill, the time limit: retryable), or another failure. */
static kf_code bn_tool_failed(const char *what, const kn_tool_result *r, unsigned timeout_s, bool *retryable,
                              kf_err *err)
{
    char how[160], tail[400];
    bn_tail(r->err, tail, sizeof(tail));
    kn_tool_outcome(r, timeout_s, how, sizeof(how));
    *retryable = true;
    if (r->cancelled)
        return kf_err_set(err, KF_UNAVAILABLE, "the job stopped during %s (cancelled or lease lost)", what);
    if (r->exit_code == BN_EXIT_UNAVAILABLE || r->timed_out || r->signal)
        return kf_err_set(err, KF_UNAVAILABLE, "the Neuron device is not usable (%s: %s%s%s); another attempt will "
                          "run on a healthy worker", what, how, tail[0] ? ": " : "", tail);
    return kf_err_set(err, KF_INTERNAL, "%s failed (%s)%s%s", what, how, tail[0] ? ": " : "", tail);
}

/* `runner health`: KF_OK, or why the device cannot take a job. */
static kf_code bn_health_check(bn_job *j, char *why, size_t len)
{
    const char *argv[] = { kf_config_str(KF_CFG_NEURON_RUNNER), "health", "--core", j ? j->core : "0", NULL };
    kn_tool_result r;
    kf_err e = KF_ERR_INIT;
    char how[160], tail[400];

    if (bn_tool(j, argv, &r, &e) != KF_OK) {
        snprintf(why, len, "%s", e.msg);
        return KF_UNAVAILABLE;
    }
    if (r.exit_code == 0) {
        kn_tool_release(&r);
        return KF_OK;
    }
    snprintf(why, len, "%s health: %s%s%s", argv[0], kn_tool_outcome(&r, j ? j->timeout_s : 60, how, sizeof(how)),
             bn_tail(r.err, tail, sizeof(tail))[0] ? ": " : "", tail);
    kn_tool_release(&r);
    return KF_UNAVAILABLE;
}

static void bn_rmtree(const char *path);

/* The worker's between-jobs check (kf_backend.health): the configured
 * core, a short limit, a private folder as the runner's working folder,
 * HOME and TMPDIR (removed after). */
static bool neuron_health(const kf_backend *self, char *why, size_t len)
{
    static const kf_job_payload none; /* target "": no job yet, the machine's own */
    const char *tmp = getenv("TMPDIR");
    bn_job j;
    bool ok;
    (void)self;
    memset(&j, 0, sizeof(j));
    snprintf(j.core, sizeof(j.core), "%ld", kf_config_int(KF_CFG_NEURON_CORE));
    snprintf(j.dir, sizeof(j.dir), "%s/kforge-neuron-health-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(j.dir)) {
        snprintf(why, len, "cannot create a temporary folder for the health check: %s", strerror(errno));
        return false;
    }
    j.timeout_s = 60;
    j.job = &none;
    ok = bn_health_check(&j, why, len) == KF_OK;
    bn_rmtree(j.dir);
    return ok;
}

/* `runner versions` and `neuronx-cc --version` into the provenance
 * (best effort: a missing field says the tool did not tell). */
static void bn_versions(bn_job *j, cJSON *prov)
{
    const char *argv[] = { kf_config_str(KF_CFG_NEURON_RUNNER), "versions", NULL };
    kn_tool_result r;
    kf_err e = KF_ERR_INIT;
    cJSON *v;

    if (bn_tool(j, argv, &r, &e) != KF_OK)
        return;
    v = r.exit_code == 0 ? cJSON_Parse(r.out) : NULL;
    if (cJSON_IsObject(v)) {
        const char *keys[] = { "compiler", "runtime", "driver", NULL };
        for (int i = 0; keys[i]; i++) {
            const char *s = kf_jobprob_str(v, keys[i]);
            if (s)
                cJSON_AddStringToObject(prov, keys[i], s);
        }
    }
    cJSON_Delete(v);
    kn_tool_release(&r);
}

/* Input k of seed s: DIR/in<s>/<name>.npy. */
static void bn_input_path(const bn_job *j, int s, int k, char *buf, size_t len)
{
    snprintf(buf, len, "%s/in%d/%s.npy", j->dir, s, j->pb.inputs[k].name);
}

/* The seeded inputs of each seed as .npy files for the device. */
static kf_code bn_write_inputs(bn_job *j, const ka_eval_req *vr, kf_err *err)
{
    for (int s = 0; s < vr->n_seeds; s++) {
        char d[PATH_MAX + 16], p[PATH_MAX + 96];
        sim_array *in = NULL;
        kf_code rc;
        snprintf(d, sizeof(d), "%s/in%d", j->dir, s);
        if (mkdir(d, 0700) != 0 && errno != EEXIST)
            return kf_err_set(err, KF_IO, "cannot create %s: %s", d, strerror(errno));
        rc = ka_eval_inputs(&j->pb, vr->seeds[s], &in, err);
        for (int k = 0; rc == KF_OK && k < j->pb.n_inputs; k++) {
            uint64_t shp[KA_MAX_DIMS];
            for (int x = 0; x < in[k].ndim; x++)
                shp[x] = (uint64_t)in[k].shape[x];
            bn_input_path(j, s, k, p, sizeof(p));
            rc = sim_npy_write(p, in[k].dtype, in[k].ndim, shp, in[k].data, SIM_NPY_KEEP_DTYPE, err);
        }
        sim_check_arrays_free(in, (size_t)j->pb.n_inputs);
        if (rc)
            return rc;
    }
    return KF_OK;
}

/* argv += "--input NAME=PATH" for each input of seed s (kept in bufs). */
static int bn_add_inputs(const bn_job *j, int s, const char **argv, int n, char (*bufs)[PATH_MAX + 160])
{
    for (int k = 0; k < j->pb.n_inputs && n < BN_MAX_ARGS - 3; k++) {
        char p[PATH_MAX + 96];
        sim_dtype dt = j->pb.inputs[k].dtype;
        bn_input_path(j, s, k, p, sizeof(p));
        /* a '|V1' file does not say which fp8 it holds: the contract's :DTYPE */
        snprintf(bufs[k], PATH_MAX + 160, "%s=%s%s%s", j->pb.inputs[k].name, p,
                 dt == SIM_DT_FLOAT8_E4M3 || dt == SIM_DT_FLOAT8_E4M3FN || dt == SIM_DT_FLOAT8_E5M2 ? ":" : "",
                 dt == SIM_DT_FLOAT8_E4M3 || dt == SIM_DT_FLOAT8_E4M3FN || dt == SIM_DT_FLOAT8_E5M2
                     ? sim_dtype_name(dt) : "");
        argv[n++] = "--input";
        argv[n++] = bufs[k];
    }
    return n;
}

/* Compile: KF_OK with the NEFF at neff; a compile error as *cerr (the
 * caller reports it); a tool failure as an error. */
static kf_code bn_compile(bn_job *j, const char *neff_dir, cJSON **cerr, bool *retryable, kf_err *err)
{
    const char *argv[BN_MAX_ARGS];
    char bufs[KA_MAX_INPUTS][PATH_MAX + 160];
    kn_tool_result r;
    int n = 0;
    kf_code rc;

    *cerr = NULL;
    if (mkdir(neff_dir, 0700) != 0 && errno != EEXIST)
        return kf_err_set(err, KF_IO, "cannot create %s: %s", neff_dir, strerror(errno));
    argv[n++] = kf_config_str(KF_CFG_NEURON_RUNNER);
    argv[n++] = "compile";
    argv[n++] = "--kernel";
    argv[n++] = j->pb.source_path;
    argv[n++] = "--entry";
    argv[n++] = j->pb.entry;
    argv[n++] = "--target";
    argv[n++] = j->job->target;
    argv[n++] = "--out";
    argv[n++] = neff_dir;
    n = bn_add_inputs(j, 0, argv, n, bufs);
    argv[n] = NULL;
    rc = bn_tool(j, argv, &r, err);
    if (rc) {
        *retryable = true;
        return rc;
    }
    if (r.exit_code == 1) {
        /* the compiler's verdict on the kernel */
        kf_buf log = KF_BUF_INIT;
        kf_buf_adds(&log, r.err);
        kf_buf_adds(&log, "\n");
        kf_buf_adds(&log, r.out);
        *cerr = kn_map_compile_error(log.data, "kernel.py");
        kf_buf_release(&log);
    } else if (r.timed_out && !r.cancelled) {
        /* compiling touches no device: the kernel is too slow to compile */
        *cerr = cJSON_CreateObject();
        cJSON_AddStringToObject(*cerr, "code", "wall_limit");
        cJSON_AddStringToObject(*cerr, "message", "the compile reached KFORGE_NEURON_TIMEOUT_S");
    } else if (r.exit_code != 0) {
        rc = bn_tool_failed("the compile", &r, j->timeout_s, retryable, err);
    }
    kn_tool_release(&r);
    return rc;
}

/* One device run of seed s's inputs: outputs under DIR/out<s>/, their
 * paths from the runner's JSON report (*rep, caller frees); a kernel that
 * fails on the device gives *kerr (its error object). */
static kf_code bn_run(bn_job *j, const char *neff, int s, int warmup, int iters, cJSON **rep, cJSON **kerr,
                      bool *retryable, kf_err *err)
{
    const char *argv[BN_MAX_ARGS];
    char bufs[KA_MAX_INPUTS][PATH_MAX + 160], outdir[PATH_MAX + 16], w[16], it[16];
    kn_tool_result r;
    int n = 0;
    kf_code rc;

    *rep = *kerr = NULL;
    snprintf(outdir, sizeof(outdir), "%s/out%d", j->dir, s);
    if (mkdir(outdir, 0700) != 0 && errno != EEXIST)
        return kf_err_set(err, KF_IO, "cannot create %s: %s", outdir, strerror(errno));
    snprintf(w, sizeof(w), "%d", warmup);
    snprintf(it, sizeof(it), "%d", iters);
    argv[n++] = kf_config_str(KF_CFG_NEURON_RUNNER);
    argv[n++] = "run";
    argv[n++] = "--neff";
    argv[n++] = neff;
    argv[n++] = "--core";
    argv[n++] = j->core;
    argv[n++] = "--output-dir";
    argv[n++] = outdir;
    argv[n++] = "--warmup";
    argv[n++] = w;
    argv[n++] = "--iters";
    argv[n++] = it;
    n = bn_add_inputs(j, s, argv, n, bufs);
    argv[n] = NULL;
    rc = bn_tool(j, argv, &r, err);
    if (rc) {
        *retryable = true;
        return rc;
    }
    if (r.exit_code == 0) {
        *rep = cJSON_Parse(r.out);
        if (!cJSON_IsObject(*rep) || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(*rep, "outputs"))) {
            cJSON_Delete(*rep);
            *rep = NULL;
            *retryable = true;
            rc = kf_err_set(err, KF_INTERNAL, "the runner's run report is not the documented JSON "
                            "(docs/neuron-backend.md): %.200s", r.out);
        }
    } else if (r.exit_code == 1) {
        char tail[600];
        *kerr = cJSON_CreateObject();
        cJSON_AddStringToObject(*kerr, "code", "device_error");
        cJSON_AddStringToObject(*kerr, "api", "nrt");
        cJSON_AddStringToObject(*kerr, "message", bn_tail(r.err, tail, sizeof(tail))[0] ? tail
                                : "the kernel failed on the device");
    } else {
        rc = bn_tool_failed("the device run", &r, j->timeout_s, retryable, err);
    }
    kn_tool_release(&r);
    return rc;
}

/* The outputs a run reported, as one reference-format file for the
 * validation child; their bytes add to *bytes. */
static kf_code bn_outputs_file(const cJSON *rep, const char *path, double *bytes, kf_err *err)
{
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(rep, "outputs"), *o;
    int n = cJSON_GetArraySize(outs), k = 0;
    sim_array *a = kf_calloc((size_t)n + 1, sizeof(*a));
    kf_code rc = KF_OK;

    cJSON_ArrayForEach(o, outs)
    {
        sim_npy_array npy;
        if (!cJSON_IsString(o)) {
            rc = kf_err_set(err, KF_INTERNAL, "the runner reported an output that is not a path");
            break;
        }
        memset(&npy, 0, sizeof(npy));
        rc = sim_npy_read(o->valuestring, -1, SIM_ARRAY_MAX_BYTES, &npy, err);
        if (rc)
            break;
        snprintf(a[k].name, sizeof(a[k].name), "out%d", k);
        a[k].dtype = npy.dtype;
        a[k].ndim = npy.ndim;
        for (int d = 0; d < npy.ndim && d < 8; d++)
            a[k].shape[d] = (int64_t)npy.shape[d];
        a[k].data = npy.data;
        *bytes += (double)npy.count * (double)sim_dtype_size(npy.dtype);
        k++;
    }
    if (rc == KF_OK)
        rc = ka_ref_write(path, a, (size_t)k, err);
    sim_check_arrays_free(a, (size_t)k);
    return rc;
}

/* A file as an artifact: text as "content", binary as "content_base64". */
static void bn_artifact(cJSON *arts, const char *name, const char *path, bool binary)
{
    FILE *f = fopen(path, "rb");
    kf_buf b = KF_BUF_INIT;
    char chunk[65536];
    size_t n;
    cJSON *o;

    if (!f)
        return;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0 && b.len <= BN_ARTIFACT_MAX)
        kf_buf_add(&b, chunk, n);
    fclose(f);
    if (b.len > BN_ARTIFACT_MAX) {
        kf_log_warn("artifact left out: %s is over %d bytes", name, BN_ARTIFACT_MAX);
        kf_buf_release(&b);
        return;
    }
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    if (binary) {
        kf_buf e = KF_BUF_INIT;
        kf_upload_base64(b.data, b.len, &e);
        cJSON_AddStringToObject(o, "content_base64", e.data);
        kf_buf_release(&e);
    } else {
        cJSON_AddStringToObject(o, "content", b.data);
    }
    cJSON_AddItemToArray(arts, o);
    kf_buf_release(&b);
}

/* neuron-explorer capture + view summary-json: the summary document. */
static kf_code bn_profile(bn_job *j, const char *neff, const char *ntff, cJSON **summary, bool *retryable,
                          kf_err *err)
{
    const char *argv[BN_MAX_ARGS];
    char paths[KA_MAX_INPUTS][PATH_MAX + 96];
    kn_tool_result r;
    int n = 0;
    kf_code rc;

    *summary = NULL;
    argv[n++] = kf_config_str(KF_CFG_NEURON_EXPLORER);
    argv[n++] = "capture";
    argv[n++] = "-n";
    argv[n++] = neff;
    argv[n++] = "-s";
    argv[n++] = ntff;
    for (int k = 0; k < j->pb.n_inputs && n < BN_MAX_ARGS - 3; k++) {
        bn_input_path(j, 0, k, paths[k], sizeof(paths[k]));
        argv[n++] = j->pb.inputs[k].name;
        argv[n++] = paths[k];
    }
    argv[n] = NULL;
    rc = bn_tool(j, argv, &r, err);
    if (rc == KF_OK && r.exit_code != 0)
        rc = bn_tool_failed("neuron-explorer capture", &r, j->timeout_s, retryable, err);
    kn_tool_release(&r);
    if (rc)
        return rc;
    n = 0;
    argv[n++] = kf_config_str(KF_CFG_NEURON_EXPLORER);
    argv[n++] = "view";
    argv[n++] = "-n";
    argv[n++] = neff;
    argv[n++] = "-s";
    argv[n++] = ntff;
    argv[n++] = "--output-format";
    argv[n++] = "summary-json";
    argv[n] = NULL;
    rc = bn_tool(j, argv, &r, err);
    if (rc == KF_OK && r.exit_code != 0)
        rc = bn_tool_failed("neuron-explorer view", &r, j->timeout_s, retryable, err);
    if (rc == KF_OK) {
        *summary = cJSON_Parse(r.out);
        if (!kn_map_summary_fields(*summary)) {
            cJSON_Delete(*summary);
            *summary = NULL;
            *retryable = false;
            rc = kf_err_set(err, KF_INTERNAL, "neuron-explorer view --output-format summary-json printed no Summary "
                            "fields (total_time...): %.200s", r.out);
        }
    }
    kn_tool_release(&r);
    return rc;
}

/* Step 7: the calibration record of this device profile (kn_calib.h), or
 * NULL with a warning in the log when the simulator cannot time the
 * kernel.  The device's Instruction rows come from neuron-explorer's full
 * JSON output; without them (the tool refuses the format, fails, or its
 * output is over KN_TOOL_MAX_OUTPUT) the record has no lines. */
static cJSON *bn_calibrate(bn_job *j, const char *neff, const char *ntff, const cJSON *prof)
{
    const char *argv[] = { kf_config_str(KF_CFG_NEURON_EXPLORER), "view", "-n", neff, "-s", ntff, "--output-format",
                           "json", NULL };
    const cJSON *d;
    kn_tool_result r;
    kf_err e = KF_ERR_INIT;
    cJSON *doc = NULL, *sim = NULL, *sdoc = NULL, *rec = NULL;
    ka_eval_req req;
    char h[65], how[160];

    if (bn_tool(j, argv, &r, &e) == KF_OK) {
        doc = r.exit_code == 0 ? cJSON_Parse(r.out) : NULL;
        if (!kn_calib_instructions(doc))
            kf_log_warn("calibration without the device's instruction table job=%s msg=\"neuron-explorer view "
                        "--output-format json: %s\"", j->job->id, kn_tool_outcome(&r, j->timeout_s, how, sizeof(how)));
        kn_tool_release(&r);
    } else {
        kf_log_warn("calibration without the device's instruction table job=%s msg=\"%s\"", j->job->id, e.msg);
    }
    memset(&req, 0, sizeof(req));
    req.pb = &j->pb;
    req.mode = KA_EVAL_TIMING;
    req.timeout_s = (unsigned)kf_config_int(KF_CFG_SIM_TIMEOUT_S);
    req.documents = true;
    if (ka_eval_run(&req, &sim, &e) != KF_OK) {
        kf_log_warn("no calibration record: the simulator's timing did not run job=%s msg=\"%s\"", j->job->id, e.msg);
        goto out;
    }
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sim, "ok"))) {
        const char *m = kf_jobprob_str(cJSON_GetObjectItemCaseSensitive(sim, "error"), "message");
        kf_log_warn("no calibration record: the simulator cannot time this kernel job=%s msg=\"%s\"", j->job->id,
                    m ? m : "no message");
        goto out;
    }
    d = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sim, "documents"), "profile.json");
    sdoc = cJSON_IsString(d) ? cJSON_Parse(d->valuestring) : NULL;
    if (kf_jobprob_sha256(j->pb.source_path, h))
        rec = kn_calib_record(prof, kn_calib_instructions(doc), sim, sdoc, 1, h, NULL);
out:
    cJSON_Delete(doc);
    cJSON_Delete(sim);
    cJSON_Delete(sdoc);
    return rec;
}

static void bn_progress(const bn_job *j, const ka_iter *it)
{
    char *txt;
    if (!j->hooks->progress)
        return;
    txt = ka_iter_json(it);
    if (txt)
        j->hooks->progress(j->hooks->ctx, txt);
    free(txt);
}

/* Remove the job's folder (written only by kforge and the device tools). */
static void bn_rmtree(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    if (!d) {
        unlink(path);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        char p[PATH_MAX + 260];
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            bn_rmtree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(path);
}

/* The one evaluation: steps 2..6 of the header. */
static kf_code bn_evaluate(bn_job *j, char **result_json, bool *retryable, kf_err *err)
{
    const kf_job_payload *job = j->job;
    bool want_prof = job->kind != KF_KIND_VALIDATE, want_val = job->kind != KF_KIND_PROFILE;
    char neff_dir[PATH_MAX + 16], neff[PATH_MAX + 32], ntff[PATH_MAX + 32], outs[BN_SEEDS][PATH_MAX + 32];
    cJSON *cerr = NULL, *kerr = NULL, *val = NULL, *prof = NULL, *summary = NULL, *lat_rep = NULL, *out = NULL;
    cJSON *calib = NULL;
    cJSON *prov = cJSON_CreateObject(), *arts = cJSON_CreateArray();
    double out_bytes = 0;
    ka_eval_req vr;
    sim_target tgt;
    ka_iter it;
    char h[65];
    kf_code rc;

    memset(&it, 0, sizeof(it));
    ka_validate_req(&vr, &j->pb, NULL, 1, BN_SEEDS, (unsigned)kf_config_int(KF_CFG_SIM_TIMEOUT_S));
    rc = sim_target_load(job->target, NULL, &tgt, err);
    if (rc) {
        rc = KF_UNPROCESSABLE;
        goto out;
    }
    rc = bn_write_inputs(j, &vr, err);
    if (rc)
        goto out;
    snprintf(neff_dir, sizeof(neff_dir), "%s/neff", j->dir);
    snprintf(neff, sizeof(neff), "%s/kernel.neff", neff_dir);
    snprintf(ntff, sizeof(ntff), "%s/profile.ntff", j->dir);
    rc = bn_compile(j, neff_dir, &cerr, retryable, err);
    if (rc)
        goto out;
    if (!cerr && access(neff, R_OK) != 0) {
        *retryable = false;
        rc = kf_err_set(err, KF_INTERNAL, "the runner's compile succeeded but left no %s", neff);
        goto out;
    }
    /* validate: every seed on the device, compared in the sandbox */
    for (int s = 0; !cerr && want_val && s < vr.n_seeds; s++) {
        cJSON *rep = NULL;
        rc = bn_run(j, neff, s, 0, 1, &rep, &kerr, retryable, err);
        if (rc || kerr)
            break;
        snprintf(outs[s], sizeof(outs[s]), "%s/out%d.kfref", j->dir, s);
        out_bytes = 0;
        rc = bn_outputs_file(rep, outs[s], &out_bytes, err);
        cJSON_Delete(rep);
        if (rc) {
            *retryable = false;
            break;
        }
        vr.out_in[s] = outs[s];
    }
    if (rc)
        goto out;
    if (!cerr && !kerr && want_val) {
        rc = ka_eval_run(&vr, &val, err);
        if (rc) {
            *retryable = rc == KF_INTERNAL;
            goto out;
        }
    }
    /* latency and profile, of a kernel that compiled, ran and (when asked) passed */
    if (!cerr && !kerr && want_prof && (!val || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(val, "pass")))) {
        rc = bn_run(j, neff, 0, BN_WARMUP, (int)kf_config_int(KF_CFG_NEURON_BENCH_ITERS), &lat_rep, &kerr, retryable,
                    err);
        if (rc == KF_OK && !kerr && out_bytes == 0) {
            char tmp[PATH_MAX + 32];
            snprintf(tmp, sizeof(tmp), "%s/outl.kfref", j->dir);
            rc = bn_outputs_file(lat_rep, tmp, &out_bytes, err);
        }
        if (rc == KF_OK && !kerr)
            rc = bn_profile(j, neff, ntff, &summary, retryable, err);
        if (rc)
            goto out;
        if (!kerr)
            prof = kn_map_profile(summary, cJSON_GetObjectItemCaseSensitive(lat_rep, "latency_us"), &j->pb, &tgt,
                                  out_bytes);
        if (prof)
            calib = bn_calibrate(j, neff, ntff, prof);
    }
    /* the iteration, as the simulator path reports it */
    {
        const cJSON *verr = val ? cJSON_GetObjectItemCaseSensitive(val, "error") : NULL;
        const cJSON *e = cerr ? cerr : kerr ? kerr : verr;
        it.iteration = 1;
        it.compiled = cerr == NULL;
        it.compile_cached = -1;
        it.compile_error = e ? cJSON_Duplicate(e, true) : NULL;
        it.source = kf_jobprob_str(job->spec, "source");
        it.validation = val ? cJSON_Duplicate(val, true) : NULL;
        it.verdict = KA_VERDICT_NONE;
        it.profile = prof ? cJSON_Duplicate(prof, true) : NULL;
        it.findings = prof ? cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(prof, "findings"), true) : NULL;
        it.action = job->kind == KF_KIND_PROFILE ? "profile" : job->kind == KF_KIND_VALIDATE ? "validate" : "diagnose";
        snprintf(it.reason, sizeof(it.reason), "%s", cerr ? "the kernel does not compile for the device"
                                                     : kerr ? "the kernel failed on the device"
                                                            : "one evaluation on the device");
        it.has_latency = prof != NULL;
        it.latency_ns = prof ? cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(prof, "latency_ns")) : 0;
        it.has_correct = val && !e;
        it.correct = it.has_correct && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(val, "pass"));
        if (!e && (prof || (val && it.correct))) {
            char p[PATH_MAX + 64];
            bn_artifact(arts, "kernel.py", j->pb.source_path, false);
            bn_artifact(arts, "kernel.neff", neff, true);
            snprintf(p, sizeof(p), "%s/kernel_debug_info.json", neff_dir);
            bn_artifact(arts, "kernel_debug_info.json", p, false);
            if (prof) {
                char *s = cJSON_PrintUnformatted(summary);
                cJSON *o = cJSON_CreateObject();
                bn_artifact(arts, "profile.ntff", ntff, true);
                cJSON_AddStringToObject(o, "name", "summary.json");
                cJSON_AddStringToObject(o, "content", s ? s : "{}");
                cJSON_AddItemToArray(arts, o);
                free(s);
            }
            it.artifacts = cJSON_Duplicate(arts, true);
        }
        bn_progress(j, &it);
        if (cerr) {
            *retryable = false;
            rc = kf_err_set(err, KF_UNPROCESSABLE, "the kernel does not compile: %s",
                            kf_jobprob_str(cerr, "message"));
            goto out;
        }
        if (kerr) {
            *retryable = false;
            rc = kf_err_set(err, KF_UNPROCESSABLE, "the kernel failed on the device: %s",
                            kf_jobprob_str(kerr, "message"));
            goto out;
        }
        if (verr) {
            *retryable = false;
            rc = kf_err_set(err, KF_UNPROCESSABLE, "the validation did not run: %s", kf_jobprob_str(verr, "message"));
            goto out;
        }
        if (val && kf_jobprob_str(val, "ref_error")) {
            *retryable = false;
            rc = kf_err_set(err, KF_UNPROCESSABLE, "the reference does not run: %s", kf_jobprob_str(val, "ref_error"));
            goto out;
        }
    }
    out = cJSON_CreateObject();
    if (prof) {
        double lat = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(prof, "latency_ns"));
        double fl = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(prof, "floor_ns"));
        cJSON_AddItemToObject(out, "profile", cJSON_Duplicate(prof, true));
        cJSON_AddNumberToObject(out, "latency_ns", lat);
        cJSON_AddNumberToObject(out, "fraction_of_bound", lat > 0 ? fl / lat : 0);
    }
    if (val) {
        cJSON_AddItemToObject(out, "validation", cJSON_Duplicate(val, true));
        cJSON_AddBoolToObject(out, "correct", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(val, "pass")));
    }
    if (calib) {
        cJSON_AddItemToArray(cJSON_AddArrayToObject(out, "calibration"), calib);
        calib = NULL;
    }
    cJSON_AddStringToObject(prov, "backend", "neuron");
    cJSON_AddStringToObject(prov, "neuron_core", j->core);
    cJSON_AddStringToObject(prov, "isolation", "device-tool-limits");
    bn_versions(j, prov);
    if (kf_jobprob_sha256(neff, h))
        cJSON_AddStringToObject(prov, "neff_sha256", h);
    if (kf_jobprob_sha256(tgt.path, h))
        cJSON_AddStringToObject(prov, "target_hash", h);
    if (kf_jobprob_sha256(j->pb.source_path, h))
        cJSON_AddStringToObject(prov, "template_hash", h);
    cJSON_AddItemToObject(out, "provenance", prov);
    prov = NULL;
    *result_json = cJSON_PrintUnformatted(out);
out:
    ka_iter_release(&it);
    cJSON_Delete(out);
    cJSON_Delete(prov);
    cJSON_Delete(arts);
    cJSON_Delete(cerr);
    cJSON_Delete(kerr);
    cJSON_Delete(val);
    cJSON_Delete(prof);
    cJSON_Delete(summary);
    cJSON_Delete(lat_rep);
    cJSON_Delete(calib);
    return rc;
}

static bool neuron_available(const kf_backend *self);

static kf_code neuron_run(const kf_backend *self, const kf_job_payload *job, const kf_backend_hooks *hooks,
                          char **result_json, bool *retryable, kf_err *err)
{
    const char *tmp = getenv("TMPDIR");
    char why[600] = "";
    bool sick = false;
    bn_job j;
    kf_code rc;

    *result_json = NULL;
    *retryable = false;
    if (job->kind == KF_KIND_GENERATE ||
        (job->kind == KF_KIND_OPTIMIZE && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(job->spec, "tunables")) > 0))
        return kf_err_set(err, KF_UNPROCESSABLE, "the neuron backend runs one evaluation (profile, validate, optimize "
                          "without tunables); to tune, submit with backend \"hybrid\" (explored on the simulator, "
                          "the best confirmed on the device) or \"sim\"");
    if (!neuron_available(self)) {
        *retryable = true;
        return kf_err_set(err, KF_UNAVAILABLE, "this worker has no Neuron device runner (KFORGE_NEURON_RUNNER=%s is "
                          "not an executable on PATH)", kf_config_str(KF_CFG_NEURON_RUNNER));
    }
    memset(&j, 0, sizeof(j));
    j.job = job;
    j.hooks = hooks;
    j.timeout_s = (unsigned)kf_config_int(KF_CFG_NEURON_TIMEOUT_S);
    snprintf(j.core, sizeof(j.core), "%ld", kf_config_int(KF_CFG_NEURON_CORE));
    snprintf(j.dir, sizeof(j.dir), "%s/kforge-neuron-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(j.dir)) {
        *retryable = true;
        return kf_err_set(err, KF_IO, "cannot create a temporary folder: %s", strerror(errno));
    }
    rc = kf_jobprob_user(job, j.dir, "neuron", &j.pb, err);
    if (rc == KF_OK && job->kind != KF_KIND_PROFILE && !j.pb.ref_path[0])
        rc = kf_err_set(err, KF_UNPROCESSABLE, "validate needs a NumPy reference (spec.reference)");
    if (rc == KF_OK && bn_cancelled(&j)) {
        *retryable = true;
        rc = kf_err_set(err, KF_UNAVAILABLE, "the job stopped before its evaluation (cancelled or lease lost)");
    }
    if (rc == KF_OK) {
        /* the health check gets the between-jobs check's minute, not a compile's limit */
        unsigned full = j.timeout_s;
        j.timeout_s = full < 60 ? full : 60;
        sick = bn_health_check(&j, why, sizeof(why)) != KF_OK;
        j.timeout_s = full;
    }
    if (sick) {
        *retryable = true;
        rc = kf_err_set(err, KF_UNAVAILABLE, "the Neuron device is not healthy (%s); another attempt will run on a "
                        "healthy worker", why);
    }
    if (rc == KF_OK)
        rc = bn_evaluate(&j, result_json, retryable, err);
    ka_problem_release(&j.pb);
    bn_rmtree(j.dir);
    return rc;
}

/* The runner exists: an absolute or relative path that is executable, or
 * a name found on PATH (as execvpe will look it up). */
static bool neuron_available(const kf_backend *self)
{
    const char *r = kf_config_str(KF_CFG_NEURON_RUNNER), *path = getenv("PATH");
    (void)self;
    if (!r || !*r)
        return false;
    if (strchr(r, '/'))
        return access(r, X_OK) == 0;
    while (path && *path) {
        const char *c = strchr(path, ':');
        size_t n = c ? (size_t)(c - path) : strlen(path);
        char p[PATH_MAX];
        if (n > 0 && n < sizeof(p) - 2 &&
            (size_t)snprintf(p, sizeof(p), "%.*s/%s", (int)n, path, r) < sizeof(p) && access(p, X_OK) == 0)
            return true;
        path = c ? c + 1 : NULL;
    }
    return false;
}

const kf_backend kf_backend_neuron = {
    .name = "neuron",
    .kinds = neuron_kinds,
    .run = neuron_run,
    .health = neuron_health,
    .available = neuron_available,
};
