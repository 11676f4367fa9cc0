#include "sim_eval.h"
#include "kf_alloc.h"
#include "sim_numerics.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- one evaluation in a sandbox --------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void add_record_summary(cJSON *j, const sim_record *rec)
{
    uint64_t by[SIM_ENG__COUNT] = { 0 }, dma_n = 0, dma_b = 0, flops = 0;
    for (size_t i = 0; i < rec->n_insns; i++) {
        const sim_insn *in = &rec->insns[i];
        if (in->engine < SIM_ENG__COUNT)
            by[in->engine]++;
        if (in->opcode == SIM_OP_DMA_COPY || in->opcode == SIM_OP_DMA_TRANSPOSE) {
            dma_n++;
            dma_b += in->ndst ? in->dst[0].bytes : 0;
        }
        flops += in->flops;
    }
    cJSON *e = cJSON_AddObjectToObject(j, "by_engine");
    for (int k = 0; k < SIM_ENG__COUNT; k++)
        cJSON_AddNumberToObject(e, sim_engine_name((sim_engine)k), (double)by[k]);
    cJSON_AddNumberToObject(j, "instructions", (double)rec->n_insns);
    cJSON_AddNumberToObject(j, "dma_count", (double)dma_n);
    cJSON_AddNumberToObject(j, "dma_bytes", (double)dma_b);
    cJSON_AddNumberToObject(j, "flops", (double)flops);
}

kf_code sim_check_eval_child(void *arg, sim_sandbox_out *out, kf_err *err)
{
    const sim_eval_spec *s = arg;
    sim_record rec;
    sim_error serr;
    sim_array *outs = NULL, *refs = NULL;
    size_t n_outs = 0, n_refs = 0;
    cJSON *j = cJSON_CreateObject();
    char *text;
    double t0, t1;
    kf_code rc;

    sim_record_init(&rec, s->run.target);
    sim_error_clear(&serr);
    t0 = now_s();
    rc = sim_run_kernel(&s->run, s->inputs, s->n_inputs, &outs, &n_outs, &rec, &serr, err);
    t1 = now_s();
    cJSON_AddNumberToObject(j, "kernel_seconds", t1 - t0);
    if (s->run.numerics)
        cJSON_AddStringToObject(j, "blas", simn_blas_name());
    if (rc != KF_OK) {
        char line[1024];
        cJSON *e = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(e, "code", sim_error_name(serr.code));
        cJSON_AddStringToObject(e, "file", serr.file);
        cJSON_AddNumberToObject(e, "line", serr.line);
        cJSON_AddStringToObject(e, "func", serr.func);
        cJSON_AddStringToObject(e, "api", serr.api);
        cJSON_AddStringToObject(e, "values", serr.values);
        cJSON_AddStringToObject(e, "rule", sim_error_rule(serr.code));
        if (serr.code != SIM_E_NONE)
            sim_error_format(&serr, line, sizeof(line));
        else
            snprintf(line, sizeof(line), "%s", err && err->msg[0] ? err->msg : kf_code_title(rc));
        cJSON_AddStringToObject(e, "message", line);
        goto send;
    }
    add_record_summary(j, &rec);
    for (size_t i = 0; i < n_outs; i++) {
        kf_err aerr = KF_ERR_INIT;
        rc = sim_sandbox_send_array(out, &outs[i], &aerr);
        if (rc) {
            cJSON *e = cJSON_AddObjectToObject(j, "error");
            cJSON_AddStringToObject(e, "code", sim_error_name(SIM_E_LIMIT));
            cJSON_AddStringToObject(e, "rule", sim_error_rule(SIM_E_LIMIT));
            cJSON_AddStringToObject(e, "message", aerr.msg);
            if (err)
                *err = aerr;
            goto send;
        }
    }
    cJSON_AddNumberToObject(j, "n_outputs", (double)n_outs);
    if (s->ref_path) {
        kf_err rerr = KF_ERR_INIT;
        t0 = now_s();
        if (sim_check_reference_args(s->ref_path, s->ref_entry ? s->ref_entry : s->run.entry, s->inputs,
                                     s->n_inputs, s->run.args, s->run.n_args, s->run.kwargs_json, &refs,
                                     &n_refs, &rerr) != KF_OK) {
            cJSON_AddStringToObject(j, "ref_error", rerr.msg);
        } else {
            size_t sent = 0;
            while (sent < n_refs && sim_sandbox_send_array(out, &refs[sent], &rerr) == KF_OK)
                sent++;
            if (sent < n_refs)
                cJSON_AddStringToObject(j, "ref_error", rerr.msg);
            else
                cJSON_AddNumberToObject(j, "n_refs", (double)n_refs);
        }
        cJSON_AddNumberToObject(j, "ref_seconds", now_s() - t0);
    }
send:
    text = cJSON_PrintUnformatted(j);
    sim_sandbox_send_json(out, text);
    free(text);
    cJSON_Delete(j);
    if (outs) {
        for (size_t i = 0; i < n_outs; i++)
            free(outs[i].data);
        free(outs);
    }
    sim_check_arrays_free(refs, n_refs);
    sim_record_release(&rec);
    return rc;
}

static double jnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static void jstr(const cJSON *o, const char *k, char *buf, size_t len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    snprintf(buf, len, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

kf_code sim_check_evaluate(const sim_sandbox_limits *lim, const sim_eval_spec *spec, sim_eval *ev,
                           kf_err *err)
{
    cJSON *j = NULL, *e;
    kf_code rc;

    memset(ev, 0, sizeof(*ev));
    sim_error_clear(&ev->serr);
    sim_eval_spec copy = *spec;      /* the child reads it; the sandbox API takes void * */
    /* all the evaluation may read of the machine: the kernel, the reference
     * and the import roots the caller names */
    const char *files[SIM_RUN_MAX_PATHS + 3] = { NULL };
    size_t nf = 0;
    sim_sandbox_limits l = *lim;
    if (spec->run.source_path)
        files[nf++] = spec->run.source_path;
    if (spec->ref_path)
        files[nf++] = spec->ref_path;
    for (size_t i = 0; spec->run.paths && spec->run.paths[i] && i < SIM_RUN_MAX_PATHS; i++)
        files[nf++] = spec->run.paths[i];
    l.ro_paths = files;
    /* the child opens them where the sandbox mounts them */
    char *real_src = sim_sandbox_real_path(spec->run.source_path);
    char *real_ref = sim_sandbox_real_path(spec->ref_path);
    char *real_roots[SIM_RUN_MAX_PATHS + 1] = { NULL };
    for (size_t i = 0; spec->run.paths && spec->run.paths[i] && i < SIM_RUN_MAX_PATHS; i++)
        real_roots[i] = sim_sandbox_real_path(spec->run.paths[i]);
    copy.run.source_path = real_src;
    copy.ref_path = real_ref;
    if (spec->run.paths)
        copy.run.paths = (const char *const *)real_roots;
    rc = sim_sandbox_run(&l, sim_check_eval_child, &copy, &ev->sb, err);
    free(real_src);
    free(real_ref);
    for (size_t i = 0; real_roots[i]; i++)
        free(real_roots[i]);
    if (rc != KF_OK)
        return rc;
    if (ev->sb.json)
        j = cJSON_Parse(ev->sb.json);
    ev->kernel_seconds = jnum(j, "kernel_seconds");
    ev->ref_seconds = jnum(j, "ref_seconds");
    jstr(j, "blas", ev->blas, sizeof(ev->blas));
    e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (cJSON_IsObject(e)) {
        char code[64];
        jstr(e, "code", code, sizeof(code));
        for (int c = 0; c < SIM_E__COUNT; c++)
            if (strcmp(code, sim_error_name((sim_error_code)c)) == 0)
                ev->serr.code = (sim_error_code)c;
        jstr(e, "file", ev->serr.file, sizeof(ev->serr.file));
        ev->serr.line = (int)jnum(e, "line");
        jstr(e, "func", ev->serr.func, sizeof(ev->serr.func));
        jstr(e, "api", ev->serr.api, sizeof(ev->serr.api));
        jstr(e, "values", ev->serr.values, sizeof(ev->serr.values));
        jstr(e, "message", ev->error, sizeof(ev->error));
    }
    if (ev->sb.status == SIM_SB_OK) {
        size_t n_out = (size_t)jnum(j, "n_outputs"), n_ref = (size_t)jnum(j, "n_refs");
        if (n_out + n_ref != ev->sb.n_arrays) {
            snprintf(ev->error, sizeof(ev->error),
                     "the evaluation sent %zu arrays but announced %zu outputs and %zu reference results",
                     ev->sb.n_arrays, n_out, n_ref);
        } else {
            ev->kernel_ok = true;
            ev->outputs = ev->sb.arrays;
            ev->n_outputs = n_out;
            ev->refs = ev->sb.arrays + n_out;
            ev->n_refs = n_ref;
        }
        const cJSON *be = cJSON_GetObjectItemCaseSensitive(j, "by_engine");
        for (int k = 0; k < SIM_ENG__COUNT; k++)
            ev->by_engine[k] = (uint64_t)jnum(be, sim_engine_name((sim_engine)k));
        ev->insns = (uint64_t)jnum(j, "instructions");
        ev->dma_count = (uint64_t)jnum(j, "dma_count");
        ev->dma_bytes = (uint64_t)jnum(j, "dma_bytes");
        ev->flops = (uint64_t)jnum(j, "flops");
        jstr(j, "ref_error", ev->ref_error, sizeof(ev->ref_error));
        ev->ref_failed = spec->ref_path && ev->ref_error[0];
    } else if (!ev->error[0]) {
        snprintf(ev->error, sizeof(ev->error), "%s", ev->sb.reason);
    }
    cJSON_Delete(j);
    return KF_OK;
}

void sim_eval_release(sim_eval *ev)
{
    if (!ev)
        return;
    sim_sandbox_result_release(&ev->sb);
    memset(ev, 0, sizeof(*ev));
}
