/* Unit tests of common/kf_batchspec: a batch request checked and expanded
 * (docs/batches.md), with no service. */
#include <criterion/criterion.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_batchspec.h"
#include "kf_buf.h"

static const kf_batchspec_limits LIM = { 10000, 3, NULL };

static bool parse(const char *json, const kf_batchspec_limits *lim, kf_batchspec *b, kf_fields *fe)
{
    cJSON *body = cJSON_Parse(json);
    bool ok;

    cr_assert_not_null(body, "test JSON: %s", json);
    kf_fields_init(fe);
    ok = kf_batchspec_parse(body, lim, b, fe);
    cJSON_Delete(body);
    return ok;
}

/* The request must be refused with an error on field (and rule). */
static void refused(const char *json, const kf_batchspec_limits *lim, const char *field, const char *rule)
{
    kf_batchspec b;
    kf_fields fe;
    bool found = false;

    cr_assert_not(parse(json, lim, &b, &fe), "accepted: %s", json);
    cr_assert_eq(b.n, 0, "nothing kept after a refusal");
    cr_assert_null(b.entries);
    for (int i = 0; i < fe.n; i++)
        found = found || (strcmp(fe.e[i].field, field) == 0 && (!rule || strcmp(fe.e[i].rule, rule) == 0));
    if (!found) {
        char sum[1024];
        kf_fields_summary(&fe, sum, sizeof(sum));
        cr_assert_fail("%s: no %s (%s) error; got %s", json, field, rule ? rule : "any", sum);
    }
}

Test(batchspec, shape_signatures)
{
    char out[64];
    cJSON *v = cJSON_Parse("[[4096,8192],[8192]]");

    cr_assert(kf_batchspec_shape_sig(v, out, sizeof(out)));
    cr_assert_str_eq(out, "4096x8192,8192");
    cJSON_Delete(v);
    v = cJSON_Parse("[[]]");
    cr_assert(kf_batchspec_shape_sig(v, out, sizeof(out)));
    cr_assert_str_eq(out, "1", "a scalar");
    cJSON_Delete(v);
    v = cJSON_Parse("[[2.5]]");
    cr_assert_not(kf_batchspec_shape_sig(v, out, sizeof(out)));
    cJSON_Delete(v);
    v = cJSON_Parse("[3]");
    cr_assert_not(kf_batchspec_shape_sig(v, out, sizeof(out)));
    cJSON_Delete(v);
    v = cJSON_Parse("[[1,-2]]");
    cr_assert_not(kf_batchspec_shape_sig(v, out, sizeof(out)));
    cJSON_Delete(v);
}

Test(batchspec, a_matrix_expands_in_order_with_keys_and_the_batch_priority)
{
    kf_batchspec b;
    kf_fields fe;

    cr_assert(parse("{\"name\":\"n\",\"template\":{\"kind\":\"generate\",\"budget\":{\"iterations\":5}},\"matrix\":"
                    "{\"target\":[\"trn2\",\"trn3\"],\"op\":[\"rmsnorm\",\"softmax\",\"add\"],\"shapes\":[[[8,16]]],"
                    "\"dtype\":[\"float32\"]}}",
                    &LIM, &b, &fe),
              "%s", fe.e[0].detail);
    cr_assert_eq(b.n, 6);
    cr_assert_str_eq(b.name, "n");
    cr_assert_eq(b.priority, KF_BATCH_DEFAULT_PRIORITY);
    cr_assert_not(b.library);
    /* op varies slower than target, whatever order the axes were written in. */
    cr_assert_str_eq(b.entries[0].key, "rmsnorm|8x16|float32|trn2");
    cr_assert_str_eq(b.entries[1].key, "rmsnorm|8x16|float32|trn3");
    cr_assert_str_eq(b.entries[2].key, "softmax|8x16|float32|trn2");
    cr_assert_str_eq(b.entries[5].key, "add|8x16|float32|trn3");
    for (int i = 0; i < b.n; i++) {
        cr_assert_eq(b.entries[i].jr.kind, KF_KIND_GENERATE);
        cr_assert_eq(b.entries[i].jr.priority, 2);
        cr_assert_eq(cJSON_GetObjectItem(b.entries[i].coords, "seq")->valueint, i);
        cr_assert_eq(cJSON_GetObjectItem(b.entries[i].jr.budget, "iterations")->valueint, 5);
    }
    cr_assert_str_eq(cJSON_GetObjectItem(b.entries[3].coords, "shape")->valuestring, "8x16");
    kf_batchspec_release(&b);
    kf_batchspec_release(&b);   /* idempotent */
}

Test(batchspec, the_keys_text_is_the_same_whatever_the_axis_order)
{
    kf_batchspec a, b;
    kf_fields fe;
    char *ka, *kb;

    cr_assert(parse("{\"priority\":4,\"template\":{\"kind\":\"generate\"},\"matrix\":{\"op\":[\"x\",\"y\"],\"shapes\":"
                    "[[[1]]],\"dtype\":[\"float32\"],\"target\":[\"trn1\",\"trn2\"]}}", &LIM, &a, &fe));
    cr_assert(parse("{\"template\":{\"kind\":\"generate\",\"budget\":{\"iterations\":9}},\"matrix\":{\"target\":"
                    "[\"trn2\",\"trn1\"],\"dtype\":[\"float32\"],\"shapes\":[[[1]]],\"op\":[\"y\",\"x\"]}}", &LIM, &b, &fe));
    ka = kf_batchspec_keys(&a);
    kb = kf_batchspec_keys(&b);
    cr_assert_str_eq(ka, kb);
    cr_assert_str_eq(ka, "x|1|float32|trn1\nx|1|float32|trn2\ny|1|float32|trn1\ny|1|float32|trn2\n");
    cr_assert_eq(a.priority, 4);
    free(ka);
    free(kb);
    kf_batchspec_release(&a);
    kf_batchspec_release(&b);
}

Test(batchspec, a_user_kernel_varies_by_target_and_is_keyed_by_entry_and_inputs)
{
    kf_batchspec b;
    kf_fields fe;

    cr_assert(parse("{\"template\":{\"kind\":\"profile\",\"spec\":{\"source\":\"def k(x): pass\",\"entry\":\"k\","
                    "\"inputs\":{\"x\":{\"shape\":[4,8],\"dtype\":\"float16\"}}}},\"matrix\":{\"target\":[\"trn1\","
                    "\"inf2\"]}}", &LIM, &b, &fe),
              "%s: %s", fe.e[0].field, fe.e[0].detail);
    cr_assert_eq(b.n, 2);
    cr_assert_str_eq(b.entries[0].key, "k|x=4x8|float16|trn1");
    cr_assert_str_eq(b.entries[1].key, "k|x=4x8|float16|inf2");
    kf_batchspec_release(&b);
}

Test(batchspec, bad_requests_name_the_field)
{
    refused("[]", &LIM, "", "type");
    refused("{\"template\":{\"kind\":\"diag\"}}", &LIM, "matrix", "required");
    refused("{\"template\":{\"kind\":\"diag\"},\"matrix\":{}}", &LIM, "matrix", "required");
    refused("{\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[]}}", &LIM, "matrix.target", "count");
    refused("{\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":\"trn2\"}}", &LIM, "matrix.target", NULL);
    refused("{\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[\"trn2\",3]}}", &LIM, "matrix.target[1]",
            "type");
    refused("{\"template\":{\"kind\":\"generate\"},\"matrix\":{\"shapes\":[[[1]],[[1]]]}}", &LIM, "matrix.shapes[1]",
            "unique");
    refused("{\"template\":{\"kind\":\"generate\",\"spec\":{\"dtype\":\"float32\"}},\"matrix\":{\"dtype\":"
            "[\"bfloat16\"]}}", &LIM, "template.dtype", "axis");
    refused("{\"template\":{\"kind\":\"optimize\"},\"matrix\":{\"shapes\":[[[1]]]}}", &LIM, "template.kind", "axis");
    refused("{\"template\":{\"kind\":\"diag\",\"priority\":3},\"matrix\":{\"target\":[\"trn2\"]}}", &LIM,
            "template.priority", "batch");
    refused("{\"priority\":5,\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[\"trn2\"]}}", &LIM, "priority",
            "batch");
    refused("{\"name\":\"\",\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[\"trn2\"]}}", &LIM, "name",
            NULL);
    refused("{\"template\":{\"kind\":\"diag\"},\"matrix\":{\"target\":[\"trn2\"]},\"extra\":1}", &LIM, "extra",
            "unknown");
    /* The first entry that fails, with its own field path. */
    refused("{\"template\":{\"kind\":\"generate\"},\"matrix\":{\"op\":[\"a\",\"b c\"],\"shapes\":[[[1]]],"
            "\"dtype\":[\"float32\"],\"target\":[\"trn2\"]}}", &LIM, "entries[1].op", "pattern");
    refused("{\"template\":{\"kind\":\"generate\"},\"matrix\":{\"op\":[\"a\"],\"shapes\":[[[1]]],"
            "\"dtype\":[\"float99\"],\"target\":[\"trn2\"]}}", &LIM, "entries[0].dtype", "enum");
}

/* An axis of n string values "<prefix>0".."<prefix>n-1". */
static void axis(kf_buf *b, const char *name, const char *prefix, int n)
{
    kf_buf_addf(b, "\"%s\":[", name);
    for (int i = 0; i < n; i++)
        kf_buf_addf(b, "%s\"%s%d\"", i ? "," : "", prefix, i);
    kf_buf_adds(b, "]");
}

Test(batchspec, the_job_limit_is_checked_on_the_product_before_anything_is_built)
{
    kf_batchspec_limits lim = { 10, 3, NULL };
    kf_buf big = KF_BUF_INIT;

    refused("{\"template\":{\"kind\":\"generate\"},\"matrix\":{\"op\":[\"a\",\"b\",\"c\",\"d\"],\"shapes\":"
            "[[[1]],[[2]],[[3]]],\"dtype\":[\"float32\"],\"target\":[\"trn2\"]}}", &lim, "matrix", "limit");
    /* 1024^3 x 4 would overflow a 32-bit count: still a clean "limit". */
    kf_buf_adds(&big, "{\"template\":{\"kind\":\"generate\"},\"matrix\":{");
    axis(&big, "op", "o", 1024);
    kf_buf_adds(&big, ",\"shapes\":[");
    for (int i = 0; i < 1024; i++)
        kf_buf_addf(&big, "%s[[%d]]", i ? "," : "", i + 1);
    kf_buf_adds(&big, "],");
    axis(&big, "dtype", "d", 1024);
    kf_buf_adds(&big, ",\"target\":[\"trn1\",\"trn2\",\"trn3\",\"inf2\"]}}");
    lim.max_jobs = 1000000;
    refused(big.data, &lim, "matrix", "limit");
    kf_buf_release(&big);
    /* 1025 values in one axis. */
    kf_buf_adds(&big, "{\"template\":{\"kind\":\"generate\"},\"matrix\":{");
    axis(&big, "op", "o", 1025);
    kf_buf_adds(&big, "}}");
    refused(big.data, &lim, "matrix.op", "count");
    kf_buf_release(&big);
}

static cJSON *fake_library(void)
{
    return cJSON_Parse("[{\"op\":\"add\",\"reference_shapes\":[[64,32],[64,32]]},"
                       "{\"op\":\"notes\"},"
                       "{\"op\":\"softmax\",\"reference_shapes\":[[128,256]]}]");
}

Test(batchspec, the_library_form_takes_every_op_at_its_reference_shapes)
{
    cJSON *idx = fake_library();
    kf_batchspec_limits lim = { 100, 3, idx };
    kf_batchspec b;
    kf_fields fe;

    cr_assert(parse("{\"library\":\"all\",\"targets\":[\"trn2\",\"trn3\"],\"budget\":{\"iterations\":7},"
                    "\"priority\":1}", &lim, &b, &fe), "%s: %s", fe.e[0].field, fe.e[0].detail);
    cr_assert(b.library);
    cr_assert_eq(b.n, 4, "add and softmax (notes declares no shapes) on two targets");
    cr_assert_str_eq(b.entries[0].key, "add|64x32,64x32|bfloat16|trn2");
    cr_assert_str_eq(b.entries[3].key, "softmax|128x256|bfloat16|trn3");
    cr_assert_eq(b.entries[0].jr.priority, 1);
    cr_assert_eq(cJSON_GetObjectItem(b.entries[2].jr.budget, "iterations")->valueint, 7);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(b.matrix, "op")), 2);
    kf_batchspec_release(&b);

    cr_assert(parse("{\"library\":[\"softmax\"],\"targets\":[\"trn1\"],\"dtypes\":[\"float32\",\"float16\"]}",
                    &lim, &b, &fe));
    cr_assert_eq(b.n, 2);
    cr_assert_str_eq(b.entries[1].key, "softmax|128x256|float16|trn1");
    kf_batchspec_release(&b);

    refused("{\"library\":[\"softmax\",\"notes\"],\"targets\":[\"trn1\"]}", &lim, "library[1]", "enum");
    refused("{\"library\":\"everything\",\"targets\":[\"trn1\"]}", &lim, "library", "enum");
    refused("{\"library\":\"all\",\"targets\":[\"trn1\"],\"template\":{}}", &lim, "template", "unknown");
    lim.max_jobs = 3;
    refused("{\"library\":\"all\",\"targets\":[\"trn1\",\"trn2\"]}", &lim, "targets", "limit");
    lim.library = NULL;
    refused("{\"library\":\"all\",\"targets\":[\"trn1\"]}", &lim, "library", "unavailable");
    cJSON_Delete(idx);
}
