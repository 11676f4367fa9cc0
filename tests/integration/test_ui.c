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

    /* sign in with a pasted token */
    cr_assert(kf_cdp_navigate(B, url, 30000, why, sizeof(why)), "%s", why);
    wait_for("the sign-in form", "!!document.getElementById('token')", 10000);
    expr = kf_asprintf("(() => { document.getElementById('token').value = '%s';"
                       " document.getElementById('signin').requestSubmit(); return true; })()", S.user);
    cJSON_Delete(kf_cdp_eval(B, expr, 10000, why, sizeof(why)));
    free(expr);
    wait_for("the Jobs view after sign-in", "document.getElementById('main').dataset.ready === 'true'", 30000);
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
    shot("fleet");

    cr_assert_str_eq(kf_cdp_errors(B), "", "the page logged errors:\n%s", kf_cdp_errors(B));

    free(batch);
    free(a);
    free(b);
    free(url);
    free(profile);
    free(blog);
    free(browser);
}
