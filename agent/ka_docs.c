/* ka_docs — kforge's NKI and error-code docs for tools (see ka_docs.h). */
#include "ka_docs.h"

#include <ctype.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "kf_libmeta.h"

enum { KA_DOC_MAX = 1 << 20, KA_DOC_MATCHES = 6, KA_DOC_TEXT = 12000 };

static bool docs_is_file(const char *dir, const char *name)
{
    char p[PATH_MAX + 64];
    struct stat st;

    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* kforge's docs folder: next to the kernel library (the source tree), in
 * the working folder, or <exe>/../../docs, <exe>/../share/kforge/docs. */
static bool docs_dir(char *out, size_t n)
{
    const char *kd = kf_libmeta_dir();
    char exe[PATH_MAX - 64];
    ssize_t len;

    if (kd) {
        snprintf(out, n, "%s/../docs", kd);
        if (docs_is_file(out, "sim-nki.md"))
            return true;
    }
    snprintf(out, n, "docs");
    if (docs_is_file(out, "sim-nki.md"))
        return true;
    len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len > 0) {
        char *slash;
        exe[len] = '\0';
        slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(out, n, "%s/../../docs", exe);
            if (docs_is_file(out, "sim-nki.md"))
                return true;
            snprintf(out, n, "%s/../share/kforge/docs", exe);
            if (docs_is_file(out, "sim-nki.md"))
                return true;
        }
    }
    return false;
}

/* a[0..n) and b[0..n) equal but for ASCII case (no NUL needed: hay is a
 * window of a document, and strncasecmp may read on to the document's end) */
static bool docs_eq_ci(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)a[i]) != tolower((unsigned char)b[i]))
            return false;
    return true;
}

static bool docs_contains_ci(const char *hay, size_t hlen, const char *needle, size_t nlen)
{
    if (nlen == 0)
        return true;
    for (size_t i = 0; i + nlen <= hlen; i++)
        if (docs_eq_ci(hay + i, needle, nlen))
            return true;
    return false;
}

/* Every word of q (space-separated) in s[0..len). */
static bool docs_all_words(const char *s, size_t len, const char *q)
{
    while (*q) {
        size_t w;
        q += strspn(q, " \t");
        w = strcspn(q, " \t");
        if (w && !docs_contains_ci(s, len, q, w))
            return false;
        q += w;
    }
    return true;
}

/* The lines of a section with every word of the query (a table row of
 * docs/sim-errors.md for an error code), at most 20. */
static void docs_add_lines(cJSON *o, const char *sec, size_t len, const char *query)
{
    cJSON *arr = cJSON_AddArrayToObject(o, "matching_lines");
    const char *p = sec, *end = sec + len;

    while (p < end && cJSON_GetArraySize(arr) < 20) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (l && docs_all_words(p, l, query)) {
            char *line = kf_strndup(p, l);
            cJSON_AddItemToArray(arr, cJSON_CreateString(line));
            free(line);
        }
        p += l + 1;
    }
}

static void docs_add_section(cJSON *arr, const char *doc, const char *sec, size_t len, bool with_text,
                            const char *query)
{
    cJSON *o = cJSON_CreateObject();
    size_t level = strspn(sec, "#"), tl = strcspn(sec, "\n");
    const char *t = sec + level;
    char *title;

    while (*t == ' ' && t < sec + tl)
        t++;
    title = kf_strndup(t, (size_t)(sec + tl - t));
    cJSON_AddStringToObject(o, "doc", doc);
    cJSON_AddStringToObject(o, "title", title);
    cJSON_AddNumberToObject(o, "level", (double)level);
    if (with_text) {
        char *text = kf_strndup(sec, len > KA_DOC_TEXT ? KA_DOC_TEXT : len);
        cJSON_AddStringToObject(o, "text", text);
        cJSON_AddBoolToObject(o, "truncated", len > KA_DOC_TEXT);
        free(text);
        if (query)
            docs_add_lines(o, sec, len, query);
    }
    cJSON_AddItemToArray(arr, o);
    free(title);
}

/* Walk one document's sections (a heading line outside code fences starts
 * one); add those the call asks for.  *matches counts every hit. */
static void docs_doc_sections(const char *doc, const char *text, const char *query, const char *section, cJSON *arr,
                             int *matches)
{
    const char *p = text, *start = NULL;
    bool fence = false;

    for (;;) {
        bool heading = false;
        if (*p) {
            if (strncmp(p, "```", 3) == 0)
                fence = !fence;
            heading = !fence && *p == '#';
        }
        if ((heading || !*p) && start) {
            size_t len = (size_t)(p - start), tl = strcspn(start, "\n");
            const char *t = start + strspn(start, "# ");
            size_t tlen = (size_t)(start + tl - t);
            bool hit;
            if (section)
                hit = strlen(section) == tlen && strncasecmp(t, section, tlen) == 0;
            else
                hit = !query || docs_all_words(start, len, query);
            if (hit) {
                (*matches)++;
                if (!query && !section)
                    docs_add_section(arr, doc, start, len, false, NULL);
                else if (cJSON_GetArraySize(arr) < KA_DOC_MATCHES)
                    docs_add_section(arr, doc, start, len, true, query);
            }
        }
        if (!*p)
            break;
        if (heading)
            start = p;
        p += strcspn(p, "\n");
        if (*p)
            p++;
    }
}

cJSON *ka_docs_query(const char *query, const char *section, const char *only, kf_err *err)
{
    static const char *const docs[][2] = { { "nki", "sim-nki.md" }, { "errors", "sim-errors.md" } };
    char dir[PATH_MAX];
    cJSON *res, *arr;
    int matches = 0;

    if (query && section) {
        kf_err_set(err, KF_INVALID, "give query or section, not both");
        return NULL;
    }
    if (!docs_dir(dir, sizeof(dir))) {
        kf_err_set(err, KF_NOT_FOUND, "kforge's docs/ folder was not found (it is looked for next to the kernel "
                                      "library: set KFORGE_KERNELS_DIR to the source tree's kernels/)");
        return NULL;
    }
    res = cJSON_CreateObject();
    arr = cJSON_AddArrayToObject(res, "sections");
    for (size_t i = 0; i < 2; i++) {
        char path[PATH_MAX + 32];
        char *text;
        if (only && strcmp(only, docs[i][0]) != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, docs[i][1]);
        text = kf_libmeta_read_file(path, err);
        if (!text) {
            cJSON_Delete(res);
            return NULL;
        }
        docs_doc_sections(docs[i][0], text, query, section, arr, &matches);
        free(text);
    }
    cJSON_AddNumberToObject(res, "matches", matches);
    if (section && matches == 0) {
        cJSON_Delete(res);
        kf_err_set(err, KF_NOT_FOUND, "no section titled '%.*s' (call docs without arguments for the titles)",
                   (int)kf_utf8_cut(section, strnlen(section, 200)), section);
        return NULL;
    }
    return res;
}
