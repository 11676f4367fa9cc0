/* kn_calib: a device profile next to the simulator's prediction.  The
 * device side is shaped as kn_map_profile writes it and as the profile
 * schema's Instruction table names its fields (duration_ns,
 * nki_source_location "file.py:42", possibly a list after fusion); the
 * simulator side as ka_eval_run's timing result and profile.json. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "workers/kn_calib.h"

static const char *sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

static double num(const cJSON *o, const char *k)
{
    return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

Test(kn_calib, the_record_pairs_the_devices_numbers_with_the_simulators_and_ranks_lines_by_difference)
{
    cJSON *dev = cJSON_Parse("{\"latency_ns\": 1000, \"profiled_ns\": 950, \"summary\": "
                             "{\"tensor_engine_active_time_percent\": 80, \"vector_engine_active_time_percent\": 10,"
                             " \"dma_active_time_percent\": 60}}");
    cJSON *doc = cJSON_Parse("{\"summary\": [{\"total_time\": 9.5e-7}], \"instruction\": ["
                             "{\"engine\": \"tensor\", \"duration_ns\": 300, \"nki_source_location\": \"/x/kernel.py:10\"},"
                             "{\"engine\": \"tensor\", \"duration_ns\": 200, \"nki_source_location\": \"kernel.py:10\"},"
                             "{\"engine\": \"vector\", \"start_ts\": 5, \"end_ts\": 105, "
                             " \"nki_source_location\": [\"kernel.py:12\", \"kernel.py:13\"]},"
                             "{\"engine\": \"scalar\", \"duration_ns\": 40, \"nki_source_location\": \"[\\\"kernel.py:14\\\"]\"},"
                             "{\"engine\": \"sync\", \"duration_ns\": 7}]}");
    cJSON *sim = cJSON_Parse("{\"ok\": true, \"latency_ns\": 1100, \"summary\": "
                             "{\"tensor_engine_active_time_percent\": 70, \"vector_engine_active_time_percent\": 20}}");
    cJSON *sdoc = cJSON_Parse("{\"lines\": ["
                              "{\"nki_source_location\": \"/sandbox/kernel.py:10\", \"time_ns\": 700, "
                              " \"time_ns_by_engine\": {\"tensor\": 450, \"dma\": 250}},"
                              "{\"nki_source_location\": \"/sandbox/kernel.py:12\", \"time_ns\": 100},"
                              "{\"nki_source_location\": \"/sandbox/kernel.py:20\", \"time_ns\": 30, "
                              " \"time_ns_by_engine\": {\"dma\": 30}}]}");
    cJSON *params = cJSON_Parse("{\"tile\": 128}");
    cJSON *rec = kn_calib_record(dev, kn_calib_instructions(doc), sim, sdoc, 3, sha, params);
    const cJSON *eng, *lines, *l;

    cr_assert_not_null(rec);
    cr_assert_eq(num(rec, "seq"), 3);
    cr_assert_str_eq(str(rec, "kernel_sha256"), sha);
    cr_assert_eq(num(cJSON_GetObjectItemCaseSensitive(rec, "params"), "tile"), 128);
    cr_assert_eq(num(rec, "device_latency_ns"), 1000);
    cr_assert_eq(num(rec, "device_profile_ns"), 950);
    cr_assert_eq(num(rec, "sim_ns"), 1100);
    eng = cJSON_GetObjectItemCaseSensitive(rec, "engines");
    cr_assert_eq(num(cJSON_GetObjectItemCaseSensitive(eng, "tensor"), "device_percent"), 80);
    cr_assert_eq(num(cJSON_GetObjectItemCaseSensitive(eng, "tensor"), "sim_percent"), 70);
    cr_assert_eq(num(cJSON_GetObjectItemCaseSensitive(eng, "vector"), "sim_percent"), 20);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(eng, "dma"), "only engines both sides give");
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(eng, "gpsimd"));

    /* line 10: device 500 vs sim 450 (its DMA part left out); 12: 100 vs
     * 100; 14: 40 vs 0; the sync row has no location; line 20 is DMA only */
    lines = cJSON_GetObjectItemCaseSensitive(rec, "lines");
    cr_assert_eq(cJSON_GetArraySize(lines), 3, "%s", cJSON_PrintUnformatted(lines));
    l = cJSON_GetArrayItem(lines, 0);
    cr_assert_str_eq(str(l, "loc"), "kernel.py:10");
    cr_assert_eq(num(l, "device_ns"), 500);
    cr_assert_eq(num(l, "sim_ns"), 450);
    l = cJSON_GetArrayItem(lines, 1);
    cr_assert_str_eq(str(l, "loc"), "kernel.py:14");
    cr_assert_eq(num(l, "device_ns"), 40);
    cr_assert_eq(num(l, "sim_ns"), 0);
    l = cJSON_GetArrayItem(lines, 2);
    cr_assert_str_eq(str(l, "loc"), "kernel.py:12", "the first location of a fused instruction");
    cr_assert_eq(num(l, "device_ns"), 100, "end_ts - start_ts when duration_ns is absent");
    cr_assert_eq(num(l, "sim_ns"), 100);
    cJSON_Delete(rec);

    /* no instruction table: the record without lines */
    rec = kn_calib_record(dev, NULL, sim, sdoc, 1, sha, NULL);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(rec, "lines")), 0);
    cr_assert(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(rec, "params")));
    cJSON_Delete(rec);
    cJSON_Delete(dev);
    cJSON_Delete(doc);
    cJSON_Delete(sim);
    cJSON_Delete(sdoc);
    cJSON_Delete(params);
}

Test(kn_calib, no_record_without_a_time_on_both_sides)
{
    cJSON *dev = cJSON_Parse("{\"latency_ns\": 1000, \"summary\": {}}");
    cJSON *nodev = cJSON_Parse("{\"latency_ns\": 0}");
    cJSON *sim = cJSON_Parse("{\"ok\": true, \"latency_ns\": 900}");
    cJSON *nosim = cJSON_Parse("{\"ok\": false}");
    cJSON *rec;

    cr_assert_null(kn_calib_record(nodev, NULL, sim, NULL, 1, sha, NULL));
    cr_assert_null(kn_calib_record(dev, NULL, nosim, NULL, 1, sha, NULL));
    cr_assert_null(kn_calib_record(dev, NULL, sim, NULL, 1, NULL, NULL));
    rec = kn_calib_record(dev, NULL, sim, NULL, 1, sha, NULL);
    cr_assert_not_null(rec);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(rec, "device_profile_ns")), "no total_time: null");
    cr_assert(fabs(num(rec, "sim_ns") / num(rec, "device_latency_ns") - 0.9) < 1e-12);
    cr_assert_null(kn_calib_instructions(sim));
    cJSON_Delete(rec);
    cJSON_Delete(dev);
    cJSON_Delete(nodev);
    cJSON_Delete(sim);
    cJSON_Delete(nosim);
}
