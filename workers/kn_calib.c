/* kn_calib — a device profile next to the simulator's prediction (see kn_calib.h). */
#include "kn_calib.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"

typedef struct kc_line {
    char   loc[128];
    double device_ns, sim_ns;
} kc_line;

typedef struct kc_lines {
    kc_line *v;
    int      n, cap;
} kc_lines;

static double kc_num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : 0;
}

const cJSON *kn_calib_instructions(const cJSON *doc)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(doc, "instruction");
    if (!cJSON_IsArray(a))
        a = cJSON_GetObjectItemCaseSensitive(doc, "Instruction");
    return cJSON_IsArray(a) ? a : NULL;
}

/* "FILE:LINE" with FILE's base name, from an nki_source_location: a string,
 * a list of strings (the schema: an instruction fused from several source
 * locations; the first is kept) or such a list printed as JSON text.
 * False when there is none. */
static bool kc_loc(const cJSON *v, char *buf, size_t len)
{
    const char *s = NULL, *base, *colon;
    cJSON *parsed = NULL;
    bool ok;

    if (cJSON_IsArray(v))
        v = cJSON_GetArrayItem(v, 0);
    if (v && cJSON_IsString(v) && v->valuestring[0] == '[') {
        parsed = cJSON_Parse(v->valuestring);
        v = cJSON_IsArray(parsed) ? cJSON_GetArrayItem(parsed, 0) : NULL;
    }
    if (v && cJSON_IsString(v))
        s = v->valuestring;
    base = s ? strrchr(s, '/') : NULL;
    base = base ? base + 1 : s;
    colon = base ? strrchr(base, ':') : NULL;
    ok = colon && colon > base && colon[1] >= '0' && colon[1] <= '9' && strlen(base) < len;
    if (ok)
        snprintf(buf, len, "%s", base);
    cJSON_Delete(parsed);
    return ok;
}

static kc_line *kc_find(kc_lines *ls, const char *loc)
{
    for (int i = 0; i < ls->n; i++)
        if (strcmp(ls->v[i].loc, loc) == 0)
            return &ls->v[i];
    if (ls->n >= KN_CALIB_MAX_LOCS)
        return NULL;
    if (ls->n == ls->cap) {
        ls->cap = ls->cap ? ls->cap * 2 : 32;
        ls->v = kf_realloc(ls->v, (size_t)ls->cap * sizeof(*ls->v));
    }
    memset(&ls->v[ls->n], 0, sizeof(ls->v[0]));
    snprintf(ls->v[ls->n].loc, sizeof(ls->v[0].loc), "%s", loc);
    return &ls->v[ls->n++];
}

static int kc_by_diff(const void *a, const void *b)
{
    const kc_line *x = a, *y = b;
    double dx = fabs(x->device_ns - x->sim_ns), dy = fabs(y->device_ns - y->sim_ns);
    if (dx != dy)
        return dx < dy ? 1 : -1;
    return strcmp(x->loc, y->loc);
}

/* The worst lines (see the header) into arr. */
static void kc_lines_add(cJSON *arr, const cJSON *instructions, const cJSON *sim_doc)
{
    kc_lines ls = { NULL, 0, 0 };
    const cJSON *it;
    char loc[128];

    cJSON_ArrayForEach(it, instructions)
    {
        kc_line *l;
        double d = kc_num(it, "duration_ns");
        if (d <= 0 && kc_num(it, "end_ts") > kc_num(it, "start_ts"))
            d = kc_num(it, "end_ts") - kc_num(it, "start_ts");
        if (d <= 0 || !kc_loc(cJSON_GetObjectItemCaseSensitive(it, "nki_source_location"), loc, sizeof(loc)))
            continue;
        l = kc_find(&ls, loc);
        if (l)
            l->device_ns += d;
    }
    if (ls.n > 0) {
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(sim_doc, "lines"))
        {
            kc_line *l;
            double t = kc_num(it, "time_ns") - kc_num(cJSON_GetObjectItemCaseSensitive(it, "time_ns_by_engine"), "dma");
            if (t <= 0 || !kc_loc(cJSON_GetObjectItemCaseSensitive(it, "nki_source_location"), loc, sizeof(loc)))
                continue;
            l = kc_find(&ls, loc);
            if (l)
                l->sim_ns += t;
        }
        qsort(ls.v, (size_t)ls.n, sizeof(ls.v[0]), kc_by_diff);
    }
    for (int i = 0; i < ls.n && i < KN_CALIB_LINES; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "loc", ls.v[i].loc);
        cJSON_AddNumberToObject(o, "device_ns", ls.v[i].device_ns);
        cJSON_AddNumberToObject(o, "sim_ns", ls.v[i].sim_ns);
        cJSON_AddItemToArray(arr, o);
    }
    free(ls.v);
}

cJSON *kn_calib_record(const cJSON *device_prof, const cJSON *instructions, const cJSON *sim,
                       const cJSON *sim_profile_doc, int seq, const char *kernel_sha256, const cJSON *params)
{
    static const char *const engines[] = { "tensor", "vector", "scalar", "gpsimd", "dma", NULL };
    const cJSON *dsum = cJSON_GetObjectItemCaseSensitive(device_prof, "summary");
    const cJSON *ssum = cJSON_GetObjectItemCaseSensitive(sim, "summary");
    double dev = kc_num(device_prof, "latency_ns"), sim_ns = kc_num(sim, "latency_ns");
    cJSON *rec, *eng;

    if (dev <= 0 || sim_ns <= 0 || !kernel_sha256)
        return NULL;
    rec = cJSON_CreateObject();
    cJSON_AddNumberToObject(rec, "seq", seq);
    cJSON_AddStringToObject(rec, "kernel_sha256", kernel_sha256);
    cJSON_AddItemToObject(rec, "params", cJSON_IsObject(params) ? cJSON_Duplicate(params, true) : cJSON_CreateObject());
    cJSON_AddNumberToObject(rec, "device_latency_ns", dev);
    if (kc_num(device_prof, "profiled_ns") > 0)
        cJSON_AddNumberToObject(rec, "device_profile_ns", kc_num(device_prof, "profiled_ns"));
    else
        cJSON_AddNullToObject(rec, "device_profile_ns");
    cJSON_AddNumberToObject(rec, "sim_ns", sim_ns);
    eng = cJSON_AddObjectToObject(rec, "engines");
    for (int i = 0; engines[i]; i++) {
        char key[64];
        const cJSON *d, *s;
        snprintf(key, sizeof(key), strcmp(engines[i], "dma") == 0 ? "%s_active_time_percent"
                                                                   : "%s_engine_active_time_percent", engines[i]);
        d = cJSON_GetObjectItemCaseSensitive(dsum, key);
        s = cJSON_GetObjectItemCaseSensitive(ssum, key);
        if (cJSON_IsNumber(d) && cJSON_IsNumber(s) && isfinite(d->valuedouble) && isfinite(s->valuedouble)) {
            cJSON *o = cJSON_AddObjectToObject(eng, engines[i]);
            cJSON_AddNumberToObject(o, "device_percent", d->valuedouble);
            cJSON_AddNumberToObject(o, "sim_percent", s->valuedouble);
        }
    }
    kc_lines_add(cJSON_AddArrayToObject(rec, "lines"), instructions, sim_profile_doc);
    return rec;
}
