/* Integration tests of CORS in kforge-api (issue 15, KFORGE_CORS_ORIGINS):
 * a preflight from a configured origin gets the route's methods, the
 * headers a client sends and a max-age; answers to that origin carry
 * Access-Control-Allow-Origin, Vary: Origin and the exposed headers; any
 * other origin, a look-alike or the default empty setting get no CORS
 * header at all; a setting that is not a list of origins stops start-up. */
#include <stdbool.h>
#include <sys/wait.h>

#include "test_api_fixture.h"
#include "tests/lib/kf_test.h"

#define REDIS_DB 11
#define REDIS_DB_OFF 14   /* the second API, with CORS off */
#define DASH "https://dash.example.com"

static api_fx fx;

static void setup(void)
{
    fx_start(&fx, REDIS_DB, "KFORGE_LOG_LEVEL=info\nKFORGE_CORS_ORIGINS=" DASH ", http://localhost:3000");
}

static void teardown(void)
{
    fx_stop(&fx);
}

TestSuite(api_cors, .init = setup, .fini = teardown, .timeout = 120);

/* METHOD path with Origin (and more header lines); the response. */
static long cors_req(const char *method, const char *path, const char *origin, const char *token, const char *extra,
                     const char *body, kf_http_resp *out)
{
    char *url = kf_asprintf("%s%s", fx.base, path);
    char *o = kf_asprintf("Origin: %s", origin);
    const char *h[4] = { o, NULL, NULL, NULL };
    int n = 1;
    long st;

    if (extra)
        h[n++] = extra;
    if (body)
        h[n++] = "Content-Type: application/json";
    st = kf_http_request(method, url, token, h, body, body ? (size_t)-1 : 0, out);

    free(url);
    free(o);
    return st;
}

static void expect_header(const kf_http_resp *r, const char *name, const char *want)
{
    char *v = kf_http_header(r, name);
    if (want)
        cr_expect(v && strcmp(v, want) == 0, "%s: %s, want %s\n%s", name, v ? v : "(none)", want, r->headers);
    else
        cr_expect_null(v, "%s: %s, want none\n%s", name, v, r->headers);
    free(v);
}

Test(api_cors, preflight_of_a_configured_origin_names_the_routes_methods)
{
    kf_http_resp r;
    char *id = fx_submit(&fx, fx.user, NULL), *path = kf_asprintf("/v1/jobs/%s", id);

    cr_assert_eq(cors_req("OPTIONS", "/v1/jobs", DASH, NULL, "Access-Control-Request-Method: POST", NULL, &r), 204,
                 "%s", r.body);
    expect_header(&r, "Access-Control-Allow-Origin", DASH);
    expect_header(&r, "Vary", "Origin");
    expect_header(&r, "Access-Control-Allow-Methods", "POST, GET, HEAD");
    expect_header(&r, "Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key, Last-Event-ID");
    expect_header(&r, "Access-Control-Max-Age", "600");
    cr_expect_eq(r.body_len, 0);
    kf_http_resp_release(&r);

    cr_assert_eq(cors_req("OPTIONS", path, "http://localhost:3000", NULL, "Access-Control-Request-Method: GET", NULL,
                          &r), 204);
    expect_header(&r, "Access-Control-Allow-Origin", "http://localhost:3000");
    expect_header(&r, "Access-Control-Allow-Methods", "GET, HEAD");
    kf_http_resp_release(&r);

    /* an unknown path is no preflight: 404 as ever, and no CORS header */
    cr_assert_eq(cors_req("OPTIONS", "/v1/nothing", DASH, NULL, NULL, NULL, &r), 404);
    expect_header(&r, "Access-Control-Allow-Methods", NULL);
    kf_http_resp_release(&r);
    free(path);
    free(id);
}

Test(api_cors, answers_to_a_configured_origin_carry_the_cors_headers)
{
    kf_http_resp r;

    cr_assert_eq(cors_req("POST", "/v1/jobs", DASH, fx.user, NULL, "{\"kind\":\"diag\",\"target\":\"trn2\"}", &r), 202,
                 "%s", r.body);
    expect_header(&r, "Access-Control-Allow-Origin", DASH);
    expect_header(&r, "Vary", "Origin");
    expect_header(&r, "Access-Control-Expose-Headers", "Location, ETag, Retry-After, X-Request-Id");
    expect_header(&r, "Access-Control-Allow-Methods", NULL);
    kf_http_resp_release(&r);

    /* errors too, so a page can read the problem+json */
    cr_assert_eq(cors_req("GET", "/v1/jobs", DASH, "kf_not_a_token", NULL, NULL, &r), 401);
    expect_header(&r, "Access-Control-Allow-Origin", DASH);
    kf_http_resp_release(&r);
}

Test(api_cors, other_origins_get_nothing)
{
    static const char *const others[] = { "https://evil.example.com", DASH ".evil.com", "https://DASH.example.com",
                                          DASH "/", "null" };
    kf_http_resp r;

    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        cr_assert_eq(cors_req("GET", "/v1/jobs", others[i], fx.user, NULL, NULL, &r), 200);
        expect_header(&r, "Access-Control-Allow-Origin", NULL);
        expect_header(&r, "Access-Control-Expose-Headers", NULL);
        kf_http_resp_release(&r);
        /* no preflight either: OPTIONS is no method of the route */
        cr_assert_eq(cors_req("OPTIONS", "/v1/jobs", others[i], NULL, "Access-Control-Request-Method: POST", NULL, &r),
                     405, "%s", others[i]);
        expect_header(&r, "Access-Control-Allow-Origin", NULL);
        expect_header(&r, "Access-Control-Allow-Methods", NULL);
        kf_http_resp_release(&r);
    }
}

Test(api_cors, bad_settings_stop_start_up_and_the_default_is_off)
{
    static const char *const bad[] = { "*", "dash.example.com", "https://dash.example.com/app", "https://" };
    char *bin = kf_test_bin("kforge-api");
    char *argv[] = { bin, "serve", NULL };
    kf_http_resp r;
    api_fx off;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *out = kf_asprintf("%s/bad%zu.out", fx.dir, i), *text;
        char *env[] = { kf_asprintf("KFORGE_PG_DSN=%s", fx.dsn), kf_asprintf("KFORGE_REDIS_URL=%s", fx.redis_url),
                        kf_asprintf("KFORGE_CORS_ORIGINS=%s", bad[i]), kf_strdup("KFORGE_API_LISTEN=127.0.0.1:1"),
                        NULL };
        int st = kf_test_run_cmd(argv, env, out, NULL);
        text = kf_test_read_file(out);
        cr_expect_neq(st, 0, "KFORGE_CORS_ORIGINS=%s started", bad[i]);
        cr_expect(strstr(text, "KFORGE_CORS_ORIGINS") && strstr(text, "scheme://host[:port]"), "%s", text);
        for (int k = 0; env[k]; k++)
            free(env[k]);
        free(text);
        free(out);
    }
    free(bin);

    fx_start(&off, REDIS_DB_OFF, NULL);
    {
        char *url = kf_asprintf("%s/v1/jobs", off.base);
        const char *h[] = { "Origin: " DASH, NULL };
        cr_assert_eq(kf_http_request("GET", url, off.user, h, NULL, 0, &r), 200);
        expect_header(&r, "Access-Control-Allow-Origin", NULL);
        kf_http_resp_release(&r);
        cr_assert_eq(kf_http_request("OPTIONS", url, NULL, h, NULL, 0, &r), 405);
        expect_header(&r, "Access-Control-Allow-Origin", NULL);
        kf_http_resp_release(&r);
        free(url);
    }
    fx_stop(&off);
}
