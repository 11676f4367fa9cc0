/* Unit tests for common/kf_json and common/kf_job: bounded parsing and the
 * validation of job requests and queue payloads (no services). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kf_job.h"
#include "kf_json.h"

static cJSON *parse_ok(const char *s)
{
    cJSON *v = NULL;
    kf_err e = KF_ERR_INIT;
    cr_assert_eq(kf_json_parse(s, strlen(s), KF_JSON_MAX_DEPTH, &v, &e), KF_OK, "%s: %s", s, e.msg);
    return v;
}

Test(kf_json, utf8_is_checked_strictly)
{
    size_t at = 0;
    cr_assert(kf_utf8_valid("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 15, &at));
    cr_assert(!kf_utf8_valid("\xc0\xaf", 2, &at), "overlong slash");
    cr_assert(!kf_utf8_valid("ab\xed\xa0\x80", 5, &at), "surrogate");
    cr_assert_eq(at, 2);
    cr_assert(!kf_utf8_valid("\xf4\x90\x80\x80", 4, &at), "above U+10FFFF");
    cr_assert(!kf_utf8_valid("\xe2\x82", 2, &at), "truncated");
    cr_assert(!kf_utf8_valid("\xff", 1, &at));
}

Test(kf_json, parse_refuses_bad_utf8_depth_trailing_and_duplicates)
{
    cJSON *v = NULL;
    kf_err e = KF_ERR_INIT;
    char deep[200];

    cr_assert_eq(kf_json_parse("{\"a\":\"\xff\"}", 9, 32, &v, &e), KF_INVALID);
    cr_assert(strstr(e.msg, "UTF-8"), "%s", e.msg);
    memset(deep, '[', 40);
    memset(deep + 40, ']', 40);
    cr_assert_eq(kf_json_parse(deep, 80, 32, &v, &e), KF_INVALID);
    cr_assert(strstr(e.msg, "deeper"), "%s", e.msg);
    cr_assert_eq(kf_json_parse(deep + 8, 64, 32, &v, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(kf_json_depth(v), 32);
    cJSON_Delete(v);
    cr_assert_eq(kf_json_parse("{} x", 4, 32, &v, &e), KF_INVALID);
    cr_assert(strstr(e.msg, "after"), "%s", e.msg);
    cr_assert_eq(kf_json_parse("{\"a\":1,\"b\":{\"c\":1,\"c\":2}}", 25, 32, &v, &e), KF_INVALID);
    cr_assert(strstr(e.msg, "\"c\" appears twice"), "%s", e.msg);
    cr_assert_eq(kf_json_parse("{\"a\": \"[[[[\"}  \n", 16, 2, &v, &e), KF_OK, "brackets in strings: %s", e.msg);
    cJSON_Delete(v);
    cr_assert_eq(kf_json_parse("", 0, 32, &v, &e), KF_INVALID);
    cr_assert_null(v);
}

/* One invalid request and the (field, rule) it must be refused with. */
typedef struct bad_case {
    const char *body;
    const char *field;
    const char *rule;
} bad_case;

#define DIAG "\"kind\":\"diag\",\"target\":\"trn2\""
#define SRC "\"source\":\"import nki\",\"entry\":\"k\",\"inputs\":{\"x\":{\"shape\":[128,512],\"dtype\":\"float32\"}}"

static const bad_case bad_cases[] = {
    { "{\"target\":\"trn2\"}", "kind", "required" },
    { "{\"kind\":\"nope\",\"target\":\"trn2\"}", "kind", "enum" },
    { "{\"kind\":7,\"target\":\"trn2\"}", "kind", "type" },
    { "{\"kind\":\"diag\"}", "target", "required" },
    { "{\"kind\":\"diag\",\"target\":\"trn9\"}", "target", "enum" },
    { "{" DIAG ",\"backend\":\"gpu\"}", "backend", "enum" },
    { "{" DIAG ",\"backend\":\"sim\"}", "backend", "enum" },
    { "{" DIAG ",\"priority\":10}", "priority", "range" },
    { "{" DIAG ",\"priority\":-1}", "priority", "range" },
    { "{" DIAG ",\"priority\":1.5}", "priority", "type" },
    { "{" DIAG ",\"priority\":\"5\"}", "priority", "type" },
    { "{" DIAG ",\"max_attempts\":0}", "max_attempts", "range" },
    { "{" DIAG ",\"max_attempts\":21}", "max_attempts", "range" },
    { "{" DIAG ",\"budget\":[]}", "budget", "type" },
    { "{" DIAG ",\"budget\":{\"iterations\":0}}", "budget.iterations", "range" },
    { "{" DIAG ",\"budget\":{\"seconds\":86401}}", "budget.seconds", "range" },
    { "{" DIAG ",\"budget\":{\"minutes\":1}}", "budget.minutes", "unknown" },
    { "{" DIAG ",\"goal\":{\"latency_ns\":0}}", "goal.latency_ns", "range" },
    { "{" DIAG ",\"goal\":{\"fraction_of_bound\":1.5}}", "goal.fraction_of_bound", "range" },
    { "{" DIAG ",\"goal\":{\"latency_ns\":5,\"fraction_of_bound\":0.5}}", "goal", "exclusive" },
    { "{" DIAG ",\"goal\":{\"speed\":1}}", "goal.speed", "unknown" },
    { "{" DIAG ",\"labels\":{\"team\":1}}", "labels.team", "type" },
    { "{" DIAG ",\"labels\":{\"1bad\":\"x\"}}", "labels.1bad", "pattern" },
    { "{" DIAG ",\"labels\":\"x\"}", "labels", "type" },
    { "{" DIAG ",\"extra\":true}", "extra", "unknown" },
    { "{" DIAG ",\"spec\":{\"sleep_ms\":600001}}", "spec.sleep_ms", "range" },
    { "{" DIAG ",\"spec\":{\"sleep_ms\":-5}}", "spec.sleep_ms", "range" },
    { "{" DIAG ",\"spec\":{\"fail\":\"yes\"}}", "spec.fail", "type" },
    { "{" DIAG ",\"spec\":{\"crash\":1}}", "spec.crash", "type" },
    { "{" DIAG ",\"spec\":{\"exit_code\":256}}", "spec.exit_code", "range" },
    { "{" DIAG ",\"spec\":{\"op\":\"x\"}}", "spec.op", "unknown" },
    { "{" DIAG ",\"spec\":3}", "spec", "type" },
    { "{" DIAG ",\"sleep_ms\":1,\"spec\":{}}", "sleep_ms", "unknown" },
    { "{" DIAG ",\"sleep_ms\":\"1\"}", "sleep_ms", "type" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"dtype\":\"float32\",\"shapes\":[[4]]}", "op", "required" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rms norm\",\"dtype\":\"float32\",\"shapes\":[[4]]}", "op", "pattern" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"fp64\",\"shapes\":[[4]]}", "dtype", "enum" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[]}", "shapes", "count" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[0]]}", "shapes[0][0]", "range" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[1,2,3,4,5,6,7,8,9]]}", "shapes[0]", "count" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[4]],\"source\":\"x\"}", "source", "unknown" },
    /* warm_start, which the API adds from the kernel library (docs/library.md) */
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[4]],\"warm_start\":[]}", "warm_start", "type" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[4]],\"warm_start\":{\"params\":{}}}", "warm_start.entry", "required" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[4]],\"warm_start\":{\"entry\":\"a/b\",\"params\":{}}}", "warm_start.entry", "pattern" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[4]],\"warm_start\":{\"entry\":\"e\"}}", "warm_start.params", "required" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[4]],\"warm_start\":{\"entry\":\"e\",\"params\":{\"T\":[1]}}}", "warm_start.params", "type" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[4]],\"warm_start\":{\"entry\":\"e\",\"params\":{\"2T\":1}}}", "warm_start.params", "type" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[4]],\"warm_start\":{\"entry\":\"e\",\"params\":{\"T\":1e400}}}", "warm_start.params", "type" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[4]],\"warm_start\":{\"entry\":\"e\",\"params\":{},\"latency_ns\":-1}}", "warm_start.latency_ns", "range" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[4]],\"warm_start\":{\"entry\":\"e\",\"params\":{},\"why\":1}}", "warm_start.why", "unknown" },
    { "{\"kind\":\"profile\",\"target\":\"trn2\",\"entry\":\"k\",\"inputs\":{\"x\":{\"shape\":[1],\"dtype\":\"float32\"}}}", "source", "required" },
    { "{\"kind\":\"profile\",\"target\":\"trn2\",\"source\":\"s\",\"entry\":\"2k\",\"inputs\":{\"x\":{\"shape\":[1],\"dtype\":\"float32\"}}}", "entry", "pattern" },
    { "{\"kind\":\"profile\",\"target\":\"trn2\",\"source\":\"\",\"entry\":\"k\",\"inputs\":{\"x\":{\"shape\":[1],\"dtype\":\"float32\"}}}", "source", "length" },
    { "{\"kind\":\"profile\",\"target\":\"trn2\",\"source\":\"s\",\"entry\":\"k\"}", "inputs", "required" },
    { "{\"kind\":\"profile\",\"target\":\"trn2\",\"source\":\"s\",\"entry\":\"k\",\"inputs\":{}}", "inputs", "count" },
    { "{\"kind\":\"profile\",\"target\":\"trn2\",\"source\":\"s\",\"entry\":\"k\",\"inputs\":{\"x\":{\"shape\":[1]}}}", "inputs.x.dtype", "required" },
    { "{\"kind\":\"profile\",\"target\":\"trn2\",\"source\":\"s\",\"entry\":\"k\",\"inputs\":{\"x\":{\"shape\":[1],\"dtype\":\"float32\",\"layout\":1}}}", "inputs.x.layout", "unknown" },
    { "{\"kind\":\"profile\",\"target\":\"trn2\",\"source\":\"s\",\"entry\":\"k\",\"inputs\":{\"x\":{\"shape\":\"1\",\"dtype\":\"float32\"}}}", "inputs.x.shape", "type" },
    { "{\"kind\":\"profile\",\"target\":\"trn2\",\"reference\":\"r\"," SRC "}", "reference", "unknown" },
    { "{\"kind\":\"optimize\",\"target\":\"trn2\"," SRC "}", "reference", "required" },
    { "{\"kind\":\"optimize\",\"target\":\"trn2\",\"reference\":\"r\",\"tunables\":{\"T\":[]}," SRC "}", "tunables.T", "count" },
    { "{\"kind\":\"optimize\",\"target\":\"trn2\",\"reference\":\"r\",\"tunables\":{\"T\":[{}]}," SRC "}", "tunables.T", "type" },
    { "{\"kind\":\"optimize\",\"target\":\"trn2\",\"reference\":\"r\",\"tunables\":[1]," SRC "}", "tunables", "type" },
    { "{\"kind\":\"validate\",\"target\":\"trn2\",\"tunables\":{}," SRC "}", "tunables", "unknown" },
    /* Nothing to validate against: the worker would refuse it. */
    { "{\"kind\":\"validate\",\"target\":\"trn2\"," SRC "}", "reference", "required" },
    /* the planner (docs/llm.md, Jobs) */
    { "{\"kind\":\"optimize\",\"target\":\"trn2\",\"reference\":\"r\",\"planner\":\"gpt\"," SRC "}", "planner", "enum" },
    { "{\"kind\":\"optimize\",\"target\":\"trn2\",\"backend\":\"neuron\",\"reference\":\"r\",\"planner\":\"llm\"," SRC "}", "planner", "backend" },
    { "{\"kind\":\"validate\",\"target\":\"trn2\",\"reference\":\"r\",\"planner\":\"llm\"," SRC "}", "planner", "unknown" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[4]],\"budget\":{\"llm_tokens\":0}}", "budget.llm_tokens", "range" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"gelu\",\"dtype\":\"float32\",\"shapes\":[[4]],\"reference\":\"def gelu(x): pass\"}", "reference", "planner" },
    { "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\",\"shapes\":[[4]],\"budget\":{\"llm_tokens\":1.5}}", "budget.llm_tokens", "type" },
    { "{\"kind\":\"auto\",\"target\":\"trn2\"}", "kind", "auto" },
    { "[]", "", "type" },
};

Test(kf_job, every_bad_field_is_named_with_its_rule)
{
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const bad_case *c = &bad_cases[i];
        cJSON *v = parse_ok(c->body);
        kf_job_request jr;
        kf_fields fe;
        bool found = false;

        kf_fields_init(&fe);
        cr_assert(!kf_job_request_parse(v, 3, &jr, &fe), "case %zu accepted: %s", i, c->body);
        for (int k = 0; k < fe.n; k++)
            found = found || (strcmp(fe.e[k].field, c->field) == 0 && strcmp(fe.e[k].rule, c->rule) == 0);
        cr_assert(found, "case %zu %s: want %s/%s, got %s/%s (%d errors)", i, c->body, c->field, c->rule,
                  fe.n ? fe.e[0].field : "-", fe.n ? fe.e[0].rule : "-", fe.n);
        cr_assert_null(jr.spec);
        cJSON_Delete(v);
    }
}

Test(kf_job, good_requests_get_defaults_and_a_spec)
{
    static const char *const good[] = {
        "{" DIAG "}",
        "{" DIAG ",\"spec\":{\"sleep_ms\":100,\"fail\":true}}",
        "{" DIAG ",\"sleep_ms\":5,\"crash\":false,\"priority\":9,\"max_attempts\":20,\"labels\":{\"team\":\"infra\"}}",
        "{\"kind\":\"generate\",\"target\":\"inf2\",\"op\":\"rmsnorm\",\"dtype\":\"bfloat16\",\"shapes\":[[4096,8192],[8192]]}",
        "{\"kind\":\"optimize\",\"target\":\"trn2\",\"backend\":\"sim\",\"reference\":\"r\",\"tunables\":{\"TILE\":[256,512]},"
        "\"budget\":{\"iterations\":40,\"seconds\":900},\"goal\":{\"fraction_of_bound\":0.9}," SRC "}",
        "{\"kind\":\"validate\",\"target\":\"trn1\",\"reference\":\"r\"," SRC "}",
        "{\"kind\":\"auto\",\"target\":\"trn3\",\"reference\":\"r\"," SRC "}",
        "{\"kind\":\"generate\",\"target\":\"trn2\",\"spec\":{\"op\":\"rmsnorm\",\"dtype\":\"bfloat16\",\"shapes\":[[64,64],[64]],"
        "\"planner\":\"llm\"},\"budget\":{\"llm_tokens\":50000}}",
        "{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"gelu\",\"dtype\":\"bfloat16\",\"shapes\":[[128,1000]],"
        "\"planner\":\"llm\",\"reference\":\"def gelu(x): pass\"}",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        cJSON *v = parse_ok(good[i]);
        kf_job_request jr;
        kf_fields fe;
        kf_fields_init(&fe);
        cr_assert(kf_job_request_parse(v, 3, &jr, &fe), "case %zu refused: %s: %s/%s", i, good[i],
                  fe.n ? fe.e[0].field : "", fe.n ? fe.e[0].rule : "");
        cr_assert(cJSON_IsObject(jr.spec));
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(jr.budget, "iterations")));
        if (i == 0) {
            cr_assert_str_eq(jr.backend, "diag");
            cr_assert_eq(jr.priority, 5);
            cr_assert_eq(jr.max_attempts, 3);
            cr_assert_eq(cJSON_GetObjectItem(jr.spec, "sleep_ms")->valueint, 0);
        }
        if (i == 2) {
            cr_assert_eq(cJSON_GetObjectItem(jr.spec, "sleep_ms")->valueint, 5);
            cr_assert_eq(jr.max_attempts, 20);
            cr_assert_str_eq(cJSON_GetObjectItem(jr.labels, "team")->valuestring, "infra");
        }
        if (i == 6)
            cr_assert_eq(jr.kind, KF_KIND_OPTIMIZE);
        if (i == 8)
            cr_assert_str_eq(cJSON_GetObjectItem(jr.spec, "reference")->valuestring, "def gelu(x): pass");
        if (i == 7) {
            cr_assert_str_eq(cJSON_GetObjectItem(jr.spec, "planner")->valuestring, "llm");
            cr_assert_eq(cJSON_GetObjectItem(jr.budget, "llm_tokens")->valueint, 50000);
        } else {
            cr_assert_null(cJSON_GetObjectItem(jr.budget, "llm_tokens"), "no token budget unless given");
        }
        kf_job_request_release(&jr);
        kf_job_request_release(&jr); /* idempotent */
        cJSON_Delete(v);
    }
}

Test(kf_job, payload_round_trips_and_is_checked_again)
{
    kf_err e = KF_ERR_INIT;
    kf_job_payload p;
    char *s = kf_job_payload_build("5bd35d24-a80d-4ced-9c48-7d25c358dfdb", "diag", "trn2", "diag",
                                   "{\"sleep_ms\":250,\"fail\":true,\"crash\":false,\"exit_code\":3}",
                                   "{\"iterations\":20,\"seconds\":900}", "{}", &e);
    cr_assert_not_null(s, "%s", e.msg);
    cr_assert_eq(kf_job_payload_parse(s, &p, &e), KF_OK, "%s", e.msg);
    cr_assert_str_eq(p.id, "5bd35d24-a80d-4ced-9c48-7d25c358dfdb");
    cr_assert_eq(p.kind, KF_KIND_DIAG);
    cr_assert_eq(p.diag.sleep_ms, 250);
    cr_assert(p.diag.fail);
    cr_assert_eq(p.diag.exit_code, 3);
    kf_job_payload_release(&p);
    free(s);

    cr_assert_null(kf_job_payload_build("x", "diag", "trn2", "diag", "[", "{}", "{}", &e));
    s = kf_job_payload_build("5bd35d24-a80d-4ced-9c48-7d25c358dfdb", "diag", "trn2", "diag", "{\"sleep_ms\":-1}",
                             "{}", "{}", &e);
    cr_assert_eq(kf_job_payload_parse(s, &p, &e), KF_INVALID);
    cr_assert(strstr(e.msg, "spec.sleep_ms"), "%s", e.msg);
    free(s);
    cr_assert_eq(kf_job_payload_parse("{\"id\":\"nope\"}", &p, &e), KF_INVALID);
    cr_assert(kf_uuid_valid("5BD35D24-a80d-4ced-9c48-7d25c358dfdb"));
    cr_assert(!kf_uuid_valid("5bd35d24-a80d-4ced-9c48-7d25c358dfd"));
    cr_assert(!kf_uuid_valid("5bd35d24xa80d-4ced-9c48-7d25c358dfdb"));
    cr_assert(kf_job_state_terminal("dead"));
    cr_assert(!kf_job_state_terminal("retrying"));
}

Test(kf_job, new_ids_are_version_7_uuids_that_sort_by_time)
{
    char a[37], b[37], c[37];
    struct timespec two_ms = { 0, 2000000L };

    cr_assert(kf_uuid_v7(a));
    cr_assert(kf_uuid_v7(b));
    nanosleep(&two_ms, NULL);
    cr_assert(kf_uuid_v7(c));
    cr_assert(kf_uuid_valid(a) && kf_uuid_valid(b) && kf_uuid_valid(c), "%s %s %s", a, b, c);
    cr_assert_neq(strcmp(a, b), 0, "two ids alike: %s", a);
    /* version nibble 7, variant bits 10 */
    cr_assert_eq(a[14], '7', "%s", a);
    cr_assert(strchr("89ab", a[19]) != NULL, "%s", a);
    /* the first 48 bits are the Unix time in ms: a later id sorts later */
    cr_assert_lt(strcmp(a, c), 0, "%s then %s", a, c);
    {
        char ms_hex[13];
        long long ms, now = (long long)time(NULL) * 1000;
        memcpy(ms_hex, a, 8);
        memcpy(ms_hex + 8, a + 9, 4);
        ms_hex[12] = '\0';
        ms = strtoll(ms_hex, NULL, 16);
        cr_assert(ms > now - 5000 && ms < now + 5000, "time field %lld, now %lld", ms, now);
    }
}

/* ---- issue 22: what a fuzzer found -------------------------------------------- */

#define GEN "\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"rmsnorm\",\"dtype\":\"float32\""
#define OPT "\"kind\":\"optimize\",\"target\":\"trn2\",\"reference\":\"r\",\"source\":\"s\",\"entry\":\"k\""

/* ---- bug 5: text is cut on character boundaries -------------------------- */

static void assert_utf8(const char *s, const char *what)
{
    size_t at = 0;
    cr_assert(kf_utf8_valid(s, strlen(s), &at), "%s is not UTF-8 (byte %zu): %s", what, at, s);
}

/* Every field, detail and the summary of the errors a body gets. */
static void assert_errors_utf8(const char *body)
{
    cJSON *v = parse_ok(body);
    kf_job_request jr;
    kf_fields fe;
    char sum[600];

    kf_fields_init(&fe);
    cr_assert(!kf_job_request_parse(v, 3, &jr, &fe), "accepted: %s", body);
    for (int k = 0; k < fe.n; k++) {
        assert_utf8(fe.e[k].field, "a field path");
        assert_utf8(fe.e[k].detail, "a detail");
    }
    kf_fields_summary(&fe, sum, sizeof(sum));
    assert_utf8(sum, "the summary");
    cJSON_Delete(v);
}

/* k ASCII bytes, then `ch` (a multi-byte character) four times. */
static void name_at(char *out, size_t cap, int k, const char *ch)
{
    int n = 0;
    for (int i = 0; i < k && (size_t)n + 1 < cap; i++)
        out[n++] = (char)('a' + i % 26);
    for (int i = 0; i < 4 && (size_t)n + strlen(ch) < cap; i++, n += (int)strlen(ch))
        memcpy(out + n, ch, strlen(ch));
    out[n] = '\0';
}

Test(kf_job, error_paths_are_cut_between_characters)
{
    static const char *const chars[] = { "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80" };
    char name[200], body[1200];

    for (size_t c = 0; c < 3; c++) {
        for (int k = 50; k < 100; k++) {
            name_at(name, sizeof(name), k, chars[c]);
            snprintf(body, sizeof(body), "{" OPT ",\"inputs\":{\"%s\":{\"shape\":[1],\"dtype\":\"float32\"}}}", name);
            assert_errors_utf8(body);
            snprintf(body, sizeof(body),
                     "{" OPT ",\"inputs\":{\"x\":{\"shape\":[1],\"dtype\":\"float32\"}},\"tunables\":{\"%s\":[1]}}",
                     name);
            assert_errors_utf8(body);
            snprintf(body, sizeof(body), "{" DIAG ",\"labels\":{\"%s\":\"x\"}}", name);
            assert_errors_utf8(body);
            snprintf(body, sizeof(body), "{" DIAG ",\"%s\":1}", name);
            assert_errors_utf8(body);
            snprintf(body, sizeof(body), "{" DIAG ",\"spec\":{\"%s\":1}}", name);
            assert_errors_utf8(body);
            snprintf(body, sizeof(body), "{" OPT ",\"inputs\":{\"x\":{\"shape\":[1],\"dtype\":\"float32\",\"%s\":1}}}",
                     name);
            assert_errors_utf8(body);
        }
    }
    /* Sixteen long names: the summary is cut too. */
    {
        size_t n = (size_t)snprintf(body, sizeof(body), "{" DIAG);
        for (int i = 0; i < 16 && n + 100 < sizeof(body); i++) {
            name_at(name, sizeof(name), i, chars[i % 3]);
            n += (size_t)snprintf(body + n, sizeof(body) - n, ",\"%s\":1", name);
        }
        snprintf(body + n, sizeof(body) - n, "}");
        assert_errors_utf8(body);
    }
}

Test(kf_job, duplicate_member_and_payload_messages_are_cut_between_characters)
{
    static const char *const chars[] = { "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80" };
    char name[200], body[1300];

    for (size_t c = 0; c < 3; c++) {
        for (int k = 55; k < 70; k++) {
            cJSON *v = NULL;
            kf_err e = KF_ERR_INIT;
            kf_job_payload p;
            char *s;

            name_at(name, sizeof(name), k, chars[c]);
            snprintf(body, sizeof(body), "{\"%s\":1,\"%s\":2}", name, name);
            cr_assert_eq(kf_json_parse(body, strlen(body), KF_JSON_MAX_DEPTH, &v, &e), KF_INVALID);
            assert_utf8(e.msg, "the duplicate's message");
            /* The worker's message about a payload (it goes back to the API). */
            snprintf(body, sizeof(body), "{\"%s\":1,\"%s%s\":2,\"%s%s%s\":3}", name, name, name, name, name, name);
            s = kf_job_payload_build("5bd35d24-a80d-4ced-9c48-7d25c358dfdb", "diag", "trn2", "diag", body, "{}",
                                     "{}", &e);
            cr_assert_eq(kf_job_payload_parse(s, &p, &e), KF_INVALID);
            assert_utf8(e.msg, "the payload's message");
            free(s);
        }
    }
}

/* ---- numbers and shapes --------------------------------------------------- */

/* The request is refused, naming `field` with `rule`. */
static void expect_refused(const char *body, const char *field, const char *rule)
{
    cJSON *v = parse_ok(body);
    kf_job_request jr;
    kf_fields fe;
    bool found = false;

    kf_fields_init(&fe);
    cr_assert(!kf_job_request_parse(v, 3, &jr, &fe), "accepted: %s", body);
    for (int k = 0; k < fe.n; k++)
        found = found || (strcmp(fe.e[k].field, field) == 0 && strcmp(fe.e[k].rule, rule) == 0);
    cr_assert(found, "%s: want %s/%s, got %s/%s: %s (%d errors)", body, field, rule, fe.n ? fe.e[0].field : "-",
              fe.n ? fe.e[0].rule : "-", fe.n ? fe.e[0].detail : "-", fe.n);
    cJSON_Delete(v);
}

/* Bug 3: a dimension is range-checked as a double before it becomes an
 * integer (casting 1e49 to int64_t is undefined; UBSan aborts on it). */
Test(kf_job, shape_dimensions_are_checked_before_they_are_converted)
{
    expect_refused("{\"kind\":\"generate\",\"shapes\":[[1e49]]}", "shapes[0][0]", "range");
    expect_refused("{" GEN ",\"shapes\":[[1e49]]}", "shapes[0][0]", "range");
    expect_refused("{" GEN ",\"shapes\":[[-1e49]]}", "shapes[0][0]", "range");
    expect_refused("{" GEN ",\"shapes\":[[9223372036854775808]]}", "shapes[0][0]", "range");
    expect_refused("{" GEN ",\"shapes\":[[2147483649]]}", "shapes[0][0]", "range");
    expect_refused("{" GEN ",\"shapes\":[[2.5]]}", "shapes[0][0]", "type");
    expect_refused("{" GEN ",\"shapes\":[[\"4\"]]}", "shapes[0][0]", "type");
    expect_refused("{" OPT ",\"inputs\":{\"x\":{\"shape\":[4,1e49],\"dtype\":\"float32\"}}}", "inputs.x.shape[1]",
                   "range");
}

/* Bug 2: 1e400 parses as infinity; every numeric field refuses it with its path. */
Test(kf_job, numbers_are_finite_in_every_numeric_field)
{
    static const bad_case cases[] = {
        { "{" DIAG ",\"priority\":1e400}", "priority", "type" },
        { "{" DIAG ",\"max_attempts\":-1e400}", "max_attempts", "type" },
        { "{" DIAG ",\"budget\":{\"iterations\":1e400}}", "budget.iterations", "type" },
        { "{" DIAG ",\"budget\":{\"seconds\":-1e400}}", "budget.seconds", "type" },
        { "{" DIAG ",\"goal\":{\"latency_ns\":1e400}}", "goal.latency_ns", "type" },
        { "{" DIAG ",\"goal\":{\"fraction_of_bound\":-1e400}}", "goal.fraction_of_bound", "type" },
        { "{" DIAG ",\"labels\":{\"team\":1e400}}", "labels.team", "type" },
        { "{" DIAG ",\"spec\":{\"sleep_ms\":1e400}}", "spec.sleep_ms", "type" },
        { "{" DIAG ",\"spec\":{\"exit_code\":-1e400}}", "spec.exit_code", "type" },
        { "{" GEN ",\"shapes\":[[4,1e400]]}", "shapes[0][1]", "range" },
        { "{" GEN ",\"shapes\":[[-1e400]]}", "shapes[0][0]", "range" },
        { "{" OPT ",\"inputs\":{\"x\":{\"shape\":[1e400],\"dtype\":\"float32\"}}}", "inputs.x.shape[0]", "range" },
        { "{" OPT ",\"inputs\":{\"x\":{\"shape\":[1],\"dtype\":\"float32\"}},\"tunables\":{\"T\":[1,1e400]}}",
          "tunables.T[1]", "range" },
        { "{" OPT ",\"inputs\":{\"x\":{\"shape\":[1],\"dtype\":\"float32\"}},\"tunables\":{\"T\":[-1e400]}}",
          "tunables.T[0]", "range" },
        { "{\"kind\":\"optimize\",\"target\":\"trn2\",\"spec\":{\"reference\":\"r\",\"source\":\"s\",\"entry\":\"k\","
          "\"inputs\":{\"x\":{\"shape\":[1],\"dtype\":\"float32\"}},\"tunables\":{\"T\":[1e400]}}}",
          "spec.tunables.T[0]", "range" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_refused(cases[i].body, cases[i].field, cases[i].rule);
}

/* What kf_job_request_parse accepts, printed as the API stores it, makes a
 * payload kf_job_payload_parse accepts, with the same spec: the worker never
 * refuses a job the API answered 202 to. */
static void round_trip_if(const char *body, bool must_accept)
{
    static const char id[] = "5bd35d24-a80d-4ced-9c48-7d25c358dfdb";
    cJSON *v = parse_ok(body);
    kf_job_request jr;
    kf_job_payload p;
    kf_fields fe;
    kf_err e = KF_ERR_INIT;
    char *spec, *budget, *goal, *payload, *again;

    kf_fields_init(&fe);
    if (!kf_job_request_parse(v, 3, &jr, &fe)) {
        cr_assert(!must_accept, "refused: %s: %s %s", body, fe.n ? fe.e[0].field : "", fe.n ? fe.e[0].detail : "");
        cJSON_Delete(v);
        return;
    }
    spec = kf_json_print(jr.spec);
    budget = kf_json_print(jr.budget);
    goal = kf_json_print(jr.goal);
    payload = kf_job_payload_build(id, kf_job_kind_name(jr.kind), jr.target, jr.backend, spec, budget, goal, &e);
    cr_assert_not_null(payload, "%s: %s", body, e.msg);
    cr_assert_eq(kf_job_payload_parse(payload, &p, &e), KF_OK, "the worker refuses what the API accepted: %s: %s",
                 payload, e.msg);
    again = kf_json_print(p.spec);
    cr_assert_str_eq(again, spec, "the spec changed on the way");
    free(again);
    kf_job_payload_release(&p);
    free(payload);
    free(spec);
    free(budget);
    free(goal);
    kf_job_request_release(&jr);
    cJSON_Delete(v);
}

static void round_trip(const char *body)
{
    round_trip_if(body, true);
}

Test(kf_job, what_the_api_accepts_the_worker_takes)
{
    static const char *const bodies[] = {
        "{" DIAG "}",
        "{" DIAG ",\"spec\":{\"sleep_ms\":600000,\"exit_code\":255,\"fail\":true},\"priority\":0,\"max_attempts\":20,"
        "\"budget\":{\"iterations\":10000,\"seconds\":86400},\"goal\":{\"latency_ns\":1e15}}",
        "{" DIAG ",\"goal\":{\"fraction_of_bound\":1e-6},\"labels\":{\"a.b/c-d\":\"\xe2\x82\xac\"}}",
        "{" GEN ",\"shapes\":[[2147483648],[1,1,1,1,1,1,1,1]]}",
        "{" OPT ",\"inputs\":{\"x\":{\"shape\":[128,512],\"dtype\":\"bfloat16\"},\"y\":{\"shape\":[1],\"dtype\":\"bool\"}},"
        "\"tunables\":{\"A\":[1.7976931348623157e308,-1.7976931348623157e308,5e-324,-0.0,0.1,9007199254740993,"
        "1e-400],\"B\":[true,false,\"\",\"\xf0\x9f\x98\x80\"],\"C\":[0.30000000000000004]}}",
        "{\"kind\":\"auto\",\"target\":\"trn3\",\"spec\":{\"reference\":\"r\",\"source\":\"s\",\"entry\":\"k\","
        "\"inputs\":{\"x\":{\"shape\":[3],\"dtype\":\"uint32\"}}}}",
        "{\"kind\":\"validate\",\"target\":\"inf2\",\"reference\":\"r\"," SRC "}",
        "{\"kind\":\"profile\",\"target\":\"trn1\",\"backend\":\"neuron\"," SRC "}",
    };
    /* What the API may refuse, but must not accept and then lose. */
    static const char *const maybe[] = {
        "{" OPT ",\"inputs\":{\"x\":{\"shape\":[1],\"dtype\":\"float32\"}},\"tunables\":{\"T\":[1e400]}}",
        "{" OPT ",\"inputs\":{\"x\":{\"shape\":[1],\"dtype\":\"float32\"}},\"tunables\":{\"T\":[-1e400,1]}}",
        "{" GEN ",\"shapes\":[[1e400]]}",
        "{" DIAG ",\"goal\":{\"latency_ns\":1e400}}",
        "{" DIAG ",\"spec\":{\"sleep_ms\":1e400}}",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
        round_trip(bodies[i]);
    for (size_t i = 0; i < sizeof(maybe) / sizeof(maybe[0]); i++)
        round_trip_if(maybe[i], false);
}

/* Bug 7: a tensor's bytes are bounded before anything multiplies its
 * dimensions (8 x 2^31 overflowed int64_t and wrapped to 0). */
Test(kf_job, shapes_are_bounded_in_total_bytes)
{
    char body[512];
    kf_fields fe;
    kf_job_request jr;
    cJSON *v;

    expect_refused("{" GEN ",\"shapes\":[[2147483648,2147483648,2147483648,2147483648,2147483648,2147483648,"
                   "2147483648,2147483648]]}",
                   "shapes[0]", "range");
    expect_refused("{" GEN ",\"shapes\":[[2147483648,2147483648]]}", "shapes[0]", "range");
    expect_refused("{" OPT ",\"inputs\":{\"x\":{\"shape\":[2147483648,2147483648,2147483648],\"dtype\":\"bool\"}}}",
                   "inputs.x.shape", "range");
    /* The limit itself: 2^38 bytes, as float32 and as int8. */
    snprintf(body, sizeof(body), "{" GEN ",\"shapes\":[[2147483648,%llu]]}",
             (unsigned long long)(KF_JOB_MAX_TENSOR_BYTES / 4 / 2147483648ULL));
    round_trip(body);
    snprintf(body, sizeof(body), "{" GEN ",\"shapes\":[[2147483648,%llu]]}",
             (unsigned long long)(KF_JOB_MAX_TENSOR_BYTES / 4 / 2147483648ULL + 1));
    expect_refused(body, "shapes[0]", "range");
    snprintf(body, sizeof(body), "{" OPT ",\"inputs\":{\"x\":{\"shape\":[%llu],\"dtype\":\"int8\"}}}",
             (unsigned long long)KF_JOB_MAX_TENSOR_BYTES);
    expect_refused(body, "inputs.x.shape[0]", "range");   /* one dimension is still at most 2^31 */
    snprintf(body, sizeof(body), "{" OPT ",\"inputs\":{\"x\":{\"shape\":[2147483648,%llu],\"dtype\":\"int8\"}}}",
             (unsigned long long)(KF_JOB_MAX_TENSOR_BYTES / 2147483648ULL));
    round_trip(body);
    /* Two tensors each within the limit, together over it. */
    snprintf(body, sizeof(body),
             "{" OPT ",\"inputs\":{\"x\":{\"shape\":[2147483648,%llu],\"dtype\":\"int8\"},"
             "\"y\":{\"shape\":[1],\"dtype\":\"int8\"}}}",
             (unsigned long long)(KF_JOB_MAX_TENSOR_BYTES / 2147483648ULL));
    expect_refused(body, "inputs", "range");
    snprintf(body, sizeof(body), "{" GEN ",\"shapes\":[[2147483648,%llu],[1]]}",
             (unsigned long long)(KF_JOB_MAX_TENSOR_BYTES / 4 / 2147483648ULL));
    expect_refused(body, "shapes", "range");
    /* The error says the limit. */
    v = parse_ok("{" GEN ",\"shapes\":[[2147483648,2147483648]]}");
    kf_fields_init(&fe);
    cr_assert(!kf_job_request_parse(v, 3, &jr, &fe));
    cr_assert(strstr(fe.e[0].detail, "274877906944"), "%s", fe.e[0].detail);
    cJSON_Delete(v);
}

/* A generate spec's warm_start (set by the API from the kernel library)
 * passes the request parser and the worker's payload parser alike. */
Test(kf_job, a_warm_start_travels_in_the_payload)
{
    cJSON *v = parse_ok("{\"kind\":\"generate\",\"target\":\"trn2\",\"op\":\"add\",\"dtype\":\"bfloat16\","
                        "\"shapes\":[[200,700],[200,700]],\"warm_start\":{\"entry\":\"add-trn2-bfloat16-sim-0123456789ab\","
                        "\"params\":{\"TILE_F\":1024,\"ENGINE\":\"vector\",\"FUSE\":true},\"latency_ns\":1200}}");
    kf_job_request jr;
    kf_job_payload p;
    kf_fields fe;
    kf_err e = KF_ERR_INIT;
    char *spec, *s;

    kf_fields_init(&fe);
    cr_assert(kf_job_request_parse(v, 3, &jr, &fe), "%s", fe.n ? fe.e[0].field : "");
    spec = kf_json_print(jr.spec);
    s = kf_job_payload_build("5bd35d24-a80d-4ced-9c48-7d25c358dfdb", "generate", "trn2", "sim", spec, "{}", "{}", &e);
    cr_assert_not_null(s, "%s", e.msg);
    cr_assert_eq(kf_job_payload_parse(s, &p, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(p.spec, "warm_start"), "params"), "TILE_F")
                     ->valuedouble,
                 1024);
    kf_job_payload_release(&p);
    kf_job_request_release(&jr);
    cJSON_Delete(v);
    free(spec);
    free(s);
}
