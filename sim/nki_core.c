/* nki_core — the run context: errors with the calling kernel line, source
 * locations, instruction appends, scratch buffers, argument parsing and the
 * on-chip (SBUF/PSUM) allocators (see nki_internal.h). */
#include "nki_internal.h"

#include <frameobject.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kf_alloc.h"

nki_ctx *nki_cur;
PyObject *nki_SimError;

/* ===== errors and locations ===== */

static void frame_where(char *file, size_t flen, int *line, char *func, size_t fnlen)
{
    PyFrameObject *f = PyEval_GetFrame();
    PyCodeObject *code;
    const char *s;

    file[0] = 0;
    func[0] = 0;
    *line = 0;
    if (!f)
        return;
    code = PyFrame_GetCode(f);
    *line = PyFrame_GetLineNumber(f);
    s = PyUnicode_AsUTF8(code->co_filename);
    if (s)
        snprintf(file, flen, "%s", s);
    s = PyUnicode_AsUTF8(code->co_name);
    if (s)
        snprintf(func, fnlen, "%s", s);
    Py_DECREF(code);
}

PyObject *nki_fail(sim_error_code code, const char *api, const char *fmt, ...)
{
    sim_error *e = nki_cur ? nki_cur->serr : NULL;
    char values[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(values, sizeof(values), fmt, ap);
    va_end(ap);
    if (e && e->code == SIM_E_NONE) {
        e->code = code;
        frame_where(e->file, sizeof(e->file), &e->line, e->func, sizeof(e->func));
        snprintf(e->api, sizeof(e->api), "%s", api ? api : "");
        snprintf(e->values, sizeof(e->values), "%s", values);
    }
    PyErr_Format(nki_SimError, "SIM_E_%s%s%s: %s (%s)", sim_error_name(code), api ? " in " : "",
                 api ? api : "", sim_error_rule(code), values);
    return NULL;
}

uint32_t nki_loc(void)
{
    PyFrameObject *f = PyEval_GetFrame();
    PyCodeObject *code;
    int line, lasti;
    uint32_t id;
    size_t slot;

    if (!f || !nki_cur)
        return 0;
    code = PyFrame_GetCode(f);
    lasti = PyFrame_GetLasti(f);
    /* Cache by (code, instruction offset): computing the line number walks
     * the line table and interning compares strings, while kernels call
     * from the same few spots in their loops.  Code objects live as long as
     * the kernel's functions, i.e. the whole run. */
    slot = (((uintptr_t)code >> 4) ^ (uintptr_t)lasti * 2654435761u) % NKI_LOC_CACHE;
    if (nki_cur->loc_code[slot] == (const void *)code && nki_cur->loc_lasti[slot] == lasti) {
        Py_DECREF(code);
        return nki_cur->loc_id[slot];
    }
    line = PyFrame_GetLineNumber(f);
    id = sim_record_loc(nki_cur->rec, PyUnicode_AsUTF8(code->co_filename), (uint32_t)line,
                        PyUnicode_AsUTF8(code->co_name));
    nki_cur->loc_code[slot] = code;
    nki_cur->loc_lasti[slot] = lasti;
    nki_cur->loc_id[slot] = id;
    Py_DECREF(code);
    return id;
}

sim_insn *nki_insn(sim_opcode op)
{
    sim_insn *in = sim_record_append(nki_cur->rec);
    in->opcode = (uint16_t)op;
    in->engine = (uint8_t)sim_opcode_engine(op);
    in->loc = nki_loc();
    in->spmd = nki_cur->spmd_index;
    return in;
}

float *nki_scratch(int slot, int64_t n)
{
    nki_ctx *c = nki_cur;
    if (n < 1)
        n = 1;
    if ((size_t)n > c->scratch_cap[slot]) {
        free(c->scratch[slot]);
        c->scratch_cap[slot] = (size_t)n;
        c->scratch[slot] = kf_malloc((size_t)n * sizeof(float));
    }
    return c->scratch[slot];
}

int nki_need_run(const char *api)
{
    if (nki_cur)
        return 0;
    /* NKI calls only mean something inside a kernel run (sim_run) */
    PyErr_Format(PyExc_RuntimeError, "%s called outside a kforge kernel run", api);
    return -1;
}

int nki_parse(const char *api, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
              const char *const *names, int n_names, PyObject **out)
{
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    int npos = 0;

    if (nki_need_run(api) < 0)
        return -1;

    for (int i = 0; i < n_names; i++)
        out[i] = NULL;
    for (int i = 0; i < n_names && names[i][0] != '*'; i++)
        npos++;
    if (nargs > npos) {
        nki_fail(SIM_E_BAD_ARGUMENT, api, "%zd positional arguments given, at most %d accepted",
                 nargs, npos);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        const char *kw = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        int found = -1;
        for (int i = 0; kw && i < n_names; i++) {
            const char *n = names[i][0] == '*' ? names[i] + 1 : names[i];
            if (n[0] == kw[0] && strcmp(n, kw) == 0) {
                found = i;
                break;
            }
        }
        if (found < 0) {
            nki_fail(SIM_E_UNSUPPORTED_API, api, "keyword argument '%s' is not supported",
                     kw ? kw : "?");
            return -1;
        }
        if (out[found]) {
            nki_fail(SIM_E_BAD_ARGUMENT, api, "argument '%s' given twice", kw);
            return -1;
        }
        out[found] = args[nargs + k];
    }
    return 0;
}

/* ===== on-chip placement by Python lifetime (the record's sbuf_offset,
 * read by the timing model; capacity is sim_live's) ===== */

/* Start of the first window-aligned place at or after `at` where len bytes
 * do not straddle a window boundary (window 0: no constraint). */
static uint64_t window_fit(uint64_t at, uint64_t len, uint64_t window)
{
    if (window && len <= window && at / window != (at + len - 1) / window)
        return (at / window + 1) * window;
    return at;
}

int nki_arena_alloc(nki_arena *a, uint64_t len, uint64_t window, uint64_t *off)
{
    uint64_t at = 0;
    size_t i;

    if (a->used + len > a->capacity)
        return -1;
    for (i = 0; i < a->n; i++) {
        at = window_fit(at, len, window);
        if (a->iv[i].off >= at && a->iv[i].off - at >= len)
            break;
        if (a->iv[i].off + a->iv[i].len > at)
            at = a->iv[i].off + a->iv[i].len;
    }
    at = window_fit(at, len, window);
    if (i == a->n && (at > a->capacity || a->capacity - at < len))
        return -1;
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 64;
        a->iv = kf_realloc(a->iv, a->cap * sizeof(*a->iv));
    }
    memmove(&a->iv[i + 1], &a->iv[i], (a->n - i) * sizeof(*a->iv));
    a->iv[i].off = at;
    a->iv[i].len = len;
    a->n++;
    a->used += len;
    if (a->used > a->peak)
        a->peak = a->used;
    *off = at;
    return 0;
}

static void arena_free(nki_arena *a, uint64_t off, uint64_t len)
{
    for (size_t i = 0; i < a->n; i++) {
        if (a->iv[i].off == off && a->iv[i].len == len) {
            memmove(&a->iv[i], &a->iv[i + 1], (a->n - i - 1) * sizeof(*a->iv));
            a->n--;
            a->used -= len;
            return;
        }
    }
}

void nki_store_release(simc_store *st)
{
    if (!nki_cur || !st || st->acct_bytes == 0)
        return;
    if (st->mem == SIM_MEM_SBUF)
        arena_free(&nki_cur->sbuf, st->acct_off, st->acct_bytes);
    else if (st->mem == SIM_MEM_PSUM)
        arena_free(&nki_cur->psum, st->acct_off, st->acct_bytes);
    sim_record_free(nki_cur->rec, st->alloc_id);
    st->acct_bytes = 0;
}

/* ===== small helpers ===== */

int nki_get_int(PyObject *o, int64_t *out)
{
    if (PyBool_Check(o) || !PyIndex_Check(o))
        return 0;
    *out = PyLong_AsLongLong(o);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}
