/*
 * backend_hybrid — the `hybrid` backend: an optimize job with tunables
 * explores on the simulator and confirms its best candidates on the device
 * (docs/neuron-backend.md "Hybrid mode").
 *
 *   1. the sim backend tunes the job as it would with backend "sim" (its
 *      iterations are the job's first ones);
 *   2. the last HYBRID_CONFIRM entries of the search's path (each a new
 *      best, so these are the fastest candidates it found) run, fastest
 *      first, as one-evaluation neuron jobs on the user's source with the
 *      candidate's params as the entry's defaults: compiled, validated on
 *      the device against the reference, timed and profiled, each paired
 *      with the simulator's prediction (a calibration record);
 *   3. the result is the sim backend's, plus "confirmed" (per candidate:
 *      the simulator's iteration and latency, the device's seq, latency and
 *      correctness, or why it did not run), "device_best" (the fastest
 *      correct candidate on the device) and "calibration" (the records,
 *      each with the seq of its device iteration and the candidate's
 *      params).
 * Each device evaluation is one more iteration of the job, with action
 * "confirm" and the candidate's params.  A device that is not usable ends
 * the attempt as retryable (the neuron backend's rule); a candidate that
 * does not compile or fails on the device is recorded in "confirmed" and
 * the next is tried.  Runs only where both backends are available; its
 * health is the neuron backend's.
 */
#include "kf_backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_jobprob.h"
#include "kf_log.h"
#include "agent/ka_loop.h"

enum { HYBRID_CONFIRM = 3 };

extern const kf_backend kf_backend_sim;
extern const kf_backend kf_backend_neuron;

static const char *const hybrid_kinds[] = { "optimize", NULL };

typedef struct hy_relay {
    const kf_backend_hooks *hooks;
    int                     n;        /* iterations relayed: the seq the worker gave the last */
    const cJSON            *params;   /* confirming: the candidate's params */
    int                     sim_iteration;
} hy_relay;

static void hy_progress(void *ctx, const char *json)
{
    hy_relay *r = ctx;
    r->n++;
    if (!r->hooks->progress)
        return;
    if (r->params) {
        cJSON *it = cJSON_Parse(json);
        char reason[128], *txt;
        if (!it) {
            r->hooks->progress(r->hooks->ctx, json);
            return;
        }
        snprintf(reason, sizeof(reason), "the device confirms the simulator's iteration %d", r->sim_iteration);
        cJSON_ReplaceItemInObjectCaseSensitive(it, "params", cJSON_Duplicate(r->params, true));
        cJSON_DeleteItemFromObjectCaseSensitive(it, "action");
        cJSON_AddStringToObject(it, "action", "confirm");
        cJSON_DeleteItemFromObjectCaseSensitive(it, "reason");
        cJSON_AddStringToObject(it, "reason", reason);
        txt = cJSON_PrintUnformatted(it);
        r->hooks->progress(r->hooks->ctx, txt ? txt : json);
        free(txt);
        cJSON_Delete(it);
        return;
    }
    r->hooks->progress(r->hooks->ctx, json);
}

static bool hy_cancelled(void *ctx)
{
    const hy_relay *r = ctx;
    return r->hooks->cancelled && r->hooks->cancelled(r->hooks->ctx);
}

/* The user's source with params as the entry's defaults (caller frees). */
static char *hy_source(const kf_job_payload *job, const cJSON *params, kf_err *err)
{
    const char *tmp = getenv("TMPDIR"), *src = kf_jobprob_str(job->spec, "source");
    const char *entry = kf_jobprob_str(job->spec, "entry");
    char dir[PATH_MAX], path[PATH_MAX + 16], *out = NULL;
    FILE *f;

    snprintf(dir, sizeof(dir), "%s/kforge-hybrid-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!src || !entry) {
        kf_err_set(err, KF_UNPROCESSABLE, "hybrid needs spec.source and spec.entry");
        return NULL;
    }
    if (!mkdtemp(dir)) {
        kf_err_set(err, KF_IO, "cannot create a temporary folder: %s", strerror(errno));
        return NULL;
    }
    snprintf(path, sizeof(path), "%s/kernel.py", dir);
    f = fopen(path, "w");
    if (f) {
        bool ok = fputs(src, f) >= 0;
        ok = fclose(f) == 0 && ok;
        if (ok)
            out = ka_specialize_source(path, entry, params);
    }
    if (!out)
        kf_err_set(err, KF_IO, "cannot write the candidate's source in %s", dir);
    unlink(path);
    rmdir(dir);
    return out;
}

static kf_code hybrid_run(const kf_backend *self, const kf_job_payload *job, const kf_backend_hooks *hooks,
                          char **result_json, bool *retryable, kf_err *err)
{
    hy_relay relay = { hooks, 0, NULL, 0 };
    kf_backend_hooks h = { &relay, hy_progress, hy_cancelled };
    kf_job_payload sj = *job;
    cJSON *res = NULL, *conf, *cal, *best = NULL, *prov;
    const cJSON *path;
    char *sim_json = NULL;
    double best_ns = 0;
    int n, first;
    kf_code rc;

    (void)self;
    *result_json = NULL;
    *retryable = false;
    if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(job->spec, "tunables")) == 0)
        return kf_err_set(err, KF_UNPROCESSABLE, "the hybrid backend explores tunables on the simulator and confirms "
                          "the best on the device: give spec.tunables, or submit one evaluation with backend "
                          "\"neuron\"");
    snprintf(sj.backend, sizeof(sj.backend), "%s", "sim");
    rc = kf_backend_sim.run(&kf_backend_sim, &sj, &h, &sim_json, retryable, err);
    if (rc)
        return rc;
    res = cJSON_Parse(sim_json);
    free(sim_json);
    if (!cJSON_IsObject(res)) {
        cJSON_Delete(res);
        *retryable = true;
        return kf_err_set(err, KF_INTERNAL, "the simulator's result is not JSON");
    }
    conf = cJSON_AddArrayToObject(res, "confirmed");
    cal = cJSON_AddArrayToObject(res, "calibration");
    prov = cJSON_GetObjectItemCaseSensitive(res, "provenance");
    if (!prov)
        prov = cJSON_AddObjectToObject(res, "provenance");
    path = cJSON_GetObjectItemCaseSensitive(res, "path");
    n = cJSON_GetArraySize(path);
    first = n > HYBRID_CONFIRM ? n - HYBRID_CONFIRM : 0;
    for (int i = n - 1; i >= first; i--) {
        const cJSON *cand = cJSON_GetArrayItem(path, i), *params = cJSON_GetObjectItemCaseSensitive(cand, "params");
        kf_job_payload nj = *job;
        cJSON *spec = cJSON_Duplicate(job->spec, true), *one = cJSON_CreateObject(), *nres = NULL;
        char *src, *nres_s = NULL;
        bool nretry = false;
        kf_err ne = KF_ERR_INIT;

        cJSON_AddNumberToObject(one, "iteration", cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(cand, "iteration")));
        cJSON_AddItemToObject(one, "params", cJSON_Duplicate(params, true));
        cJSON_AddNumberToObject(one, "sim_latency_ns", cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(cand, "latency_ns")));
        cJSON_AddItemToArray(conf, one);
        src = hy_source(job, params, err);
        if (!src) {
            cJSON_Delete(spec);
            cJSON_Delete(res);
            *retryable = true;
            return err->code;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(spec, "tunables");
        cJSON_ReplaceItemInObjectCaseSensitive(spec, "source", cJSON_CreateString(src));
        free(src);
        nj.spec = spec;
        nj.kind = KF_KIND_OPTIMIZE;
        snprintf(nj.backend, sizeof(nj.backend), "%s", "neuron");
        relay.params = params;
        relay.sim_iteration = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(cand, "iteration"));
        rc = kf_backend_neuron.run(&kf_backend_neuron, &nj, &h, &nres_s, &nretry, &ne);
        relay.params = NULL;
        cJSON_Delete(spec);
        if (rc && nretry) {
            cJSON_Delete(res);
            *retryable = true;
            return kf_err_set(err, rc, "confirming on the device: %s", ne.msg);
        }
        cJSON_AddNumberToObject(one, "seq", relay.n);
        if (rc) {
            cJSON_AddStringToObject(one, "error", ne.msg);
            cJSON_AddBoolToObject(one, "correct", false);
            continue;
        }
        nres = cJSON_Parse(nres_s);
        free(nres_s);
        {
            const cJSON *lat = cJSON_GetObjectItemCaseSensitive(nres, "latency_ns"), *rec;
            bool ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(nres, "correct"));
            const cJSON *np = cJSON_GetObjectItemCaseSensitive(nres, "provenance"), *v;
            cJSON_AddBoolToObject(one, "correct", ok);
            if (cJSON_IsNumber(lat))
                cJSON_AddNumberToObject(one, "device_latency_ns", lat->valuedouble);
            cJSON_ArrayForEach(rec, cJSON_GetObjectItemCaseSensitive(nres, "calibration"))
            {
                cJSON *c = cJSON_Duplicate(rec, true);
                cJSON_ReplaceItemInObjectCaseSensitive(c, "seq", cJSON_CreateNumber(relay.n));
                cJSON_ReplaceItemInObjectCaseSensitive(c, "params", cJSON_Duplicate(params, true));
                cJSON_AddItemToArray(cal, c);
            }
            if (ok && cJSON_IsNumber(lat) && (!best || lat->valuedouble < best_ns)) {
                cJSON_Delete(best);
                best = cJSON_CreateObject();
                best_ns = lat->valuedouble;
                cJSON_AddNumberToObject(best, "seq", relay.n);
                cJSON_AddItemToObject(best, "params", cJSON_Duplicate(params, true));
                cJSON_AddNumberToObject(best, "latency_ns", best_ns);
                cJSON_AddNumberToObject(best, "sim_latency_ns",
                                        cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(cand, "latency_ns")));
                /* the device tools' versions and the best's NEFF */
                cJSON_ArrayForEach(v, np)
                {
                    if (cJSON_IsString(v) && strcmp(v->string, "backend") != 0) {
                        cJSON_DeleteItemFromObjectCaseSensitive(prov, v->string);
                        cJSON_AddStringToObject(prov, v->string, v->valuestring);
                    }
                }
            }
        }
        cJSON_Delete(nres);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(prov, "backend");
    cJSON_AddStringToObject(prov, "backend", "hybrid");
    cJSON_AddItemToObject(res, "device_best", best ? best : cJSON_CreateNull());
    *result_json = cJSON_PrintUnformatted(res);
    cJSON_Delete(res);
    return KF_OK;
}

static bool hybrid_available(const kf_backend *self)
{
    (void)self;
    return kf_backend_available(&kf_backend_sim) && kf_backend_available(&kf_backend_neuron);
}

static bool hybrid_health(const kf_backend *self, char *why, size_t len)
{
    (void)self;
    return !kf_backend_neuron.health || kf_backend_neuron.health(&kf_backend_neuron, why, len);
}

const kf_backend kf_backend_hybrid = {
    .name = "hybrid",
    .kinds = hybrid_kinds,
    .run = hybrid_run,
    .health = hybrid_health,
    .available = hybrid_available,
};
