/* kf_batchspec — a batch request checked and expanded (see kf_batchspec.h). */
#include "kf_batchspec.h"

#include "kf_alloc.h"
#include "kf_buf.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The matrix's axes, in the order they vary (the last fastest). */
enum { AX_OP, AX_SHAPES, AX_DTYPE, AX_TARGET, AX__N };
static const char *const kf_batch_axis_names[AX__N + 1] = { "op", "shapes", "dtype", "target", NULL };

void kf_batchspec_release(kf_batchspec *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->n; i++) {
        kf_job_request_release(&b->entries[i].jr);
        free(b->entries[i].key);
        cJSON_Delete(b->entries[i].coords);
    }
    free(b->entries);
    free(b->name);
    cJSON_Delete(b->tmpl);
    cJSON_Delete(b->matrix);
    memset(b, 0, sizeof(*b));
}

bool kf_batchspec_shape_sig(const cJSON *shapes, char *out, size_t cap)
{
    kf_buf b = KF_BUF_INIT;
    const cJSON *sh, *d;
    bool ok = cJSON_IsArray(shapes);
    int i = 0;

    const cJSON *list = ok ? shapes : NULL;

    if (cap)
        out[0] = '\0';
    cJSON_ArrayForEach(sh, list)
    {
        int k = 0;
        if (!cJSON_IsArray(sh)) {
            ok = false;
            break;
        }
        if (i++)
            kf_buf_addc(&b, ',');
        if (cJSON_GetArraySize(sh) == 0)
            kf_buf_addc(&b, '1');
        cJSON_ArrayForEach(d, sh)
        {
            double v = cJSON_IsNumber(d) ? d->valuedouble : -1;
            if (v < 0 || v > 9.0e15 || floor(v) != v) {
                ok = false;
                break;
            }
            if (k++)
                kf_buf_addc(&b, 'x');
            kf_buf_addf(&b, "%lld", (long long)v);
        }
        if (!ok)
            break;
    }
    if (ok && cap)
        snprintf(out, cap, "%s", b.len ? b.data : "");
    kf_buf_release(&b);
    return ok;
}

/* ---- the parts every form has ------------------------------------------------- */

static void kf_batch_common(const cJSON *body, kf_batchspec *out, kf_fields *fe)
{
    const char *name = NULL;
    int64_t prio = KF_BATCH_DEFAULT_PRIORITY;

    if (kf_fields_str(fe, body, "", "name", false, 1, KF_BATCH_MAX_NAME, &name)) {
        if (!kf_utf8_valid(name, strlen(name), NULL))
            kf_fields_add(fe, "name", "encoding", "must be UTF-8 text");
        else
            out->name = kf_strdup(name);
    }
    if (cJSON_GetObjectItemCaseSensitive(body, "priority") &&
        !kf_fields_int(fe, body, "", "priority", false, 0, KF_BATCH_MAX_PRIORITY, &prio))
        kf_fields_add(fe, "priority", "batch",
                      "a batch runs at priority 0 to %d, below interactive jobs (default 5), so a re-tune never "
                      "starves a notebook", KF_BATCH_MAX_PRIORITY);
    out->priority = (int)prio;
}

/* An axis (or the library form's list) at obj[name]: an array of 1 to
 * KF_BATCH_MAX_AXIS values of the right JSON type, no two the same.
 * want: cJSON_String or cJSON_Array.  *vals NULL when absent and not required. */
static bool kf_batch_list(kf_fields *fe, const cJSON *obj, const char *parent, const char *name, bool required,
                          int want, const cJSON **vals)
{
    char path[96];
    const cJSON *arr = NULL, *v;
    int n, i = 0;
    char **txt;
    bool ok = true;

    *vals = NULL;
    if (!kf_fields_obj(fe, obj, parent, name, required, true, &arr))
        return !required && !cJSON_GetObjectItemCaseSensitive(obj, name);
    kf_field_path(path, sizeof(path), parent, name);
    n = cJSON_GetArraySize(arr);
    if (n < 1 || n > KF_BATCH_MAX_AXIS) {
        kf_fields_add(fe, path, "count", "must list 1 to %d values (got %d)", KF_BATCH_MAX_AXIS, n);
        return false;
    }
    txt = kf_calloc((size_t)n, sizeof(*txt));
    cJSON_ArrayForEach(v, arr)
    {
        if ((v->type & 0xff) != want) {
            char ep[112];
            kf_field_pathf(ep, sizeof(ep), "%s[%d]", path, i);
            kf_fields_add(fe, ep, "type", want == cJSON_String ? "must be a string" : "must be an array of shapes");
            ok = false;
            break;
        }
        txt[i] = cJSON_PrintUnformatted(v);
        for (int j = 0; j < i && ok; j++) {
            if (txt[j] && txt[i] && strcmp(txt[j], txt[i]) == 0) {
                char ep[112];
                kf_field_pathf(ep, sizeof(ep), "%s[%d]", path, i);
                kf_fields_add(fe, ep, "unique", "repeats %s[%d]; list each value once", path, j);
                ok = false;
            }
        }
        i++;
        if (!ok)
            break;
    }
    for (int j = 0; j < n; j++)
        free(txt[j]);
    free(txt);
    if (ok)
        *vals = arr;
    return ok;
}

/* ---- expansion ------------------------------------------------------------------ */

static const char *kf_batch_str(const cJSON *o, const char *name, const char *dflt)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, name));
    return s ? s : dflt;
}

/* The entry's match key and coordinates, from its validated job. */
static void kf_batch_key(kf_batch_entry *e, int seq)
{
    const cJSON *spec = e->jr.spec;
    char sig[512] = "";
    const char *op, *dtype;
    kf_buf k = KF_BUF_INIT;

    if (e->jr.kind == KF_KIND_GENERATE) {
        op = kf_batch_str(spec, "op", "?");
        dtype = kf_batch_str(spec, "dtype", "-");
        kf_batchspec_shape_sig(cJSON_GetObjectItemCaseSensitive(spec, "shapes"), sig, sizeof(sig));
    } else {
        /* A user's kernel: its entry point names it, its inputs shape it. */
        const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(spec, "inputs"), *in;
        const cJSON *list = cJSON_IsObject(inputs) ? inputs : NULL;
        kf_buf s = KF_BUF_INIT;
        op = kf_batch_str(spec, "entry", kf_job_kind_name(e->jr.kind));
        dtype = "-";
        cJSON_ArrayForEach(in, list)
        {
            cJSON *one = cJSON_CreateArray();
            char one_sig[128] = "";
            cJSON_AddItemToArray(one, cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(in, "shape"), 1));
            kf_batchspec_shape_sig(one, one_sig, sizeof(one_sig));
            cJSON_Delete(one);
            if (s.len)
                kf_buf_addc(&s, ',');
            kf_buf_addf(&s, "%s=%s", in->string ? in->string : "?", one_sig);
            if (strcmp(dtype, "-") == 0)
                dtype = kf_batch_str(in, "dtype", "-");
        }
        snprintf(sig, sizeof(sig), "%s", s.len ? s.data : "");
        kf_buf_release(&s);
    }
    kf_buf_addf(&k, "%s|%s|%s|%s", op, sig, dtype, e->jr.target);
    e->key = kf_buf_detach(&k);
    e->coords = cJSON_CreateObject();
    cJSON_AddNumberToObject(e->coords, "seq", seq);
    cJSON_AddStringToObject(e->coords, "key", e->key);
    cJSON_AddStringToObject(e->coords, "op", op);
    cJSON_AddStringToObject(e->coords, "shape", sig);
    cJSON_AddStringToObject(e->coords, "dtype", dtype);
    cJSON_AddStringToObject(e->coords, "target", e->jr.target);
}

/* Every combination of the axes present in ax (the last fastest) over the
 * template: n jobs, each checked as POST /v1/jobs checks one.  op_shapes
 * (library form): the shapes of each op, by the op axis's index. */
static bool kf_batch_expand(const cJSON *tmpl, const cJSON *ax[AX__N], const cJSON *op_shapes, long n,
                            const kf_batchspec_limits *lim, kf_batchspec *out, kf_fields *fe)
{
    int len[AX__N];
    bool in_spec = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(tmpl, "spec"));

    for (int a = 0; a < AX__N; a++)
        len[a] = ax[a] ? cJSON_GetArraySize(ax[a]) : 1;
    out->entries = kf_calloc((size_t)n, sizeof(*out->entries));
    for (long i = 0; i < n; i++) {
        cJSON *job = cJSON_Duplicate(tmpl, 1);
        cJSON *dst = in_spec ? cJSON_GetObjectItemCaseSensitive(job, "spec") : job;
        long rest = i;
        int idx[AX__N];
        kf_fields efe;
        bool ok;

        for (int a = AX__N - 1; a >= 0; a--) {
            idx[a] = (int)(rest % len[a]);
            rest /= len[a];
        }
        for (int a = 0; a < AX__N; a++) {
            if (!ax[a])
                continue;
            cJSON_AddItemToObject(a == AX_TARGET ? job : dst, kf_batch_axis_names[a],
                                  cJSON_Duplicate(cJSON_GetArrayItem(ax[a], idx[a]), 1));
        }
        if (op_shapes)
            cJSON_AddItemToObject(dst, "shapes", cJSON_Duplicate(cJSON_GetArrayItem(op_shapes, idx[AX_OP]), 1));
        cJSON_AddNumberToObject(job, "priority", out->priority);
        kf_fields_init(&efe);
        ok = kf_job_request_parse(job, lim->default_max_attempts, &out->entries[i].jr, &efe);
        cJSON_Delete(job);
        if (!ok) {
            for (int k = 0; k < efe.n; k++) {
                char p[96];
                kf_field_pathf(p, sizeof(p), "entries[%ld]%s%s", i, efe.e[k].field[0] ? "." : "", efe.e[k].field);
                kf_fields_add(fe, p, efe.e[k].rule, "%s", efe.e[k].detail);
            }
            return false;
        }
        out->n = (int)(i + 1);
        kf_batch_key(&out->entries[i], (int)i);
    }
    return true;
}

/* The product of the lengths, or -1 past max (checked before anything is built). */
static long kf_batch_count(const cJSON *ax[AX__N], long max)
{
    long n = 1;

    for (int a = 0; a < AX__N; a++) {
        long k = ax[a] ? cJSON_GetArraySize(ax[a]) : 1;
        if (k > 0 && n > max / k)
            return -1;
        n *= k;
    }
    return n;
}

static void kf_batch_limit(kf_fields *fe, const char *field, const cJSON *ax[AX__N], long max)
{
    char prod[128] = "";
    size_t o = 0;

    for (int a = 0; a < AX__N; a++)
        if (ax[a] && o < sizeof(prod))
            o += (size_t)snprintf(prod + o, sizeof(prod) - o, "%s%d %s", o ? " x " : "", cJSON_GetArraySize(ax[a]),
                                  kf_batch_axis_names[a]);
    kf_fields_add(fe, field, "limit",
                  "%s is more than the %ld jobs a batch may hold (KFORGE_MAX_BATCH_JOBS); split it into smaller "
                  "batches", prod, max);
}

/* ---- the matrix form ------------------------------------------------------------ */

static bool kf_batch_matrix(const cJSON *body, const kf_batchspec_limits *lim, kf_batchspec *out, kf_fields *fe)
{
    static const char *const allowed[] = { "name", "priority", "template", "matrix", NULL };
    const cJSON *tmpl = NULL, *matrix = NULL, *ax[AX__N] = { 0 }, *spec;
    const char *kind;
    bool any = false, gen_axis = false;
    long n;

    kf_fields_refuse_unknown(fe, body, "", allowed);
    kf_batch_common(body, out, fe);
    kf_fields_obj(fe, body, "", "template", true, false, &tmpl);
    if (kf_fields_obj(fe, body, "", "matrix", true, false, &matrix)) {
        kf_fields_refuse_unknown(fe, matrix, "matrix", kf_batch_axis_names);
        for (int a = 0; a < AX__N; a++) {
            kf_batch_list(fe, matrix, "matrix", kf_batch_axis_names[a], false,
                          a == AX_SHAPES ? cJSON_Array : cJSON_String, &ax[a]);
            any = any || ax[a];
            gen_axis = gen_axis || (ax[a] && a != AX_TARGET);
        }
        if (!any && fe->n == 0)
            kf_fields_add(fe, "matrix", "required", "list at least one axis: op, shapes, dtype or target");
    }
    if (!tmpl || fe->n)
        return false;
    spec = cJSON_GetObjectItemCaseSensitive(tmpl, "spec");
    if (cJSON_GetObjectItemCaseSensitive(tmpl, "priority"))
        kf_fields_add(fe, "template.priority", "batch", "a batch's jobs take the batch's priority; give it at the "
                                                        "top level (0 to %d)", KF_BATCH_MAX_PRIORITY);
    for (int a = 0; a < AX__N; a++) {
        char p[64];
        if (!ax[a])
            continue;
        if (cJSON_GetObjectItemCaseSensitive(tmpl, kf_batch_axis_names[a]) ||
            (cJSON_IsObject(spec) && cJSON_GetObjectItemCaseSensitive(spec, kf_batch_axis_names[a]))) {
            snprintf(p, sizeof(p), "template.%s", kf_batch_axis_names[a]);
            kf_fields_add(fe, p, "axis", "is an axis of the matrix; leave it out of the template");
        }
    }
    kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tmpl, "kind"));
    if (gen_axis && (!kind || (strcmp(kind, "generate") != 0 && strcmp(kind, "auto") != 0)))
        kf_fields_add(fe, "template.kind", "axis",
                      "the op, shapes and dtype axes are for generate templates; other kinds vary by target only");
    if (fe->n)
        return false;
    n = kf_batch_count(ax, lim->max_jobs);
    if (n < 0) {
        kf_batch_limit(fe, "matrix", ax, lim->max_jobs);
        return false;
    }
    out->tmpl = cJSON_Duplicate(tmpl, 1);
    out->matrix = cJSON_Duplicate(matrix, 1);
    return kf_batch_expand(tmpl, ax, NULL, n, lim, out, fe);
}

/* ---- the library form ----------------------------------------------------------- */

/* The template of the library's index with this op that declares its
 * shapes, or NULL. */
static const cJSON *kf_batch_lib_op(const cJSON *index, const char *op)
{
    const cJSON *m;

    cJSON_ArrayForEach(m, index)
    {
        const char *o = kf_batch_str(m, "op", NULL);
        if (o && strcmp(o, op) == 0 && cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(m, "reference_shapes")))
            return m;
    }
    return NULL;
}

static bool kf_batch_library(const cJSON *body, const kf_batchspec_limits *lim, kf_batchspec *out, kf_fields *fe)
{
    static const char *const allowed[] = { "name", "priority", "library", "targets", "dtypes", "backend",
                                           "budget", "goal", "labels", "max_attempts", NULL };
    static const char *const envelope[] = { "backend", "budget", "goal", "labels", "max_attempts", NULL };
    const cJSON *lib = cJSON_GetObjectItemCaseSensitive(body, "library"), *targets = NULL, *dtypes = NULL;
    const cJSON *ax[AX__N] = { 0 }, *m;
    cJSON *ops = NULL, *shapes = NULL, *dflt = NULL, *tmpl = NULL;
    long n;
    bool ok = false;

    kf_fields_refuse_unknown(fe, body, "", allowed);
    kf_batch_common(body, out, fe);
    kf_batch_list(fe, body, "", "targets", true, cJSON_String, &targets);
    kf_batch_list(fe, body, "", "dtypes", false, cJSON_String, &dtypes);
    if (!lim->library) {
        kf_fields_add(fe, "library", "unavailable",
                      "this server has no kernel library; its operator must set KFORGE_KERNELS_DIR");
        return false;
    }
    ops = cJSON_CreateArray();
    shapes = cJSON_CreateArray();
    if (cJSON_IsString(lib) && strcmp(lib->valuestring, "all") == 0) {
        cJSON_ArrayForEach(m, lim->library)
        {
            const char *o = kf_batch_str(m, "op", NULL);
            if (o && kf_batch_lib_op(lim->library, o) == m) {
                cJSON_AddItemToArray(ops, cJSON_CreateString(o));
                cJSON_AddItemToArray(shapes,
                                     cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(m, "reference_shapes"), 1));
            }
        }
        if (cJSON_GetArraySize(ops) == 0)
            kf_fields_add(fe, "library", "empty", "the kernel library holds no template with reference_shapes");
    } else if (cJSON_IsArray(lib)) {
        const cJSON *names = NULL, *v;
        int i = 0;
        if (kf_batch_list(fe, body, "", "library", true, cJSON_String, &names)) {
            cJSON_ArrayForEach(v, names)
            {
                const cJSON *meta = kf_batch_lib_op(lim->library, v->valuestring);
                if (!meta) {
                    char p[48];
                    snprintf(p, sizeof(p), "library[%d]", i);
                    kf_fields_add(fe, p, "enum",
                                  "the kernel library has no op \"%.64s\" with declared reference_shapes "
                                  "(the templates are in the server's kernels/ folder)", v->valuestring);
                } else {
                    cJSON_AddItemToArray(ops, cJSON_CreateString(v->valuestring));
                    cJSON_AddItemToArray(
                        shapes, cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(meta, "reference_shapes"), 1));
                }
                i++;
            }
        }
    } else {
        kf_fields_add(fe, "library", "enum", "must be \"all\" or a list of the library's op names");
    }
    if (fe->n)
        goto out;
    if (!dtypes) {
        dflt = cJSON_CreateArray();
        cJSON_AddItemToArray(dflt, cJSON_CreateString(KF_BATCH_DEFAULT_DTYPE));
        dtypes = dflt;
    }
    ax[AX_OP] = ops;
    ax[AX_DTYPE] = dtypes;
    ax[AX_TARGET] = targets;
    n = kf_batch_count(ax, lim->max_jobs);
    if (n < 0) {
        kf_batch_limit(fe, "targets", ax, lim->max_jobs);
        goto out;
    }
    tmpl = cJSON_CreateObject();
    cJSON_AddStringToObject(tmpl, "kind", "generate");
    for (int i = 0; envelope[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, envelope[i]);
        if (v)
            cJSON_AddItemToObject(tmpl, envelope[i], cJSON_Duplicate(v, 1));
    }
    out->matrix = cJSON_CreateObject();
    cJSON_AddItemToObject(out->matrix, "library", cJSON_Duplicate(lib, 1));
    cJSON_AddItemToObject(out->matrix, "op", cJSON_Duplicate(ops, 1));
    cJSON_AddItemToObject(out->matrix, "shapes", cJSON_Duplicate(shapes, 1));
    cJSON_AddItemToObject(out->matrix, "dtype", cJSON_Duplicate(dtypes, 1));
    cJSON_AddItemToObject(out->matrix, "target", cJSON_Duplicate(targets, 1));
    out->tmpl = cJSON_Duplicate(tmpl, 1);
    ok = kf_batch_expand(tmpl, ax, shapes, n, lim, out, fe);
out:
    cJSON_Delete(ops);
    cJSON_Delete(shapes);
    cJSON_Delete(dflt);
    cJSON_Delete(tmpl);
    return ok;
}

bool kf_batchspec_parse(const cJSON *body, const kf_batchspec_limits *lim, kf_batchspec *out, kf_fields *fe)
{
    bool ok;

    memset(out, 0, sizeof(*out));
    if (!cJSON_IsObject(body)) {
        kf_fields_add(fe, "", "type", "the body must be a JSON object");
        return false;
    }
    out->library = cJSON_GetObjectItemCaseSensitive(body, "library") != NULL;
    if (out->library && cJSON_GetObjectItemCaseSensitive(body, "matrix")) {
        kf_fields_add(fe, "matrix", "exclusive", "give either library (every library op) or template + matrix");
        return false;
    }
    ok = out->library ? kf_batch_library(body, lim, out, fe) : kf_batch_matrix(body, lim, out, fe);
    if (!ok || fe->n) {
        kf_batchspec_release(out);
        return false;
    }
    return true;
}

static int kf_batch_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char *kf_batchspec_keys(const kf_batchspec *b)
{
    char **keys = kf_calloc((size_t)(b->n ? b->n : 1), sizeof(*keys));
    kf_buf out = KF_BUF_INIT;

    for (int i = 0; i < b->n; i++)
        keys[i] = b->entries[i].key;
    qsort(keys, (size_t)b->n, sizeof(*keys), kf_batch_cmp);
    for (int i = 0; i < b->n; i++) {
        kf_buf_adds(&out, keys[i]);
        kf_buf_addc(&out, '\n');
    }
    free(keys);
    if (!out.len)
        kf_buf_adds(&out, "");
    return kf_buf_detach(&out);
}
