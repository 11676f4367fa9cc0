/* The CLI's pieces that need no service: the Server-Sent Events parser
 * (common/kf_sse_client) and what `kforge` prints for people (cli/cli_out). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_library.h"
#include "cli/cli_out.h"
#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_sse_client.h"

/* ---- the SSE parser -------------------------------------------------------------- */

typedef struct got {
    kf_buf log;     /* "type|id|data\n" per event */
    int    n;
    int    stop_at; /* return KF_CONFLICT at this event (0 never) */
} got;

static kf_code on_event(void *ud, const kf_sse_event *ev, kf_err *err)
{
    got *g = ud;
    g->n++;
    kf_buf_addf(&g->log, "%s|%s|", ev->type, ev->id);
    kf_buf_add(&g->log, ev->data, ev->data_len);
    kf_buf_addc(&g->log, '\n');
    if (g->stop_at && g->n == g->stop_at)
        return kf_err_set(err, KF_CONFLICT, "stop");
    return KF_OK;
}

/* Feed text in chunks of `step` bytes; the events' log (caller frees). */
static char *parse_in_steps(const char *text, size_t step, kf_code *rc_out)
{
    kf_sse_parser *p = kf_sse_new(0, 0);
    got g = { KF_BUF_INIT, 0, 0 };
    kf_err e = KF_ERR_INIT;
    kf_code rc = KF_OK;
    size_t n = strlen(text);

    for (size_t i = 0; i < n && rc == KF_OK; i += step)
        rc = kf_sse_feed(p, text + i, n - i < step ? n - i : step, on_event, &g, &e);
    if (rc_out)
        *rc_out = rc;
    kf_sse_free(p);
    return kf_buf_detach(&g.log);
}

Test(sse_client, events_with_ids_types_and_multiline_data)
{
    const char *s = "id: 7\nevent: state\ndata: {\"to\":\"running\"}\n\n"
                    ": hb\n"
                    "event: iteration\nid: 8\ndata: line1\ndata: line2\n\n"
                    "data:no space\n\n";
    char *log = parse_in_steps(s, 1000, NULL);
    cr_assert_str_eq(log, "state|7|{\"to\":\"running\"}\niteration|8|line1\nline2\nmessage|8|no space\n");
    free(log);
}

Test(sse_client, chunking_does_not_change_the_events)
{
    const char *s = "\xEF\xBB\xBFid: 1\r\nevent: state\r\ndata: a\r\n\r\nid: 2\rdata: b\r\rdata: c\n\n";
    char *whole = parse_in_steps(s, 4096, NULL);

    cr_assert_str_eq(whole, "state|1|a\nmessage|2|b\nmessage|2|c\n");
    for (size_t step = 1; step < 8; step++) {
        char *part = parse_in_steps(s, step, NULL);
        cr_assert_str_eq(part, whole, "chunks of %zu bytes", step);
        free(part);
    }
    free(whole);
}

Test(sse_client, blank_event_and_unknown_fields_dispatch_nothing)
{
    char *log = parse_in_steps("event: state\n\nfoo: bar\nretry: x1\n\n: comment\n\n", 3, NULL);
    cr_assert_str_eq(log, "");
    free(log);
}

Test(sse_client, retry_and_comments_are_kept)
{
    kf_sse_parser *p = kf_sse_new(0, 0);
    got g = { KF_BUF_INIT, 0, 0 };
    const char *s = ": hb\nretry: 2500\n: hb\nretry: 12a\n";

    cr_assert_eq(kf_sse_retry_ms(p), -1);
    cr_assert_eq(kf_sse_feed(p, s, strlen(s), on_event, &g, NULL), KF_OK);
    cr_assert_eq(kf_sse_retry_ms(p), 2500);
    cr_assert_eq(kf_sse_comments(p), 2);
    kf_sse_free(p);
    kf_buf_release(&g.log);
}

Test(sse_client, a_line_over_the_bound_fails_until_restart)
{
    kf_sse_parser *p = kf_sse_new(16, 64);
    got g = { KF_BUF_INIT, 0, 0 };
    kf_err e = KF_ERR_INIT;
    const char *longline = "data: 0123456789abcdef\n\n";

    cr_assert_eq(kf_sse_feed(p, longline, strlen(longline), on_event, &g, &e), KF_TOO_LARGE);
    cr_assert(strstr(e.msg, "longer than 16 bytes"), "%s", e.msg);
    cr_assert_neq(kf_sse_feed(p, "data: x\n\n", 9, on_event, &g, &e), KF_OK);
    kf_sse_restart(p);
    cr_assert_eq(kf_sse_feed(p, "data: x\n\n", 9, on_event, &g, &e), KF_OK);
    cr_assert_eq(g.n, 1);
    kf_sse_free(p);
    kf_buf_release(&g.log);
}

Test(sse_client, data_over_the_bound_fails)
{
    kf_sse_parser *p = kf_sse_new(64, 10);
    got g = { KF_BUF_INIT, 0, 0 };
    kf_err e = KF_ERR_INIT;
    const char *s = "data: 12345\ndata: 12345\n\n";

    cr_assert_eq(kf_sse_feed(p, s, strlen(s), on_event, &g, &e), KF_TOO_LARGE);
    cr_assert(strstr(e.msg, "more than 10 bytes"), "%s", e.msg);
    cr_assert_eq(g.n, 0);
    kf_sse_free(p);
}

Test(sse_client, long_ids_fail_and_ids_with_nul_are_ignored)
{
    kf_sse_parser *p = kf_sse_new(0, 0);
    got g = { KF_BUF_INIT, 0, 0 };
    kf_err e = KF_ERR_INIT;
    char longid[400];
    const char nul_id[] = "id: 5\nid: 6\0x\ndata: d\n\n";

    const char nul_type[] = "event: \0state\ndata: d\n\n";

    cr_assert_eq(kf_sse_feed(p, nul_id, sizeof(nul_id) - 1, on_event, &g, &e), KF_OK);
    cr_assert_str_eq(kf_sse_last_id(p), "5");
    /* the fuzzer's find: a type starting with NUL was dispatched as "" */
    cr_assert_eq(kf_sse_feed(p, nul_type, sizeof(nul_type) - 1, on_event, &g, &e), KF_OK);
    cr_assert_str_eq(g.log.data, "message|5|d\nmessage|5|d\n");
    memset(longid, 'a', sizeof(longid));
    longid[0] = 'i';   /* "id: " then 'a's, no NUL: a line over the id limit */
    longid[1] = 'd';
    longid[2] = ':';
    longid[3] = ' ';
    longid[sizeof(longid) - 1] = '\n';
    cr_assert_eq(kf_sse_feed(p, longid, sizeof(longid), on_event, &g, &e), KF_TOO_LARGE);
    cr_assert_str_eq(kf_sse_last_id(p), "5");
    kf_sse_free(p);
    kf_buf_release(&g.log);
}

Test(sse_client, restart_keeps_the_last_id_and_drops_the_partial_event)
{
    kf_sse_parser *p = kf_sse_new(0, 0);
    got g = { KF_BUF_INIT, 0, 0 };
    const char *a = "id: 41\ndata: one\n\nid: 42\ndata: par";

    cr_assert_eq(kf_sse_feed(p, a, strlen(a), on_event, &g, NULL), KF_OK);
    cr_assert_str_eq(kf_sse_last_id(p), "42");
    kf_sse_restart(p);
    cr_assert_eq(kf_sse_feed(p, "tial\n\ndata: two\n\n", 17, on_event, &g, NULL), KF_OK);
    cr_assert_str_eq(g.log.data, "message|41|one\nmessage|42|two\n");
    kf_sse_free(p);
    kf_buf_release(&g.log);
}

Test(sse_client, a_callback_error_stops_the_feed)
{
    kf_sse_parser *p = kf_sse_new(0, 0);
    got g = { KF_BUF_INIT, 0, 1 };
    kf_err e = KF_ERR_INIT;
    const char *s = "data: 1\n\ndata: 2\n\n";

    cr_assert_eq(kf_sse_feed(p, s, strlen(s), on_event, &g, &e), KF_CONFLICT);
    cr_assert_eq(g.n, 1);
    kf_sse_free(p);
    kf_buf_release(&g.log);
}

/* ---- tables ------------------------------------------------------------------------ */

static char *render(void (*fn)(const cJSON *, kf_buf *), const char *json)
{
    cJSON *doc = cJSON_Parse(json);
    kf_buf b = KF_BUF_INIT;

    cr_assert_not_null(doc, "bad test JSON: %s", json);
    fn(doc, &b);
    cJSON_Delete(doc);
    return kf_buf_detach(&b);
}

Test(cli_table, columns_are_aligned_and_cells_cleaned)
{
    static const char *const head[] = { "A", "LONGER" };
    const char *r1[] = { "xxxxx", "1" }, *r2[] = { "y\nz", NULL };
    cli_table *t = cli_table_new(2, head);
    kf_buf b = KF_BUF_INIT;

    cli_table_add(t, r1);
    cli_table_add(t, r2);
    cli_table_render(t, &b);
    cr_assert_str_eq(b.data, "A      LONGER\nxxxxx  1\ny z    -\n");
    cli_table_free(t);
    kf_buf_release(&b);
}

Test(cli_table, long_cells_are_cut_between_characters)
{
    static const char *const head[] = { "X" };
    char cell[200] = "";
    const char *row[] = { cell };
    cli_table *t = cli_table_new(1, head);
    kf_buf b = KF_BUF_INIT;

    for (size_t i = 0; i < 140; i += 2) {   /* é: 2 bytes, 1 character */
        cell[i] = '\xC3';
        cell[i + 1] = '\xA9';
    }
    cell[140] = '\0';
    cli_table_add(t, row);
    cli_table_render(t, &b);
    /* 57 characters then "..." */
    cr_assert(strstr(b.data, "..."), "%s", b.data);
    cr_assert_eq(strlen(strchr(b.data, '\n') + 1), 57 * 2 + 3 + 1, "%s", b.data);
    cli_table_free(t);
    kf_buf_release(&b);
}

Test(cli_render, jobs_light_items_and_the_next_page)
{
    char *s = render(cli_render_jobs,
                     "{\"jobs\":[{\"id\":\"0b6c1f3e-0000-4000-8000-000000000001\",\"state\":\"succeeded\","
                     "\"kind\":\"generate\",\"target\":\"trn2\",\"spec\":{\"op\":\"softmax\"},"
                     "\"best\":{\"seq\":3,\"latency_ns\":81234.0,\"fraction_of_bound\":0.934},"
                     "\"created_at\":\"2026-12-02T10:00:00.123456Z\"},"
                     "{\"id\":\"0b6c1f3e-0000-4000-8000-000000000002\",\"state\":\"queued\",\"kind\":\"diag\","
                     "\"target\":\"trn1\",\"spec\":{},\"best\":null,\"created_at\":\"2026-12-02T09:00:00Z\"}],"
                     "\"next_cursor\":\"abc\"}");
    cr_assert(strstr(s, "ID                                    STATE      KIND      OP       TARGET  BEST     "
                        "FRACTION  CREATED\n"), "%s", s);
    cr_assert(strstr(s, "succeeded  generate  softmax  trn2    81.2 us  0.93      2026-12-02T10:00:00\n"), "%s", s);
    cr_assert(strstr(s, "queued     diag      -        trn1    -        -         2026-12-02T09:00:00\n"), "%s", s);
    cr_assert(strstr(s, "more: kforge jobs --cursor abc\n"), "%s", s);
    free(s);
    s = render(cli_render_jobs, "{\"jobs\":[],\"next_cursor\":null}");
    cr_assert_str_eq(s, "no jobs\n");
    free(s);
}

Test(cli_render, jobs_full_shape_reads_the_result)
{
    char *s = render(cli_render_jobs, "{\"items\":[{\"id\":\"x\",\"state\":\"succeeded\",\"result\":"
                                      "{\"latency_ns\":2500000,\"fraction_of_bound\":0.5}}]}");
    cr_assert(strstr(s, "2.50 ms  0.50"), "%s", s);
    free(s);
}

Test(cli_render, events_table)
{
    char *s = render(cli_render_events,
                     "{\"job_id\":\"j\",\"events\":[{\"id\":12,\"type\":\"started\",\"attempt\":1,"
                     "\"from_state\":\"queued\",\"to_state\":\"running\",\"detail\":{\"worker\":\"w1\"},"
                     "\"created_at\":\"2026-12-02T10:00:00.123456+00:00\"}]}");
    cr_assert(strstr(s, "ID  AT                       TYPE     FROM    TO       ATTEMPT  DETAIL\n"), "%s", s);
    cr_assert(strstr(s, "12  2026-12-02T10:00:00.123  started  queued  running  1        {\"worker\":\"w1\"}\n"), "%s",
              s);
    free(s);
}

Test(cli_render, iterations_table_and_details)
{
    const char *it = "{\"seq\":3,\"attempt\":1,\"action\":\"tune\",\"reason\":\"bigger tile\",\"params\":"
                     "{\"TILE_N\":512,\"ENGINE\":\"vector\"},\"latency_ns\":81234.0,\"fraction_of_bound\":0.93,"
                     "\"correct\":true,\"best_so_far_ns\":80000,\"findings\":[{\"code\":\"dma_small_transfers\","
                     "\"severity\":\"high\",\"message\":\"small DMAs\"}],\"source\":\"def k():\\n  pass\","
                     "\"source_diff\":null}";
    char *page = kf_asprintf("{\"items\":[%s],\"next_cursor\":\"c2\"}", it);
    char *s = render(cli_render_iterations, page);
    cJSON *doc = cJSON_Parse(it);
    kf_buf b = KF_BUF_INIT;

    cr_assert(strstr(s, "SEQ  ATTEMPT  ACTION  LATENCY  FRACTION  CORRECT  BEST     PARAMS"), "%s", s);
    cr_assert(strstr(s, "3    1        tune    81.2 us  0.93      true     80.0 us  TILE_N=512 ENGINE=vector  "
                        "bigger tile\n"), "%s", s);
    cr_assert(strstr(s, "more: kforge iterations ID --cursor c2\n"), "%s", s);
    cli_render_iteration(doc, 1, &b);
    cr_assert(strstr(b.data, "params       TILE_N=512 ENGINE=vector\n"), "%s", b.data);
    cr_assert(strstr(b.data, "finding      dma_small_transfers high: small DMAs\n"), "%s", b.data);
    cr_assert(strstr(b.data, "\ndef k():\n  pass\n"), "%s", b.data);
    kf_buf_reset(&b);
    cli_render_iteration(doc, 2, &b);
    cr_assert(strstr(b.data, "(no diff: the first iteration)"), "%s", b.data);
    kf_buf_release(&b);
    cJSON_Delete(doc);
    free(s);
    free(page);
}

Test(cli_render, artifacts_table)
{
    char *s = render(cli_render_artifacts,
                     "{\"items\":[{\"name\":\"trace.json\",\"sha256\":\"0123456789abcdef0123456789abcdef0123456789abcdef"
                     "0123456789abcdef\",\"size\":123456,\"content_type\":\"application/json\",\"attempt\":1,"
                     "\"seq\":7,\"final\":true}]}");
    cr_assert(strstr(s, "trace.json  7    1        final  123456  0123456789ab  application/json\n"), "%s", s);
    free(s);
}

Test(cli_render, library_list_and_entry_with_its_history)
{
    char *s = render(cli_render_library,
                     "{\"items\":[{\"id\":\"add-trn2-bfloat16-sim-0123456789ab\",\"op\":\"add\",\"target\":\"trn2\","
                     "\"dtype\":\"bfloat16\",\"shape\":[[200,700],[200,700]],\"latency_ns\":12345,"
                     "\"fraction_of_bound\":0.8123,\"params\":{\"TILE_F\":1024},\"updated_at\":\"2026-12-02T07:00:00.123Z\"}],"
                     "\"next_cursor\":\"add-trn2-bfloat16-sim-0123456789ab\"}");
    cr_assert(strstr(s, "ENTRY") && strstr(s, "add-trn2-bfloat16-sim-0123456789ab  add  trn2"), "%s", s);
    cr_assert(strstr(s, "12.3 us") && strstr(s, "0.81") && strstr(s, "TILE_F=1024") && strstr(s, "[[200,700],[200,700]]"),
              "%s", s);
    cr_assert(strstr(s, "more: kforge library list --cursor add-trn2-bfloat16-sim-0123456789ab"), "%s", s);
    free(s);
    s = render(cli_render_library, "{\"items\":[],\"next_cursor\":null}");
    cr_assert_str_eq(s, "no library entries\n");
    free(s);
    s = render(cli_render_library_entry,
               "{\"id\":\"add-x\",\"op\":\"add\",\"entry\":\"add\",\"target\":\"trn2\",\"dtype\":\"bfloat16\","
               "\"backend\":\"sim\",\"shape\":[[4,4]],\"latency_ns\":900,\"params\":{},\"shared\":true,"
               "\"job_id\":\"J2\",\"attempt\":1,\"iteration\":3,\"provenance\":{\"sim_build\":\"b2\"},\"history\":["
               "{\"reason\":\"created\",\"new_latency_ns\":1000,\"new_job_id\":\"J1\",\"old_provenance\":null,"
               "\"new_provenance\":{\"sim_build\":\"b1\"},\"at\":\"2026-12-01T00:00:00Z\"},"
               "{\"reason\":\"provenance\",\"old_latency_ns\":1000,\"new_latency_ns\":900,\"new_job_id\":\"J2\","
               "\"old_provenance\":{\"sim_build\":\"b1\",\"worker\":\"w1\",\"compiler\":\"c\"},"
               "\"new_provenance\":{\"sim_build\":\"b2\",\"worker\":\"w2\"},\"at\":\"2026-12-02T00:00:00Z\"}]}");
    cr_assert(strstr(s, "entry add-x: add (add) on trn2, bfloat16, sim\n"), "%s", s);
    cr_assert(strstr(s, "best: 900 ns, - of the bound, params (none)"), "%s", s);
    cr_assert(strstr(s, "from: job J2 attempt 1 iteration 3"), "%s", s);
    cr_assert(strstr(s, "created     -       1.0 us  J1"), "%s", s);
    cr_assert(strstr(s, "sim_build: b1 -> b2; compiler: c -> -"), "the worker does not count: %s", s);
    cr_assert(!strstr(s, "worker:"), "%s", s);
    free(s);
}

/* The manifest record of an exported kernel: the entry's fields, the file,
 * and for a library op the kforge-sim arguments that validate it. */
Test(cli_library, manifest_records_say_how_to_check_a_kernel)
{
    cJSON *e = cJSON_Parse("{\"id\":\"add-trn2-bfloat16-sim-0123456789ab\",\"op\":\"add\",\"entry\":\"add\","
                           "\"target\":\"trn2\",\"dtype\":\"bfloat16\",\"shape\":[[200,700],[200,700]],"
                           "\"params\":{\"TILE_F\":1024},\"latency_ns\":5,\"provenance\":{}}");
    cJSON *meta = cJSON_Parse("{\"reference\":\"add_ref\",\"inputs\":[{\"name\":\"a\"},{\"name\":\"b\"}]}");
    cJSON *m = cli_library_manifest_item(e, meta, "add.py", "ff", 42), *bad;
    char *check = cJSON_PrintUnformatted(cJSON_GetObjectItem(m, "check"));

    cr_assert_str_eq(check,
                     "[\"run\",\"add.py\",\"--entry\",\"add\",\"--target\",\"trn2\",\"--input\","
                     "\"a=shape:200x700:bf16\",\"--input\",\"b=shape:200x700:bf16\",\"--kwargs\",\"{\\\"TILE_F\\\":1024}\","
                     "\"--check\",\"add.py\",\"--ref-entry\",\"add_ref\"]");
    cr_assert_str_eq(cJSON_GetObjectItem(m, "sha256")->valuestring, "ff");
    cr_assert_eq(cJSON_GetObjectItem(m, "bytes")->valuedouble, 42);
    cr_assert_str_eq(cJSON_GetObjectItem(m, "id")->valuestring, "add-trn2-bfloat16-sim-0123456789ab");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(m, "fraction_of_bound")), "absent fields are null");
    free(check);
    cJSON_Delete(m);
    /* no reference (a user kernel), or shapes that do not line up with the inputs: no check */
    m = cli_library_manifest_item(e, NULL, "add.py", "ff", 42);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(m, "check")));
    cJSON_Delete(m);
    bad = cJSON_Parse("{\"reference\":\"add_ref\",\"inputs\":[{\"name\":\"a\"}]}");
    m = cli_library_manifest_item(e, bad, "add.py", "ff", 42);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(m, "check")));
    cJSON_Delete(m);
    cJSON_Delete(bad);
    cr_assert(cli_library_id_ok("add-trn2-bfloat16-sim-0123456789ab"));
    cr_assert(!cli_library_id_ok("..") && !cli_library_id_ok("-x") && !cli_library_id_ok("a/b") && !cli_library_id_ok(""));
    cJSON_Delete(meta);
    cJSON_Delete(e);
}

Test(cli_render, compare_sections)
{
    cJSON *doc = cJSON_Parse(
        "{\"jobs\":[{\"id\":\"aaaaaaaa-1\",\"kind\":\"generate\",\"op\":\"softmax\",\"target\":\"trn2\","
        "\"state\":\"succeeded\",\"best\":{\"seq\":4,\"latency_ns\":1000,\"fraction_of_bound\":0.5}},"
        "{\"id\":\"bbbbbbbb-2\",\"kind\":\"generate\",\"op\":\"softmax\",\"target\":\"trn3\",\"state\":\"succeeded\","
        "\"best\":{\"seq\":2,\"latency_ns\":800,\"fraction_of_bound\":0.6}}],"
        "\"params_differ\":{\"TILE\":[256,512]},"
        "\"profile_deltas\":{\"total_time_ns\":{\"values\":[1000,800],\"delta\":[0,-200]}},"
        "\"findings_only\":{\"aaaaaaaa-1\":[\"dma_small_transfers\"],\"bbbbbbbb-2\":[]},"
        "\"provenance_differ\":{\"target_hash\":[\"h1\",\"h2\"]},"
        "\"source_diff\":[\"--- a\\n+++ b\\n-x\\n+y\"]}");
    kf_buf b = KF_BUF_INIT;

    cli_render_compare(doc, false, &b);
    cr_assert(strstr(b.data, "aaaaaaaa-1  generate  softmax  trn2    succeeded  1.0 us  0.50      4\n"), "%s", b.data);
    cr_assert(strstr(b.data, "Params that differ:\nFIELD  aaaaaaaa  bbbbbbbb\nTILE   256       512\n"), "%s", b.data);
    cr_assert(strstr(b.data, "total_time_ns  1000      800       -200\n"), "%s", b.data);
    cr_assert(strstr(b.data, "Findings only in one:\n  aaaaaaaa: dma_small_transfers\n\n"), "%s", b.data);
    cr_assert(strstr(b.data, "target_hash  h1        h2\n"), "%s", b.data);
    cr_assert_null(strstr(b.data, "+++ b"), "%s", b.data);
    kf_buf_reset(&b);
    cli_render_compare(doc, true, &b);
    cr_assert(strstr(b.data, "Source diff, job 2 against job 1:\n--- a\n+++ b\n-x\n+y\n"), "%s", b.data);
    kf_buf_release(&b);
    cJSON_Delete(doc);
}

Test(cli_render, job_summary_says_the_error)
{
    char *s = render(cli_render_job, "{\"id\":\"j1\",\"state\":\"failed\",\"kind\":\"optimize\",\"target\":\"trn2\","
                                     "\"attempt\":2,\"max_attempts\":3,\"last_error\":\"compile: line 3\\nbad\","
                                     "\"result\":null}");
    cr_assert_str_eq(s, "job j1: failed (optimize on trn2, attempt 2 of 3)\nerror: compile: line 3 bad\n");
    free(s);
    s = render(cli_render_job, "{\"id\":\"j2\",\"state\":\"succeeded\",\"kind\":\"generate\",\"spec\":{\"op\":"
                               "\"rmsnorm\"},\"target\":\"trn2\",\"attempt\":1,\"max_attempts\":3,\"best_iteration\":5,"
                               "\"result\":{\"latency_ns\":12345,\"fraction_of_bound\":0.8}}");
    cr_assert_str_eq(s, "job j2: succeeded (generate rmsnorm on trn2, attempt 1 of 3)\n"
                        "best: 12.3 us, 0.80 of the bound, iteration 5\n");
    free(s);
}

/* ---- progress ------------------------------------------------------------------------ */

static void feed(cli_progress *p, const char *type, const char *json, kf_buf *out)
{
    cJSON *d = cJSON_Parse(json);
    cli_progress_event(p, type, d, out);
    cJSON_Delete(d);
}

Test(cli_progress, pipe_prints_one_plain_line_per_iteration)
{
    cli_progress p;
    kf_buf b = KF_BUF_INIT;

    cli_progress_init(&p, false);
    feed(&p, "state", "{\"type\":\"started\",\"from\":\"queued\",\"to\":\"running\",\"attempt\":1}", &b);
    feed(&p, "iteration", "{\"attempt\":1,\"seq\":1,\"params\":{\"T\":256},\"latency_ns\":2000,"
                          "\"fraction_of_bound\":0.4,\"correct\":true,\"best_so_far_ns\":2000}", &b);
    feed(&p, "iteration", "{\"attempt\":1,\"seq\":2,\"params\":{\"T\":512},\"latency_ns\":3000,"
                          "\"fraction_of_bound\":0.3,\"correct\":false,\"best_so_far_ns\":2000}", &b);
    cr_assert_str_eq(b.data, "state: queued -> running (attempt 1)\n"
                             "iteration 1 (attempt 1): 2.0 us, 0.40 of bound, correct; best 2.0 us; T=256\n"
                             "iteration 2 (attempt 1): 3.0 us, 0.30 of bound, not correct; best 2.0 us; T=512\n");
    cr_assert_eq(p.n_iterations, 2);
    cr_assert_float_eq(p.fraction, 0.4, 1e-9, "the bar shows the best's fraction, not the last one's");
    kf_buf_release(&b);
}

Test(cli_progress, terminal_rewrites_one_line_with_a_bar)
{
    cli_progress p;
    kf_buf b = KF_BUF_INIT;

    cli_progress_init(&p, true);
    feed(&p, "iteration", "{\"attempt\":1,\"seq\":7,\"latency_ns\":1500,\"fraction_of_bound\":0.5,"
                          "\"correct\":true,\"best_so_far_ns\":1500}", &b);
    cr_assert_eq(b.data[0], '\r');
    cr_assert_null(strchr(b.data, '\n'), "one line, rewritten: %s", b.data);
    cr_assert(strstr(b.data, "iteration 7  best 1.5 us  0.50 of bound [##########..........]"), "%s", b.data);
    cr_assert_geq(b.len, 81);
    kf_buf_release(&b);
}

Test(cli_progress, unknown_events_and_missing_fields_are_harmless)
{
    cli_progress p;
    kf_buf b = KF_BUF_INIT;

    cli_progress_init(&p, false);
    feed(&p, "other", "{\"x\":1}", &b);
    cr_assert_str_eq(b.data, "");
    feed(&p, "iteration", "{}", &b);
    cr_assert_str_eq(b.data, "iteration ? (attempt 0): no latency, not correct\n");
    kf_buf_release(&b);
}

Test(cli_fmt, latency_units)
{
    char b[32];
    cli_fmt_latency(999, b, sizeof(b));
    cr_assert_str_eq(b, "999 ns");
    cli_fmt_latency(81234, b, sizeof(b));
    cr_assert_str_eq(b, "81.2 us");
    cli_fmt_latency(2.5e6, b, sizeof(b));
    cr_assert_str_eq(b, "2.50 ms");
    cli_fmt_latency(3e9, b, sizeof(b));
    cr_assert_str_eq(b, "3.00 s");
}
