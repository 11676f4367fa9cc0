/* cli_library — the pure parts of `kforge library` (see cli_library.h). */
#include "cli_library.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_job.h"
#include "kf_json.h"

bool cli_library_id_ok(const char *id)
{
    size_t n;

    if (!id || !*id || *id == '.' || *id == '-')
        return false;
    n = strlen(id);
    return n <= 200 && strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}

/* The entry's dtype as `kforge-sim run --input` spells it. */
static const char *cli_lib_sim_dtype(const char *d)
{
    return d && strcmp(d, "bfloat16") == 0 ? "bf16" : d && strcmp(d, "float16") == 0 ? "fp16" : d ? d : "float32";
}

/* "--input NAME=shape:AxB:DT" arguments, one per input of meta with the
 * entry's shapes in order (a generate key's shape is a list, one per
 * input); false when they do not line up. */
static bool cli_lib_inputs(const cJSON *entry, const cJSON *meta, cJSON *args)
{
    const cJSON *shapes = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(meta, "inputs"), *in;
    const char *dt = cli_lib_sim_dtype(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(entry, "dtype")));
    int i = 0;

    if (!cJSON_IsArray(shapes) || !cJSON_IsArray(inputs) || cJSON_GetArraySize(shapes) != cJSON_GetArraySize(inputs))
        return false;
    cJSON_ArrayForEach(in, inputs)
    {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(in, "name"));
        const cJSON *sh = cJSON_GetArrayItem(shapes, i++), *d;
        char spec[512];
        size_t o;

        /* names and dtype come from the network: identifiers only, so
         * one argument stays NAME=shape:...:DTYPE */
        if (!name || !kf_ident_valid(name, 64, NULL) || !kf_ident_valid(dt, 32, NULL) || !cJSON_IsArray(sh) ||
            cJSON_GetArraySize(sh) < 1)
            return false;
        o = (size_t)snprintf(spec, sizeof(spec), "%.64s=shape:", name);
        cJSON_ArrayForEach(d, sh)
        {
            /* a whole number of 1..2^31 elements (KF_JOB_MAX_DIM); the
             * network's JSON may hold 1e400, which cJSON reads as inf */
            if (!cJSON_IsNumber(d) || !(d->valuedouble >= 1 && d->valuedouble <= 2147483648.0) ||
                (double)(long long)d->valuedouble != d->valuedouble || o >= sizeof(spec))
                return false;
            o += (size_t)snprintf(spec + o, sizeof(spec) - o, "%s%.0f", d == sh->child ? "" : "x", d->valuedouble);
        }
        if (o >= sizeof(spec) - 20)
            return false;
        snprintf(spec + o, sizeof(spec) - o, ":%s", dt);
        cJSON_AddItemToArray(args, cJSON_CreateString("--input"));
        cJSON_AddItemToArray(args, cJSON_CreateString(spec));
    }
    return true;
}

/* Whether target names a target kforge knows: it becomes an argument of
 * the check, and the entry comes from the network (fuzz_library: a target
 * "--input" made the check's arguments malformed). */
static bool cli_lib_target_ok(const char *target)
{
    for (int i = 0; target && kf_job_targets[i]; i++)
        if (strcmp(target, kf_job_targets[i]) == 0)
            return true;
    return false;
}

cJSON *cli_library_manifest_item(const cJSON *entry, const cJSON *meta, const char *file, const char *sha256,
                                 long long bytes)
{
    static const char *const copied[] = { "id", "op", "entry", "target", "dtype", "backend", "shape", "params",
                                          "latency_ns", "fraction_of_bound", "provenance", "job_id", "attempt",
                                          "iteration", "source_sha256", "updated_at", NULL };
    cJSON *m = cJSON_CreateObject(), *args;
    const char *ref = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "reference"));
    const char *ent = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(entry, "entry"));
    const char *target = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(entry, "target"));
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(entry, "params");

    cJSON_AddStringToObject(m, "file", file);
    cJSON_AddStringToObject(m, "sha256", sha256);
    cJSON_AddNumberToObject(m, "bytes", (double)bytes);
    for (int i = 0; copied[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(entry, copied[i]);
        cJSON_AddItemToObject(m, copied[i], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    }
    args = cJSON_CreateArray();
    if (ref && ent && ent[0] && ent[0] != '-' && cli_lib_target_ok(target) && cli_lib_inputs(entry, meta, args)) {
        char *kw = cJSON_IsObject(params) ? cJSON_PrintUnformatted(params) : kf_strdup("{}");
        cJSON *check = cJSON_CreateArray();
        const char *head[] = { "run", file, "--entry", ent, "--target", target };
        const cJSON *a;
        for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
            cJSON_AddItemToArray(check, cJSON_CreateString(head[i]));
        cJSON_ArrayForEach(a, args)
            cJSON_AddItemToArray(check, cJSON_CreateString(a->valuestring));
        cJSON_AddItemToArray(check, cJSON_CreateString("--kwargs"));
        cJSON_AddItemToArray(check, cJSON_CreateString(kw));
        cJSON_AddItemToArray(check, cJSON_CreateString("--check"));
        cJSON_AddItemToArray(check, cJSON_CreateString(file));
        cJSON_AddItemToArray(check, cJSON_CreateString("--ref-entry"));
        cJSON_AddItemToArray(check, cJSON_CreateString(ref));
        cJSON_AddItemToObject(m, "check", check);
        free(kw);
    } else {
        cJSON_AddNullToObject(m, "check");
    }
    cJSON_Delete(args);
    return m;
}
