/* Unit tests for kforge-api's pieces that need no services: the route
 * table, tokens, and the small parsers of headers and cursors. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <math.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

Test(api_routes, table_is_consistent)
{
    int public_routes = 0;

    for (int i = 0; i < api_n_routes; i++) {
        const api_route *r = &api_routes[i];
        cr_assert_not_null(r->handler, "%s %s", r->method, r->pattern);
        cr_assert_eq(r->pattern[0], '/');
        cr_assert(strcmp(r->method, "GET") == 0 || strcmp(r->method, "POST") == 0, "%s", r->method);
        for (int k = 0; k < i; k++)
            cr_assert(strcmp(api_routes[k].pattern, r->pattern) != 0 || strcmp(api_routes[k].method, r->method) != 0,
                      "%s %s twice", r->method, r->pattern);
        /* Internal routes are for workers only; workers use nothing else. */
        if (strncmp(r->pattern, "/v1/internal/", 13) == 0)
            cr_assert_eq(r->roles, API_ROLE_WORKER, "%s", r->pattern);
        else
            cr_assert_eq(r->roles & API_ROLE_WORKER, 0, "%s", r->pattern);
        if (r->roles == API_PUBLIC && api_route_is_ui(r)) {
            /* the dashboard's files: no data, no token (api_ui.c) */
            cr_assert(strcmp(r->pattern, "/") == 0 || strncmp(r->pattern, "/ui", 3) == 0, "%s", r->pattern);
            cr_assert_str_eq(r->method, "GET");
        } else if (r->roles == API_PUBLIC) {
            public_routes++;
            cr_assert(strncmp(r->pattern, "/v1/jobs", 8) != 0, "%s must need a token", r->pattern);
        }
        if (r->flags & (API_F_JSON | API_F_JSON_OPT))
            cr_assert_str_eq(r->method, "POST");
    }
    cr_assert_eq(public_routes, 4, "healthz, readyz, metrics, openapi");
}

/* Every route of the table is in api/openapi.json with a unique
 * operationId, tags, and a typed schema for each JSON answer (make lint
 * runs the OpenAPI linter over the rest; this needs no Node). */
Test(api_routes, every_route_has_an_operation_id_tags_and_typed_answers)
{
    cJSON *doc = cJSON_Parse(api_openapi_json);
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(doc, "paths");
    const char *ids[64];
    int n_ids = 0;

    cr_assert_not_null(paths, "api/openapi.json has paths");
    for (int i = 0; i < api_n_routes; i++) {
        const api_route *r = &api_routes[i];
        char m[8];
        const cJSON *op, *id, *tags, *resp;
        size_t k;
        if (api_route_is_ui(r))
            continue;   /* files, not the API */
        for (k = 0; r->method[k] && k + 1 < sizeof(m); k++)
            m[k] = (char)(r->method[k] | 0x20);
        m[k] = '\0';
        op = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(paths, r->pattern), m);
        cr_assert_not_null(op, "openapi.json lacks %s %s", r->method, r->pattern);
        id = cJSON_GetObjectItemCaseSensitive(op, "operationId");
        tags = cJSON_GetObjectItemCaseSensitive(op, "tags");
        cr_assert(cJSON_IsString(id) && id->valuestring[0], "%s %s has no operationId", r->method, r->pattern);
        for (int j = 0; j < n_ids; j++)
            cr_assert(strcmp(ids[j], id->valuestring) != 0, "operationId %s twice", ids[j]);
        if (n_ids < 64)
            ids[n_ids++] = id->valuestring;
        cr_assert(cJSON_IsArray(tags) && cJSON_GetArraySize(tags) > 0, "%s %s has no tags", r->method, r->pattern);
        cJSON_ArrayForEach(resp, cJSON_GetObjectItemCaseSensitive(op, "responses"))
        {
            const cJSON *ct;
            cJSON_ArrayForEach(ct, cJSON_GetObjectItemCaseSensitive(resp, "content"))
            {
                const cJSON *sch = cJSON_GetObjectItemCaseSensitive(ct, "schema");
                bool typed = !strstr(ct->string, "json") || cJSON_GetObjectItemCaseSensitive(sch, "$ref") ||
                             cJSON_GetObjectItemCaseSensitive(sch, "properties") ||
                             cJSON_GetObjectItemCaseSensitive(sch, "allOf") ||
                             cJSON_GetObjectItemCaseSensitive(sch, "oneOf");
                cr_assert(typed, "%s %s answers %s %s with an untyped schema", r->method, r->pattern, resp->string,
                          ct->string);
            }
        }
    }
    cJSON_Delete(doc);
}

Test(api_auth, roles_and_token_hashes)
{
    unsigned char h[32];
    static const unsigned char abc[32] = { 0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40,
                                           0xde, 0x5d, 0xae, 0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17,
                                           0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad };
    char *a, *b;

    for (const char *const *n = (const char *const[]){ "admin", "user", "worker", NULL }; *n; n++)
        cr_assert_str_eq(api_role_name(api_role_parse(*n)), *n);
    cr_assert_eq(api_role_parse("root"), 0);
    cr_assert_eq(api_role_parse(NULL), 0);
    api_token_hash("abc", h);
    cr_assert_eq(memcmp(h, abc, 32), 0, "SHA-256(\"abc\")");
    a = api_token_new_secret();
    b = api_token_new_secret();
    cr_assert_eq(strlen(a), 67);
    cr_assert_eq(strncmp(a, "kf_", 3), 0);
    cr_assert_eq(strspn(a + 3, "0123456789abcdef"), 64);
    cr_assert_str_neq(a, b);
    free(a);
    free(b);
}

Test(api_parsers, content_type)
{
    cr_assert(api_content_type_json("application/json"));
    cr_assert(api_content_type_json("Application/JSON; charset=utf-8"));
    cr_assert(api_content_type_json("application/json;charset=\"UTF-8\""));
    cr_assert(!api_content_type_json("application/json; charset=latin1"));
    cr_assert(!api_content_type_json("application/jsonx"));
    cr_assert(!api_content_type_json("text/json"));
    cr_assert(!api_content_type_json("application/problem+json"));
    cr_assert(!api_content_type_json(""));
    cr_assert(!api_content_type_json(NULL));
}

Test(api_parsers, idempotency_keys)
{
    char k[256];

    cr_assert(api_idem_parse_key("\"8e03978e-40d5-43e8-bc93-6894a57f9324\"", k, sizeof(k)));
    cr_assert_str_eq(k, "8e03978e-40d5-43e8-bc93-6894a57f9324");
    cr_assert(api_idem_parse_key("\"a \\\"quoted\\\" \\\\ key\"", k, sizeof(k)));
    cr_assert_str_eq(k, "a \"quoted\" \\ key");
    cr_assert(!api_idem_parse_key("bare-token_1", k, sizeof(k)), "the draft's sf-string has quotes");
    cr_assert(!api_idem_parse_key("8e03978e-40d5-43e8-bc93-6894a57f9324", k, sizeof(k)));
    cr_assert(!api_idem_parse_key("'single'", k, sizeof(k)));
    cr_assert(!api_idem_parse_key(" \"leading space\"", k, sizeof(k)));
    cr_assert(!api_idem_parse_key("\"unterminated", k, sizeof(k)));
    cr_assert(!api_idem_parse_key("\"\"", k, sizeof(k)), "empty");
    cr_assert(!api_idem_parse_key("\"a\"b", k, sizeof(k)), "bytes after the string");
    cr_assert(!api_idem_parse_key("\"bad \\n escape\"", k, sizeof(k)));
    cr_assert(!api_idem_parse_key("\"tab\there\"", k, sizeof(k)));
    cr_assert(!api_idem_parse_key("two words", k, sizeof(k)));
    cr_assert(!api_idem_parse_key("\"\xc3\xa9\"", k, sizeof(k)), "non-ASCII");
    {
        char longk[300];
        memset(longk, 'x', sizeof(longk) - 1);
        longk[0] = longk[sizeof(longk) - 2] = '"';
        longk[sizeof(longk) - 1] = '\0';
        cr_assert(!api_idem_parse_key(longk, k, sizeof(k)), "longer than the buffer");
        longk[257] = '"';
        longk[258] = '\0';
        cr_assert(!api_idem_parse_key(longk, k, sizeof(k)), "256 characters");
        longk[256] = '"';
        longk[257] = '\0';
        cr_assert(api_idem_parse_key(longk, k, sizeof(k)), "255 characters fit");
        cr_assert_eq(strlen(k), 255);
    }
}

Test(api_parsers, cursors_round_trip_and_refuse_forgeries)
{
    char cur[128], micros[24], id[37];

    api_cursor_make("1764495667123456", "5bd35d24-a80d-4ced-9c48-7d25c358dfdb", cur, sizeof(cur));
    cr_assert_eq(strspn(cur, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"), strlen(cur),
                 "URL-safe: %s", cur);
    cr_assert(api_cursor_parse(cur, micros, sizeof(micros), id));
    cr_assert_str_eq(micros, "1764495667123456");
    cr_assert_str_eq(id, "5bd35d24-a80d-4ced-9c48-7d25c358dfdb");

    cr_assert(!api_cursor_parse("", micros, sizeof(micros), id));
    cr_assert(!api_cursor_parse("not base64!", micros, sizeof(micros), id));
    api_cursor_make("12a4", "5bd35d24-a80d-4ced-9c48-7d25c358dfdb", cur, sizeof(cur));
    cr_assert(!api_cursor_parse(cur, micros, sizeof(micros), id), "non-digit time");
    api_cursor_make("1234", "5bd35d24-a80d-4ced-9c48-7d25c358dfdbX", cur, sizeof(cur));
    cr_assert(!api_cursor_parse(cur, micros, sizeof(micros), id), "not a UUID");
    api_cursor_make("12345678901234567890123", "5bd35d24-a80d-4ced-9c48-7d25c358dfdb", cur, sizeof(cur));
    cr_assert(!api_cursor_parse(cur, micros, sizeof(micros), id), "time too long");
    api_cursor_make("', 1); DROP TABLE jobs; --", "5bd35d24-a80d-4ced-9c48-7d25c358dfdb", cur, sizeof(cur));
    cr_assert(!api_cursor_parse(cur, micros, sizeof(micros), id));
    /* 19 digits that overflow a bigint, or a time PostgreSQL cannot hold. */
    api_cursor_make("9999999999999999999", "5bd35d24-a80d-4ced-9c48-7d25c358dfdb", cur, sizeof(cur));
    cr_assert(!api_cursor_parse(cur, micros, sizeof(micros), id), "beyond a bigint");
    api_cursor_make("9223372036854775807", "5bd35d24-a80d-4ced-9c48-7d25c358dfdb", cur, sizeof(cur));
    cr_assert(!api_cursor_parse(cur, micros, sizeof(micros), id), "beyond PostgreSQL's timestamps");
    api_cursor_make("253402300799999999", "5bd35d24-a80d-4ced-9c48-7d25c358dfdb", cur, sizeof(cur));
    cr_assert(api_cursor_parse(cur, micros, sizeof(micros), id), "the last microsecond of year 9999");
    /* fuzz_cursor: only the encoding make() writes; the same bytes with
     * stray low bits in the last character, a lone character or a NUL
     * hidden inside are other texts and are refused. */
    api_cursor_make("0", "6BD35D24-A80D-4CED-9C48-7D25C358DFDA", cur, sizeof(cur));
    cr_assert_str_eq(cur, "MCw2QkQzNUQyNC1BODBELTRDRUQtOUM0OC03RDI1QzM1OERGREE");
    cr_assert(api_cursor_parse(cur, micros, sizeof(micros), id));
    cr_assert(!api_cursor_parse("MCw2QkQzNUQyNC1BODBELTRDRUQtOUM0OC03RDI1QzM1OERGREH", micros, sizeof(micros), id),
              "stray bits");
    cr_assert(!api_cursor_parse("MCw2QkQzNUQyNC1BODBELTRDRUQtOUM0OC03RDI1QzM1OERGREEA", micros, sizeof(micros), id),
              "a lone sixth of a byte");
    cr_assert(!api_cursor_parse("MCw2QkQzNUQyNC1BODBELTRDRUQtOUM0OC03RDI1QzM1OERGREEAAA", micros, sizeof(micros), id),
              "a NUL after the id");
}

/* Query numbers: digits only, and never past the bound, overflow included. */
Test(api_parsers, unsigned_query_numbers)
{
    unsigned long long v = 7;

    cr_assert(api_parse_uint("0", 10, &v) && v == 0);
    cr_assert(api_parse_uint("200", 200, &v) && v == 200);
    cr_assert(api_parse_uint("9223372036854775807", INT64_MAX, &v) && v == (unsigned long long)INT64_MAX);
    cr_assert(api_parse_uint("18446744073709551615", ULLONG_MAX, &v) && v == ULLONG_MAX);
    v = 7;
    cr_assert(!api_parse_uint("201", 200, &v));
    cr_assert(!api_parse_uint("5", 3, &v), "a bound below 9");
    cr_assert(!api_parse_uint("10", 9, &v));
    cr_assert(api_parse_uint("9", 9, &v) && v == 9);
    v = 7;
    cr_assert(!api_parse_uint("9223372036854775808", INT64_MAX, &v));
    cr_assert(!api_parse_uint("18446744073709551616", ULLONG_MAX, &v), "wraps an unsigned long long");
    cr_assert(!api_parse_uint("99999999999999999999999999", INT64_MAX, &v));
    cr_assert(!api_parse_uint("", 10, &v));
    cr_assert(!api_parse_uint(NULL, 10, &v));
    cr_assert(!api_parse_uint("-1", 10, &v));
    cr_assert(!api_parse_uint("+1", 10, &v));
    cr_assert(!api_parse_uint(" 1", 10, &v));
    cr_assert(!api_parse_uint("1e3", 10000, &v));
    cr_assert(!api_parse_uint("0x10", 100, &v));
    cr_assert_eq(v, 7, "untouched on failure");
}

Test(api_parsers, rfc3339_times_are_real_dates_and_nothing_else)
{
    static const char *const good[] = {
        "2026-12-02T10:00:00Z", "2026-12-02t10:00:00z", "2026-12-02T10:00:00.5Z", "2026-12-02T10:00:00.123456789Z",
        "2026-12-02T10:00:00+01:00", "2026-12-02T10:00:00-15:59", "2024-02-29T23:59:59Z", "2000-02-29T00:00:00Z",
        "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z",
    };
    static const char *const bad[] = {
        "", "2026-12-02", "2026-12-02T10:00:00", "2026-12-02 10:00:00Z", "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z", "2026-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2026-04-31T00:00:00Z",
        "2026-12-02T24:00:00Z", "2026-12-02T10:60:00Z", "2026-12-02T10:00:60Z", "2026-12-02T10:00:00.Z",
        "2026-12-02T10:00:00.1234567890Z", "2026-12-02T10:00:00+24:00", "2026-12-02T10:00:00-16:00", "2026-12-02T10:00:00+01:60",
        "2026-12-02T10:00:00+0100", "2026-12-02T10:00:00Zjunk", "0000-01-01T00:00:00Z", "+2026-12-02T10:00:00Z",
        "2026-1-02T10:00:00Z", "2026-12-02T10:00:00 Z",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        cr_assert(api_parse_rfc3339(good[i]), "refused %s", good[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert(!api_parse_rfc3339(bad[i]), "took %s", bad[i]);
}

Test(api_jobs, created_at_is_postgres_json_text_and_always_later)
{
    char prev[40] = "", t[40];

    for (int i = 0; i < 1000; i++) {
        size_t n;
        api_job_clock(t);
        n = strlen(t);
        /* 2026-11-30T18:31:48[.ffffff without trailing zeros]+00:00 */
        cr_assert(n >= 25 && n <= 32, "%s", t);
        cr_assert(t[4] == '-' && t[7] == '-' && t[10] == 'T' && t[13] == ':' && t[16] == ':', "%s", t);
        cr_assert_str_eq(t + n - 6, "+00:00");
        if (n > 25) {
            cr_assert_eq(t[19], '.', "%s", t);
            cr_assert_neq(t[n - 7], '0', "trailing zero in %s", t);
        }
        /* same length prefix compares as time; a shorter fraction is not
         * later text-wise, so compare the seconds and then the fraction */
        if (prev[0]) {
            int c = strncmp(prev, t, 19);
            cr_assert(c < 0 || (c == 0 && strtod(prev + 17, NULL) < strtod(t + 17, NULL)), "%s then %s", prev, t);
        }
        memcpy(prev, t, sizeof(prev));
    }
}

static struct sockaddr_in addr4(const char *ip)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    cr_assert_eq(inet_pton(AF_INET, ip, &a.sin_addr), 1);
    return a;
}

/* 20 failures per address per 60 s window are 401s; the next ones are
 * 429 with Retry-After to the window's end; other addresses and the next
 * window start afresh.  Clock values are made up (the function takes the
 * time), far apart per test so the process-wide table holds no leftovers. */
Test(api_auth, failed_tokens_are_limited_per_address_and_window)
{
    struct sockaddr_in a = addr4("192.0.2.10"), b = addr4("192.0.2.11");
    struct sockaddr_in6 a6;
    struct sockaddr_un_like { sa_family_t f; char path[8]; } other = { AF_UNIX, "x" };
    long long t0 = 1000000000LL;
    int retry = -1;

    for (int i = 1; i <= 20; i++) {
        cr_assert_not(api_auth_fail_note((struct sockaddr *)&a, t0 + i, &retry), "failure %d", i);
        cr_assert_eq(retry, 0);
    }
    cr_assert(api_auth_fail_note((struct sockaddr *)&a, t0 + 1500, &retry), "the 21st");
    cr_assert_eq(retry, 59, "the window started at t0 + 1 ms: %d", retry);
    cr_assert(api_auth_fail_note((struct sockaddr *)&a, t0 + 59000, &retry));
    cr_assert_eq(retry, 2);
    /* Another address is not affected. */
    cr_assert_not(api_auth_fail_note((struct sockaddr *)&b, t0 + 2000, &retry));
    /* IPv6 addresses count on their own, families without an address never. */
    memset(&a6, 0, sizeof(a6));
    a6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8::1", &a6.sin6_addr);
    cr_assert_not(api_auth_fail_note((struct sockaddr *)&a6, t0 + 2000, &retry));
    for (int i = 0; i < 50; i++)
        cr_assert_not(api_auth_fail_note((struct sockaddr *)(void *)&other, t0 + 2000, &retry));
    /* The next window starts afresh. */
    cr_assert_not(api_auth_fail_note((struct sockaddr *)&a, t0 + 60001, &retry));
    cr_assert_eq(retry, 0);
}

static int fail_limited;

static void *fail_many(void *p)
{
    const struct sockaddr_in *a = p;
    int retry, limited = 0;

    for (int i = 0; i < 1000; i++)
        limited += api_auth_fail_note((const struct sockaddr *)a, 5000000000LL, &retry);
    __atomic_add_fetch(&fail_limited, limited, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Failures from one address on many threads at once are all counted:
 * exactly the first 20 of the 8000 pass. */
Test(api_auth, failure_counts_are_thread_safe)
{
    enum { T = 8 };
    pthread_t t[T];
    struct sockaddr_in a = addr4("198.51.100.7");

    for (int i = 0; i < T; i++)
        pthread_create(&t[i], NULL, fail_many, &a);
    for (int i = 0; i < T; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(fail_limited, T * 1000 - 20);
}

/* api_reply_code takes status and title from KF_ERROR_MAP and keeps the
 * caller's slug and detail; api_reply_err derives the slug from the code. */
static cJSON *reply_body(api_req *r)
{
    cJSON *p;

    p = cJSON_Parse(r->out.data);
    cr_assert_not_null(p, "%s", r->out.data);
    return p;
}

Test(api_reply, code_takes_status_and_title_from_the_map)
{
    static const struct {
        kf_code code;
        int status;
        const char *title;
    } c[] = { { KF_NOT_FOUND, 404, "Not found" },     { KF_STALE, 409, "Stale attempt or lease" },
              { KF_UNAVAILABLE, 503, "Service unavailable" }, { KF_TOO_LARGE, 413, "Request body too large" },
              { KF_METHOD, 405, "Method not allowed" } };

    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        api_req r = { .url = "/v1/jobs/x", .request_id = "req-1" };
        cJSON *p;

        kf_buf_init(&r.out);
        api_reply_code(&r, c[i].code, "my-slug", "job %s is %d", "x", 7);
        cr_assert_eq(r.status, c[i].status);
        cr_assert_str_eq(r.content_type, "application/problem+json");
        cr_assert_eq(r.retry_after, c[i].status == 503 ? 2 : 0, "503s carry Retry-After");
        p = reply_body(&r);
        cr_assert_str_eq(cJSON_GetObjectItem(p, "type")->valuestring, "urn:kforge:problem:my-slug");
        cr_assert_str_eq(cJSON_GetObjectItem(p, "title")->valuestring, c[i].title);
        cr_assert_eq(cJSON_GetObjectItem(p, "status")->valueint, c[i].status);
        cr_assert_str_eq(cJSON_GetObjectItem(p, "detail")->valuestring, "job x is 7");
        cr_assert_str_eq(cJSON_GetObjectItem(p, "request_id")->valuestring, "req-1");
        cJSON_Delete(p);
        kf_buf_release(&r.out);
    }
}

Test(api_reply, err_derives_the_slug_from_the_code)
{
    api_req r = { .url = "/v1/jobs/x", .request_id = "req-2" };
    kf_err e = KF_ERR_INIT;
    cJSON *p;

    kf_buf_init(&r.out);
    kf_err_set(&e, KF_STALE, "job x is on attempt %d", 3);
    api_reply_err(&r, &e);
    cr_assert_eq(r.status, 409);
    p = reply_body(&r);
    cr_assert_str_eq(cJSON_GetObjectItem(p, "type")->valuestring, "urn:kforge:problem:stale-attempt");
    cr_assert_str_eq(cJSON_GetObjectItem(p, "title")->valuestring, "Stale attempt or lease");
    cr_assert_str_eq(cJSON_GetObjectItem(p, "detail")->valuestring, "job x is on attempt 3");
    cJSON_Delete(p);
    kf_buf_release(&r.out);
}

Test(api, report_verdicts_follow_the_ratio_and_the_threshold)
{
    double ratio;

    cr_assert_str_eq(api_report_verdict(false, "", 0, true, 100, 0.03, &ratio), "missing");
    cr_assert_str_eq(api_report_verdict(true, "running", 0, true, 100, 0.03, &ratio), "pending");
    cr_assert_str_eq(api_report_verdict(true, "queued", 90, true, 100, 0.03, &ratio), "pending");
    cr_assert_str_eq(api_report_verdict(true, "failed", 90, true, 100, 0.03, &ratio), "failed");
    cr_assert_str_eq(api_report_verdict(true, "succeeded", 0, true, 100, 0.03, &ratio), "failed",
                     "succeeded without a correct latency");
    cr_assert_str_eq(api_report_verdict(true, "succeeded", 90, false, 0, 0.03, &ratio), "new");
    cr_assert_str_eq(api_report_verdict(true, "succeeded", 90, true, 0, 0.03, &ratio), "new",
                     "the baseline's job had no latency");
    cr_assert(isnan(ratio));
    cr_assert_str_eq(api_report_verdict(true, "succeeded", 96, true, 100, 0.03, &ratio), "improved");
    cr_assert_float_eq(ratio, 0.96, 1e-12);
    cr_assert_str_eq(api_report_verdict(true, "succeeded", 97, true, 100, 0.03, &ratio), "unchanged",
                     "exactly at the threshold is unchanged");
    cr_assert_str_eq(api_report_verdict(true, "succeeded", 103, true, 100, 0.03, &ratio), "unchanged");
    cr_assert_str_eq(api_report_verdict(true, "succeeded", 103.5, true, 100, 0.03, &ratio), "regressed");
    cr_assert_str_eq(api_report_verdict(true, "succeeded", 100, true, 100, 0, &ratio), "unchanged");
    cr_assert_str_eq(api_report_verdict(true, "succeeded", 100.001, true, 100, 0, &ratio), "regressed");
}
