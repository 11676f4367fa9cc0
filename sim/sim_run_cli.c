/* sim_run_cli — `kforge-sim run` once its flags are parsed (see sim_run_cli.h). */
#include "sim_run_cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_fs.h"
#include "kf_log.h"
#include "sim_check.h"
#include "sim_eval.h"
#include "sim_input.h"
#include "sim_npy.h"

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
    float blk[4096];
    bool fl = sim_npy_dtype_is_float(a->dtype);
    for (uint64_t i0 = 0; i0 < n; i0 += 4096) {
        uint64_t m = n - i0 < 4096 ? n - i0 : 4096;
        if (fl)
            sim_npy_load_f32(a->dtype, a->data, i0, blk, m);
        for (uint64_t i = 0; i < m; i++) {
            double v = fl ? blk[i] : sim_npy_load_elem(a->dtype, a->data, i0 + i);
            if (isnan(v)) { s.nan++; continue; }
            if (isinf(v)) { s.inf++; continue; }
            if (v < s.min) s.min = v;
            if (v > s.max) s.max = v;
            sum += v;
            finite++;
        }
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


int sim_run_cli_run(const sim_run_cli_args *a)
{
    sim_array *inputs = kf_calloc(a->n_inputs + 1, sizeof(*inputs));
    sim_eval ev;
    sim_eval_spec spec;
    sim_sandbox_limits lim;
    kf_err err = KF_ERR_INIT;
    cJSON *doc = cJSON_CreateObject(), *jout = NULL, *jchk = NULL;
    kf_buf text = KF_BUF_INIT;
    int status = SIM_RUN_PASS;
    bool ev_done = false;

    memset(&ev, 0, sizeof(ev));
    /* inputs are read and generated here, before any user code runs */
    for (size_t i = 0; i < a->n_inputs; i++) {
        if (sim_input_array(a->inputs[i], (uint64_t)a->memory_mib << 20, &inputs[i], &err) != KF_OK) {
            fprintf(stderr, "kforge-sim run: %s\n", err.msg);
            status = SIM_RUN_USAGE;
            goto out;
        }
    }
    if (kf_mkdir_p(a->out_dir, 0755) < 0) {
        fprintf(stderr, "kforge-sim run: cannot create output folder '%s': %s\n", a->out_dir,
                strerror(errno));
        status = SIM_RUN_USAGE;
        goto out;
    }
    if (a->save_inputs) {
        char *dir = kf_asprintf("%s/inputs", a->out_dir);
        kf_mkdir_p(dir, 0755);
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
    spec.run.threads = (int)a->threads;
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
        status = SIM_RUN_KERNEL;
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
        status = SIM_RUN_KERNEL;
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
            status = SIM_RUN_USAGE;
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
    kf_buf_addf(&text, ")\n  DMA: %llu transfers, %.3f MiB; %.3g FLOPs; kernel %.3f s%s%s\n",
                (unsigned long long)ev.dma_count, (double)ev.dma_bytes / 1048576.0, (double)ev.flops,
                ev.kernel_seconds, ev.blas[0] ? ", BLAS " : "", ev.blas);
    if (ev.blas[0])
        cJSON_AddStringToObject(doc, "blas", ev.blas);
    cJSON *jd = cJSON_AddObjectToObject(doc, "dma");
    cJSON_AddNumberToObject(jd, "count", (double)ev.dma_count);
    cJSON_AddNumberToObject(jd, "bytes", (double)ev.dma_bytes);
    cJSON_AddNumberToObject(doc, "flops", (double)ev.flops);

    if (a->ref) {
        if (ev.ref_failed) {
            kf_buf_addf(&text, "error: %s\n", ev.ref_error);
            cJSON_AddStringToObject(doc, "ref_error", ev.ref_error);
            status = SIM_RUN_USAGE;
            goto report;
        }
        kf_buf_addf(&text, "  check against %s:%s\n", a->ref, a->ref_entry ? a->ref_entry : a->entry);
        jchk = cJSON_AddArrayToObject(doc, "check");
        if (ev.n_refs != ev.n_outputs) {
            kf_buf_addf(&text, "    the kernel returned %zu outputs, the reference %zu\n", ev.n_outputs,
                        ev.n_refs);
            status = SIM_RUN_MISMATCH;
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
                status = SIM_RUN_MISMATCH;
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
        kf_buf_addf(&text, "result: %s\n", status == SIM_RUN_PASS ? "PASS" : "FAIL");
    }

report:
    if (ev_done && ev.sb.log && ev.sb.log[0]) {
        cJSON_AddStringToObject(doc, "log", ev.sb.log);
        kf_buf_addf(&text, "  kernel output (last %d bytes kept):\n%s%s", SIM_SANDBOX_LOG_TAIL, ev.sb.log,
                    ev.sb.log[strlen(ev.sb.log) - 1] == '\n' ? "" : "\n");
    }
    cJSON_AddNumberToObject(doc, "exit_code", status);
    cJSON_AddStringToObject(doc, "status", status == SIM_RUN_PASS ? (a->ref ? "pass" : "ok")
                                           : status == SIM_RUN_MISMATCH ? "mismatch"
                                           : status == SIM_RUN_KERNEL ? "kernel_error" : "usage_error");
    if (a->json) {
        char *s = cJSON_Print(doc);
        puts(s);
        free(s);
    } else {
        fputs(text.data, status == SIM_RUN_KERNEL ? stderr : stdout);
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
