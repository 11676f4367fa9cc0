/* ka_cache: memory and folder lookups, entries that must not be trusted,
 * the size bound, and a folder that cannot be made. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "agent/ka_cache.h"
#include "tests/lib/kf_test.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/kforge-cache-test.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char *cmd = kf_asprintf("rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
}

/* cppcheck-suppress unknownMacro */
TestSuite(cache, .init = setup, .fini = teardown, .timeout = 60);

/* A 64-hex key made from n. */
static void key_of(int n, char out[65])
{
    for (int i = 0; i < 64; i++)
        out[i] = "0123456789abcdef"[(n >> (4 * (i % 6))) & 15];
    out[64] = '\0';
}

static cJSON *result_of(double latency)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddTrueToObject(o, "ok");
    cJSON_AddNumberToObject(o, "latency_ns", latency);
    return o;
}

static char *entry_path(const char *key)
{
    return kf_asprintf("%s/v1/%.2s/%s.json", dir, key, key);
}

Test(cache, memory_only_cache_keeps_copies)
{
    ka_cache *c = ka_cache_new();
    char k[65];
    cJSON *v = result_of(5);

    key_of(1, k);
    cr_assert_null(ka_cache_get(c, k));
    ka_cache_put(c, k, v);
    cJSON_Delete(v);   /* the cache holds its own copy */
    cr_assert_eq(cJSON_GetObjectItem(ka_cache_get(c, k), "latency_ns")->valuedouble, 5);
    cr_assert_eq(ka_cache_hits(c), 1);
    cr_assert_eq(ka_cache_disk_hits(c), 0);
    cr_assert_null(ka_cache_dir(c));
    ka_cache_free(c);
    ka_cache_free(NULL);
}

Test(cache, a_second_cache_on_the_folder_reads_what_the_first_wrote)
{
    kf_err e = KF_ERR_INIT;
    ka_cache *a = ka_cache_open(dir, 0, &e), *b;
    char k[65];
    cJSON *v = result_of(42);
    struct stat st;

    cr_assert_not_null(a, "%s", e.msg);
    key_of(2, k);
    ka_cache_put(a, k, v);
    cJSON_Delete(v);
    char *p = entry_path(k);
    cr_assert_eq(stat(p, &st), 0, "entry file %s", p);
    ka_cache_free(a);

    b = ka_cache_open(dir, 0, &e);
    cr_assert_not_null(b, "%s", e.msg);
    const cJSON *got = ka_cache_get(b, k);
    cr_assert_not_null(got);
    cr_assert_eq(cJSON_GetObjectItem(got, "latency_ns")->valuedouble, 42);
    cr_assert_eq(ka_cache_disk_hits(b), 1);
    cr_assert_not_null(ka_cache_get(b, k));
    cr_assert_eq(ka_cache_disk_hits(b), 1, "the second lookup is answered from memory");
    ka_cache_free(b);
    free(p);
}

Test(cache, corrupt_or_foreign_entries_are_misses_and_removed)
{
    kf_err e = KF_ERR_INIT;
    ka_cache *c = ka_cache_open(dir, 0, &e);
    char k1[65], k2[65], k3[65];
    struct stat st;

    cr_assert_not_null(c, "%s", e.msg);
    key_of(3, k1);
    key_of(4, k2);
    key_of(5, k3);
    char *p1 = entry_path(k1), *p2 = entry_path(k2), *p3 = entry_path(k3);
    char *sub = kf_asprintf("%s/v1/%.2s", dir, k1);
    mkdir(sub, 0700);
    free(sub);
    sub = kf_asprintf("%s/v1/%.2s", dir, k2);
    mkdir(sub, 0700);
    free(sub);
    sub = kf_asprintf("%s/v1/%.2s", dir, k3);
    mkdir(sub, 0700);
    free(sub);
    kf_test_write_file(p1, "{\"key\": \"");                                  /* truncated */
    char *foreign = kf_asprintf("{\"key\": \"%s\", \"result\": {\"latency_ns\": 1}}", k1);
    kf_test_write_file(p2, foreign);                                           /* another key's entry */
    kf_test_write_file(p3, "{\"key\": \"x\"}");
    cr_assert_null(ka_cache_get(c, k1));
    cr_assert_null(ka_cache_get(c, k2));
    cr_assert_null(ka_cache_get(c, k3));
    cr_assert_neq(stat(p1, &st), 0, "a corrupt entry is removed");
    cr_assert_neq(stat(p2, &st), 0, "a foreign entry is removed");
    cr_assert_eq(ka_cache_hits(c), 0);
    /* Keys that are not 64 hex digits never touch the folder. */
    cJSON *v = result_of(1);
    ka_cache_put(c, "../../escape", v);
    cJSON_Delete(v);
    cr_assert_neq(stat("/tmp/escape.json", &st), 0);
    cr_assert_not_null(ka_cache_get(c, "../../escape"), "kept in memory");
    free(foreign);
    free(p1);
    free(p2);
    free(p3);
    ka_cache_free(c);
}

Test(cache, opening_trims_the_folder_to_its_bound_oldest_first)
{
    kf_err e = KF_ERR_INIT;
    ka_cache *c = ka_cache_open(dir, 0, &e);
    char k[65], old[65];
    struct stat st;

    cr_assert_not_null(c, "%s", e.msg);
    for (int i = 0; i < 150; i++) {
        cJSON *v = result_of(i);
        key_of(100 + i, k);
        ka_cache_put(c, k, v);
        cJSON_Delete(v);
    }
    ka_cache_free(c);
    /* Make one entry clearly the oldest. */
    key_of(100 + 7, old);
    char *p = entry_path(old);
    char *cmd = kf_asprintf("touch -d '2001-01-01' '%s'", p);
    cr_assert_eq(system(cmd), 0);
    free(cmd);

    c = ka_cache_open(dir, 100, &e);
    cr_assert_not_null(c, "%s", e.msg);
    ka_cache_free(c);
    cr_assert_neq(stat(p, &st), 0, "the oldest entry went first");
    cmd = kf_asprintf("find '%s/v1' -name '*.json' | wc -l", dir);
    FILE *f = popen(cmd, "r");
    int n = -1;
    cr_assert_eq(fscanf(f, "%d", &n), 1);
    pclose(f);
    cr_assert_eq(n, 90, "trimmed to 90%% of the bound, found %d", n);
    free(cmd);
    free(p);
}

Test(cache, a_folder_that_cannot_be_made_is_an_error_that_says_what_to_do)
{
    kf_err e = KF_ERR_INIT;
    char *file = kf_asprintf("%s/plain", dir), *under;
    kf_test_write_file(file, "x");
    under = kf_asprintf("%s/sub", file);
    cr_assert_null(ka_cache_open(under, 0, &e));
    cr_assert_eq(e.code, KF_IO);
    cr_assert(strstr(e.msg, "KFORGE_CACHE_DIR") && strstr(e.msg, under), "%s", e.msg);
    cr_assert_null(ka_cache_open("", 0, &e));
    free(under);
    free(file);
}

Test(cache, the_identity_is_the_executables_hash)
{
    const char *id = ka_cache_identity();
    cr_assert_eq(strlen(id), 64);
    cr_assert_str_eq(id, ka_cache_identity(), "computed once, stable");
    cr_assert_str_neq(id, "unknown");
}
