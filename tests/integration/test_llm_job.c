/* The LLM planner on jobs (issue 20) through the whole stack: kforge-api,
 * kforge-scheduler and kforge-worker against real PostgreSQL and Redis,
 * the model a scripted OpenAI-compatible server over real HTTP
 * (tests/lib/kf_test_llm).  An optimize job with planner "llm" whose
 * kernel does not compile is repaired (a wrong candidate first, then
 * a kernel fitted to the shape it was shown fails the second shape), the
 * model echoes the API key once, then the guided planner tunes the repair: every
 * iteration and model turn is a row of PostgreSQL, the key is nowhere in
 * them or the logs, the API gives the turns back as a transcript that
 * `kforge tune --llm-replay` replays to the same verdicts with no model;
 * a worker without an LLM endpoint fails such a job at once, naming the
 * settings. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_json.h"
#include "tests/lib/kf_test.h"
#include "tests/lib/kf_test_http.h"
#include "tests/lib/kf_test_llm.h"
#include "tests/lib/kf_test_stack.h"

#define LLM_JOB_DB 6
#define KEY "sk-test-SECRETKEY-4417"

static kf_stack S;

static void teardown(void)
{
    kf_stack_stop(&S);
}

TestSuite(llm_job, .fini = teardown, .timeout = 420);

static const char *KERNEL =
    "import math\n"
    "import nki\n"
    "import nki.language as nl\n"
    "import nki.isa as nisa\n"
    "\n"
    "@nki.jit\n"
    "def double(x, TILE_F=128):\n"
    "    N, D = x.shape\n"
    "    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)\n"
    "    for c in nl.affine_range(math.ceil(D / TILE_F)):\n"
    "        c0 = c * TILE_F\n"
    "        w = min(TILE_F, D - c0)\n"
    "        t = nl.ndarray((N, TILE_F), dtype=x.dtype, buffer=nl.sbuf)\n"
    "        nisa.dma_copy(dst=t[0:N, 0:w], src=x[0:N, c0:c0 + w])\n"
    "        o = nl.ndarray((N, TILE_F), dtype=x.dtype, buffer=nl.sbuf)\n"
    "        nisa.tensor_scalar(dst=o[0:N, 0:w], data=t[0:N, 0:w], op0=nl.multiply, operand0=2.0)\n"
    "        nisa.dma_copy(dst=out[0:N, c0:c0 + w], src=o[0:N, 0:w])\n"
    "    return out\n";

static const char *REF = "import numpy as np\ndef double(x):\n    return 2.0 * np.asarray(x, dtype=np.float64)\n";

static char *replace(const char *s, const char *from, const char *to)
{
    const char *at = strstr(s, from);
    cr_assert_not_null(at, "'%s' in the kernel", from);
    return kf_asprintf("%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
}

static void push_tool(kf_test_llm *s, const char *id, const char *name, const char *src, const char *reason)
{
    cJSON *a = cJSON_CreateObject();
    char *args, *b;
    if (src)
        cJSON_AddStringToObject(a, "source", src);
    if (reason)
        cJSON_AddStringToObject(a, "reason", reason);
    args = kf_json_print(a);
    b = kf_test_llm_tool(id, name, args, 900, 300);
    kf_test_llm_push(s, 200, NULL, 0, b);
    free(b);
    free(args);
    cJSON_Delete(a);
}

/* An optimize job's body with planner llm. */
static char *job_body(const char *source)
{
    cJSON *b = cJSON_CreateObject(), *spec, *in, *x, *sh, *tun, *bud;
    char *t;

    cJSON_AddStringToObject(b, "kind", "optimize");
    cJSON_AddStringToObject(b, "target", "trn2");
    cJSON_AddStringToObject(b, "backend", "sim");
    cJSON_AddNumberToObject(b, "max_attempts", 2);
    bud = cJSON_AddObjectToObject(b, "budget");
    cJSON_AddNumberToObject(bud, "iterations", 3);
    cJSON_AddNumberToObject(bud, "llm_tokens", 200000);
    spec = cJSON_AddObjectToObject(b, "spec");
    cJSON_AddStringToObject(spec, "source", source);
    cJSON_AddStringToObject(spec, "entry", "double");
    cJSON_AddStringToObject(spec, "reference", REF);
    cJSON_AddStringToObject(spec, "planner", "llm");
    in = cJSON_AddObjectToObject(spec, "inputs");
    x = cJSON_AddObjectToObject(in, "x");
    sh = cJSON_AddArrayToObject(x, "shape");
    cJSON_AddItemToArray(sh, cJSON_CreateNumber(128));
    cJSON_AddItemToArray(sh, cJSON_CreateNumber(1000));
    cJSON_AddStringToObject(x, "dtype", "bfloat16");
    tun = cJSON_AddObjectToObject(spec, "tunables");
    sh = cJSON_AddArrayToObject(tun, "TILE_F");
    cJSON_AddItemToArray(sh, cJSON_CreateNumber(128));
    cJSON_AddItemToArray(sh, cJSON_CreateNumber(256));
    t = kf_json_print(b);
    cJSON_Delete(b);
    return t;
}

static long count(const char *sql, const char *id)
{
    return kf_stack_sql_long(&S, sql, id);
}

static bool file_has(const char *path, const char *needle)
{
    char *t = kf_test_read_file(path);
    bool has = t && strstr(t, needle);
    free(t);
    return has;
}

/* The verdicts of a replayed run's iterations.jsonl: how many iterations
 * were accepted and how many were wrong (only the model's proposals when
 * proposals_only). */
static void replay_verdicts(const char *path, bool proposals_only, int *ok, int *bad)
{
    char *t = kf_test_read_file(path);

    *ok = *bad = 0;
    cr_assert_not_null(t, "the replay wrote %s", path);
    for (char *l = t; *l;) {
        char *nl = strchr(l, '\n');
        cJSON *j, *a;
        if (nl)
            *nl = '\0';
        j = cJSON_Parse(l);
        a = cJSON_GetObjectItemCaseSensitive(j, "action");
        if (!proposals_only || (cJSON_IsString(a) && strcmp(a->valuestring, "propose") == 0)) {
            *ok += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "accepted"));
            *bad += cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "correct"));
        }
        cJSON_Delete(j);
        if (!nl)
            break;
        l = nl + 1;
    }
    free(t);
}

Test(llm_job, optimize_with_the_llm_planner_is_stored_and_replays)
{
    kf_stack_opts o = { .redis_db = LLM_JOB_DB, .n_workers = 0, .n_schedulers = 1, .lease_ms = 10000 };
    kf_test_llm *m = kf_test_llm_start();
    char *broken = replace(KERNEL, "op0=nl.multiply", "op0=nl.multiplyy");
    char *wrong = replace(KERNEL, "operand0=2.0", "operand0=3.0");
    char *fitted = replace(KERNEL, "N, D = x.shape", "N, D = 128, 1000");
    char *echo = kf_test_llm_content("Done. (Debug: the key I was given is " KEY ".)", 900, 40);
    char *keyfile, *env, *body, *id, *url, *auth, *wlog, *alog, *tfile, *kfile, *rfile, *out, *cmd, *res;
    kf_http_resp r = { 0 };
    cJSON *page, *it;
    int fd, props = 0, accepted = 0, wrong_seen = 0, turns = 0;

    kf_stack_start(&S, &o);
    keyfile = kf_asprintf("%s/llm-key", S.dir);
    fd = open(keyfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(fd >= 0);
    cr_assert(write(fd, KEY "\n", strlen(KEY) + 1) == (ssize_t)strlen(KEY) + 1);
    close(fd);
    env = kf_asprintf("KFORGE_LLM_URL=%s\nKFORGE_LLM_MODEL=scripted\nKFORGE_LLM_API_KEY_FILE=%s\nKFORGE_LLM_RETRIES=0",
                      kf_test_llm_url(m), keyfile);
    kf_stack_worker(&S, 0, env);

    /* repair: a wrong candidate, then the fix; restructure: the model
     * echoes the key instead of calling a tool, then finishes */
    {
        char *b = kf_test_llm_tool("c0", "docs", "{\"query\":\"tensor_scalar\"}", 900, 300);
        kf_test_llm_push(m, 200, NULL, 0, b);
        free(b);
    }
    push_tool(m, "c1", "propose", wrong, "multiply by three");
    push_tool(m, "c2", "propose", fitted, "the op is nl.multiply, for the shape I was shown");
    push_tool(m, "c2b", "propose", KERNEL, "the op is nl.multiply");
    kf_test_llm_push(m, 200, NULL, 0, echo);
    push_tool(m, "c3", "finish", NULL, "good enough");

    body = job_body(broken);
    id = kf_stack_submit(&S, body);
    cr_assert(kf_stack_wait_state(&S, id, "succeeded", 300000), "the job is %s; see %s", kf_stack_state(&S, id),
              S.dir);
    cr_assert_eq(kf_test_llm_requests(m), 6, "the model was asked 6 times");
    auth = kf_test_llm_auth(m, 0);
    cr_assert_str_eq(auth, "Bearer " KEY, "the key went to the endpoint");
    free(auth);

    /* every iteration and turn in PostgreSQL */
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action = 'llm_start' AND NOT "
                       "(compile->>'ok')::bool",
                       id),
                 1, "the start kernel, which does not compile");
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action = 'llm_propose'", id), 3);
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action = 'llm_propose' AND "
                       "correct AND (llm->>'accepted')::bool AND source LIKE '%operand0=2.0%' AND "
                       "(llm->'usage'->>'prompt_tokens')::int > 0",
                       id),
                 1, "the repair is accepted, its source and usage stored");
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action = 'llm_propose' AND NOT "
                       "correct AND llm->>'mode' = 'repair' AND llm->'hack' IS NULL AND source LIKE '%operand0=3.0%'",
                       id),
                 1, "the wrong candidate is rejected");
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action = 'llm_propose' AND NOT "
                       "correct AND NOT (llm->>'accepted')::bool AND llm->'hack'->>'rule' = 'second_shape' AND "
                       "source LIKE '%= 128, 1000%'",
                       id),
                 1, "the kernel fitted to the shown shape fails the second shape and is recorded as such");
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action = 'llm_turn'", id), 6,
                 "one row per model turn");
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action = 'llm_turn' AND "
                       "llm->'turn'->'messages' @> '[{\"role\": \"tool\"}]' AND llm::text LIKE '%tensor_scalar%' AND "
                       "llm::text LIKE '%sections%' AND llm::text NOT LIKE '%not available%'",
                       id),
                 1, "the docs tool answers in a job: kforge's docs/sim-nki.md sections");
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND llm->'turn'->'messages'->0->>"
                       "'role' = 'system' AND llm->'turn'->>'reply' LIKE '%tensor_scalar%'",
                       id),
                 1, "the first turn holds the prompts and the reply");
    cr_assert_gt(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND llm IS NULL", id), 0,
                 "the guided planner tuned the repair");
    {
        char *l = kf_stack_sql_value(&S, "SELECT (result->'llm')::text FROM job_results WHERE job_id = $1::uuid", id);
        cr_assert_eq(count("SELECT count(*) FROM job_results WHERE job_id = $1::uuid AND result->'llm'->>'stop' = "
                           "'finished' AND (result->'llm'->'llm'->>'completion_tokens')::int = 1540",
                           id),
                     1, "the result carries the model's part and its tokens: %.2000s", l ? l : "(none)");
        free(l);
    }
    /* the key: overwritten in the stored reply, nowhere else */
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND llm->'turn'->>'reply' LIKE "
                       "'%given is ********************%'",
                       id),
                 1, "the echoed key is redacted");
    cr_assert_eq(count("SELECT count(*) FROM iterations i WHERE i.job_id = $1::uuid AND (i.llm::text LIKE "
                       "'%SECRETKEY%' OR i.reason LIKE '%SECRETKEY%' OR i.source LIKE '%SECRETKEY%')",
                       id),
                 0, "the key is in no iteration");
    cr_assert_eq(count("SELECT count(*) FROM job_results WHERE job_id = $1::uuid AND result::text LIKE '%SECRETKEY%'",
                       id),
                 0);
    wlog = kf_stack_log(&S, "worker", 0);
    alog = kf_stack_log(&S, "api", 0);
    cr_assert(!file_has(wlog, "SECRETKEY") && !file_has(alog, "SECRETKEY"), "the key is in no log");
    cr_assert(file_has(wlog, "llm=scripted"), "the worker says it has an LLM endpoint");

    /* the runs API: iterations carry the llm member, the transcript the turns */
    url = kf_asprintf("%s/v1/jobs/%s/iterations?limit=500", S.api_url, id);
    cr_assert_eq(kf_http_json("GET", url, S.user, NULL, &r), 200);
    page = cJSON_Parse(r.body);
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(page, "items"))
    {
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(it, "llm");
        const char *act = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "action"));
        if (act && strcmp(act, "llm_propose") == 0) {
            props++;
            accepted += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(l, "accepted"));
            wrong_seen += cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(it, "correct"));
        }
        if (act && strcmp(act, "llm_turn") == 0) {
            turns++;
            cr_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(it, "llm_turn")));
            cr_assert_null(cJSON_GetObjectItemCaseSensitive(l, "turn"), "list items leave the turn's text out");
        }
    }
    cr_assert(props == 3 && accepted == 1 && wrong_seen == 2 && turns == 6, "%d %d %d %d", props, accepted,
              wrong_seen, turns);
    cJSON_Delete(page);
    kf_http_resp_release(&r);
    free(url);
    url = kf_asprintf("%s/v1/jobs/%s/transcript", S.api_url, id);
    cr_assert_eq(kf_http_json("GET", url, S.user, NULL, &r), 200);
    tfile = kf_asprintf("%s/transcript.jsonl", S.dir);
    kf_test_write_file(tfile, r.body);
    {
        int lines = 0;
        for (const char *p = r.body; *p; p++)
            lines += *p == '\n';
        cr_assert_eq(lines, 6, "one line per turn:\n%s", r.body);
    }
    kf_http_resp_release(&r);
    free(url);

    /* the stored transcript replays the run with no model */
    kfile = kf_asprintf("%s/start.py", S.dir);
    rfile = kf_asprintf("%s/ref.py", S.dir);
    out = kf_asprintf("%s/replay", S.dir);
    kf_test_write_file(kfile, broken);
    kf_test_write_file(rfile, REF);
    {
        char *bin = kf_test_bin("kforge");
        cmd = kf_asprintf("%s tune %s --entry double --reference %s --input "
                          "x=shape:128x1000:bf16 --planner llm --llm-replay %s --tunables '{\"TILE_F\":[128,256]}' "
                          "--iterations 2 --output-dir %s --quiet > %s/replay.out 2>&1",
                          bin, kfile, rfile, tfile, out, S.dir);
        free(bin);
    }
    cr_assert_eq(system(cmd), 0, "the replay runs: %s", cmd);
    res = kf_asprintf("%s/iterations.jsonl", out);
    {
        int ok = 0, bad = 0;
        replay_verdicts(res, true, &ok, &bad);
        cr_assert(ok == 1 && bad == 2, "the replay reaches the same verdicts (%d accepted, %d wrong)", ok, bad);
    }
    free(res);
    free(cmd);
    free(out);
    free(kfile);
    free(rfile);
    free(tfile);
    free(wlog);
    free(alog);
    free(id);
    free(body);
    free(env);
    free(keyfile);
    free(echo);
    free(wrong);
    free(fitted);
    free(broken);
    kf_test_llm_stop(m);
}

Test(llm_job, a_worker_without_an_llm_endpoint_fails_the_job_at_once)
{
    kf_stack_opts o = { .redis_db = LLM_JOB_DB, .n_workers = 1, .n_schedulers = 1, .lease_ms = 10000 };
    char *body, *id, *err;

    kf_stack_start(&S, &o);
    body = job_body(KERNEL);
    id = kf_stack_submit(&S, body);
    cr_assert(kf_stack_wait_state(&S, id, "failed", 60000), "the job is %s", kf_stack_state(&S, id));
    err = kf_stack_sql_value(&S, "SELECT coalesce(error, '') FROM job_results WHERE job_id = $1::uuid", id);
    cr_assert(err && strstr(err, "no LLM endpoint configured") && strstr(err, "KFORGE_LLM_URL"), "%s", err);
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT attempt FROM jobs WHERE id = $1::uuid", id), 1,
                 "not retried: another attempt would not help");
    cr_assert_eq(kf_stack_sql_long(&S, "SELECT count(*) FROM iterations WHERE job_id = $1::uuid", id), 0);
    free(err);
    free(id);
    free(body);
}

static const char *GELU =
    "import math\n"
    "import nki\n"
    "import nki.language as nl\n"
    "import nki.isa as nisa\n"
    "\n"
    "@nki.jit\n"
    "def gelu(x):\n"
    "    N, D = x.shape\n"
    "    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)\n"
    "    for c in nl.affine_range(math.ceil(D / 512)):\n"
    "        c0 = c * 512\n"
    "        w = min(512, D - c0)\n"
    "        t = nl.ndarray((N, 512), dtype=x.dtype, buffer=nl.sbuf)\n"
    "        nisa.dma_copy(dst=t[0:N, 0:w], src=x[0:N, c0:c0 + w])\n"
    "        o = nl.ndarray((N, 512), dtype=x.dtype, buffer=nl.sbuf)\n"
    "        nisa.activation(dst=o[0:N, 0:w], op=nl.gelu_apprx_tanh, data=t[0:N, 0:w])\n"
    "        nisa.dma_copy(dst=out[0:N, c0:c0 + w], src=o[0:N, 0:w])\n"
    "    return out\n";

static const char *GELU_REF = "import numpy as np\n"
                              "def gelu(x):\n"
                              "    x = np.asarray(x, dtype=np.float64)\n"
                              "    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))\n";

/* Write mode: GELU is not in the library; the model writes it from the
 * reference -- a first attempt that does not compile, a repair with the
 * wrong function, one fitted to the shape it was shown (the second shape
 * catches it), the right one -- and the job's transcript replays through
 * `kforge tune --planner llm --op` with no model. */
Test(llm_job, a_generate_job_writes_an_op_outside_the_library)
{
    kf_stack_opts o = { .redis_db = LLM_JOB_DB, .n_workers = 0, .n_schedulers = 1, .lease_ms = 10000 };
    kf_test_llm *m = kf_test_llm_start();
    char *nocompile = replace(GELU, "op=nl.gelu_apprx_tanh", "op=nl.gelu_tanhh");
    char *wrong = replace(GELU, "op=nl.gelu_apprx_tanh", "op=nl.tanh");
    char *fitted = replace(GELU, "N, D = x.shape", "N, D = 128, 1000");
    char *env, *body, *id, *url, *tfile, *rfile, *out, *cmd, *res;
    kf_http_resp r = { 0 };
    cJSON *b, *spec, *sh, *d;
    int ok = 0, bad = 0;

    kf_stack_start(&S, &o);
    env = kf_asprintf("KFORGE_LLM_URL=%s\nKFORGE_LLM_MODEL=scripted\nKFORGE_LLM_RETRIES=0", kf_test_llm_url(m));
    kf_stack_worker(&S, 0, env);
    push_tool(m, "w1", "propose", nocompile, "first attempt");
    push_tool(m, "w2", "propose", wrong, "activation tanh");
    push_tool(m, "w3", "propose", fitted, "for the shape given");
    push_tool(m, "w4", "propose", GELU, "gelu_apprx_tanh on the ScalarE");
    push_tool(m, "w5", "finish", NULL, "done");

    b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "kind", "generate");
    cJSON_AddStringToObject(b, "target", "trn2");
    cJSON_AddNumberToObject(b, "max_attempts", 1);
    spec = cJSON_AddObjectToObject(b, "spec");
    cJSON_AddStringToObject(spec, "op", "gelu");
    cJSON_AddStringToObject(spec, "dtype", "bfloat16");
    cJSON_AddStringToObject(spec, "planner", "llm");
    cJSON_AddStringToObject(spec, "reference", GELU_REF);
    sh = cJSON_AddArrayToObject(spec, "shapes");
    d = cJSON_CreateArray();
    cJSON_AddItemToArray(d, cJSON_CreateNumber(128));
    cJSON_AddItemToArray(d, cJSON_CreateNumber(1000));
    cJSON_AddItemToArray(sh, d);
    body = kf_json_print(b);
    cJSON_Delete(b);
    id = kf_stack_submit(&S, body);
    cr_assert(kf_stack_wait_state(&S, id, "succeeded", 300000), "the job is %s; see %s", kf_stack_state(&S, id),
              S.dir);
    cr_assert_eq(kf_test_llm_requests(m), 5);
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action = 'llm_start'", id), 0,
                 "nothing to start from");
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action = 'llm_propose' AND "
                       "llm->>'mode' = 'write' AND NOT (compile->>'ok')::bool AND source LIKE '%gelu_tanhh%'",
                       id),
                 1, "the first attempt does not compile");
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action = 'llm_propose' AND "
                       "llm->>'mode' = 'repair' AND NOT correct AND llm->'hack' IS NULL AND source LIKE '%nl.tanh%'",
                       id),
                 1, "the repair with the wrong function is rejected by the validator");
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action = 'llm_propose' AND NOT "
                       "correct AND llm->'hack'->>'rule' = 'second_shape'",
                       id),
                 1, "the kernel fitted to the shown shape fails the second shape");
    cr_assert_eq(count("SELECT count(*) FROM iterations WHERE job_id = $1::uuid AND action = 'llm_propose' AND "
                       "correct AND (llm->>'accepted')::bool AND source LIKE '%gelu_apprx_tanh%'",
                       id),
                 1, "the written kernel is accepted");
    cr_assert_eq(count("SELECT count(*) FROM job_results WHERE job_id = $1::uuid AND result->'stop'->>'reason' = "
                       "'llm_only' AND result->'best'->>'source' LIKE '%gelu_apprx_tanh%' AND "
                       "(result->'llm'->'start'->>'written')::bool",
                       id),
                 1, "the written kernel is the result (it declares no tunables)");

    url = kf_asprintf("%s/v1/jobs/%s/transcript", S.api_url, id);
    cr_assert_eq(kf_http_json("GET", url, S.user, NULL, &r), 200);
    tfile = kf_asprintf("%s/write.jsonl", S.dir);
    kf_test_write_file(tfile, r.body);
    kf_http_resp_release(&r);
    rfile = kf_asprintf("%s/gelu_ref.py", S.dir);
    kf_test_write_file(rfile, GELU_REF);
    out = kf_asprintf("%s/write-replay", S.dir);
    {
        char *bin = kf_test_bin("kforge");
        cmd = kf_asprintf("%s tune --planner llm --op gelu --reference %s --shape 128x1000 --dtype bf16 "
                          "--llm-replay %s --output-dir %s --quiet > %s/write-replay.out 2>&1",
                          bin, rfile, tfile, out, S.dir);
        free(bin);
    }
    cr_assert_eq(system(cmd), 0, "the replay runs: %s", cmd);
    res = kf_asprintf("%s/iterations.jsonl", out);
    replay_verdicts(res, false, &ok, &bad);
    cr_assert(ok == 1 && bad == 3, "the replay reaches the same verdicts (%d accepted, %d wrong)", ok, bad);
    free(res);
    free(cmd);
    free(out);
    free(rfile);
    free(tfile);
    free(url);
    free(id);
    free(body);
    free(env);
    free(nocompile);
    free(wrong);
    free(fitted);
    kf_test_llm_stop(m);
}
