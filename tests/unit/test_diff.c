/* Unit tests for common/kf_diff: unified diffs as GNU diff -u writes them,
 * round trips through kf_diff_apply, the bounds for hostile texts, and
 * diffs that do not apply. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_diff.h"

static char *diff_of(const char *a, const char *b, bool *minimal)
{
    kf_buf out = KF_BUF_INIT;
    kf_diff_unified(a, b, "a/kernel.py", "b/kernel.py", &out, minimal);
    return kf_buf_detach(&out);
}

/* diff a -> b, apply it to a, and check b comes back. */
static void round_trip(const char *a, const char *b, bool want_minimal)
{
    bool minimal = !want_minimal;
    char *d = diff_of(a, b, &minimal), *back = NULL;
    kf_err e = KF_ERR_INIT;

    cr_assert_eq(minimal, want_minimal, "minimal for diff:\n%s", d);
    cr_assert_eq(kf_diff_apply(a, d, &back, &e), KF_OK, "%s\ndiff:\n%s", e.msg, d);
    cr_assert_str_eq(back, b, "diff:\n%s", d);
    free(back);
    free(d);
}

Test(kf_diff, equal_texts_give_no_diff)
{
    char *d = diff_of("a\nb\n", "a\nb\n", NULL);
    cr_assert_str_eq(d, "");
    free(d);
}

Test(kf_diff, one_changed_line_reads_as_gnu_diff_writes_it)
{
    const char *a = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n";
    const char *b = "1\n2\n3\n4\n5\nsix\n7\n8\n9\n10\n";
    char *d = diff_of(a, b, NULL);

    cr_assert_str_eq(d, "--- a/kernel.py\n+++ b/kernel.py\n"
                        "@@ -3,7 +3,7 @@\n 3\n 4\n 5\n-6\n+six\n 7\n 8\n 9\n");
    free(d);
}

Test(kf_diff, distant_changes_make_two_hunks_and_near_ones_one)
{
    kf_buf a = KF_BUF_INIT, b = KF_BUF_INIT;
    char *d;

    for (int i = 1; i <= 30; i++) {
        kf_buf_addf(&a, "line %d\n", i);
        kf_buf_addf(&b, i == 2 || i == 25 ? "LINE %d\n" : "line %d\n", i);
    }
    d = diff_of(a.data, b.data, NULL);
    cr_assert_not_null(strstr(d, "@@ -1,5 +1,5 @@\n"), "%s", d);
    cr_assert_not_null(strstr(d, "@@ -22,7 +22,7 @@\n"), "%s", d);
    free(d);
    round_trip(a.data, b.data, true);
    kf_buf_reset(&b);
    for (int i = 1; i <= 30; i++)
        kf_buf_addf(&b, i == 2 || i == 9 ? "LINE %d\n" : "line %d\n", i);
    d = diff_of(a.data, b.data, NULL);
    cr_assert_not_null(strstr(d, "@@ -1,12 +1,12 @@\n"), "%s", d);
    cr_assert_null(strstr(strstr(d, "@@ -") + 1, "@@ -"), "one hunk expected:\n%s", d);
    free(d);
    kf_buf_release(&a);
    kf_buf_release(&b);
}

Test(kf_diff, insertions_and_deletions_at_the_ends_and_empty_texts)
{
    char *d = diff_of("", "x\n", NULL);
    cr_assert_str_eq(d, "--- a/kernel.py\n+++ b/kernel.py\n@@ -0,0 +1,1 @@\n+x\n");
    free(d);
    d = diff_of("x\n", "", NULL);
    cr_assert_str_eq(d, "--- a/kernel.py\n+++ b/kernel.py\n@@ -1,1 +0,0 @@\n-x\n");
    free(d);
    round_trip("b\nc\n", "a\nb\nc\n", true);
    round_trip("a\nb\nc\n", "a\nb\nc\nd\n", true);
    round_trip("a\nb\nc\n", "b\n", true);
    round_trip("a\nb\nc\n", "", true);
}

Test(kf_diff, a_last_line_without_newline_is_marked)
{
    char *d = diff_of("a\nb", "a\nb\n", NULL);
    cr_assert_str_eq(d, "--- a/kernel.py\n+++ b/kernel.py\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n");
    free(d);
    round_trip("a\nb", "a\nb\n", true);
    round_trip("a\nb\n", "a\nc", true);
    round_trip("x", "y", true);
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Texts over a small alphabet of lines, so equal lines are frequent. */
static void random_text(uint64_t *s, int lines, kf_buf *out)
{
    kf_buf_reset(out);
    for (int i = 0; i < lines; i++)
        kf_buf_addf(out, "l%d\n", (int)(rng_next(s) % 6));
    if (rng_next(s) % 4 == 0)
        kf_buf_adds(out, "tail");
}

Test(kf_diff, random_pairs_round_trip)
{
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    kf_buf a = KF_BUF_INIT, b = KF_BUF_INIT;

    for (int i = 0; i < 500; i++) {
        random_text(&s, (int)(rng_next(&s) % 40), &a);
        random_text(&s, (int)(rng_next(&s) % 40), &b);
        round_trip(a.data, b.data, true);
    }
    kf_buf_release(&a);
    kf_buf_release(&b);
}

Test(kf_diff, past_the_edit_bound_the_diff_replaces_the_middle_and_still_applies)
{
    kf_buf a = KF_BUF_INIT, b = KF_BUF_INIT;
    char *d;
    bool minimal = true;

    kf_buf_adds(&a, "head\n");
    kf_buf_adds(&b, "head\n");
    for (int i = 0; i < KF_DIFF_MAX_EDITS; i++) {
        kf_buf_addf(&a, "old %d\n", i);
        kf_buf_addf(&b, "new %d\n", i);
    }
    kf_buf_adds(&a, "tail\n");
    kf_buf_adds(&b, "tail\n");
    d = diff_of(a.data, b.data, &minimal);
    cr_assert(!minimal);
    cr_assert_not_null(strstr(d, "@@ -1,1002 +1,1002 @@\n head\n-old 0\n"), "%.200s", d);
    free(d);
    round_trip(a.data, b.data, false);
    kf_buf_release(&a);
    kf_buf_release(&b);
}

Test(kf_diff, past_the_line_bound_the_diff_replaces_everything_and_still_applies)
{
    kf_buf a = KF_BUF_INIT, b = KF_BUF_INIT;

    for (int i = 0; i < KF_DIFF_MAX_LINES + 10; i++)
        kf_buf_adds(&a, "x\n");
    kf_buf_adds(&b, a.data);
    kf_buf_adds(&b, "y");
    round_trip(a.data, b.data, false);
    kf_buf_release(&a);
    kf_buf_release(&b);
}

Test(kf_diff, diffs_that_do_not_fit_or_are_malformed_are_refused)
{
    static const char *const bad[] = {
        "@@ -1,1 +1,1 @@\n-zzz\n+b\n",            /* deleted line differs */
        "@@ -1,2 +1,2 @@\n a\n",                  /* fewer lines than the header */
        "@@ -1,1 +1,1 @@\n-a\n+b\n+c\n",          /* more */
        "@@ -9,1 +9,1 @@\n-a\n+b\n",              /* past the end */
        "@@ -2,1 +2,1 @@\n-b\n+B\n@@ -1,1 +1,1 @@\n-a\n+A\n",   /* out of order */
        "@@ -1,x +1,1 @@\n-a\n+b\n",              /* malformed header */
        "@@ -1,1 +1,1\n-a\n+b\n",
        "@@ -1,1 +1,1 @@\n*a\n+b\n",              /* unknown mark */
        "@@ -1,999999999999 +1,1 @@\n-a\n",        /* absurd count */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *out = (char *)1;
        kf_err e = KF_ERR_INIT;
        cr_assert_eq(kf_diff_apply("a\nb\nc\n", bad[i], &out, &e), KF_UNPROCESSABLE, "case %zu applied", i);
        cr_assert_null(out);
        cr_assert_not_null(strstr(e.msg, "hunk"), "%s", e.msg);
    }
}

Test(kf_diff, headers_before_the_first_hunk_are_skipped)
{
    char *out = NULL;
    kf_err e = KF_ERR_INIT;

    cr_assert_eq(kf_diff_apply("a\nb\n", "diff --git a/k b/k\n--- a/k\n+++ b/k\n@@ -2 +2 @@\n-b\n+c\n", &out, &e),
                 KF_OK, "%s", e.msg);
    cr_assert_str_eq(out, "a\nc\n");
    free(out);
}
