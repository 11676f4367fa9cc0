/* Unit tests for common/: errors, buffers, config. */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_error.h"
#include "kf_fs.h"
#include "kf_json.h"
#include "kf_queue.h"
#include "kf_log.h"
#include "kf_num.h"
#include "tests/lib/kf_test.h"

Test(kf_error, set_and_wrap_keep_code_and_text)
{
    kf_err e = KF_ERR_INIT;
    cr_assert_eq(kf_err_set(&e, KF_INVALID, "field '%s' must be a string", "kind"), KF_INVALID);
    kf_err_wrap(&e, "job spec");
    cr_assert_str_eq(e.msg, "job spec: field 'kind' must be a string");
    cr_assert_eq(kf_code_http_status(KF_INVALID), 400);
    cr_assert_eq(kf_code_http_status(KF_UNAVAILABLE), 503);
    cr_assert_str_eq(kf_code_name(KF_STALE), "STALE");
}

Test(kf_buf, grows_and_detaches)
{
    kf_buf b = KF_BUF_INIT;
    for (int i = 0; i < 1000; i++)
        kf_buf_addf(&b, "%d,", i);
    cr_assert_eq(strncmp(b.data, "0,1,2,", 6), 0);
    cr_assert_eq(b.len, strlen(b.data));
    char *s = kf_buf_detach(&b);
    cr_assert_eq(b.len, 0);
    cr_assert_str_eq(b.data, "");
    free(s);
    kf_buf_release(&b);
}

/* kf_buf_addf formats into the room there is, and again after growing
 * when the text does not fit: the result is the same either way. */
Test(kf_buf, addf_with_room_without_room_and_empty)
{
    kf_buf b = KF_BUF_INIT;
    char big[300], want[400];

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    kf_buf_adds(&b, "ab");                 /* cap 64: room for a short text */
    kf_buf_addf(&b, "<%d>", 42);
    cr_assert_str_eq(b.data, "ab<42>");
    kf_buf_addf(&b, "%s", "");              /* nothing added, still terminated */
    cr_assert_str_eq(b.data, "ab<42>");
    kf_buf_addf(&b, "[%s]", big);           /* more than the room left */
    snprintf(want, sizeof(want), "ab<42>[%s]", big);
    cr_assert_str_eq(b.data, want);
    cr_assert_eq(b.len, strlen(want));
    kf_buf_release(&b);
}

/* What kf_json_add_str writes, cJSON reads back as the same string. */
Test(kf_buf, utf8_cut_never_splits_a_character)
{
    /* "a" é € 😀: bytes 0 | 1-2 | 3-5 | 6-9 */
    static const char s[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    static const size_t want[] = { 0, 1, 1, 3, 3, 3, 6, 6, 6, 6, 10 };
    char out[8];

    for (size_t n = 0; n <= 10; n++)
        cr_assert_eq(kf_utf8_cut(s, n), want[n], "cut at %zu: %zu", n, kf_utf8_cut(s, n));
    /* Every cut of UTF-8 is UTF-8. */
    for (size_t n = 0; n <= 10; n++)
        cr_assert(kf_utf8_valid(s, kf_utf8_cut(s, n), NULL), "cut at %zu", n);
    cr_assert_eq(kf_utf8_cut("abc", 2), 2);
    kf_utf8_copy(out, sizeof(out), s);
    cr_assert_str_eq(out, "a\xc3\xa9\xe2\x82\xac", "7 bytes of room hold a, e-acute and the euro sign");
    kf_utf8_copy(out, 3, s);
    cr_assert_str_eq(out, "a");
    kf_utf8_copy(out, 1, s);
    cr_assert_str_eq(out, "");
    kf_utf8_copy(out, sizeof(out), "ok");
    cr_assert_str_eq(out, "ok");
}

Test(kf_error, messages_are_cut_between_characters)
{
    kf_err e = KF_ERR_INIT;
    char big[600];

    /* 510 bytes of ASCII, then euro signs: the 511 bytes of room end inside one. */
    memset(big, 'x', 510);
    memcpy(big + 510, "\xe2\x82\xac\xe2\x82\xac", 7);
    kf_err_set(&e, KF_INVALID, "%s", big);
    cr_assert(kf_utf8_valid(e.msg, strlen(e.msg), NULL));
    cr_assert_eq(strlen(e.msg), 510);
    /* "p: " then 507 x: the first euro sign does not fit whole. */
    kf_err_set(&e, KF_INVALID, "%s", big + 3);
    kf_err_wrap(&e, "p");
    cr_assert(kf_utf8_valid(e.msg, strlen(e.msg), NULL), "%s", e.msg);
    cr_assert_eq(strlen(e.msg), 510);
}

Test(kf_json, add_str_escapes_what_json_needs)
{
    static const char *const cases[] = { "", "plain", "q\"uote", "back\\slash", "line\nfeed\ttab\rret",
                                         "\x01\x1f ctl", "utf-8 \xc3\xa9 \xe2\x82\xac", NULL };
    for (int i = 0; cases[i]; i++) {
        kf_buf b = KF_BUF_INIT;
        kf_json_add_str(&b, cases[i]);
        cJSON *v = cJSON_Parse(b.data);
        cr_assert(cJSON_IsString(v), "case %d printed %s", i, b.data);
        cr_assert_str_eq(v->valuestring, cases[i]);
        cJSON_Delete(v);
        kf_buf_release(&b);
    }
    kf_buf b = KF_BUF_INIT;
    kf_json_add_str(&b, "a\x02\"");
    cr_assert_str_eq(b.data, "\"a\\u0002\\\"\"");
    kf_buf_release(&b);
}

/* kf_json_parse takes only RFC 8259 JSON that survives whole: numbers
 * without leading zeros (cJSON alone reads "01" as 1), strings without raw
 * control characters, and no \u0000 (cJSON alone cuts the string there). */
Test(kf_json, parse_refuses_leading_zeros_raw_controls_and_nul_escapes)
{
    static const char *const bad[] = {
        "{\"a\":01}", "[-01]", "[00]", "[1.]", "[-]", "[1.e5]", "[1e]", "[.5]", "[0x10]",
        "[\"a\x01b\"]", "[\"tab\there\"]", "{\"k\nk\":1}", "[\"a\\u0000b\"]", "{\"\\u0000\":1}", NULL,
    };
    static const char *const good[] = {
        "[0,-0,0.5,-0.5e-3,10,1E+2,2e10,120]", "[\"01\",\"\\\\u0000\",\"a\\u0001\\n\"]", "{\"a\":[-1,{\"b\":0}]}",
        "0", "-12.5", NULL,
    };
    for (int i = 0; bad[i]; i++) {
        cJSON *v = NULL;
        kf_err e = KF_ERR_INIT;
        cr_assert_eq(kf_json_parse(bad[i], strlen(bad[i]), KF_JSON_MAX_DEPTH, &v, &e), KF_INVALID, "accepted %s",
                     bad[i]);
        cr_assert_null(v);
        cr_assert(strstr(e.msg, "offset"), "%s: %s", bad[i], e.msg);
    }
    for (int i = 0; good[i]; i++) {
        cJSON *v = NULL;
        kf_err e = KF_ERR_INIT;
        cr_assert_eq(kf_json_parse(good[i], strlen(good[i]), KF_JSON_MAX_DEPTH, &v, &e), KF_OK, "%s: %s", good[i],
                     e.msg);
        cJSON_Delete(v);
    }
    {
        cJSON *v = NULL;
        kf_err e = KF_ERR_INIT;
        const char *t = "[\"\\\\u0000\"]";   /* an escaped backslash, then the text u0000 */
        cr_assert_eq(kf_json_parse(t, strlen(t), KF_JSON_MAX_DEPTH, &v, &e), KF_OK, "%s", e.msg);
        cr_assert_str_eq(cJSON_GetArrayItem(v, 0)->valuestring, "\\u0000");
        cJSON_Delete(v);
    }
    {
        /* cJSON skips any byte below 0x20 between tokens, NUL included
         * (found by the llm_args harness): JSON's white space is four bytes */
        static const char nul_ws[] = "{\"a\":\0\0 1}", vt_ws[] = "[1,\v2]", ok_ws[] = "{ \"a\" :\t\r\n1 }";
        cJSON *v = NULL;
        kf_err e = KF_ERR_INIT;
        cr_assert_eq(kf_json_parse(nul_ws, sizeof(nul_ws) - 1, KF_JSON_MAX_DEPTH, &v, &e), KF_INVALID);
        cr_assert_not_null(strstr(e.msg, "control character"), "%s", e.msg);
        cr_assert_eq(kf_json_parse(vt_ws, sizeof(vt_ws) - 1, KF_JSON_MAX_DEPTH, &v, &e), KF_INVALID);
        cr_assert_eq(kf_json_parse(ok_ws, sizeof(ok_ws) - 1, KF_JSON_MAX_DEPTH, &v, &e), KF_OK, "%s", e.msg);
        cJSON_Delete(v);
    }
}

/* kf_json_print writes cJSON's compact text: the same as
 * cJSON_PrintUnformatted for every tree the API prints, and numbers that
 * read back as the same double. */
Test(kf_json, print_is_compact_json_that_reads_back_the_same)
{
    static const char *const same[] = {
        "{}", "[]", "null", "true", "false", "\"s\"", "0", "-7", "123456789",
        "{\"a\":1,\"b\":[1,2,{\"c\":null}],\"d\":\"x\\\"y\",\"e\":true,\"f\":{}}",
        "[0.5,-0.25,0.1,1e+300,3.14159265358979,1e-07]", NULL,
    };
    for (int i = 0; same[i]; i++) {
        cJSON *v = cJSON_Parse(same[i]);
        char *ours, *theirs;
        cr_assert_not_null(v, "case %d", i);
        ours = kf_json_print(v);
        theirs = cJSON_PrintUnformatted(v);
        cr_assert_str_eq(ours, theirs, "case %d", i);
        cr_assert_str_eq(ours, same[i]);
        free(ours);
        free(theirs);
        cJSON_Delete(v);
    }
    /* Integers up to 2^53 in full digits (cJSON would write 1e+15). */
    cJSON *v = cJSON_Parse("[1e15,-9007199254740991,4096.0,-0.0]");
    char *s = kf_json_print(v);
    cr_assert_str_eq(s, "[1000000000000000,-9007199254740991,4096,0]");
    free(s);
    cJSON_Delete(v);
    /* Every double comes back exactly (cJSON's own printer writes
     * 0.30000000000000004 as 0.3). */
    static const double nums[] = { 0.1 + 0.2, 1.0 / 3, 2.0 / 3, 1e-310, 1.7976931348623157e308, 9007199254740993.0, 6.02e23 };
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        cJSON *n = cJSON_CreateNumber(nums[i]);
        char *t = kf_json_print(n);
        cr_assert_eq(strtod(t, NULL), nums[i], "%s", t);
        free(t);
        cJSON_Delete(n);
    }
    cJSON *inf = cJSON_CreateNumber(HUGE_VAL);
    s = kf_json_print(inf);
    cr_assert_str_eq(s, "null");
    free(s);
    cJSON_Delete(inf);
}

Test(kf_config, defaults_bounds_and_unknown_names)
{
    kf_err e = KF_ERR_INIT;
    unsetenv("KFORGE_LEASE_MS");
    cr_assert_eq(kf_config_load(&e), KF_OK, "%s", e.msg);
    cr_assert_eq(kf_config_int(KF_CFG_LEASE_MS), 30000);

    setenv("KFORGE_LEASE_MS", "12", 1);
    cr_assert_eq(kf_config_load(&e), KF_CONFIG);
    cr_assert(strstr(e.msg, "KFORGE_LEASE_MS") != NULL, "%s", e.msg);
    setenv("KFORGE_LEASE_MS", "abc", 1);
    cr_assert_eq(kf_config_load(&e), KF_CONFIG);
    unsetenv("KFORGE_LEASE_MS");

    setenv("KFORGE_NO_SUCH_THING", "1", 1);
    cr_assert_eq(kf_config_load(&e), KF_CONFIG);
    cr_assert(strstr(e.msg, "KFORGE_NO_SUCH_THING") != NULL, "%s", e.msg);
    unsetenv("KFORGE_NO_SUCH_THING");
    cr_assert_eq(kf_config_load(&e), KF_OK);

    /* the test harness's and the benchmarks' own knobs pass through the
     * binaries they run (bench/run.sh sets KFORGE_BENCH_AGENT_OPS, ...) */
    setenv("KFORGE_TEST_ROOT_X", "1", 1);
    setenv("KFORGE_BENCH_AGENT_OPS", "softmax", 1);
    cr_assert_eq(kf_config_load(&e), KF_OK, "%s", e.msg);
    unsetenv("KFORGE_TEST_ROOT_X");
    unsetenv("KFORGE_BENCH_AGENT_OPS");
    setenv("KFORGE_BENCH", "1", 1);     /* the bare prefix is no knob of either */
    cr_assert_eq(kf_config_load(&e), KF_CONFIG);
    unsetenv("KFORGE_BENCH");
}

Test(kf_config, scrub_blanks_a_secret_in_the_environment_block_and_unsets_it)
{
    kf_err e = KF_ERR_INIT;
    const char *v;
    setenv("KFORGE_BOOTSTRAP_TOKEN", "kf_admin_secret_0123456789", 1);
    cr_assert_eq(kf_config_load(&e), KF_OK, "%s", e.msg);
    v = getenv("KFORGE_BOOTSTRAP_TOKEN");   /* glibc keeps setenv's string: its bytes stay readable */
    cr_assert_not_null(v);
    cr_assert_str_eq(kf_config_str(KF_CFG_BOOTSTRAP_TOKEN), "kf_admin_secret_0123456789");
    kf_config_scrub(KF_CFG_BOOTSTRAP_TOKEN);
    cr_assert_null(getenv("KFORGE_BOOTSTRAP_TOKEN"));
    cr_assert_str_eq(kf_config_str(KF_CFG_BOOTSTRAP_TOKEN), "");
    for (size_t i = 0; i < strlen("kf_admin_secret_0123456789"); i++)
        cr_assert_eq(v[i], '\0', "byte %zu of the old value is blank", i);
    cr_assert_eq(kf_config_load(&e), KF_OK, "%s", e.msg);
}

/* kf_log_add gathers whole lines and writes them in writes of at most
 * PIPE_BUF bytes; lines below the level are not written. */
Test(kf_log, lines_of_a_batch_are_written_whole_in_order)
{
    char path[] = "/tmp/kf_log_test_XXXXXX";
    int fd = mkstemp(path), saved = dup(STDERR_FILENO);
    kf_buf lines = KF_BUF_INIT;
    char pad[201], *text;
    FILE *f;
    long size;
    int n = 0;

    cr_assert(fd >= 0 && saved >= 0);
    memset(pad, 'p', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    cr_assert_eq(kf_log_init("test", "info"), 0);
    dup2(fd, STDERR_FILENO);
    kf_log_add(&lines, KF_LOG_DEBUG, "hidden");
    cr_assert_eq(lines.len, 0, "a debug line at level info");
    for (int i = 0; i < 60; i++) {
        kf_log_add(&lines, KF_LOG_INFO, "item i=%d pad=%s", i, pad);
        cr_assert_leq(lines.len, 4096, "held more than PIPE_BUF");
    }
    kf_log_flush(&lines);
    cr_assert_eq(lines.len, 0);
    dup2(saved, STDERR_FILENO);
    close(saved);
    f = fdopen(fd, "r");
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    rewind(f);
    text = kf_calloc(1, (size_t)size + 1);
    cr_assert_eq(fread(text, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    unlink(path);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), n++) {
        char want[32];
        snprintf(want, sizeof(want), "msg=item i=%d pad=", n);
        cr_assert(strstr(line, "level=info comp=test") && strstr(line, want), "line %d: %s", n, line);
        cr_assert_eq(strlen(strstr(line, "pad=") + 4), sizeof(pad) - 1, "line %d cut", n);
    }
    cr_assert_eq(n, 60);
    free(text);
    kf_buf_release(&lines);
}

/* A message quoting client bytes (a path with a newline, a carriage
 * return, an escape sequence, a backslash) stays one line, with those
 * bytes escaped so that they read back unambiguously. */
Test(kf_log, control_bytes_in_a_message_are_escaped_never_a_line_of_their_own)
{
    char path[] = "/tmp/kf_log_test_XXXXXX";
    int fd = mkstemp(path), saved = dup(STDERR_FILENO);
    char text[8192];
    ssize_t got;
    int lines = 0;

    cr_assert(fd >= 0 && saved >= 0);
    cr_assert_eq(kf_log_init("test", "info"), 0);
    dup2(fd, STDERR_FILENO);
    kf_log_info("request path=%s", "/v1/x\n2026-01-01T00:00:00.000Z level=error comp=api msg=forged\r\x1b[2J\\n\x7f");
    dup2(saved, STDERR_FILENO);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    got = read(fd, text, sizeof(text) - 1);
    close(fd);
    unlink(path);
    cr_assert_gt(got, 0);
    text[got] = '\0';
    for (ssize_t i = 0; i < got; i++)
        lines += text[i] == '\n';
    cr_assert_eq(lines, 1, "one line: %s", text);
    cr_assert_eq(text[got - 1], '\n');
    cr_assert(strstr(text, "path=/v1/x\\n2026-01-01T00:00:00.000Z level=error comp=api msg=forged\\r\\x1b[2J\\\\n\\x7f\n"),
              "%s", text);
    for (ssize_t i = 0; i < got - 1; i++)
        cr_assert((unsigned char)text[i] >= 0x20 && text[i] != 0x7f, "byte %zd is 0x%02x: %s", i,
                  (unsigned char)text[i], text);
}

/* The Redis URL: its parts, and no password in any refusal (fuzz_config
 * found URLs whose error quoted the credentials into the log). */
Test(queue_url, parses_parts_and_never_quotes_a_password)
{
    static const char *const bad[] = {
        "redis://:hunter22@127.0.0.1:99999/0",
        "redis://admin:hunter22@h:+6379/0",
        "redis://:hunter22@h:6379/x",
        "redis://:hunter22@h:6379/-1",
        "redis://:hunter22@/0",
        "redis://:hunter22@bad host:6379",
        "hunter22@redis:6379",
        "redis://admin:hunter22@h@evil:6379/1001",
    };
    kf_queue_url u;
    kf_err e = KF_ERR_INIT;

    cr_assert_eq(kf_queue_url_parse("redis://admin:s3:cret@redis.svc-1:6380/7", &u, &e), KF_OK, "%s", e.msg);
    cr_assert_str_eq(u.host, "redis.svc-1");
    cr_assert_eq(u.port, 6380);
    cr_assert_eq(u.db, 7);
    cr_assert_str_eq(u.user, "admin");
    cr_assert_str_eq(u.password, "s3:cret");
    kf_queue_url_release(&u);
    cr_assert_eq(kf_queue_url_parse("redis://localhost", &u, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(u.port, 6379);
    cr_assert_eq(u.db, 0);
    cr_assert_null(u.password);
    kf_queue_url_release(&u);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        e = (kf_err)KF_ERR_INIT;
        cr_expect_eq(kf_queue_url_parse(bad[i], &u, &e), KF_CONFIG, "%s was accepted", bad[i]);
        cr_expect_null(u.host, "%s", bad[i]);
        cr_expect(strstr(e.msg, "hunter22") == NULL, "the password is in: %s", e.msg);
        cr_expect(strstr(e.msg, "***") != NULL, "%s", e.msg);
    }
}

Test(kf_num, whole_numbers_refuse_garbage_blanks_and_overflow)
{
    kf_err e = KF_ERR_INIT;
    long v = 7;
    uint64_t u = 7;

    cr_assert_eq(kf_num_long("200", 1, 200, &v, &e), KF_OK);
    cr_assert_eq(v, 200);
    cr_assert_eq(kf_num_long("-3", -5, 5, &v, &e), KF_OK);
    cr_assert_eq(v, -3);
    for (const char *const *s = (const char *const[]){ "12x", "x", "", " 5", "5 ", "+5", "1.5", "0x10",
                                                       "99999999999999999999", NULL };
         *s; s++) {
        v = 7;
        cr_assert_eq(kf_num_long(*s, -1000, 1000, &v, &e), KF_INVALID, "'%s'", *s);
        cr_assert_eq(v, 7, "'%s' leaves the output alone", *s);
    }
    cr_assert_eq(kf_num_long("12x", 1, 200, &v, &e), KF_INVALID);
    cr_assert_str_eq(e.msg, "'12x' is not a whole number; write one between 1 and 200");
    cr_assert_eq(kf_num_long("201", 1, 200, &v, &e), KF_INVALID);
    cr_assert_str_eq(e.msg, "201 is out of range; write a whole number between 1 and 200");

    cr_assert_eq(kf_num_u64("18446744073709551615", UINT64_MAX, &u, &e), KF_OK);
    cr_assert_eq(u, UINT64_MAX);
    cr_assert_eq(kf_num_u64("18446744073709551616", UINT64_MAX, &u, &e), KF_INVALID);
    cr_assert_eq(kf_num_u64("-1", UINT64_MAX, &u, &e), KF_INVALID, "strtoull would wrap -1 to 2^64-1");
    cr_assert_eq(kf_num_u64("7 ", UINT64_MAX, &u, &e), KF_INVALID);
    cr_assert_eq(kf_num_u64("11", 10, &u, &e), KF_INVALID);
    cr_assert_eq(u, UINT64_MAX);
}

Test(kf_num, decimals_refuse_garbage_nan_inf_and_hex)
{
    kf_err e = KF_ERR_INIT;
    double d = 7;

    cr_assert_eq(kf_num_double("0.5", 0, 1, &d, &e), KF_OK);
    cr_assert_float_eq(d, 0.5, 1e-12);
    cr_assert_eq(kf_num_double("1e-3", 0, 1, &d, &e), KF_OK);
    cr_assert_float_eq(d, 1e-3, 1e-15);
    cr_assert_eq(kf_num_double("-2", -5, 5, &d, &e), KF_OK);
    cr_assert_eq(kf_num_double(".25", 0, 1, &d, &e), KF_OK);
    for (const char *const *s = (const char *const[]){ "0.5s", "", " 1", "nan", "inf", "-inf", "0x1p3", "+1",
                                                       "e5", "1e999", NULL };
         *s; s++) {
        d = 7;
        cr_assert_eq(kf_num_double(*s, -1e300, 1e300, &d, &e), KF_INVALID, "'%s'", *s);
        cr_assert_eq(d, 7, "'%s' leaves the output alone", *s);
    }
    cr_assert_eq(kf_num_double("1.5", 0, 1, &d, &e), KF_INVALID);
    cr_assert_str_eq(e.msg, "1.5 is out of range; write a number between 0 and 1");
}

Test(fs, mkdir_p_makes_every_level_and_accepts_what_exists)
{
    char *tmp = kf_test_tmpdir("fs");
    char *deep = kf_asprintf("%s/a/b/c", tmp), *file = kf_asprintf("%s/f", tmp), *under = kf_asprintf("%s/f/x", tmp);
    char *longp = kf_calloc(PATH_MAX + 2, 1);
    struct stat st;
    FILE *f;

    cr_assert_eq(kf_mkdir_p(deep, 0700), 0, "%s: %s", deep, strerror(errno));
    cr_assert(stat(deep, &st) == 0 && S_ISDIR(st.st_mode));
    {
        mode_t um = umask(0);
        umask(um);
        cr_assert_eq(st.st_mode & 0777, 0700 & ~um, "mode %o", st.st_mode & 0777);
    }
    cr_assert_eq(kf_mkdir_p(deep, 0700), 0, "an existing folder is fine");
    f = fopen(file, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(kf_mkdir_p(file, 0755), -1);
    cr_assert_eq(errno, ENOTDIR);
    cr_assert_eq(kf_mkdir_p(under, 0755), -1, "a file in the way");
    memset(longp, 'a', PATH_MAX);
    cr_assert_eq(kf_mkdir_p(longp, 0755), -1);
    cr_assert_eq(errno, ENAMETOOLONG);
    free(longp);
    free(under);
    free(file);
    free(deep);
    free(tmp);
}

/* Data folders are found beside the binary, first match in order: this test
 * runs as build/tests/unit/test_common, so ../../../migrations is the tree's. */
Test(common, data_dir_beside_binary)
{
    static const char *const none[] = { "no-such-folder", "../no-such-folder" };
    static const char *const rels[] = { "no-such-folder", "../../../migrations", "../../../kernels" };
    static const char *const file[] = { "../../../Makefile" };
    char buf[PATH_MAX], tiny[8];
    struct stat st;
    const char *d = kf_fs_data_dir(rels, 3, buf, sizeof(buf));

    cr_assert_not_null(d);
    cr_assert_eq(d, buf);
    cr_assert(strstr(d, "/../../../migrations") != NULL, "%s", d);
    cr_assert(stat(d, &st) == 0 && S_ISDIR(st.st_mode));
    cr_assert_null(kf_fs_data_dir(none, 2, buf, sizeof(buf)));
    cr_assert_null(kf_fs_data_dir(file, 1, buf, sizeof(buf)), "a file is not a data folder");
    cr_assert_null(kf_fs_data_dir(rels + 1, 1, tiny, sizeof(tiny)), "a path that does not fit is no match");
}

/* Whole files read into a string: the bytes as they are (NUL-terminated),
 * an empty file as "", a file over the bound and a folder or a missing file
 * refused with the code that says which. */
Test(common, read_file_whole_bounded_and_refused)
{
    char *tmp = kf_test_tmpdir("readfile"), *p = kf_asprintf("%s/f", tmp), *e0 = kf_asprintf("%s/empty", tmp);
    char big[40000], *s;
    kf_err err = KF_ERR_INIT;
    FILE *f;

    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)('a' + i % 26);
    f = fopen(p, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(big, 1, sizeof(big), f), sizeof(big));
    fclose(f);
    f = fopen(e0, "wb");
    cr_assert_not_null(f);
    fclose(f);

    s = kf_fs_read_file(p, sizeof(big), &err);   /* more than one read chunk, exactly the bound */
    cr_assert_not_null(s, "%s", err.msg);
    cr_assert_eq(strlen(s), sizeof(big));
    cr_assert_eq(memcmp(s, big, sizeof(big)), 0);
    free(s);
    s = kf_fs_read_file(e0, 10, &err);
    cr_assert_not_null(s, "%s", err.msg);
    cr_assert_str_eq(s, "");
    free(s);
    cr_assert_null(kf_fs_read_file(p, sizeof(big) - 1, &err));
    cr_assert_eq(err.code, KF_TOO_LARGE, "%s", err.msg);
    cr_assert_null(kf_fs_read_file(tmp, 1 << 20, &err), "a folder");
    cr_assert_eq(err.code, KF_IO, "%s", err.msg);
    cr_assert_null(kf_fs_read_file("/no/such/file", 1 << 20, &err));
    cr_assert_eq(err.code, KF_IO);
    cr_assert(strstr(err.msg, "/no/such/file") != NULL, "%s", err.msg);
    free(e0);
    free(p);
    free(tmp);
}
