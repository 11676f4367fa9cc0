/* kn_selftest — the neuron backend's first-machine checklist (see kn_selftest.h). */
#include "kn_selftest.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kf_backend.h"
#include "kf_buf.h"
#include "kf_job.h"
#include "kf_json.h"
#include "agent/ka_eval.h"

extern const kf_backend kf_backend_neuron;

static const char kn_st_kernel[] =
    "import nki\n"
    "import nki.language as nl\n"
    "import nki.isa as nisa\n"
    "\n"
    "\n"
    "@nki.jit\n"
    "def selftest_add(a, b):\n"
    "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
    "    at = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)\n"
    "    bt = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)\n"
    "    ct = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)\n"
    "    nisa.dma_copy(dst=at, src=a)\n"
    "    nisa.dma_copy(dst=bt, src=b)\n"
    "    nisa.tensor_tensor(dst=ct, data1=at, data2=bt, op=nl.add)\n"
    "    nisa.dma_copy(dst=out, src=ct)\n"
    "    return out\n";

static const char kn_st_reference[] = "def selftest_add(a, b):\n    return a + b\n";

typedef struct kn_st {
    cJSON *iteration;   /* the last iteration the backend reported */
} kn_st;

static void kn_st_progress(void *ctx, const char *json)
{
    kn_st *s = ctx;
    cJSON_Delete(s->iteration);
    s->iteration = cJSON_Parse(json);
}

static bool kn_st_never(void *ctx)
{
    (void)ctx;
    return false;
}

static int kn_st_item(FILE *out, bool ok, const char *what, const char *seen)
{
    fprintf(out, "[%s] %s%s%s\n", ok ? " ok " : "FAIL", what, seen && *seen ? ": " : "", seen ? seen : "");
    return ok ? 0 : 1;
}

static const char *kn_st_str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

int kn_selftest_run(FILE *out, const char *target)
{
    const kf_backend *b = &kf_backend_neuron;
    kf_buf body = KF_BUF_INIT;
    kf_job_payload job;
    kf_err err = KF_ERR_INIT;
    kn_st st = { NULL };
    kf_backend_hooks hooks = { &st, kn_st_progress, kn_st_never };
    char why[600] = "", seen[700], *result = NULL;
    bool retryable = false, neff = false, ntff = false;
    cJSON *res = NULL, *prof, *val, *prov, *sum;
    const cJSON *a;
    int fails = 0, n_sum = 0, checks = 0;
    const char *const *keys = ka_eval_summary_keys();
    kf_code rc;

    fprintf(out, "kforge-worker --self-test: the neuron backend on target %s (docs/neuron-backend.md)\n", target);
    if (!b->available(b)) {
        kn_st_item(out, false, "device runner (KFORGE_NEURON_RUNNER) found", "not an executable on PATH");
        return 1;
    }
    fails += kn_st_item(out, true, "device runner (KFORGE_NEURON_RUNNER) found", NULL);
    fails += kn_st_item(out, b->health(b, why, sizeof(why)), "device health (runner health)", why);
    if (fails)
        return 1;
    kf_buf_addf(&body, "{\"id\":\"00000000-0000-7000-8000-000000000001\",\"kind\":\"optimize\",\"target\":\"%s\","
                       "\"backend\":\"neuron\",\"spec\":{\"entry\":\"selftest_add\",\"inputs\":{"
                       "\"a\":{\"shape\":[128,512],\"dtype\":\"float32\"},\"b\":{\"shape\":[128,512],\"dtype\":"
                       "\"float32\"}},\"source\":",
                target);
    kf_json_add_str(&body, kn_st_kernel);
    kf_buf_adds(&body, ",\"reference\":");
    kf_json_add_str(&body, kn_st_reference);
    kf_buf_adds(&body, "},\"budget\":{},\"goal\":{}}");
    if (kf_job_payload_parse(body.data, &job, &err) != KF_OK) {
        kf_buf_release(&body);
        return kn_st_item(out, false, "the self-test job", err.msg);
    }
    kf_buf_release(&body);
    rc = b->run(b, &job, &hooks, &result, &retryable, &err);
    kf_job_payload_release(&job);
    snprintf(seen, sizeof(seen), "%s", rc ? err.msg : "");
    fails += kn_st_item(out, rc == KF_OK, "compile, run, validate and profile a 128x512 add", seen);
    res = result ? cJSON_Parse(result) : NULL;
    free(result);
    if (rc == KF_OK && res) {
        val = cJSON_GetObjectItemCaseSensitive(res, "validation");
        cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(val, "checks"))
            checks++;
        snprintf(seen, sizeof(seen), "%d checks", checks);
        fails += kn_st_item(out, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(val, "pass")) && checks == 3,
                            "device outputs equal the NumPy reference (3 seeds, every element)", seen);
        prof = cJSON_GetObjectItemCaseSensitive(res, "profile");
        {
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(prof, "latency_percentiles_ns");
            double p50 = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(p, "p50"));
            double p99 = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(p, "p99"));
            double tot = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(prof, "profiled_ns"));
            snprintf(seen, sizeof(seen), "p50 %.0f ns, p99 %.0f ns; the profile's total_time %.0f ns", p50, p99, tot);
            fails += kn_st_item(out, p50 > 0 && p99 >= p50, "latency percentiles of warm-up + timed runs", seen);
        }
        sum = cJSON_GetObjectItemCaseSensitive(prof, "summary");
        for (int i = 0; keys[i]; i++)
            n_sum += cJSON_GetObjectItemCaseSensitive(sum, keys[i]) != NULL;
        snprintf(seen, sizeof(seen), "%d of the fields the simulator's profile keeps", n_sum);
        fails += kn_st_item(out, cJSON_GetObjectItemCaseSensitive(sum, "total_time") != NULL,
                            "neuron-explorer summary-json fields (total_time at least)", seen);
        prov = cJSON_GetObjectItemCaseSensitive(res, "provenance");
        snprintf(seen, sizeof(seen), "compiler \"%s\", runtime \"%s\", driver \"%s\"", kn_st_str(prov, "compiler"),
                 kn_st_str(prov, "runtime"), kn_st_str(prov, "driver"));
        fails += kn_st_item(out, *kn_st_str(prov, "compiler") && *kn_st_str(prov, "runtime") &&
                                     *kn_st_str(prov, "driver"),
                            "versions for provenance (runner versions)", seen);
    }
    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(st.iteration, "artifacts"))
    {
        const char *b64 = kn_st_str(a, "content_base64");
        if (strcmp(kn_st_str(a, "name"), "kernel.neff") == 0)
            neff = strlen(b64) / 4 * 3 > 1024;
        if (strcmp(kn_st_str(a, "name"), "profile.ntff") == 0)
            ntff = *b64 != '\0';
    }
    if (rc == KF_OK)
        fails += kn_st_item(out, neff && ntff, "artifacts: kernel.neff (over its 1024-byte header) and profile.ntff",
                            NULL);
    cJSON_Delete(st.iteration);
    cJSON_Delete(res);
    fprintf(out, "%s\n", fails ? "self-test FAILED: see docs/neuron-backend.md \"To verify on a first real machine\""
                               : "self-test passed");
    return fails ? 1 : 0;
}
