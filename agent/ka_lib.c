/* ka_lib — the kernel library and tuning problems (see ka_lib.h). */
#include "ka_lib.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_job.h"
#include "kf_buf.h"
#include "kf_config.h"
#include "kf_libmeta.h"
#include "ka_expr.h"
#include "sim_profile.h"
#include "sim_input.h"
#include "sim_target.h"

/* The library folder and its KFORGE blocks are read by common/kf_libmeta
 * (kforge-api lists the library's ops without the simulator); these are
 * the agent's names for them. */
static char *ka_read_file(const char *path, kf_err *err)
{
    return kf_libmeta_read_file(path, err);
}

const char *ka_lib_dir(void)
{
    return kf_libmeta_dir();
}

kf_code ka_lib_meta_from_text(const char *text, const char *what, cJSON **meta, kf_err *err)
{
    return kf_libmeta_from_text(text, what, meta, err);
}

kf_code ka_lib_read_meta(const char *path, cJSON **meta, kf_err *err)
{
    return kf_libmeta_read(path, meta, err);
}

kf_code ka_lib_index(const char *dir, cJSON **index, kf_err *err)
{
    return kf_libmeta_index(dir, index, err);
}

kf_code ka_lib_find(const char *dir, const char *op, cJSON **meta, char *path, size_t path_len, kf_err *err)
{
    cJSON *index = NULL, *m;
    kf_buf ops;
    kf_code rc = ka_lib_index(dir, &index, err);

    *meta = NULL;
    if (rc)
        return rc;
    cJSON_ArrayForEach(m, index)
    {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(m, "op");
        if (cJSON_IsString(o) && strcmp(o->valuestring, op) == 0) {
            snprintf(path, path_len, "%s", cJSON_GetObjectItemCaseSensitive(m, "path")->valuestring);
            *meta = cJSON_DetachItemViaPointer(index, m);
            cJSON_Delete(index);
            return KF_OK;
        }
    }
    kf_buf_init(&ops);
    cJSON_ArrayForEach(m, index)
    {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(m, "op");
        if (cJSON_IsString(o))
            kf_buf_addf(&ops, "%s%s", ops.len ? ", " : "", o->valuestring);
    }
    rc = kf_err_set(err, KF_NOT_FOUND, "unknown op \"%s\": the library has %s", op, ops.len ? ops.data : "no ops");
    kf_buf_release(&ops);
    cJSON_Delete(index);
    return rc;
}

/* ---- spaces ------------------------------------------------------------- */

void ka_space_env_set(ka_space *sp, const char *name, double v)
{
    for (int i = 0; i < sp->n_env; i++) {
        if (strcmp(sp->env[i].name, name) == 0) {
            sp->env[i].value = v;
            return;
        }
    }
    if (sp->n_env < KA_MAX_ENV) {
        snprintf(sp->env[sp->n_env].name, sizeof(sp->env[0].name), "%s", name);
        sp->env[sp->n_env++].value = v;
    }
}

kf_code ka_space_set_target(ka_space *sp, const char *target, sim_dtype dtype, kf_err *err)
{
    sim_target tgt;
    kf_code rc = sim_target_load(target, NULL, &tgt, err);
    if (rc)
        return rc;
    ka_space_env_set(sp, "SBUF_BYTES", tgt.sbuf_bytes_per_part);
    ka_space_env_set(sp, "PMAX", tgt.sbuf_partitions);
    ka_space_env_set(sp, "DTYPE_BYTES", sim_dtype_size(dtype));
    return KF_OK;
}

typedef struct ka_lookup_ctx {
    const ka_space *sp;
    const int      *idx;    /* NULL: tunables unknown */
} ka_lookup_ctx;

static bool ka_lookup(void *vctx, const char *name, int len, ka_value *out)
{
    ka_lookup_ctx *c = vctx;
    const ka_space *sp = c->sp;
    if (c->idx) {
        for (int i = 0; i < sp->n; i++) {
            if ((int)strlen(sp->t[i].name) == len && strncmp(sp->t[i].name, name, (size_t)len) == 0) {
                const cJSON *v = cJSON_GetArrayItem(sp->t[i].values, c->idx[i]);
                memset(out, 0, sizeof(*out));
                if (cJSON_IsString(v)) {
                    out->is_str = true;
                    out->str = v->valuestring;
                    out->str_len = (int)strlen(v->valuestring);
                } else if (cJSON_IsBool(v)) {
                    out->num = cJSON_IsTrue(v) ? 1 : 0;
                } else {
                    out->num = v ? v->valuedouble : 0;
                }
                return true;
            }
        }
    }
    for (int i = 0; i < sp->n_env; i++) {
        if ((int)strlen(sp->env[i].name) == len && strncmp(sp->env[i].name, name, (size_t)len) == 0) {
            memset(out, 0, sizeof(*out));
            out->num = sp->env[i].value;
            return true;
        }
    }
    return false;
}

kf_code ka_space_legal(const ka_space *sp, const int *idx, bool *ok, const char **why, kf_err *err)
{
    ka_lookup_ctx c = { sp, idx };
    const cJSON *e;

    *ok = true;
    if (why)
        *why = NULL;
    cJSON_ArrayForEach(e, sp->constraints)
    {
        bool r = false;
        kf_code rc;
        if (!cJSON_IsString(e))
            continue;
        rc = ka_expr_test(e->valuestring, ka_lookup, &c, &r, err);
        if (rc)
            return rc;
        if (!r) {
            *ok = false;
            if (why)
                *why = e->valuestring;
            return KF_OK;
        }
    }
    return KF_OK;
}

cJSON *ka_space_params(const ka_space *sp, const int *idx)
{
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < sp->n; i++)
        cJSON_AddItemToObject(o, sp->t[i].name, cJSON_Duplicate(cJSON_GetArrayItem(sp->t[i].values, idx[i]), true));
    return o;
}

char *ka_space_kwargs(const ka_space *sp, const int *idx, const cJSON *fixed)
{
    cJSON *o = ka_space_params(sp, idx);
    const cJSON *f;
    char *s;
    cJSON_ArrayForEach(f, fixed)
    {
        if (!cJSON_GetObjectItemCaseSensitive(o, f->string))
            cJSON_AddItemToObject(o, f->string, cJSON_Duplicate(f, true));
    }
    s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* A tunable reaches the kernel as a keyword argument: a Python identifier
 * (ASCII only) that fits ka_tunable.name whole. */
static bool ka_tunable_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;

    if (n == 0 || n >= sizeof(((ka_tunable *)0)->name) || (name[0] >= '0' && name[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    return true;
}

/* The keyword default of `name` in `def entry(...)` of src as JSON (a
 * number, 'text' or "text", True/False/None), or NULL when the signature
 * gives none that JSON can hold.  `NAME: type = V` counts too.  Caller
 * deletes. */
static cJSON *ka_sig_default(const char *src, const char *entry, const char *name)
{
    char pat[160], val[128];
    const char *p, *v = NULL, *end;
    size_t nlen = strlen(name), vlen;
    int depth = 1;
    char quote = 0;

    snprintf(pat, sizeof(pat), "def %s(", entry);
    p = strstr(src, pat);
    while (p && p != src && p[-1] != '\n' && p[-1] != ' ')
        p = strstr(p + 1, pat);
    if (!p)
        return NULL;
    for (p += strlen(pat); *p && depth > 0 && !v; p++) {
        if (quote) {
            if (*p == quote)
                quote = 0;
            continue;
        }
        if (*p == '"' || *p == '\'') {
            quote = *p;
        } else if (*p == '(' || *p == '[' || *p == '{') {
            depth++;
        } else if (*p == ')' || *p == ']' || *p == '}') {
            depth--;
        } else if (depth == 1 && strncmp(p, name, nlen) == 0 && strchr("(, \t\n*", p[-1])) {
            const char *q = p + nlen;
            q += strspn(q, " \t");
            if (*q == ':')
                q += strcspn(q, "=,)");
            if (*q == '=' && q[1] != '=')
                v = q + 1;
        }
    }
    if (!v)
        return NULL;
    v += strspn(v, " \t");
    for (end = v, depth = 0, quote = 0; *end; end++) {
        if (quote) {
            if (*end == quote)
                quote = 0;
            continue;
        }
        if (*end == '"' || *end == '\'')
            quote = *end;
        else if (*end == '(' || *end == '[')
            depth++;
        else if (((*end == ')' || *end == ']') && depth-- == 0) || (*end == ',' && depth == 0))
            break;
    }
    vlen = (size_t)(end - v);
    while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t' || v[vlen - 1] == '\n'))
        vlen--;
    if (vlen == 0 || vlen >= sizeof(val))
        return NULL;
    memcpy(val, v, vlen);
    val[vlen] = '\0';
    if (vlen >= 2 && (val[0] == '\'' || val[0] == '"') && val[vlen - 1] == val[0]) {
        val[vlen - 1] = '\0';
        return strchr(val + 1, '\\') ? NULL : cJSON_CreateString(val + 1);
    }
    if (strcmp(val, "True") == 0 || strcmp(val, "False") == 0)
        return cJSON_CreateBool(val[0] == 'T');
    if (strcmp(val, "None") == 0)
        return cJSON_CreateNull();
    return cJSON_Parse(val);
}

static kf_code ka_tunable_from(ka_tunable *t, const char *name, const cJSON *values, const cJSON *decl,
                               const cJSON *sig_def, kf_err *err)
{
    const cJSON *def = decl ? cJSON_GetObjectItemCaseSensitive(decl, "default") : NULL;
    const cJSON *addr = decl ? cJSON_GetObjectItemCaseSensitive(decl, "addresses") : NULL;
    int n = cJSON_GetArraySize(values);

    memset(t, 0, sizeof(*t));
    if (!ka_tunable_name_ok(name)) {
        char shown[sizeof(t->name)];
        size_t k = 0;
        /* The name as far as it is printable ASCII, the rest as '?'. */
        for (; name && name[k] && k + 1 < sizeof(shown); k++) {
            char c = name[k];
            if (c <= 0x20 || c >= 0x7f)
                c = '?';
            shown[k] = c;
        }
        shown[k] = '\0';
        return kf_err_set(err, KF_INVALID, "tunable '%s%s' is not a keyword argument name: use 1 to %zu ASCII "
                          "letters, digits and underscores, not starting with a digit", shown,
                          name && strlen(name) >= sizeof(shown) ? "..." : "", sizeof(t->name) - 1);
    }
    if (!cJSON_IsArray(values) || n < 1)
        return kf_err_set(err, KF_INVALID, "tunable %s needs a non-empty list of values", name);
    if (addr && !cJSON_IsObject(addr))
        return kf_err_set(err, KF_INVALID, "tunable %s: \"addresses\" must be an object of finding kind -> "
                          "\"up\", \"down\" or \"any\"", name);
    if (addr) {
        const cJSON *a;
        cJSON_ArrayForEach(a, addr)
        {
            bool known = false;
            for (int k = 0; k < SIM_FIND__COUNT; k++)
                known = known || strcmp(a->string, sim_finding_name((sim_finding_kind)k)) == 0;
            if (!known)
                return kf_err_set(err, KF_INVALID, "tunable %s addresses '%s', which is not a finding kind of the "
                                  "profiler (docs/profile.md lists them)", name, a->string);
            if (!cJSON_IsString(a) || (strcmp(a->valuestring, "up") != 0 && strcmp(a->valuestring, "down") != 0 &&
                                       strcmp(a->valuestring, "any") != 0))
                return kf_err_set(err, KF_INVALID, "tunable %s: the direction for '%s' must be \"up\", \"down\" "
                                  "or \"any\"", name, a->string);
        }
    }
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->values = cJSON_Duplicate(values, true);
    t->n_values = n;
    t->def = 0;
    if (!def)
        def = sig_def;   /* no declared default: the kernel's own signature's */
    if (def) {
        for (int i = 0; i < n; i++) {
            if (cJSON_Compare(cJSON_GetArrayItem(values, i), def, true)) {
                t->def = i;
                break;
            }
        }
    }
    t->addresses = cJSON_IsObject(addr) ? cJSON_Duplicate(addr, true) : NULL;
    return KF_OK;
}

kf_code ka_space_from_tunables(const cJSON *tunables, const cJSON *meta, const ka_problem *pb, ka_space *sp,
                               kf_err *err)
{
    const cJSON *decls = meta ? cJSON_GetObjectItemCaseSensitive(meta, "tunables") : NULL;
    const cJSON *t;
    char *src = NULL;
    kf_code rc;

    memset(sp, 0, sizeof(*sp));
    /* the source's signature gives the defaults its tunables do not declare */
    if (pb->source_path[0] && pb->entry[0])
        src = ka_read_file(pb->source_path, NULL);
    cJSON_ArrayForEach(t, tunables)
    {
        const cJSON *decl = decls ? cJSON_GetObjectItemCaseSensitive(decls, t->string) : NULL;
        cJSON *sig_def;
        if (sp->n >= KA_MAX_TUNABLES) {
            rc = kf_err_set(err, KF_INVALID, "at most %d tunables", KA_MAX_TUNABLES);
            goto fail;
        }
        sig_def = src && t->string ? ka_sig_default(src, pb->entry, t->string) : NULL;
        rc = ka_tunable_from(&sp->t[sp->n], t->string, t, decl, sig_def, err);
        cJSON_Delete(sig_def);
        if (rc)
            goto fail;
        sp->n++;
    }
    if (meta) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(meta, "constraints");
        if (cJSON_IsArray(c))
            sp->constraints = cJSON_Duplicate(c, true);
    }
    if (meta) {
        /* the block's dim names, bound to the given inputs by position */
        const cJSON *in;
        int i = 0;
        cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(meta, "inputs"))
        {
            const cJSON *dims = cJSON_GetObjectItemCaseSensitive(in, "dims");
            if (i >= pb->n_inputs)
                break;
            for (int d = 0; d < pb->inputs[i].ndim && d < cJSON_GetArraySize(dims); d++) {
                const cJSON *dn = cJSON_GetArrayItem(dims, d);
                if (cJSON_IsString(dn))
                    ka_space_env_set(sp, dn->valuestring, (double)pb->inputs[i].shape[d]);
            }
            i++;
        }
    }
    if (pb->n_inputs > 0) {
        for (int d = 0; d < pb->inputs[0].ndim; d++) {
            char nm[16];
            snprintf(nm, sizeof(nm), "D%d", d);
            ka_space_env_set(sp, nm, (double)pb->inputs[0].shape[d]);
        }
        rc = ka_space_set_target(sp, pb->target, pb->inputs[0].dtype, err);
        if (rc)
            goto fail;
    }
    free(src);
    return KF_OK;
fail:
    free(src);
    ka_space_release(sp);
    return rc;
}

void ka_space_release(ka_space *sp)
{
    if (!sp)
        return;
    for (int i = 0; i < sp->n; i++) {
        cJSON_Delete(sp->t[i].values);
        cJSON_Delete(sp->t[i].addresses);
    }
    cJSON_Delete(sp->constraints);
    memset(sp, 0, sizeof(*sp));
}

void ka_problem_release(ka_problem *pb)
{
    if (!pb)
        return;
    cJSON_Delete(pb->fixed_kwargs);
    pb->fixed_kwargs = NULL;
}

/* ---- binding a template to shapes --------------------------------------- */

static void ka_fmt_shape(char *buf, size_t len, const int64_t *s, int nd)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < nd && o + 24 < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? "x" : "", (long long)s[i]);
}

/* A template's inputs before anything reads them: each an object with a
 * "name" (a non-empty string that fits ka_input.name) and "dims" (1 to
 * KA_MAX_DIMS dim names or numbers).  Messages from binding name the
 * inputs, so a nameless one is refused here with the file and position. */
static kf_code ka_check_inputs(const cJSON *inputs, const char *path, kf_err *err)
{
    const cJSON *in;
    int i = 0;
    cJSON_ArrayForEach(in, inputs)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(in, "name");
        const cJSON *dims = cJSON_GetObjectItemCaseSensitive(in, "dims");
        const cJSON *d;
        int nd = cJSON_GetArraySize(dims);
        if (!cJSON_IsObject(in) || !cJSON_IsString(name) || !name->valuestring[0] ||
            strlen(name->valuestring) >= sizeof(((ka_input *)0)->name))
            return kf_err_set(err, KF_INVALID, "%s: KFORGE input %d needs a \"name\" (a string of 1 to %zu "
                              "characters)", path, i + 1, sizeof(((ka_input *)0)->name) - 1);
        if (!cJSON_IsArray(dims) || nd < 1 || nd > KA_MAX_DIMS)
            return kf_err_set(err, KF_INVALID, "%s: KFORGE input %s needs \"dims\", a list of 1 to %d dim names "
                              "or numbers", path, name->valuestring, KA_MAX_DIMS);
        cJSON_ArrayForEach(d, dims)
        {
            if (!(cJSON_IsString(d) && d->valuestring[0]) && !cJSON_IsNumber(d))
                return kf_err_set(err, KF_INVALID, "%s: KFORGE input %s: every dim is a name or a number", path,
                                  name->valuestring);
        }
        i++;
    }
    return KF_OK;
}

kf_code ka_lib_bind(const cJSON *meta, const char *path, const int64_t (*shapes)[KA_MAX_DIMS], const int *ndims,
                    int n_shapes, sim_dtype dtype, const char *target, ka_problem *pb, ka_space *sp, kf_err *err)
{
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(meta, "op");
    const cJSON *entry = cJSON_GetObjectItemCaseSensitive(meta, "entry");
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(meta, "reference");
    const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(meta, "inputs");
    const cJSON *tun = cJSON_GetObjectItemCaseSensitive(meta, "tunables");
    const cJSON *sup = cJSON_GetObjectItemCaseSensitive(meta, "supports");
    const cJSON *in, *t, *c;
    int n_in = cJSON_GetArraySize(inputs), i = 0;
    char *src;
    kf_code rc;

    memset(pb, 0, sizeof(*pb));
    memset(sp, 0, sizeof(*sp));
    if (!cJSON_IsString(op) || !cJSON_IsString(entry) || !cJSON_IsArray(inputs) || n_in < 1 ||
        n_in > KA_MAX_INPUTS)
        return kf_err_set(err, KF_INVALID, "%s: KFORGE needs op, entry and 1..%d inputs", path, KA_MAX_INPUTS);
    rc = ka_check_inputs(inputs, path, err);
    if (rc)
        return rc;
    if (n_shapes < 1 || n_shapes > n_in)
        return kf_err_set(err, KF_INVALID, "%s takes %d input%s; give 1 to %d shapes (got %d)", op->valuestring,
                          n_in, n_in == 1 ? "" : "s", n_in, n_shapes);
    snprintf(pb->op, sizeof(pb->op), "%s", op->valuestring);
    snprintf(pb->source_path, sizeof(pb->source_path), "%s", path);
    snprintf(pb->entry, sizeof(pb->entry), "%s", entry->valuestring);
    if (cJSON_IsString(ref)) {
        snprintf(pb->ref_path, sizeof(pb->ref_path), "%s", path);
        snprintf(pb->ref_entry, sizeof(pb->ref_entry), "%s", ref->valuestring);
    }
    snprintf(pb->target, sizeof(pb->target), "%s", target);

    /* dims from the given shapes */
    cJSON_ArrayForEach(in, inputs)
    {
        const cJSON *dims = cJSON_GetObjectItemCaseSensitive(in, "dims");
        int nd = cJSON_GetArraySize(dims);
        if (i >= n_shapes)
            break;
        if (nd != ndims[i]) {
            char want[256] = "", got[128];
            const cJSON *d;
            cJSON_ArrayForEach(d, dims)
            {
                size_t o = strlen(want);
                snprintf(want + o, sizeof(want) - o, "%s%s", o ? "x" : "", cJSON_IsString(d) ? d->valuestring : "?");
            }
            ka_fmt_shape(got, sizeof(got), shapes[i], ndims[i]);
            return kf_err_set(err, KF_INVALID, "%s input %s has shape %s; got %s", op->valuestring,
                              cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(in, "name")), want, got);
        }
        for (int d = 0; d < nd; d++) {
            const cJSON *dn = cJSON_GetArrayItem(dims, d);
            ka_value prev;
            ka_lookup_ctx lc = { sp, NULL };
            if (!cJSON_IsString(dn))
                continue;
            if (ka_lookup(&lc, dn->valuestring, (int)strlen(dn->valuestring), &prev) &&
                prev.num != (double)shapes[i][d])
                return kf_err_set(err, KF_INVALID, "%s: dim %s is %.0f in one input and %lld in %s", op->valuestring,
                                  dn->valuestring, prev.num, (long long)shapes[i][d],
                                  cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(in, "name")));
            ka_space_env_set(sp, dn->valuestring, (double)shapes[i][d]);
        }
        i++;
    }
    /* every input's shape, from the dims */
    i = 0;
    cJSON_ArrayForEach(in, inputs)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(in, "name");
        const cJSON *dims = cJSON_GetObjectItemCaseSensitive(in, "dims");
        const cJSON *std = cJSON_GetObjectItemCaseSensitive(in, "std");
        ka_input *pi = &pb->inputs[i];
        snprintf(pi->name, sizeof(pi->name), "%s", cJSON_IsString(name) ? name->valuestring : "x");
        pi->dtype = dtype;
        pi->std = cJSON_IsNumber(std) ? std->valuedouble : 1.0;
        if (cJSON_IsString(std)) {
            /* an expression over the dims, e.g. "1 / sqrt(H)" (fan-in scaled weights) */
            ka_value v;
            ka_lookup_ctx lc = { sp, NULL };
            rc = ka_expr_eval(std->valuestring, ka_lookup, &lc, &v, err);
            if (rc)
                return rc;
            pi->std = v.is_str || v.num <= 0 ? 1.0 : v.num;
        }
        pi->ndim = cJSON_GetArraySize(dims);
        if (pi->ndim < 1 || pi->ndim > KA_MAX_DIMS)
            return kf_err_set(err, KF_INVALID, "%s: input %s needs 1..%d dims", path, pi->name, KA_MAX_DIMS);
        for (int d = 0; d < pi->ndim; d++) {
            const cJSON *dn = cJSON_GetArrayItem(dims, d);
            ka_value v = { .is_str = false, .num = 0, .str = NULL, .str_len = 0 };
            ka_lookup_ctx lc = { sp, NULL };
            if (cJSON_IsNumber(dn) || (cJSON_IsString(dn) &&
                                        ka_lookup(&lc, dn->valuestring, (int)strlen(dn->valuestring), &v))) {
                /* A dimension is a whole number of elements, checked before
                 * the conversion (a template may write any number). */
                double x = cJSON_IsNumber(dn) ? dn->valuedouble : v.is_str ? 0 : v.num;
                if (!(x >= 1 && x <= (double)KF_JOB_MAX_DIM) || x != floor(x))
                    return kf_err_set(err, KF_INVALID, "%s: dim %d of input %s is %g; a dim is a whole number of 1 to "
                                      "%lld elements", path, d, pi->name, x, (long long)KF_JOB_MAX_DIM);
                pi->shape[d] = (int64_t)x;
            } else {
                return kf_err_set(err, KF_INVALID,
                                  "%s: the shapes given do not determine dim %s of input %s; give one shape per "
                                  "input (%d inputs)", op->valuestring, cJSON_IsString(dn) ? dn->valuestring : "?",
                                  pi->name, n_in);
            }
        }
        i++;
    }
    pb->n_inputs = n_in;
    rc = ka_space_set_target(sp, target, dtype, err);
    if (rc)
        return rc;
    /* supported shapes */
    cJSON_ArrayForEach(c, sup)
    {
        bool ok = false;
        ka_lookup_ctx lc = { sp, NULL };
        if (!cJSON_IsString(c))
            continue;
        rc = ka_expr_test(c->valuestring, ka_lookup, &lc, &ok, err);
        if (rc)
            return rc;
        if (!ok)
            return kf_err_set(err, KF_UNPROCESSABLE, "the %s template cannot serve these shapes on %s: it needs %s",
                              op->valuestring, target, c->valuestring);
    }
    /* tunables with their declarations (the signature's default when a
     * declaration gives none) */
    src = ka_read_file(path, NULL);
    cJSON_ArrayForEach(t, tun)
    {
        const cJSON *vals = cJSON_GetObjectItemCaseSensitive(t, "values");
        cJSON *sig_def;
        if (sp->n >= KA_MAX_TUNABLES)
            break;
        sig_def = src && t->string ? ka_sig_default(src, pb->entry, t->string) : NULL;
        rc = ka_tunable_from(&sp->t[sp->n], t->string, vals, t, sig_def, err);
        cJSON_Delete(sig_def);
        if (rc) {
            free(src);
            ka_space_release(sp);
            return rc;
        }
        sp->n++;
    }
    free(src);
    c = cJSON_GetObjectItemCaseSensitive(meta, "constraints");
    if (cJSON_IsArray(c))
        sp->constraints = cJSON_Duplicate(c, true);
    /* the op's FLOPs, for its floor */
    c = cJSON_GetObjectItemCaseSensitive(meta, "flops");
    if (cJSON_IsNumber(c) || cJSON_IsString(c)) {
        ka_value v = { 0 };
        ka_lookup_ctx lc = { sp, NULL };
        if (cJSON_IsString(c)) {
            rc = ka_expr_eval(c->valuestring, ka_lookup, &lc, &v, err);
            if (rc) {
                ka_space_release(sp);
                return rc;
            }
        } else {
            v.num = c->valuedouble;
        }
        if (v.is_str || v.num < 0) {
            ka_space_release(sp);
            return kf_err_set(err, KF_INVALID, "%s: KFORGE \"flops\" must be a number >= 0 or an expression over "
                              "the dims giving one", path);
        }
        pb->op_flops = v.num;
        pb->op_flops_set = true;
    }
    return KF_OK;
}
