/* Unit tests for the Chrome trace export (sim/sim_trace.h): the file is
 * checked against the Trace Event Format's rules — a traceEvents array;
 * every event has ph, pid, tid; "X" events have a string name, numeric
 * ts >= 0 and dur >= 0; "M" events name processes and threads; every track
 * used by an X event is named; X events on one track never overlap. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/sim_timing_synth.h"
#include "sim/sim_trace.h"

typedef struct xev {
    double ts, dur;
    int tid;
} xev;

static int cmp_xev(const void *a, const void *b)
{
    const xev *x = a, *y = b;
    if (x->tid != y->tid)
        return x->tid - y->tid;
    return x->ts < y->ts ? -1 : (x->ts > y->ts);
}

static char *slurp(FILE *f)
{
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    return buf;
}

/* Checks a trace against the format's rules; returns NULL when it holds
 * (and the number of X events in *nx) or the first rule it breaks. */
#define RULE(cond, why) do { if (!(cond)) { err = (why); goto out; } } while (0)
static const char *check_trace(const char *text, size_t *nx_out)
{
    const char *err = NULL;
    cJSON *root = cJSON_Parse(text), *ev;
    size_t nx = 0;
    xev *xs = NULL;
    int named[4096] = { 0 }, process_named = 0;

    RULE(root, "not JSON");
    cJSON *evs = cJSON_GetObjectItem(root, "traceEvents");
    RULE(cJSON_IsArray(evs), "no traceEvents array");
    xs = calloc((size_t)cJSON_GetArraySize(evs) + 1, sizeof(*xs));
    cJSON_ArrayForEach(ev, evs) {
        cJSON *ph = cJSON_GetObjectItem(ev, "ph"), *pid = cJSON_GetObjectItem(ev, "pid");
        cJSON *tid = cJSON_GetObjectItem(ev, "tid"), *name = cJSON_GetObjectItem(ev, "name");
        RULE(cJSON_IsString(ph) && strlen(ph->valuestring) == 1, "ph must be one letter");
        RULE(cJSON_IsNumber(pid) && cJSON_IsNumber(tid), "pid and tid must be numbers");
        RULE(cJSON_IsString(name) && name->valuestring[0], "name must be a string");
        RULE(tid->valueint >= 0 && tid->valueint < 4096, "tid out of range");
        if (strcmp(ph->valuestring, "M") == 0) {
            cJSON *args = cJSON_GetObjectItem(ev, "args");
            RULE(cJSON_IsObject(args), "metadata needs args");
            if (strcmp(name->valuestring, "thread_name") == 0) {
                RULE(cJSON_IsString(cJSON_GetObjectItem(args, "name")), "thread_name needs args.name");
                named[tid->valueint] = 1;
            } else if (strcmp(name->valuestring, "process_name") == 0) {
                process_named = 1;
            } else {
                RULE(strcmp(name->valuestring, "thread_sort_index") == 0, "unknown metadata");
            }
            continue;
        }
        RULE(strcmp(ph->valuestring, "X") == 0, "only X and M events expected");
        cJSON *ts = cJSON_GetObjectItem(ev, "ts"), *dur = cJSON_GetObjectItem(ev, "dur");
        RULE(cJSON_IsNumber(ts) && ts->valuedouble >= 0, "X needs ts >= 0");
        RULE(cJSON_IsNumber(dur) && dur->valuedouble >= 0, "X needs dur >= 0");
        RULE(cJSON_IsString(cJSON_GetObjectItem(ev, "cat")), "X needs cat");
        RULE(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "args"),
                                                "nki_source_location")),
             "X needs args.nki_source_location");
        xs[nx].ts = ts->valuedouble;
        xs[nx].dur = dur->valuedouble;
        xs[nx].tid = tid->valueint;
        nx++;
    }
    RULE(process_named, "no process_name");
    qsort(xs, nx, sizeof(*xs), cmp_xev);
    for (size_t i = 0; i < nx; i++) {
        RULE(named[xs[i].tid], "a track without thread_name");
        if (i > 0 && xs[i].tid == xs[i - 1].tid)
            RULE(xs[i - 1].ts + xs[i - 1].dur <= xs[i].ts + 1e-9, "X events overlap on a track");
    }
    *nx_out = nx;
out:
    free(xs);
    cJSON_Delete(root);
    return err;
}

static size_t validate(const char *text)
{
    size_t nx = 0;
    const char *why = check_trace(text, &nx);
    cr_assert_null(why, "invalid trace: %s", why);
    return nx;
}

Test(sim_trace, matmul_trace_follows_the_trace_event_format)
{
    sim_target t;
    sim_record r;
    sim_profile *p = NULL;
    kf_err e = KF_ERR_INIT;
    cr_assert_eq(sim_target_load("trn2", NULL, &t, &e), KF_OK, "%s", e.msg);
    sim_record_init(&r, "trn2");
    syn_mm mm = { SYN_MM_TILED, 512, 1024, 512, 128, 512, 1, 1, 2, SIM_DT_BFLOAT16 };
    syn_matmul_kernel(&r, &mm, "dir/we\"ird.py");
    cr_assert_eq(sim_profile_build(&r, &t, &p, &e), KF_OK, "%s", e.msg);
    FILE *f = tmpfile();
    cr_assert_eq(sim_trace_write(p, f, &e), KF_OK, "%s", e.msg);
    char *text = slurp(f);
    fclose(f);
    cr_assert_eq(validate(text), r.n_insns);
    cr_assert(strstr(text, "\"dma_q0\"") != NULL && strstr(text, "\"tensor\"") != NULL);
    cr_assert(strstr(text, "we\\\"ird.py") != NULL, "quotes in file names are escaped");
    free(text);
    sim_profile_free(p);
    sim_record_release(&r);
}

Test(sim_trace, the_checker_rejects_traces_that_break_the_rules)
{
    const char *head =
        "{\"traceEvents\":[{\"ph\":\"M\",\"pid\":1,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"n\"}},"
        "{\"ph\":\"M\",\"pid\":1,\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":\"t\"}},"
        "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"name\":\"A\",\"cat\":\"c\",\"ts\":0,\"dur\":2,\"args\":{\"nki_source_location\":\"k.py:1\"}},";
    static const char *tails[] = {
        /* overlap */
        "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"name\":\"B\",\"cat\":\"c\",\"ts\":1,\"dur\":2,\"args\":{\"nki_source_location\":\"k.py:2\"}}]}",
        /* negative duration */
        "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"name\":\"B\",\"cat\":\"c\",\"ts\":3,\"dur\":-1,\"args\":{\"nki_source_location\":\"k.py:2\"}}]}",
        /* unnamed track */
        "{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"name\":\"B\",\"cat\":\"c\",\"ts\":3,\"dur\":1,\"args\":{\"nki_source_location\":\"k.py:2\"}}]}",
        /* ts as a string */
        "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"name\":\"B\",\"cat\":\"c\",\"ts\":\"3\",\"dur\":1,\"args\":{\"nki_source_location\":\"k.py:2\"}}]}",
    };
    char buf[2048];
    size_t nx;
    for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
        snprintf(buf, sizeof(buf), "%s%s", head, tails[i]);
        cr_assert_not_null(check_trace(buf, &nx), "case %zu accepted", i);
    }
    snprintf(buf, sizeof(buf), "%s%s", head,
             "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"name\":\"B\",\"cat\":\"c\",\"ts\":2,\"dur\":1,\"args\":{\"nki_source_location\":\"k.py:2\"}}]}");
    cr_assert_null(check_trace(buf, &nx));
    cr_assert_eq(nx, 2);
}

Test(sim_trace, write_file_reports_unwritable_paths)
{
    sim_target t;
    sim_record r;
    sim_profile *p = NULL;
    kf_err e = KF_ERR_INIT;
    cr_assert_eq(sim_target_load("trn1", NULL, &t, &e), KF_OK, "%s", e.msg);
    sim_record_init(&r, "trn1");
    cr_assert_eq(sim_profile_build(&r, &t, &p, &e), KF_OK, "%s", e.msg);   /* empty kernel */
    cr_assert_eq(sim_trace_write_file(p, "/nonexistent-dir/x.json", &e), KF_IO);
    cr_assert(strstr(e.msg, "/nonexistent-dir/x.json") != NULL);
    char path[] = "/tmp/kf-trace-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    cr_assert_eq(sim_trace_write_file(p, path, &e), KF_OK, "%s", e.msg);
    FILE *f = fopen(path, "r");
    fseek(f, 0, SEEK_END);
    char *text = slurp(f);
    fclose(f);
    unlink(path);
    cr_assert_eq(validate(text), 0);
    free(text);
    sim_profile_free(p);
    sim_record_release(&r);
}
