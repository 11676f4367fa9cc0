/* Unit tests of the artifact store's folder backend and zlib codec
 * (db/kf_artifact.h; the PostgreSQL backend is tested against a real
 * server in tests/integration/test_artifacts.c) and of the worker's
 * artifact and provenance reports (workers/kf_upload.h). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_artifact.h"
#include "kf_buf.h"
#include "tests/lib/kf_test.h"
#include "workers/kf_finish.h"
#include "workers/kf_upload.h"

/* ---- codec -------------------------------------------------------------------- */

Test(artifact_codec, json_round_trips_smaller_and_noise_is_kept_raw)
{
    kf_buf text = KF_BUF_INIT, z = KF_BUF_INIT, back = KF_BUF_INIT;
    kf_err e = KF_ERR_INIT;
    unsigned char noise[4096];
    uint64_t x = 88172645463325252ULL;

    for (int i = 0; i < 5000; i++)
        kf_buf_addf(&text, "{\"name\":\"tensor_tensor\",\"ts\":%d.5,\"dur\":0.25,\"cat\":\"vector\"},", i);
    cr_assert(kf_artifact_deflate(text.data, text.len, &z));
    cr_assert_lt(z.len * 5, text.len, "trace-like JSON shrinks at least 5x (%zu -> %zu)", text.len, z.len);
    cr_assert_eq(kf_artifact_inflate(z.data, z.len, text.len, &back, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(back.len, text.len);
    cr_assert_eq(memcmp(back.data, text.data, text.len), 0);
    /* a size that does not match is corruption, not a short read */
    kf_buf_reset(&back);
    cr_assert_eq(kf_artifact_inflate(z.data, z.len, text.len + 1, &back, &e), KF_INTERNAL);
    cr_assert_eq(kf_artifact_inflate("garbage", 7, 10, &back, &e), KF_INTERNAL);
    cr_assert(strstr(e.msg, "corrupt"), "%s", e.msg);
    for (size_t i = 0; i < sizeof(noise); i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noise[i] = (unsigned char)x;
    }
    cr_assert_not(kf_artifact_deflate(noise, sizeof(noise), &z), "random bytes do not shrink: stored raw");
    kf_buf_release(&text);
    kf_buf_release(&z);
    kf_buf_release(&back);
}

Test(artifact_codec, sha256_names_and_their_check)
{
    char sha[65];

    kf_artifact_sha256_hex("abc", 3, sha);
    cr_assert_str_eq(sha, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    cr_assert(kf_artifact_sha_valid(sha));
    cr_assert_not(kf_artifact_sha_valid("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"));
    cr_assert_not(kf_artifact_sha_valid("ba78"));
    cr_assert_not(kf_artifact_sha_valid("../../../../etc/passwd"));
    sha[10] = 'g';
    cr_assert_not(kf_artifact_sha_valid(sha));
    cr_assert_not(kf_artifact_sha_valid(NULL));
}

/* ---- the folder store ------------------------------------------------------------- */

Test(artifact_store, settings_are_checked)
{
    kf_artifact_store *s = NULL;
    kf_err e = KF_ERR_INIT;

    cr_assert_eq(kf_artifact_store_open("s3://bucket", &s, &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "dir:/ABSOLUTE/PATH"), "%s", e.msg);
    cr_assert_null(s);
    cr_assert_eq(kf_artifact_store_open("dir:relative/path", &s, &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "absolute"), "%s", e.msg);
    cr_assert_eq(kf_artifact_store_open("dir:/proc/kforge-cannot-be-here", &s, &e), KF_IO);
    cr_assert_eq(kf_artifact_store_open("", &s, &e), KF_OK);
    cr_assert_str_eq(kf_artifact_store_kind(s), "pg");
    kf_artifact_store_free(s);
    kf_artifact_store_free(NULL);
}

static int count_files(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *de;

    cr_assert_not_null(d, "%s", dir);
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

Test(artifact_store, folder_puts_are_atomic_idempotent_and_read_by_range)
{
    char *dir = kf_test_tmpdir("artdir"), *spec = kf_asprintf("dir:%s/store", dir), *path, *leaf;
    kf_artifact_store *s = NULL;
    kf_err e = KF_ERR_INIT;
    const char *text = "def kernel(x):\n    return x\n";
    char sha[65], sha2[65];
    kf_buf out = KF_BUF_INIT;
    uint64_t size = 0;
    struct stat st;

    cr_assert_eq(kf_artifact_store_open(spec, &s, &e), KF_OK, "%s", e.msg);
    cr_assert_str_eq(kf_artifact_store_kind(s), "dir");
    cr_assert_eq(kf_artifact_put(s, NULL, text, strlen(text), sha, &e), KF_OK, "%s", e.msg);
    path = kf_asprintf("%s/store/%.2s/%.2s/%s", dir, sha, sha + 2, sha);
    leaf = kf_asprintf("%s/store/%.2s/%.2s", dir, sha, sha + 2);
    cr_assert_eq(stat(path, &st), 0, "fan-out path %s", path);
    cr_assert_eq(st.st_size, (off_t)strlen(text));
    cr_assert_eq(st.st_mode & 0777, 0600, "private to the store's user: %o", st.st_mode & 0777);
    cr_assert_eq(count_files(leaf), 1, "no temporary file left behind");
    /* the same bytes again: the same name, refreshed */
    {
        struct timespec old[2] = { { 1000, 0 }, { 1000, 0 } };
        cr_assert_eq(utimensat(AT_FDCWD, path, old, 0), 0);
    }
    cr_assert_eq(kf_artifact_put(s, NULL, text, strlen(text), sha2, &e), KF_OK);
    cr_assert_str_eq(sha, sha2);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_gt(st.st_mtime, 1000, "touched by the repeat (retention's grace)");
    cr_assert_eq(count_files(leaf), 1);
    /* whole, a slice, past the end */
    cr_assert_eq(kf_artifact_get(s, NULL, sha, 0, KF_ARTIFACT_TO_END, &out, &size, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(size, strlen(text));
    cr_assert_str_eq(out.data, text);
    kf_buf_reset(&out);
    cr_assert_eq(kf_artifact_get(s, NULL, sha, 4, 6, &out, &size, &e), KF_OK);
    cr_assert_str_eq(out.data, "kernel");
    kf_buf_reset(&out);
    cr_assert_eq(kf_artifact_get(s, NULL, sha, 20, 1000, &out, &size, &e), KF_OK);
    cr_assert_eq(out.len, strlen(text) - 20, "clipped to the end");
    kf_buf_reset(&out);
    cr_assert_eq(kf_artifact_get(s, NULL, sha, 1000, 10, &out, &size, &e), KF_OK);
    cr_assert_eq(out.len, 0);
    /* unknown and malformed names */
    memset(sha2, 'e', 64);
    cr_assert_eq(kf_artifact_get(s, NULL, sha2, 0, 1, &out, &size, &e), KF_NOT_FOUND);
    cr_assert_eq(kf_artifact_get(s, NULL, "../store", 0, 1, &out, &size, &e), KF_NOT_FOUND);
    /* an empty content is a content */
    cr_assert_eq(kf_artifact_put(s, NULL, "", 0, sha2, &e), KF_OK);
    cr_assert_str_eq(sha2, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    cr_assert_eq(kf_artifact_get(s, NULL, sha2, 0, KF_ARTIFACT_TO_END, &out, &size, &e), KF_OK);
    cr_assert_eq(size, 0);
    /* a store folder that is a file is an error naming it */
    {
        char *file = kf_asprintf("%s/a-file", dir), *bad = kf_asprintf("dir:%s/a-file/store", dir);
        kf_artifact_store *s2 = NULL;
        kf_test_write_file(file, "x");
        cr_assert_eq(kf_artifact_store_open(bad, &s2, &e), KF_IO);
        cr_assert(strstr(e.msg, "a-file"), "%s", e.msg);
        free(file);
        free(bad);
    }
    kf_buf_release(&out);
    kf_artifact_store_free(s);
    free(path);
    free(leaf);
    free(spec);
    free(dir);
}

/* ---- the worker's reports ----------------------------------------------------------------- */

Test(worker_upload, base64_is_standard_and_padded)
{
    static const char *const cases[][2] = {
        { "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" }, { "foo", "Zm9v" }, { "foob", "Zm9vYg==" },
        { "fooba", "Zm9vYmE=" }, { "foobar", "Zm9vYmFy" }, { "\xff\xfe", "//4=" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kf_buf b = KF_BUF_INIT;
        kf_upload_base64(cases[i][0], strlen(cases[i][0]), &b);
        cr_assert_str_eq(b.data, cases[i][1], "case %zu", i);
        kf_buf_release(&b);
    }
}

Test(worker_upload, artifacts_are_taken_out_and_each_becomes_a_report)
{
    cJSON *it = cJSON_Parse("{\"seq\":1,\"artifacts\":[{\"name\":\"kernel.py\",\"content\":\"x = \\\"1\\\"\\n\"},"
                            "{\"name\":\"trace.json\",\"content\":\"{}\"}],\"params\":{}}");
    cJSON *arts = kf_upload_take_artifacts(it), *body;
    char *s;

    cr_assert_not_null(arts);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(it, "artifacts"), "the iteration no longer carries them");
    cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(it, "params"));
    cr_assert_eq(cJSON_GetArraySize(arts), 2);
    s = kf_upload_artifact_body(2, "tok\"en", "w-1", 7, true, cJSON_GetArrayItem(arts, 0));
    body = cJSON_Parse(s);
    cr_assert_not_null(body, "%s", s);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(body, "attempt")->valueint, 2);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(body, "lease_token")->valuestring, "tok\"en");
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(body, "worker")->valuestring, "w-1");
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(body, "seq")->valueint, 7);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "final")));
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(body, "name")->valuestring, "kernel.py");
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(body, "content_base64")->valuestring, "eCA9ICIxIgo=");
    cJSON_Delete(body);
    free(s);
    cJSON_Delete(arts);
    cJSON_Delete(it);

    /* another shape is dropped, never sent half-formed */
    it = cJSON_Parse("{\"artifacts\":[{\"name\":\"a\"}]}");
    cr_assert_null(kf_upload_take_artifacts(it));
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(it, "artifacts"));
    cJSON_Delete(it);
    it = cJSON_Parse("{\"artifacts\":\"x\"}");
    cr_assert_null(kf_upload_take_artifacts(it));
    cJSON_Delete(it);
    it = cJSON_Parse("{\"name\":7,\"content\":\"x\"}");
    cr_assert_null(kf_upload_artifact_body(1, "t", "w", 1, false, it));
    cJSON_Delete(it);
}

Test(worker_upload, provenance_moves_from_the_result_to_the_report)
{
    cJSON *res = cJSON_Parse("{\"latency_ns\":5,\"provenance\":{\"backend\":\"sim\",\"worker\":\"forged\"}}");
    char *p = kf_upload_take_provenance(res, "w-1");
    kf_buf body = KF_BUF_INIT;
    cJSON *b;

    cr_assert_not_null(p);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(res, "provenance"));
    kf_finish_body(&body, &(kf_finish_report){ 1, "tok", true, "{}", NULL, false, "w-1", p });
    b = cJSON_Parse(body.data);
    cr_assert_not_null(b, "%s", body.data);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(b, "provenance"), "worker")
                         ->valuestring, "w-1", "the worker names itself: %s", body.data);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(b, "provenance"), "backend")
                         ->valuestring, "sim");
    cJSON_Delete(b);
    free(p);
    cJSON_Delete(res);
    /* none: the body stays as it was */
    res = cJSON_Parse("{\"provenance\":[1]}");
    cr_assert_null(kf_upload_take_provenance(res, "w-1"));
    kf_buf_reset(&body);
    kf_finish_body(&body, &(kf_finish_report){ 1, "tok", true, "{}", NULL, false, "w-1", NULL });
    cr_assert_null(strstr(body.data, "provenance"), "%s", body.data);
    cJSON_Delete(res);
    kf_buf_release(&body);
}
