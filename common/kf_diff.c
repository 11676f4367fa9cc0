/* kf_diff — unified diffs, made with Myers' greedy O(ND) search and applied
 * hunk by hunk.  See kf_diff.h for the bounds and what happens past them. */
#include "kf_diff.h"

#include "kf_alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct kd_line {
    const char *p;
    size_t      n;       /* bytes, with the '\n' when there is one */
    uint64_t    h;
} kd_line;

typedef struct kd_text {
    kd_line *l;
    int      n;
    bool     over;       /* more than KF_DIFF_MAX_LINES: not all split */
} kd_text;

enum { KD_EQ, KD_DEL, KD_INS };

typedef struct kd_op {
    int type;
    int a, b;            /* line index in old / new (the one the op is about) */
} kd_op;

static uint64_t kd_hash(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* Split into lines; stops (over = true) past KF_DIFF_MAX_LINES. */
static void kd_split(const char *s, kd_text *t)
{
    int cap = 64;

    t->n = 0;
    t->over = false;
    t->l = kf_malloc((size_t)cap * sizeof(*t->l));
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t n = nl ? (size_t)(nl - s) + 1 : strlen(s);
        if (t->n == KF_DIFF_MAX_LINES) {
            t->over = true;
            return;
        }
        if (t->n == cap) {
            cap *= 2;
            t->l = kf_realloc(t->l, (size_t)cap * sizeof(*t->l));
        }
        t->l[t->n].p = s;
        t->l[t->n].n = n;
        t->l[t->n].h = kd_hash(s, n);
        t->n++;
        s += n;
    }
}

static bool kd_eq(const kd_line *x, const kd_line *y)
{
    return x->h == y->h && x->n == y->n && memcmp(x->p, y->p, x->n) == 0;
}

/* Myers' greedy search over a[0..n) and b[0..m); the edit script (in
 * order) into ops, *nops; false when it needs more than max_d edits. */
static bool kd_myers(const kd_line *a, int n, const kd_line *b, int m, int max_d, kd_op *ops, int *nops)
{
    int off = max_d + 1;
    int *v = kf_calloc(2 * (size_t)max_d + 3, sizeof(int));
    int **trace = kf_calloc((size_t)max_d + 1, sizeof(int *));
    int found = -1, x, y, cnt = 0;

    for (int d = 0; d <= max_d && found < 0; d++) {
        trace[d] = kf_malloc((size_t)(2 * d + 1) * sizeof(int));
        memcpy(trace[d], v + off - d, (size_t)(2 * d + 1) * sizeof(int));
        for (int k = -d; k <= d; k += 2) {
            if (k == -d || (k != d && v[off + k - 1] < v[off + k + 1]))
                x = v[off + k + 1];
            else
                x = v[off + k - 1] + 1;
            y = x - k;
            while (x < n && y < m && kd_eq(&a[x], &b[y])) {
                x++;
                y++;
            }
            v[off + k] = x;
            if (x >= n && y >= m) {
                found = d;
                break;
            }
        }
    }
    if (found >= 0) {
        /* Walk back from (n, m), writing the script from its end. */
        x = n;
        y = m;
        for (int d = found; d >= 0; d--) {
            int pk, px, py, k = x - y;
            if (d == 0) {
                while (x > 0 && y > 0)
                    ops[cnt++] = (kd_op){ KD_EQ, --x, --y };
                break;
            }
            {
                const int *tv = trace[d] + d;   /* tv[k] for k in [-d, d] */
                pk = (k == -d || (k != d && tv[k - 1] < tv[k + 1])) ? k + 1 : k - 1;
                px = tv[pk];
            }
            py = px - pk;
            while (x > px && y > py)
                ops[cnt++] = (kd_op){ KD_EQ, --x, --y };
            if (x == px)
                ops[cnt++] = (kd_op){ KD_INS, x, --y };
            else
                ops[cnt++] = (kd_op){ KD_DEL, --x, y };
        }
        for (int i = 0; i < cnt / 2; i++) {
            kd_op t = ops[i];
            ops[i] = ops[cnt - 1 - i];
            ops[cnt - 1 - i] = t;
        }
        *nops = cnt;
    }
    for (int d = 0; d <= max_d; d++)
        free(trace[d]);
    free(trace);
    free(v);
    return found >= 0;
}

static void kd_line_out(kf_buf *out, char mark, const kd_line *l)
{
    kf_buf_addc(out, mark);
    kf_buf_add(out, l->p, l->n);
    if (l->n == 0 || l->p[l->n - 1] != '\n')
        kf_buf_adds(out, "\n\\ No newline at end of file\n");
}

/* Lines of s, however many (counting only). */
static int kd_count(const char *s)
{
    int n = 0;
    for (; *s; n++) {
        const char *nl = strchr(s, '\n');
        s = nl ? nl + 1 : s + strlen(s);
    }
    return n;
}

static void kd_out_all(kf_buf *out, char mark, const char *s)
{
    while (*s) {
        const char *nl = strchr(s, '\n');
        kd_line l = { s, nl ? (size_t)(nl - s) + 1 : strlen(s), 0 };
        kd_line_out(out, mark, &l);
        s += l.n;
    }
}

/* The whole-replacement diff, for texts past KF_DIFF_MAX_LINES: linear in
 * their size, no line table kept. */
static void kd_replace_all(const char *old_text, const char *new_text, const char *old_label, const char *new_label,
                           kf_buf *out)
{
    int na = kd_count(old_text), nb = kd_count(new_text);

    kf_buf_addf(out, "--- %s\n+++ %s\n@@ -%d,%d +%d,%d @@\n", old_label, new_label, na ? 1 : 0, na, nb ? 1 : 0, nb);
    kd_out_all(out, '-', old_text);
    kd_out_all(out, '+', new_text);
}

/* The hunks of a whole script ops[0..n). */
static void kd_hunks(const kd_op *ops, int n, const kd_text *a, const kd_text *b, kf_buf *out)
{
    int i = 0;

    while (i < n) {
        int first, last, s, e, oa = 0, ob = 0;
        while (i < n && ops[i].type == KD_EQ)
            i++;
        if (i == n)
            break;
        first = i;
        last = i;
        /* Extend while the next change is at most 2 x context lines away. */
        for (int j = i + 1; j < n; j++) {
            if (ops[j].type == KD_EQ)
                continue;
            if (j - last - 1 > 2 * KF_DIFF_CONTEXT)
                break;
            last = j;
        }
        s = first - KF_DIFF_CONTEXT < 0 ? 0 : first - KF_DIFF_CONTEXT;
        e = last + 1 + KF_DIFF_CONTEXT > n ? n : last + 1 + KF_DIFF_CONTEXT;
        for (int j = s; j < e; j++) {
            oa += ops[j].type != KD_INS;
            ob += ops[j].type != KD_DEL;
        }
        /* An empty range names the line before it (0 at the start). */
        kf_buf_addf(out, "@@ -%d,%d +%d,%d @@\n", oa ? ops[s].a + 1 : ops[s].a, oa, ob ? ops[s].b + 1 : ops[s].b, ob);
        for (int j = s; j < e; j++) {
            if (ops[j].type == KD_EQ)
                kd_line_out(out, ' ', &a->l[ops[j].a]);
            else if (ops[j].type == KD_DEL)
                kd_line_out(out, '-', &a->l[ops[j].a]);
            else
                kd_line_out(out, '+', &b->l[ops[j].b]);
        }
        i = e;
    }
}

void kf_diff_unified(const char *old_text, const char *new_text, const char *old_label, const char *new_label,
                     kf_buf *out, bool *minimal)
{
    kd_text a, b;
    kd_op *ops;
    int head = 0, tail = 0, n = 0, mid = 0;
    bool ok = false;

    if (minimal)
        *minimal = true;
    if (strcmp(old_text, new_text) == 0)
        return;
    kd_split(old_text, &a);
    kd_split(new_text, &b);
    if (!a.over && !b.over) {
        while (head < a.n && head < b.n && kd_eq(&a.l[head], &b.l[head]))
            head++;
        while (tail < a.n - head && tail < b.n - head && kd_eq(&a.l[a.n - 1 - tail], &b.l[b.n - 1 - tail]))
            tail++;
    }
    ops = kf_malloc(((size_t)a.n + (size_t)b.n + 1) * sizeof(*ops));
    for (int i = 0; i < head; i++)
        ops[n++] = (kd_op){ KD_EQ, i, i };
    if (!a.over && !b.over)
        ok = kd_myers(a.l + head, a.n - head - tail, b.l + head, b.n - head - tail, KF_DIFF_MAX_EDITS, ops + n, &mid);
    if (ok) {
        for (int i = n; i < n + mid; i++) {
            ops[i].a += head;
            ops[i].b += head;
        }
        n += mid;
    } else {
        /* Past a bound: every differing old line out, every new one in.  A
         * text past KF_DIFF_MAX_LINES is split again without the bound. */
        if (minimal)
            *minimal = false;
        if (a.over || b.over) {
            free(a.l);
            free(b.l);
            free(ops);
            kd_replace_all(old_text, new_text, old_label, new_label, out);
            return;
        }
        for (int i = head; i < a.n - tail; i++)
            ops[n++] = (kd_op){ KD_DEL, i, head };
        for (int i = head; i < b.n - tail; i++)
            ops[n++] = (kd_op){ KD_INS, a.n - tail, i };
    }
    for (int i = 0; i < tail; i++)
        ops[n++] = (kd_op){ KD_EQ, a.n - tail + i, b.n - tail + i };
    kf_buf_addf(out, "--- %s\n+++ %s\n", old_label, new_label);
    kd_hunks(ops, n, &a, &b, out);
    free(ops);
    free(a.l);
    free(b.l);
}

/* ---- apply ---------------------------------------------------------------------- */

/* One line of the diff: [p, p + n) without its '\n'; next is the line after. */
static const char *kd_next_line(const char *p, size_t *n)
{
    const char *nl = strchr(p, '\n');
    *n = nl ? (size_t)(nl - p) : strlen(p);
    return nl ? nl + 1 : p + *n;
}

/* "@@ -a[,b] +c[,d] @@": the four numbers (b, d default to 1). */
static bool kd_hunk_head(const char *p, size_t n, long v[4])
{
    const char *e = p + n;
    char *end;

    if (n < 4 || strncmp(p, "@@ -", 4) != 0)
        return false;
    p += 4;
    for (int i = 0; i < 4; i += 2) {
        if (p >= e || *p < '0' || *p > '9')
            return false;
        v[i] = strtol(p, &end, 10);
        p = end;
        v[i + 1] = 1;
        if (p < e && *p == ',') {
            p++;
            if (p >= e || *p < '0' || *p > '9')
                return false;
            v[i + 1] = strtol(p, &end, 10);
            p = end;
        }
        if (v[i] < 0 || v[i] > 100000000 || v[i + 1] < 0 || v[i + 1] > 100000000)
            return false;
        if (i == 0) {
            if (e - p < 2 || strncmp(p, " +", 2) != 0)
                return false;
            p += 2;
        }
    }
    return e - p >= 3 && strncmp(p, " @@", 3) == 0;
}

kf_code kf_diff_apply(const char *base, const char *diff, char **out, kf_err *err)
{
    kf_buf o = KF_BUF_INIT;
    const char *bp = base, *dp = diff;
    long bline = 0;   /* lines of base consumed */
    int hunk = 0;

    *out = NULL;
    while (*dp) {
        size_t n;
        const char *line = dp;
        long v[4], olds, news, want_start;
        dp = kd_next_line(dp, &n);
        if (n < 2 || strncmp(line, "@@", 2) != 0) {
            if (hunk > 0)
                goto bad_line;
            continue;   /* headers before the first hunk */
        }
        hunk++;
        if (!kd_hunk_head(line, n, v)) {
            kf_buf_release(&o);
            return kf_err_set(err, KF_UNPROCESSABLE, "hunk %d of the diff has a malformed header; expected "
                                                     "\"@@ -START,COUNT +START,COUNT @@\"", hunk);
        }
        /* An empty old range names the line before it. */
        want_start = v[1] == 0 ? v[0] : v[0] - 1;
        if (want_start < bline) {
            kf_buf_release(&o);
            return kf_err_set(err, KF_UNPROCESSABLE, "hunk %d of the diff starts at line %ld, before the end of the "
                                                     "hunk ahead of it; hunks must come in order", hunk, v[0]);
        }
        while (bline < want_start) {
            size_t bn;
            const char *bl = bp;
            if (!*bp) {
                kf_buf_release(&o);
                return kf_err_set(err, KF_UNPROCESSABLE, "hunk %d of the diff starts at line %ld, past the end of "
                                                         "the text it applies to (%ld lines)", hunk, v[0], bline);
            }
            bp = kd_next_line(bp, &bn);
            kf_buf_add(&o, bl, (size_t)(bp - bl));
            bline++;
        }
        olds = v[1];
        news = v[3];
        while (olds > 0 || news > 0) {
            char mark;
            const char *text;
            size_t tn, bn;
            bool nl = true;
            line = dp;
            if (!*dp)
                goto short_hunk;
            dp = kd_next_line(dp, &n);
            mark = ' ';   /* an empty line: context, as some tools write it */
            if (n)
                mark = line[0];
            text = n ? line + 1 : line;
            tn = n ? n - 1 : 0;
            if (strncmp(dp, "\\ ", 2) == 0) {
                size_t skip;
                nl = false;
                dp = kd_next_line(dp, &skip);
            }
            if (mark == '+') {
                if (news-- == 0)
                    goto bad_line;
                kf_buf_add(&o, text, tn);
                if (nl)
                    kf_buf_addc(&o, '\n');
                continue;
            }
            if (mark != ' ' && mark != '-')
                goto bad_line;
            if (olds-- == 0 || (mark == ' ' && news-- == 0))
                goto bad_line;
            {
                const char *bl = bp;
                bp = kd_next_line(bp, &bn);
                if (bn != tn || memcmp(bl, text, tn) != 0 || (nl ? bl[bn] != '\n' : bl[bn] != '\0')) {
                    kf_buf_release(&o);
                    return kf_err_set(err, KF_UNPROCESSABLE, "hunk %d of the diff does not fit: line %ld of the "
                                                             "text differs from the diff's", hunk, bline + 1);
                }
                bline++;
                if (mark == ' ')
                    kf_buf_add(&o, bl, (size_t)(bp - bl));
            }
        }
    }
    kf_buf_adds(&o, bp);
    *out = kf_buf_detach(&o);
    return KF_OK;
short_hunk:
    kf_buf_release(&o);
    return kf_err_set(err, KF_UNPROCESSABLE, "hunk %d of the diff ends before the line counts of its header",
                      hunk);
bad_line:
    kf_buf_release(&o);
    return kf_err_set(err, KF_UNPROCESSABLE, "hunk %d of the diff has a line that is not ' ', '-' or '+' or "
                                             "more lines than its header counts", hunk);
}
