/* kn_map — Neuron tool output in kforge's terms (see kn_map.h). */
#include "kn_map.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/ka_eval.h"
#include "sim/sim_run.h"

/* Length of a compiler error code at s: "NCC_" + letters + digits, or
 * (bracketed=true, s just after a '[') at least 3 letters + 3 digits
 * followed by ']' (the older codes such as [TEN404] that logs show); 0
 * when there is none. */
static size_t kn_code_len(const char *s, bool bracketed)
{
    size_t n = strncmp(s, "NCC_", 4) == 0 ? 4 : 0, l = 0, d = 0;
    if (!n && !bracketed)
        return 0;
    while (isupper((unsigned char)s[n + l]))
        l++;
    while (isdigit((unsigned char)s[n + l + d]))
        d++;
    if (n)
        return l >= 1 && d >= 1 ? n + l + d : 0;
    return l >= 3 && d >= 3 && s[l + d] == ']' ? l + d : 0;
}

/* The line of text holding position p, trimmed, into buf. */
static void kn_line_at(const char *text, const char *p, char *buf, size_t len)
{
    const char *b = p, *e = p;
    size_t n;
    while (b > text && b[-1] != '\n')
        b--;
    while (*e && *e != '\n')
        e++;
    while (b < e && isspace((unsigned char)*b))
        b++;
    while (e > b && isspace((unsigned char)e[-1]))
        e--;
    n = (size_t)(e - b) < len - 1 ? (size_t)(e - b) : len - 1;
    memcpy(buf, b, n);
    buf[n] = '\0';
}

/* The last line number the log gives for kernel_file: `FILE", line N`
 * (a Python traceback) or `FILE:N` (a compiler diagnostic); 0 if none. */
static int kn_last_line(const char *log, const char *kernel_file)
{
    size_t fl = strlen(kernel_file);
    const char *p = log;
    int line = 0;

    while (fl && (p = strstr(p, kernel_file)) != NULL) {
        const char *q = p + fl;
        char *end = NULL;
        long v = 0;
        if (strncmp(q, "\", line ", 8) == 0)
            v = strtol(q + 8, &end, 10);
        else if (*q == ':' && isdigit((unsigned char)q[1]))
            v = strtol(q + 1, &end, 10);
        if (end && v > 0 && v < 1000000)
            line = (int)v;
        p = q;
    }
    return line;
}

cJSON *kn_map_compile_error(const char *log, const char *kernel_file)
{
    cJSON *e = cJSON_CreateObject();
    const char *p = log ? log : "", *code_at = NULL;
    char code[32] = "NCC_UNKNOWN", text[600] = "", msg[800];
    int line;

    for (const char *s = p; (s = strstr(s, "NCC_")) != NULL; s++) {
        size_t n = kn_code_len(s, false);
        if (n && n < sizeof(code)) {
            memcpy(code, s, n);
            code[n] = '\0';
            code_at = s;
            break;
        }
    }
    for (const char *s = p; !code_at && (s = strchr(s, '[')) != NULL; s++) {
        size_t n = kn_code_len(s + 1, true);
        if (n && n < sizeof(code)) {
            memcpy(code, s + 1, n);
            code[n] = '\0';
            code_at = s;
        }
    }
    if (code_at) {
        kn_line_at(p, code_at, text, sizeof(text));
    } else {
        /* the last non-empty line: Python's exception line ends a traceback */
        const char *end = p + strlen(p);
        while (end > p && isspace((unsigned char)end[-1]))
            end--;
        if (end > p)
            kn_line_at(p, end - 1, text, sizeof(text));
    }
    line = kn_last_line(p, kernel_file);
    if (line > 0)
        snprintf(msg, sizeof(msg), "%s:%d: %s", kernel_file, line, text[0] ? text : code);
    else
        snprintf(msg, sizeof(msg), "%s", text[0] ? text : "the compiler failed without a message");
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "file", kernel_file);
    cJSON_AddNumberToObject(e, "line", line);
    cJSON_AddStringToObject(e, "api", "neuronx-cc");
    cJSON_AddStringToObject(e, "message", msg);
    return e;
}

const cJSON *kn_map_summary_fields(const cJSON *doc)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(doc, "summary");
    if (cJSON_IsArray(s))
        s = cJSON_GetArrayItem(s, 0);
    if (cJSON_IsObject(s))
        return s;
    if (cJSON_IsArray(doc))
        doc = cJSON_GetArrayItem(doc, 0);
    return cJSON_IsObject(doc) && cJSON_GetObjectItemCaseSensitive(doc, "total_time") ? doc : NULL;
}

static double kn_num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

cJSON *kn_map_profile(const cJSON *summary, const cJSON *latency_us, const ka_problem *pb, const sim_target *tgt,
                      double output_bytes)
{
    cJSON *j = cJSON_CreateObject(), *sum = cJSON_AddObjectToObject(j, "summary"), *bo, *pct;
    const cJSON *f = kn_map_summary_fields(summary), *v;
    const char *const *keys = ka_eval_summary_keys();
    double bw = sim_target_dma_bpns(tgt), peak = sim_target_te_peak_flops(tgt);
    double flops = pb->op_flops_set ? pb->op_flops : kn_num(f, "model_flops");
    double io = kn_num(f, "inputs_outputs_weights_size_bytes"), hbm = kn_num(f, "hbm_read_bytes") + kn_num(f, "hbm_write_bytes");
    double compute_ns, io_ns, memory_ns, floor_ns, lat = kn_num(latency_us, "p50") * 1e3;

    for (int i = 0; keys[i]; i++) {
        v = cJSON_GetObjectItemCaseSensitive(f, keys[i]);
        if (v)
            cJSON_AddItemToObject(sum, keys[i], cJSON_Duplicate(v, true));
    }
    if (io <= 0) {
        io = output_bytes;
        for (int i = 0; i < pb->n_inputs; i++) {
            double n = (double)sim_dtype_size(pb->inputs[i].dtype);
            for (int d = 0; d < pb->inputs[i].ndim; d++)
                n *= (double)pb->inputs[i].shape[d];
            io += n;
        }
    }
    compute_ns = peak > 0 ? flops / peak * 1e9 : 0;
    io_ns = bw > 0 ? io / bw : 0;
    memory_ns = bw > 0 ? hbm / bw : 0;
    floor_ns = compute_ns > io_ns ? compute_ns : io_ns;
    cJSON_AddBoolToObject(j, "ok", true);
    cJSON_AddStringToObject(j, "source", "device");
    cJSON_AddNumberToObject(j, "latency_ns", lat);
    pct = cJSON_AddObjectToObject(j, "latency_percentiles_ns");
    cJSON_ArrayForEach(v, latency_us)
    {
        if (cJSON_IsNumber(v))
            cJSON_AddNumberToObject(pct, v->string, v->valuedouble * 1e3);
    }
    if (f && kn_num(f, "total_time") > 0)
        cJSON_AddNumberToObject(j, "profiled_ns", kn_num(f, "total_time") * 1e9);
    cJSON_AddNumberToObject(j, "floor_ns", floor_ns);
    cJSON_AddStringToObject(j, "bound_kind", compute_ns > io_ns ? "compute" : "io");
    bo = cJSON_AddObjectToObject(j, "bounds");
    cJSON_AddNumberToObject(bo, "compute_ns", compute_ns);
    cJSON_AddNumberToObject(bo, "op_compute_ns", compute_ns);
    cJSON_AddNumberToObject(bo, "memory_ns", memory_ns);
    cJSON_AddNumberToObject(bo, "necessary_io_ns", io_ns);
    cJSON_AddNumberToObject(bo, "floor_ns", floor_ns);
    cJSON_AddNumberToObject(bo, "fraction_of_floor", lat > 0 ? floor_ns / lat : 0);
    cJSON_AddArrayToObject(j, "findings");
    cJSON_AddArrayToObject(j, "lines");
    return j;
}
