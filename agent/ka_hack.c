/* ka_hack — the static reward-hacking check (see ka_hack.h). */
#include "ka_hack.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"

enum { HK_MAX_DEFS = 256, HK_MAX_NAMES = 64, HK_NAME = 64 };

typedef struct hk_def {
    char   name[HK_NAME];
    size_t sig;          /* offset of "def" */
    size_t body, end;    /* the body: after the signature's ':' up to the next top-level statement */
    bool   nki;          /* decorated with @nki... */
    bool   kernel;
} hk_def;

typedef struct hk_set {
    char v[HK_MAX_NAMES][HK_NAME];
    int  n;
} hk_set;

typedef struct hk {
    char       *code;    /* the source with comments and string contents blanked */
    size_t      n;
    hk_def      defs[HK_MAX_DEFS];
    int         n_defs;
    hk_set      inputs;   /* the entry's parameters without a default */
    hk_set      np;       /* aliases of numpy and its submodules */
    hk_set      npfn;     /* names imported from numpy */
    hk_set      mod;      /* module-level variables */
    const char *ref_entry, *ref_module;
    char       *rule;
    int        *line;
    char       *why;
    size_t      why_n;
} hk;

static bool hk_id(int c)
{
    return isalnum(c) || c == '_';
}

static void hk_blank(char *s)
{
    for (size_t i = 0; s[i];) {
        if (s[i] == '#') {
            while (s[i] && s[i] != '\n')
                s[i++] = ' ';
        } else if (s[i] == '"' || s[i] == '\'') {
            char q = s[i];
            bool triple = s[i + 1] == q && s[i + 2] == q;
            i += triple ? 3 : 1;
            while (s[i]) {
                if (s[i] == '\\' && s[i + 1]) {
                    s[i] = ' ';
                    if (s[i + 1] != '\n')
                        s[i + 1] = ' ';
                    i += 2;
                    continue;
                }
                if (s[i] == q && (!triple || (s[i + 1] == q && s[i + 2] == q))) {
                    i += triple ? 3 : 1;
                    break;
                }
                if (!triple && s[i] == '\n')
                    break;   /* an unterminated string: Python refuses it anyway */
                if (s[i] != '\n')
                    s[i] = ' ';
                i++;
            }
        } else {
            i++;
        }
    }
}

static int hk_line(const hk *h, size_t at)
{
    int l = 1;
    for (size_t i = 0; i < at && i < h->n; i++)
        l += h->code[i] == '\n';
    return l;
}

static bool hk_found(hk *h, const char *rule, size_t at, const char *fmt, const char *name)
{
    snprintf(h->rule, 32, "%s", rule);
    *h->line = hk_line(h, at);
    snprintf(h->why, h->why_n, fmt, name);
    return true;
}

static size_t hk_skip_sp(const hk *h, size_t i)
{
    while (i < h->n && (h->code[i] == ' ' || h->code[i] == '\t'))
        i++;
    return i;
}

/* The identifier at i into out (cut); its end. */
static size_t hk_word(const hk *h, size_t i, char *out)
{
    size_t j = i;
    while (j < h->n && hk_id((unsigned char)h->code[j]))
        j++;
    snprintf(out, HK_NAME, "%.*s", (int)(j - i), h->code + i);
    return j;
}

static bool hk_in(const hk_set *set, const char *w)
{
    for (int i = 0; i < set->n; i++)
        if (strcmp(set->v[i], w) == 0)
            return true;
    return false;
}

static void hk_add(hk_set *set, const char *w)
{
    if (set->n < HK_MAX_NAMES && w[0] && !hk_in(set, w))
        snprintf(set->v[set->n++], HK_NAME, "%s", w);
}

/* The offset after the bracket matching the one at i (or the end). */
static size_t hk_match(const hk *h, size_t i)
{
    int depth = 0;
    for (; i < h->n; i++) {
        char c = h->code[i];
        if (c == '(' || c == '[' || c == '{')
            depth++;
        else if ((c == ')' || c == ']' || c == '}') && --depth == 0)
            return i + 1;
    }
    return h->n;
}

static bool hk_one_of(const char *w, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(w, *list) == 0)
            return true;
    return false;
}

static const char *const hk_meta_attrs[] = { "shape", "dtype", "ndim", "size", "buffer", NULL };
static const char *const hk_value_attrs[] = { "sum", "mean", "max", "min", "tolist", "item", "copy", "astype",
                                              "__array__", "all", "any", "prod", "cumsum", "std", "var", "dot",
                                              "data", "tobytes", "argmax", "argmin", "flatten", "ravel", NULL };

typedef enum { USE_META, USE_VALUE, USE_VALUE_METHOD } hk_use;

/* How the input name at [i, j) is used: its metadata (.shape...), a method
 * on its values (.sum()...), or its value; *after gets the offset after
 * the subscripts and attribute. */
static hk_use hk_input_use(const hk *h, size_t j, size_t *after)
{
    char attr[HK_NAME];

    while (j < h->n && h->code[j] == '[')
        j = hk_match(h, j);
    *after = j;
    if (j < h->n && h->code[j] == '.') {
        size_t k = hk_word(h, j + 1, attr);
        *after = k;
        if (hk_one_of(attr, hk_meta_attrs))
            return USE_META;
        if (hk_one_of(attr, hk_value_attrs))
            return USE_VALUE_METHOD;
        return USE_META;   /* another attribute: an NKI tensor method (reshape, ap...) */
    }
    return USE_VALUE;
}

/* An input's value used in [from, to): its offset, or (size_t)-1. */
static size_t hk_value_in(const hk *h, size_t from, size_t to, char *name)
{
    for (size_t i = from; i < to; i++) {
        char w[HK_NAME];
        size_t j, after;
        if (!hk_id((unsigned char)h->code[i]) || (i && (hk_id((unsigned char)h->code[i - 1]) || h->code[i - 1] == '.')))
            continue;
        j = hk_word(h, i, w);
        if (hk_in(&h->inputs, w) && hk_input_use(h, j, &after) != USE_META) {
            snprintf(name, HK_NAME, "%s", w);
            return i;
        }
        i = j;
    }
    return (size_t)-1;
}

/* The end of a condition starting at i: ':' (if/elif/while), the end of the
 * logical line (assert), or "else" (a conditional expression), at depth 0. */
static size_t hk_cond_end(const hk *h, size_t i, bool inline_if, bool is_assert)
{
    for (; i < h->n; i++) {
        char c = h->code[i];
        if (c == '(' || c == '[' || c == '{') {
            i = hk_match(h, i) - 1;
            continue;
        }
        if (c == '\n' && !(i && h->code[i - 1] == '\\'))
            return i;
        if (!inline_if && !is_assert && c == ':')
            return i;
        if (is_assert && c == ',')
            return i;
        if (inline_if && strncmp(h->code + i, "else", 4) == 0 && !hk_id((unsigned char)h->code[i + 4]) &&
            !hk_id((unsigned char)h->code[i - 1]))
            return i;
    }
    return h->n;
}

static bool hk_is_op(char c)
{
    return c && strchr("+-*/%@<>&|^~", c) != NULL;
}

/* Whether the word at i follows "import" or "from" on its line. */
static bool hk_after_import(const hk *h, size_t i)
{
    size_t ls = i;
    while (ls > 0 && h->code[ls - 1] != '\n')
        ls--;
    ls = hk_skip_sp(h, ls);
    return strncmp(h->code + ls, "import ", 7) == 0 || strncmp(h->code + ls, "from ", 5) == 0;
}

/* One kernel function's body. */
static bool hk_scan(hk *h, const hk_def *d)
{
    static const char *const dyn_call[] = { "open", "exec", "eval", "compile", "globals", "vars", "__import__",
                                            "breakpoint", "input", NULL };
    static const char *const dyn_any[] = { "importlib", "pickle", "marshal", "ctypes", "subprocess", "os", NULL };
    static const char *const builtins[] = { "sum", "float", "int", "abs", "max", "min", "list", "bool", "bytes",
                                            "round", "any", "all", "sorted", "complex", "divmod", "pow", NULL };
    static const char *const mutators[] = { "append", "extend", "update", "setdefault", "add", "pop", "clear",
                                            "insert", "remove", "__setitem__", NULL };
    char name[HK_NAME];

    for (size_t i = d->body; i < d->end; i++) {
        char w[HK_NAME], attr[HK_NAME];
        size_t j, after, k;
        char prev, next;

        if (!hk_id((unsigned char)h->code[i]) || hk_id((unsigned char)h->code[i - 1]))
            continue;
        if (h->code[i - 1] == '.' || isdigit((unsigned char)h->code[i])) {
            while (i < d->end && hk_id((unsigned char)h->code[i]))
                i++;
            continue;
        }
        j = hk_word(h, i, w);
        k = hk_skip_sp(h, j);
        next = '\0';
        if (k < h->n)
            next = h->code[k];
        if (strcmp(w, "global") == 0 || strcmp(w, "nonlocal") == 0)
            return hk_found(h, "state_between_calls", i, "'%s' in a kernel function keeps state between calls", w);
        if ((hk_one_of(w, dyn_call) && next == '(') || hk_one_of(w, dyn_any) ||
            (strcmp(w, "sys") == 0 && strncmp(h->code + j, ".modules", 8) == 0))
            return hk_found(h, "dynamic_code", i, "'%s' in a kernel function: a kernel reads no files and loads no code",
                            w);
        if ((h->ref_entry[0] && strcmp(w, h->ref_entry) == 0) ||
            (h->ref_module[0] && strcmp(w, h->ref_module) == 0 && (next == '.' || hk_after_import(h, i))))
            return hk_found(h, "reads_reference", i, "the kernel uses the reference ('%s')", w);
        if (hk_in(&h->np, w) || hk_in(&h->npfn, w)) {
            size_t c = j;
            while (c < h->n && h->code[c] == '.')
                c = hk_word(h, c + 1, attr);
            c = hk_skip_sp(h, c);
            if (c < h->n && h->code[c] == '(') {
                size_t e = hk_match(h, c);
                if (hk_value_in(h, c, e, name) != (size_t)-1)
                    return hk_found(h, "numpy_on_inputs", i,
                                    "a NumPy call on the input '%s': the kernel must compute through NKI", name);
            }
            i = j - 1;
            continue;
        }
        if (hk_in(&h->inputs, w)) {
            hk_use u = hk_input_use(h, j, &after);
            size_t p = i;
            while (p > d->body && (h->code[p - 1] == ' ' || h->code[p - 1] == '\t'))
                p--;
            prev = '\0';
            if (p > 0)
                prev = h->code[p - 1];
            if (u == USE_VALUE_METHOD)
                return hk_found(h, "python_on_inputs", i, "a Python/NumPy method on the input '%s''s values", w);
            if (u == USE_VALUE) {
                size_t a = hk_skip_sp(h, after);
                char nx = '\0';
                if (a < h->n)
                    nx = h->code[a];
                bool cmp = nx == '=' && a + 1 < h->n && h->code[a + 1] == '=';
                bool ncmp = nx == '!' && a + 1 < h->n && h->code[a + 1] == '=';
                bool pcmp = prev == '=' && p >= 2 && strchr("=!<>", h->code[p - 2]);
                char fn[HK_NAME] = "";
                if (prev == '(' && p >= 2) {
                    size_t q = p - 1;
                    while (q > 0 && hk_id((unsigned char)h->code[q - 1]))
                        q--;
                    if (q == 0 || h->code[q - 1] != '.')
                        hk_word(h, q, fn);
                }
                if ((hk_is_op(nx) && !(a + 1 < h->n && h->code[a + 1] == '=' && nx != '<' && nx != '>')) || cmp ||
                    ncmp || hk_is_op(prev) || pcmp || (fn[0] && hk_one_of(fn, builtins)))
                    return hk_found(h, "python_on_inputs", i,
                                    "Python arithmetic on the input '%s''s values: the kernel must compute through NKI",
                                    w);
            }
            i = after - 1;
            continue;
        }
        if (hk_in(&h->mod, w)) {
            size_t c = j;
            bool sub = false;
            while (c < h->n && h->code[c] == '[') {
                c = hk_match(h, c);
                sub = true;
            }
            c = hk_skip_sp(h, c);
            if (sub && c + 1 < h->n && h->code[c] == '=' && h->code[c + 1] != '=')
                return hk_found(h, "state_between_calls", i, "the kernel writes the module-level '%s'", w);
            if (c < h->n && h->code[c] == '.') {
                hk_word(h, c + 1, attr);
                if (hk_one_of(attr, mutators))
                    return hk_found(h, "state_between_calls", i, "the kernel mutates the module-level '%s'", w);
            }
        }
        for (int f = 0; f < h->n_defs; f++) {
            if (strcmp(h->defs[f].name, w) == 0 && next == '.') {
                size_t c = hk_skip_sp(h, hk_word(h, k + 1, attr));
                if (c + 1 < h->n && h->code[c] == '=' && h->code[c + 1] != '=')
                    return hk_found(h, "state_between_calls", i, "the kernel sets an attribute of the function '%s'",
                                    w);
            }
        }
        if (strcmp(w, "if") == 0 || strcmp(w, "elif") == 0 || strcmp(w, "while") == 0 || strcmp(w, "assert") == 0) {
            size_t ls = i;
            while (ls > 0 && (h->code[ls - 1] == ' ' || h->code[ls - 1] == '\t'))
                ls--;
            bool stmt = ls == 0 || h->code[ls - 1] == '\n' || h->code[ls - 1] == ';' || h->code[ls - 1] == ':';
            size_t e = hk_cond_end(h, j, w[0] == 'i' && w[1] == 'f' && !stmt, w[0] == 'a');
            size_t at = hk_value_in(h, j, e, name);
            if (at != (size_t)-1)
                return hk_found(h, "branches_on_inputs", at,
                                "a condition on the input '%s''s values: the kernel must not special-case its inputs",
                                name);
        }
        i = j - 1;
    }
    return false;
}

/* Top-level defs, module variables, numpy aliases. */
static void hk_structure(hk *h)
{
    int depth = 0;
    bool nki_pending = false;
    hk_def *open_def = NULL;

    for (size_t ls = 0; ls < h->n;) {
        size_t le = ls;
        while (le < h->n && h->code[le] != '\n')
            le++;
        size_t first = hk_skip_sp(h, ls);
        bool blank = first >= le;
        if (!blank && depth == 0 && first == ls) {   /* a top-level line */
            char w[HK_NAME];
            if (open_def) {
                open_def->end = ls;
                open_def = NULL;
            }
            if (h->code[ls] == '@') {
                nki_pending = nki_pending || strstr(h->code + ls, "nki") < h->code + le;
            } else {
                size_t j = hk_word(h, ls, w);
                if (strcmp(w, "async") == 0)
                    j = hk_word(h, hk_skip_sp(h, j), w);
                if (strcmp(w, "def") == 0 && h->n_defs < HK_MAX_DEFS) {
                    hk_def *d = &h->defs[h->n_defs++];
                    size_t p;
                    memset(d, 0, sizeof(*d));
                    d->sig = ls;
                    p = hk_word(h, hk_skip_sp(h, j), d->name);
                    p = hk_skip_sp(h, p);
                    if (p < h->n && h->code[p] == '(')
                        p = hk_match(h, p);
                    while (p < h->n && h->code[p] != ':')
                        p++;
                    d->body = p < h->n ? p + 1 : h->n;
                    d->end = h->n;
                    d->nki = nki_pending;
                    open_def = d;
                } else if (w[0] && strcmp(w, "KFORGE") != 0) {
                    size_t a = hk_skip_sp(h, j);
                    if (a < h->n && (h->code[a] == ':' || (h->code[a] == '=' && h->code[a + 1] != '=')))
                        hk_add(&h->mod, w);
                }
                nki_pending = false;
            }
        }
        /* imports anywhere */
        if (!blank) {
            char w[HK_NAME], m[HK_NAME], a[HK_NAME];
            size_t j = hk_word(h, first, w);
            if (strcmp(w, "import") == 0) {
                for (size_t c = hk_skip_sp(h, j); c < le;) {
                    size_t e = c;
                    while (e < le && (hk_id((unsigned char)h->code[e]) || h->code[e] == '.'))
                        e++;
                    snprintf(m, sizeof(m), "%.*s", (int)(e - c), h->code + c);
                    e = hk_skip_sp(h, e);
                    a[0] = '\0';
                    if (strncmp(h->code + e, "as", 2) == 0 && !hk_id((unsigned char)h->code[e + 2]))
                        e = hk_word(h, hk_skip_sp(h, e + 2), a);
                    if (strcmp(m, "numpy") == 0 || strncmp(m, "numpy.", 6) == 0)
                        hk_add(&h->np, a[0] ? a : "numpy");
                    e = hk_skip_sp(h, e);
                    if (e >= le || h->code[e] != ',')
                        break;
                    c = hk_skip_sp(h, e + 1);
                }
            } else if (strcmp(w, "from") == 0) {
                size_t c = hk_skip_sp(h, j), e = c;
                while (e < le && (hk_id((unsigned char)h->code[e]) || h->code[e] == '.'))
                    e++;
                snprintf(m, sizeof(m), "%.*s", (int)(e - c), h->code + c);
                if (strcmp(m, "numpy") == 0 || strncmp(m, "numpy.", 6) == 0) {
                    for (c = e; c < le; c++) {
                        if (!hk_id((unsigned char)h->code[c]) || hk_id((unsigned char)h->code[c - 1]))
                            continue;
                        c = hk_word(h, c, a) - 1;
                        if (strcmp(a, "import") != 0 && strcmp(a, "as") != 0)
                            hk_add(&h->npfn, a);
                    }
                }
            }
        }
        for (size_t c = ls; c < le; c++) {
            char ch = h->code[c];
            depth += (ch == '(' || ch == '[' || ch == '{') - (ch == ')' || ch == ']' || ch == '}');
            if (depth < 0)
                depth = 0;
        }
        ls = le + 1;
    }
}

/* The entry's parameters without a default: the inputs. */
static void hk_inputs(hk *h, const hk_def *d)
{
    char nm[HK_NAME];
    size_t p = hk_skip_sp(h, hk_word(h, hk_skip_sp(h, d->sig + 3), nm));
    size_t e;

    if (p >= h->n || h->code[p] != '(')
        return;
    e = hk_match(h, p) - 1;
    for (size_t c = p + 1; c < e;) {
        char w[HK_NAME];
        size_t s = c;
        int depth = 0;
        while (c < e && (depth > 0 || h->code[c] != ',')) {
            char ch = h->code[c];
            depth += (ch == '(' || ch == '[' || ch == '{') - (ch == ')' || ch == ']' || ch == '}');
            c++;
        }
        s = hk_skip_sp(h, s);
        while (s < c && isspace((unsigned char)h->code[s]))
            s++;
        if (s < c && h->code[s] != '*' && memchr(h->code + s, '=', c - s) == NULL) {
            hk_word(h, s, w);
            if (strcmp(w, "self") != 0)
                hk_add(&h->inputs, w);
        }
        c++;
    }
}

bool ka_hack_check(const char *source, const char *entry, const char *ref_entry, const char *ref_module,
                   char rule[32], int *line, char *why, size_t why_n)
{
    hk *h = kf_calloc(1, sizeof(*h));
    bool found = false, grew = true;

    rule[0] = '\0';
    *line = 0;
    if (why_n)
        why[0] = '\0';
    h->n = strlen(source);
    h->code = kf_malloc(h->n + 4);
    memcpy(h->code, source, h->n + 1);
    h->code[h->n + 1] = h->code[h->n + 2] = h->code[h->n + 3] = '\0';
    hk_blank(h->code);
    h->ref_entry = ref_entry ? ref_entry : "";
    h->ref_module = ref_module ? ref_module : "";
    h->rule = rule, h->line = line, h->why = why, h->why_n = why_n;
    hk_structure(h);
    for (int i = 0; i < h->n_defs; i++) {
        hk_def *d = &h->defs[i];
        d->kernel = (d->nki || strcmp(d->name, entry) == 0) && strcmp(d->name, h->ref_entry) != 0;
        if (strcmp(d->name, entry) == 0)
            hk_inputs(h, d);
    }
    /* the functions the kernels call, transitively */
    while (grew) {
        grew = false;
        for (int i = 0; i < h->n_defs; i++) {
            if (!h->defs[i].kernel)
                continue;
            for (int f = 0; f < h->n_defs; f++) {
                hk_def *g = &h->defs[f];
                if (g->kernel || strcmp(g->name, h->ref_entry) == 0)
                    continue;
                for (const char *p = h->code + h->defs[i].body; p < h->code + h->defs[i].end;
                     p = strstr(p, g->name) ? strstr(p, g->name) + 1 : h->code + h->n) {
                    const char *at = strstr(p, g->name);
                    size_t L = strlen(g->name);
                    if (!at || at >= h->code + h->defs[i].end)
                        break;
                    if ((at == h->code || !hk_id((unsigned char)at[-1])) && !hk_id((unsigned char)at[L]) &&
                        at[-1] != '.') {
                        g->kernel = grew = true;
                        break;
                    }
                }
            }
        }
    }
    for (int i = 0; i < h->n_defs && !found; i++)
        if (h->defs[i].kernel)
            found = hk_scan(h, &h->defs[i]);
    free(h->code);
    free(h);
    return !found;
}
