/* The team dashboard (ui/, served by kforge-api at /ui/; issue 17) in a
 * real browser: Debian's headless Chromium driven over the DevTools
 * protocol (tests/lib/kf_test_cdp) against a whole stack (kforge-api +
 * kforge-scheduler + a sim kforge-worker, real PostgreSQL and Redis).
 *
 * It signs in with a pasted token, submits a job through the API and sees
 * it appear live in the Jobs list and turn succeeded there, opens it and
 * checks the drawn curve (SVG marks), the iteration table, the bounds bars
 * and the engine timeline (canvas rows and coloured pixels, and a hover
 * naming an instruction), opens an iteration from a curve mark by
 * keyboard, compares two jobs (two overlaid curves), opens a batch's
 * report, the library and the fleet.  A screenshot of each view goes to
 * $(BUILD)/test-artifacts/ui/.  Any console error, uncaught exception or
 * error log entry (a failed load, a CSP violation) fails the test.
 *
 * Without Chromium the test is skipped with a message saying so (Debian's
 * `chromium`, installed by scripts/deps.sh); it never passes silently. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kf_alloc.h"
#include "kf_queue.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_cdp.h"
#include "tests/lib/kf_test_http.h"
#include "tests/lib/kf_test_stack.h"

#define UI_DB 6
#define JOB_WAIT_MS 200000

static kf_stack S;
static kf_cdp *B;
static char *Shots;   /* the screenshot folder */

static void teardown(void)
{
    if (B)
        kf_cdp_stop(B);
    B = NULL;
    kf_stack_stop(&S);
    free(Shots);
    Shots = NULL;
}

/* cppcheck-suppress unknownMacro */
TestSuite(ui, .fini = teardown, .timeout = 600);

static void mkdirs(const char *path)
{
    char *p = kf_strdup(path);

    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
    free(p);
}

static void shot(const char *name)
{
    char why[512];
    char *path = kf_asprintf("%s/%s.png", Shots, name);

    cr_assert(kf_cdp_screenshot(B, path, why, sizeof(why)), "screenshot %s: %s", name, why);
    free(path);
}

/* Evaluate expr in the page, which must be true within timeout_ms; the
 * failure names what was waited for and the page's errors so far. */
static void wait_for(const char *what, const char *expr, int timeout_ms)
{
    bool ok = kf_cdp_wait(B, expr, timeout_ms);
    char *text = ok ? NULL : kf_cdp_eval_str(B, "document.getElementById('main').innerText.slice(0, 800)");

    cr_assert(ok, "%s: not true within %d ms: %s\npage: %s\nerrors: %s", what, timeout_ms, expr, text ? text : "?",
              kf_cdp_errors(B));
    free(text);
}

static double num(const char *expr)
{
    return kf_cdp_eval_num(B, expr);
}

/* Go to a view by its URL's hash and wait until it has loaded its data. */
static void open_view(const char *hash)
{
    char *expr = kf_asprintf("(() => { location.hash = '%s'; return true; })()", hash);
    char why[512];
    cJSON *v = kf_cdp_eval(B, expr, 10000, why, sizeof(why));

    cr_assert_not_null(v, "set the hash %s: %s", hash, why);
    cJSON_Delete(v);
    free(expr);
    wait_for(hash, "document.getElementById('main').dataset.ready === 'true'", 30000);
}

/* ---- the pure helpers of ui/api.js and ui/dom.js, run in the browser ------------------- */

/* ui/api.js's SSE parser (sseFeed) and the small formatters, imported as
 * the dashboard imports them, from the signed-out page (no test page is
 * shipped): each case's outcome as JSON, against the value written here. */
static const char *const UNIT_JS =
    "(async () => { const m = await import('/ui/api.js'); const d = await import('/ui/dom.js');"
    " const run = (chunks) => { const st = { buf: '', event: '', data: [], id: null, lastId: null, retry: 3000 };"
    "  const ev = []; let ended = false;"
    "  for (const c of chunks) if (m.sseFeed(st, c, (t, x, i) => ev.push([t, x, i]))) { ended = true; break; }"
    "  return { ev, lastId: st.lastId, retry: st.retry, ended, rest: st.buf }; };"
    " const one = 'event: job\\ndata: {\"a\":1}\\nid: 7\\n\\n';"
    " window.kfUnit = {"
    "  split: run(['event: job\\ndata: {\"a\"', ':1}\\nid: 7\\n', '\\n']),"
    "  bytes: run(one.split('')),"
    "  comment: run([': hb\\n\\n', 'data: x\\n: mid-event\\ndata:y\\n\\n']),"
    "  multi: run(['data: {\"a\":\\ndata: 2}\\n\\n']),"
    "  crlf: run(['event: e\\r\\ndata: 1\\r', '\\n\\r\\n']),"
    "  ids: run(['id: 7\\ndata: 1\\n\\ndata: 2\\n\\nid: 9\\n\\n']),"
    "  retry: run(['retry: 5000\\n\\nretry: 5x\\n\\n']),"
    "  end: run(['event: end\\ndata: {}\\n\\nevent: job\\ndata: 1\\n\\n']),"
    "  qs: m.qs({ a: 1, b: '', c: null, d: 'x y' }),"
    "  ns: [d.ns(512), d.ns(1500), d.ns(2.5e6), d.ns(null)],"
    "  pct: [d.pct(0.5), d.pct(undefined)],"
    "  diff: d.diffLines('a\\nb\\nc', 'a\\nx\\nc') };"
    " return true; })()";

static void unit_checks(void)
{
    static const struct {
        const char *key, *want, *what;
    } cases[] = {
        { "split", "{\"ev\":[[\"job\",{\"a\":1},\"7\"]],\"lastId\":\"7\",\"retry\":3000,\"ended\":false,\"rest\":\"\"}",
          "a frame split across chunks is one event with its type, JSON data and id" },
        { "bytes", "{\"ev\":[[\"job\",{\"a\":1},\"7\"]],\"lastId\":\"7\",\"retry\":3000,\"ended\":false,\"rest\":\"\"}",
          "the same frame fed one character at a time" },
        { "comment", "{\"ev\":[[\"message\",\"x\\ny\",null]],\"lastId\":null,\"retry\":3000,\"ended\":false,\"rest\":\"\"}",
          "comments are skipped, even inside an event; data lines join with LF; not JSON stays text" },
        { "multi", "{\"ev\":[[\"message\",{\"a\":2},null]],\"lastId\":null,\"retry\":3000,\"ended\":false,\"rest\":\"\"}",
          "JSON split over two data lines" },
        { "crlf", "{\"ev\":[[\"e\",1,null]],\"lastId\":null,\"retry\":3000,\"ended\":false,\"rest\":\"\"}",
          "CRLF line ends, the CR and LF in different chunks" },
        { "ids", "{\"ev\":[[\"message\",1,\"7\"],[\"message\",2,null]],\"lastId\":\"9\",\"retry\":3000,\"ended\":false,"
                 "\"rest\":\"\"}",
          "an id belongs to its event only; an id-only frame still moves Last-Event-ID" },
        { "retry", "{\"ev\":[],\"lastId\":null,\"retry\":5000,\"ended\":false,\"rest\":\"\"}",
          "retry: sets the reconnection delay, a non-number is ignored, neither is an event" },
        { "end", "{\"ev\":[[\"end\",{},null]],\"lastId\":null,\"retry\":3000,\"ended\":true,"
                 "\"rest\":\"event: job\\ndata: 1\\n\\n\"}",
          "end stops the parser before the next frame" },
        { "qs", "\"?a=1&d=x+y\"", "qs keeps non-empty members only, encoded" },
        { "ns", "[\"512 ns\",\"1.50 µs\",\"2.500 ms\",\"—\"]", "ns picks the unit" },
        { "pct", "[\"50.0%\",\"—\"]", "pct" },
        { "diff", "[[\" \",\"a\"],[\"+\",\"x\"],[\"-\",\"b\"],[\" \",\"c\"]]", "diffLines keeps the common head and tail" },
    };
    char why[512];
    cJSON *v = kf_cdp_eval(B, UNIT_JS, 10000, why, sizeof(why));

    cr_assert(cJSON_IsTrue(v), "importing ui/api.js and ui/dom.js in the page: %s", v ? "not true" : why);
    cJSON_Delete(v);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *expr = kf_asprintf("JSON.stringify(window.kfUnit.%s)", cases[i].key);
        char *got = kf_cdp_eval_str(B, expr);

        cr_assert(got && strcmp(got, cases[i].want) == 0, "%s (%s):\n got  %s\n want %s", cases[i].key, cases[i].what,
                  got ? got : "(none)", cases[i].want);
        free(got);
        free(expr);
    }
}

/* ---- a worker played by the test, for chosen latencies ---------------------------------- */

/* Jobs for trn1, which the stack's worker does not serve, are leased here
 * and driven through the worker routes as slot 1's worker (test-w1, never
 * started): start, one correct iteration whose latency lat_of(op) picks,
 * success.  n jobs of batch. */
static void play_worker(const char *batch, int n, double (*lat_of)(const char *op))
{
    const char *targets[1] = { "trn1" };
    const char *tok = kf_stack_worker_token(&S, 1);
    kf_err e = KF_ERR_INIT;
    kf_queue *q = kf_queue_connect(S.redis_url, &e);
    int done = 0;

    cr_assert_not_null(q, "%s", e.msg);
    for (int tries = 0; done < n && tries < 3000; tries++) {
        kf_queue_lease l;
        bool got = false;
        char *op, *path, *body, *sql;
        kf_http_resp r = { 0 };
        long st;
        const char *what[3] = { "start", "iterations", "result" };

        cr_assert_eq(kf_queue_lease_job(q, &(kf_queue_caps){ targets, 1, (const char *const[]){ "diag", "sim" }, 2 }, "test-w1", 60000, &l, &got, &e), KF_OK, "%s", e.msg);
        if (!got) {
            kf_test_sleep_ms(10);
            continue;
        }
        sql = kf_asprintf("SELECT spec->>'op' FROM jobs WHERE id = $1::uuid AND batch_id = '%s'::uuid", batch);
        op = kf_stack_sql_value(&S, sql, l.id);
        free(sql);
        cr_assert_not_null(op, "leased job %s is not of batch %s", l.id, batch);
        for (int k = 0; k < 3; k++) {
            double lat = lat_of(op);
            body = k == 0   ? kf_asprintf("{\"attempt\":%d,\"lease_token\":\"%s\",\"worker\":\"test-w1\"}", l.attempt, l.token)
                   : k == 1 ? kf_asprintf("{\"attempt\":%d,\"lease_token\":\"%s\",\"seq\":0,\"latency_ns\":%g,\"correct\":true,"
                                          "\"params\":{},\"profile\":{\"latency_ns\":%g,\"floor_ns\":500},\"findings\":[],"
                                          "\"action\":\"tune\",\"reason\":\"chosen by test_ui\"}",
                                          l.attempt, l.token, lat, lat)
                            : kf_asprintf("{\"attempt\":%d,\"lease_token\":\"%s\",\"state\":\"succeeded\",\"result\":{}}",
                                          l.attempt, l.token);
            path = kf_asprintf("%s/v1/internal/jobs/%s/%s", S.api_url, l.id, what[k]);
            st = kf_http_json("POST", path, tok, body, &r);
            cr_assert_eq(st, 200, "%s %s: %ld %s", what[k], l.id, st, r.body ? r.body : "");
            kf_http_resp_release(&r);
            free(path);
            free(body);
        }
        free(op);
        kf_queue_lease_free(&l);
        done++;
    }
    cr_assert_eq(done, n, "only %d of the %d jobs of batch %s were leased", done, n, batch);
    kf_queue_free(q);
}

static double lat_base(const char *op)
{
    (void)op;
    return 1000;
}

/* softmax 20% slower, layernorm 20% faster, rmsnorm within the 3% threshold */
static double lat_next(const char *op)
{
    return strcmp(op, "softmax") == 0 ? 1200 : strcmp(op, "layernorm") == 0 ? 800 : 1010;
}

static char *post_batch(const char *body)
{
    char *burl = kf_asprintf("%s/v1/batches", S.api_url), *id;
    kf_http_resp resp = { 0 };
    cJSON *doc;
    long st = kf_http_json("POST", burl, S.user, body, &resp);

    cr_assert_eq(st, 202, "POST /v1/batches: %ld %s", st, resp.body ? resp.body : "");
    doc = cJSON_Parse(resp.body);
    cr_assert(doc && cJSON_IsString(cJSON_GetObjectItem(doc, "id")), "batch id in %s", resp.body);
    id = kf_strdup(cJSON_GetObjectItem(doc, "id")->valuestring);
    cJSON_Delete(doc);
    kf_http_resp_release(&resp);
    free(burl);
    return id;
}

/* Sign in by pasting tok into the sign-in form (signing out first). */
static void sign_in(const char *tok)
{
    char why[512];
    char *expr = kf_asprintf("(() => { const o = document.getElementById('signout'); if (!o.hidden) o.click();"
                             " document.getElementById('token').value = '%s';"
                             " document.getElementById('signin').requestSubmit(); return true; })()", tok);

    cJSON_Delete(kf_cdp_eval(B, expr, 10000, why, sizeof(why)));
    free(expr);
    wait_for("the Jobs view after sign-in", "document.getElementById('main').dataset.ready === 'true'", 30000);
}

static const char *JOB_BODY =
    "{\"kind\":\"generate\",\"target\":\"trn2\",\"backend\":\"sim\",\"max_attempts\":1,"
    "\"budget\":{\"iterations\":3},\"labels\":{\"suite\":\"ui\"},"
    "\"spec\":{\"op\":\"softmax\",\"shapes\":[[128,512]],\"dtype\":\"bfloat16\"}}";

Test(ui, the_dashboard_shows_each_view_live_in_a_browser)
{
    kf_stack_opts o = { .redis_db = UI_DB, .n_workers = 1, .n_schedulers = 1, .lease_ms = 10000 };
    char *browser = kf_cdp_find_browser();
    char why[512], *profile, *blog, *url, *expr, *a, *b, *batch;
    kf_http_resp resp = { 0 };
    long n_iters;

    if (!browser)
        cr_skip_test("no Chromium: install Debian's chromium package (scripts/deps.sh does) or set KFORGE_CHROMIUM "
                     "to a Chromium binary; the dashboard's browser test did not run");
    Shots = kf_asprintf("%s/%s/test-artifacts/ui", kf_test_env("KFORGE_TEST_ROOT"), kf_test_env("KFORGE_TEST_BUILD"));
    mkdirs(Shots);
    kf_stack_start(&S, &o);
    profile = kf_asprintf("%s/chromium-profile", S.dir);
    blog = kf_asprintf("%s/chromium.log", S.dir);
    B = kf_cdp_start(browser, profile, blog, 1280, 800, why, sizeof(why));
    cr_assert_not_null(B, "Chromium (%s) did not start: %s; see %s", browser, why, blog);

    /* /ui/ is served with the dashboard's headers; an unknown file is 404 */
    url = kf_asprintf("%s/ui/", S.api_url);
    cr_assert_eq(kf_http_request("GET", url, NULL, NULL, NULL, 0, &resp), 200);
    {
        char *csp = kf_http_header(&resp, "Content-Security-Policy");
        cr_assert(csp && strstr(csp, "default-src 'self'") && !strstr(csp, "unsafe-inline"), "CSP: %s", csp ? csp : "none");
        free(csp);
    }
    kf_http_resp_release(&resp);

    /* the signed-out page; the dashboard's pure helpers run in it */
    cr_assert(kf_cdp_navigate(B, url, 30000, why, sizeof(why)), "%s", why);
    wait_for("the sign-in form", "!!document.getElementById('token')", 10000);
    unit_checks();

    /* sign in with a pasted token */
    sign_in(S.user);
    wait_for("the signed-in name and role", "document.getElementById('signout').textContent === 'Sign out user (user)'", 5000);
    wait_for("the live stream", "(document.getElementById('live') || {}).textContent === '● live'", 15000);
    cr_assert_eq(num("sessionStorage.length"), 1, "the token is kept in sessionStorage");

    /* a job submitted through the API shows up live, then turns succeeded */
    a = kf_stack_submit(&S, JOB_BODY);
    expr = kf_asprintf("!!document.querySelector('tr[data-id=\"%s\"]')", a);
    wait_for("the new job's row", expr, 20000);
    free(expr);
    cr_assert(kf_stack_wait_state(&S, a, "succeeded", JOB_WAIT_MS), "job %s did not succeed; logs in %s", a, S.dir);
    expr = kf_asprintf("(document.querySelector('tr[data-id=\"%s\"] .c-state') || {}).textContent === 'succeeded'", a);
    wait_for("the row's state, live", expr, 15000);
    free(expr);
    expr = kf_asprintf("(document.querySelector('tr[data-id=\"%s\"] .c-best') || {}).textContent !== '—'", a);
    wait_for("the row's best latency, live", expr, 15000);
    free(expr);
    expr = kf_asprintf("document.querySelector('tr[data-id=\"%s\"] .c-owner').textContent", a);
    {
        char *owner = kf_cdp_eval_str(B, expr);
        cr_assert(owner && strcmp(owner, "user") == 0, "the owner column names the token (got %s)", owner ? owner : "none");
        free(owner);
    }
    free(expr);
    shot("jobs");
    b = kf_stack_submit(&S, JOB_BODY);

    /* the job: curve, iterations, bounds, timeline */
    expr = kf_asprintf("#/jobs/%s", a);
    open_view(expr);
    free(expr);
    n_iters = kf_stack_sql_long(&S, "SELECT count(*) FROM iterations WHERE job_id = $1::uuid", a);
    cr_assert_gt(n_iters, 0);
    cr_assert_eq(num("Number(document.querySelector('#curve svg').dataset.marks)"), (double)n_iters,
                 "one mark per evaluation");
    cr_assert_eq(num("document.querySelectorAll('#curve .pt.ok').length"),
                 (double)kf_stack_sql_long(&S, "SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND correct", a),
                 "a dot per correct evaluation");
    cr_assert_geq(num("document.querySelectorAll('#curve .pt.ok').length"), 1, "a correct evaluation is drawn");
    cr_assert_geq(num("document.querySelector('#curve path.best').getTotalLength()"), 0, "the best-so-far line");
    cr_assert_eq(num("document.querySelectorAll('#iterations tbody tr').length"), (double)n_iters);
    cr_assert_geq(num("document.querySelectorAll('#bounds rect.bar').length"), 2, "the bounds as bars");
    wait_for("the timeline's rows", "Number((document.querySelector('#timeline canvas') || {dataset: {}}).dataset.rows) >= 2", 20000);
    cr_assert_geq(num("Number(document.querySelector('#timeline canvas').dataset.drawn)"), 1, "instructions drawn");
    cr_assert_geq(num("(() => { const c = document.querySelector('#timeline canvas');"
                      " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;"
                      " for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - d[i + 2]) > 40) n++; return n; })()"),
                  50, "coloured engine bars on the canvas");
    /* hover over the first drawn instruction names it and its source line */
    {
        cJSON *v = kf_cdp_eval(B,
                               "(() => { const c = document.querySelector('#timeline canvas'); const r = c.getBoundingClientRect();"
                               " const g = c.getContext('2d'); const dpr = window.devicePixelRatio || 1;"
                               " for (let y = 3; y < 20 * Number(c.dataset.rows); y += 20)"
                               "  for (let x = 93; x < r.width; x++) { const p = g.getImageData(Math.round((x + 1) * dpr),"
                               "   Math.round((y + 8) * dpr), 1, 1).data; if (Math.abs(p[0] - p[2]) > 40) {"
                               "   c.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + x + 1, clientY: r.top + y + 8,"
                               "    bubbles: true})); return document.querySelector('#timeline .tip').innerText; } }"
                               " return ''; })()",
                               10000, why, sizeof(why));
        cr_assert(cJSON_IsString(v) && strstr(v->valuestring, "source:") && strstr(v->valuestring, " on "),
                  "the hover names the instruction and its source line: %s", cJSON_IsString(v) ? v->valuestring : why);
        cJSON_Delete(v);
    }
    shot("job");

    /* a curve mark is reachable by keyboard and opens its iteration */
    cJSON_Delete(kf_cdp_eval(B,
                             "(() => { const m = document.querySelector('#curve .pt'); m.focus();"
                             " m.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', bubbles: true}));"
                             " return document.activeElement === m; })()",
                             10000, why, sizeof(why)));
    wait_for("the iteration view", "location.hash.includes('/iterations/') && document.getElementById('main').dataset.ready === 'true'",
             20000);
    wait_for("its source", "!!document.querySelector('#main pre.src')", 5000);
    shot("iteration");

    /* two jobs compared */
    cr_assert(kf_stack_wait_state(&S, b, "succeeded", JOB_WAIT_MS), "job %s did not succeed; logs in %s", b, S.dir);
    expr = kf_asprintf("#/compare?ids=%s,%s", a, b);
    open_view(expr);
    free(expr);
    cr_assert_eq(num("document.querySelectorAll('#compare-curves path.series').length"), 2, "two overlaid curves");
    cr_assert_eq(num("document.querySelectorAll('#compare thead th').length"), 3);
    shot("compare");

    /* a batch and its report */
    {
        char *burl = kf_asprintf("%s/v1/batches", S.api_url);
        const char *body = "{\"name\":\"ui-test\",\"template\":{\"kind\":\"generate\",\"target\":\"trn2\",\"backend\":\"sim\","
                           "\"max_attempts\":1,\"budget\":{\"iterations\":2},\"shapes\":[[128,512]],\"dtype\":\"bfloat16\"},"
                           "\"matrix\":{\"op\":[\"softmax\"]}}";
        cJSON *doc;
        long st = kf_http_json("POST", burl, S.user, body, &resp);
        cr_assert_eq(st, 202, "POST /v1/batches: %ld %s", st, resp.body ? resp.body : "");
        doc = cJSON_Parse(resp.body);
        cr_assert(doc && cJSON_IsString(cJSON_GetObjectItem(doc, "id")), "batch id in %s", resp.body);
        batch = kf_strdup(cJSON_GetObjectItem(doc, "id")->valuestring);
        cJSON_Delete(doc);
        kf_http_resp_release(&resp);
        free(burl);
    }
    cr_assert(kf_stack_wait_sql(&S, "SELECT count(*) FROM jobs WHERE batch_id = $1::uuid AND state = 'succeeded'", batch, 1,
                                JOB_WAIT_MS),
              "the batch's job did not succeed; logs in %s", S.dir);
    expr = kf_asprintf("#/batches/%s", batch);
    open_view(expr);
    free(expr);
    cr_assert_eq(num("document.querySelectorAll('#report tbody tr').length"), 1, "one report entry");
    cr_assert_eq(num("document.getElementById('batch-progress').value"), 1, "progress full");
    {
        char *verdict = kf_cdp_eval_str(B, "document.querySelector('#report tbody td').textContent");
        cr_assert(verdict && strcmp(verdict, "new") == 0, "no baseline: the entry is new (got %s)", verdict ? verdict : "none");
        free(verdict);
    }
    shot("batch");

    /* A report puts regressions first: two batches over one matrix, the
     * second with a regressed, an improved and an unchanged entry; the
     * report view against the first as baseline lists them in that order. */
    {
        static const char *const want[3][3] = { { "regressed", "softmax", "1.200" }, { "improved", "layernorm", "0.800" },
                                                { "unchanged", "rmsnorm", "1.010" } };
        const char *mbody = "{\"name\":\"ui-report\",\"template\":{\"kind\":\"generate\",\"target\":\"trn1\",\"backend\":"
                            "\"sim\",\"max_attempts\":1,\"budget\":{\"iterations\":1},\"shapes\":[[128,512]],\"dtype\":"
                            "\"bfloat16\"},\"matrix\":{\"op\":[\"rmsnorm\",\"layernorm\",\"softmax\"]}}";
        char *b1 = post_batch(mbody), *b2;

        play_worker(b1, 3, lat_base);
        b2 = post_batch(mbody);
        play_worker(b2, 3, lat_next);
        cr_assert(kf_stack_wait_sql(&S, "SELECT count(*) FROM jobs WHERE batch_id = $1::uuid AND state = 'succeeded'", b2, 3,
                                    JOB_WAIT_MS));
        expr = kf_asprintf("#/batches/%s?baseline=%s", b2, b1);
        open_view(expr);
        free(expr);
        cr_assert_eq(num("document.querySelectorAll('#report tbody tr').length"), 3, "three report entries");
        for (int i = 0; i < 3; i++) {
            char *row;
            expr = kf_asprintf("[...document.querySelectorAll('#report tbody tr')[%d].cells].map((c) => c.textContent).join('|')", i);
            row = kf_cdp_eval_str(B, expr);
            free(expr);
            cr_assert(row && strncmp(row, want[i][0], strlen(want[i][0])) == 0 && row[strlen(want[i][0])] == '|' &&
                          strstr(row, want[i][1]) && strstr(row, want[i][2]),
                      "report row %d: want %s for %s (ratio %s), got %s", i, want[i][0], want[i][1], want[i][2],
                      row ? row : "none");
            free(row);
        }
        {
            char *base = kf_cdp_eval_str(B, "document.querySelector('#report-baseline a').getAttribute('href')");
            char *want_base = kf_asprintf("#/batches/%s", b1);
            cr_assert(base && strcmp(base, want_base) == 0, "the report links its baseline %s (got %s)", want_base,
                      base ? base : "none");
            free(want_base);
            free(base);
        }
        shot("batch-report");
        free(b1);
        free(b2);
    }

    /* the library holds the softmax kernel, with its history */
    open_view("#/library");
    cr_assert_geq(num("document.querySelectorAll('#library tbody tr').length"), 1, "a library entry");
    wait_for("a history sparkline", "!!document.querySelector('#library svg.spark path')", 15000);
    shot("library");

    /* the fleet: the stack's one worker, its targets, the queue */
    open_view("#/fleet");
    cr_assert_eq(num("document.querySelectorAll('#workers tbody tr').length"), 1, "one live worker");
    {
        char *wtext = kf_cdp_eval_str(B, "document.querySelector('#workers tbody tr').innerText");
        cr_assert(wtext && strstr(wtext, "test-w0") && strstr(wtext, "trn2"), "the worker's row: %s", wtext ? wtext : "none");
        free(wtext);
    }
    cr_assert_geq(num("document.querySelectorAll('#queues tbody tr').length"), 1, "a queue per target");
    cr_assert_eq(num("document.querySelectorAll('#dead').length"), 0, "dead letters are for admins only");
    cr_assert_eq(num("[...document.querySelectorAll('#fleet h2')].filter((e) => e.textContent === 'Dead letters').length"), 0,
                 "a user is not shown the dead letters' heading");
    shot("fleet");

    /* Admin-only controls follow the token's role (GET /v1/whoami): a
     * cancelled job offers the user no Requeue (the server would answer
     * 403), and offers it to an admin, who also sees the dead letters. */
    {
        char *c = kf_stack_submit(&S, "{\"kind\":\"diag\",\"target\":\"trn1\",\"max_attempts\":1}");
        char *curl = kf_asprintf("%s/v1/jobs/%s/cancel", S.api_url, c);
        long st = kf_http_json("POST", curl, S.user, NULL, &resp);

        cr_assert(st == 200 || st == 202, "cancel %s: %ld %s", c, st, resp.body ? resp.body : "");
        kf_http_resp_release(&resp);
        cr_assert(kf_stack_wait_state(&S, c, "cancelled", 20000), "job %s was not cancelled", c);
        open_view("#/jobs?state=cancelled");
        expr = kf_asprintf("!!document.querySelector('tr[data-id=\"%s\"]')", c);
        wait_for("the cancelled job's row", expr, 15000);
        free(expr);
        cr_assert_eq(num("document.querySelectorAll('#jobs button.requeue').length"), 0, "no Requeue for a user token");
        shot("jobs-user");

        sign_in(S.admin);
        wait_for("the admin's name and role", "document.getElementById('signout').textContent === 'Sign out admin (admin)'", 5000);
        open_view("#/jobs?state=cancelled");
        expr = kf_asprintf("!!document.querySelector('tr[data-id=\"%s\"] button.requeue')", c);
        wait_for("Requeue for an admin token", expr, 15000);
        free(expr);
        open_view("#/fleet");
        cr_assert_eq(num("document.querySelectorAll('#dead').length"), 1, "an admin sees the dead letters");
        free(curl);
        free(c);
    }

    cr_assert_str_eq(kf_cdp_errors(B), "", "the page logged errors:\n%s", kf_cdp_errors(B));

    free(batch);
    free(a);
    free(b);
    free(url);
    free(profile);
    free(blog);
    free(browser);
}
