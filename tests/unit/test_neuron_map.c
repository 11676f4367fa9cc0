/* kn_map: what the Neuron tools print, in kforge's terms.  The logs are
 * recorded shapes of neuronx-cc's failures: "<UTC time> [CODE] message"
 * (the compiler's logs), NCC_ codes of compiler/error-codes/, and the
 * kernel's frame of a Python traceback (the NKI front end runs the
 * kernel's Python). */
#include <criterion/criterion.h>
#include <string.h>

#include "workers/kn_map.h"
#include "sim/sim_target.h"

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double num(const cJSON *o, const char *k)
{
    return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

Test(kn_map, an_ncc_code_with_the_kernels_innermost_line)
{
    const char *log = "Traceback (most recent call last):\n"
                      "  File \"/opt/neuron/lib/nki/compile.py\", line 88, in trace\n"
                      "  File \"/tmp/kforge-neuron-1/kernel.py\", line 12, in tensor_add\n"
                      "  File \"/tmp/kforge-neuron-1/kernel.py\", line 17, in _tile\n"
                      "2026-12-02T19:44:14Z [NCC_EVRF004] Complex data types are not supported\n";
    cJSON *e = kn_map_compile_error(log, "kernel.py");
    cr_assert_str_eq(str(e, "code"), "NCC_EVRF004");
    cr_assert_eq(num(e, "line"), 17, "the innermost frame of the user's file");
    cr_assert_str_eq(str(e, "file"), "kernel.py");
    cr_assert(strncmp(str(e, "message"), "kernel.py:17: ", 14) == 0, "%s", str(e, "message"));
    cr_assert(strstr(str(e, "message"), "[NCC_EVRF004] Complex data types"), "%s", str(e, "message"));
    cJSON_Delete(e);
}

Test(kn_map, an_older_bracketed_code_and_a_diagnostic_location)
{
    const char *log = "compiling kernel.py:41 for trn1\n"
                      "2024-03-10T18:15:07Z [LUR015] Compiler generated too many instructions (13929091).\n";
    cJSON *e = kn_map_compile_error(log, "kernel.py");
    cr_assert_str_eq(str(e, "code"), "LUR015");
    cr_assert_eq(num(e, "line"), 41);
    cJSON_Delete(e);
}

Test(kn_map, no_code_keeps_the_last_line_and_no_location)
{
    cJSON *e = kn_map_compile_error("warming up\nSyntaxError: invalid syntax\n\n", "kernel.py");
    cr_assert_str_eq(str(e, "code"), "NCC_UNKNOWN");
    cr_assert_eq(num(e, "line"), 0);
    cr_assert_str_eq(str(e, "message"), "SyntaxError: invalid syntax");
    cJSON_Delete(e);
    e = kn_map_compile_error("", "kernel.py");
    cr_assert_str_eq(str(e, "message"), "the compiler failed without a message");
    cJSON_Delete(e);
}

Test(kn_map, summary_json_maps_onto_the_simulators_profile_fields)
{
    cJSON *sum = cJSON_Parse("{\"total_time\": 2e-5, \"model_flops\": 2e9, \"mfu_estimated_percent\": 40,"
                             "\"hbm_read_bytes\": 1048576, \"hbm_write_bytes\": 524288, \"not_kept\": 1,"
                             "\"inputs_outputs_weights_size_bytes\": 1572864}");
    cJSON *lat = cJSON_Parse("{\"p0\": 19.5, \"p50\": 20.0, \"p99\": 22.0, \"p100\": 23.0}");
    cJSON *nested = cJSON_CreateObject();
    ka_problem pb;
    sim_target tgt;
    kf_err err = KF_ERR_INIT;
    cJSON *p;
    double peak;

    cr_assert_eq(sim_target_load("trn2", NULL, &tgt, &err), KF_OK, "%s", err.msg);
    memset(&pb, 0, sizeof(pb));
    p = kn_map_profile(sum, lat, &pb, &tgt, 0);
    cr_assert_eq(num(p, "latency_ns"), 20000.0, "the median of the timed runs");
    cr_assert_eq(num(cJSON_GetObjectItemCaseSensitive(p, "latency_percentiles_ns"), "p99"), 22000.0);
    cr_assert_eq(num(cJSON_GetObjectItemCaseSensitive(p, "summary"), "mfu_estimated_percent"), 40);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "summary"), "not_kept"),
                   "only the fields a simulator profile keeps");
    peak = sim_target_te_peak_flops(&tgt);
    cr_assert_float_eq(num(cJSON_GetObjectItemCaseSensitive(p, "bounds"), "compute_ns"), 2e9 / peak * 1e9, 1e-6);
    cr_assert_float_eq(num(cJSON_GetObjectItemCaseSensitive(p, "bounds"), "necessary_io_ns"),
                       1572864 / sim_target_dma_bpns(&tgt), 1e-6);
    cr_assert_float_eq(num(p, "floor_ns"), num(cJSON_GetObjectItemCaseSensitive(p, "bounds"), "floor_ns"), 1e-9);
    cr_assert(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(p, "findings")));
    cJSON_Delete(p);

    /* the Summary under "summary" (an object, or an array of one row) reads the same */
    cJSON_AddItemToObject(nested, "summary", cJSON_CreateArray());
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(nested, "summary"), cJSON_Duplicate(sum, true));
    cr_assert_eq(num(kn_map_summary_fields(nested), "total_time"), 2e-5);
    cr_assert_null(kn_map_summary_fields(lat), "no Summary fields");
    cJSON_Delete(nested);
    cJSON_Delete(sum);
    cJSON_Delete(lat);
}
