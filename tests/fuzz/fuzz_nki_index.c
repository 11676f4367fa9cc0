/*
 * fuzz_nki_index — the NKI index expressions the simulator reads from a
 * kernel: nl.arange grids, nl.mgrid's .p/.x, program ids, nl.ds and
 * slices, the affine arithmetic over them (+ - * // and unary minus, with
 * ints of any sign), and the masks built from their comparisons
 * (< <= > >= == != joined by & | ^ ~).
 *
 * The bytes do not become Python text directly: they steer a small grammar
 * that can only write index expressions and masks, which the harness puts
 * into a fixed kernel (a masked load from an HBM input through the
 * expressions, then a store) and runs in the simulator in this process
 * (sim_run_source, numerics on, as kforge-sim run does inside its sandbox).
 *
 * Promises checked: no crash, no UB, no read or write outside a tensor (ASan
 * watches the simulator's buffers); the run either succeeds or is refused
 * with KF_INVALID/KF_TOO_LARGE and a message, the way a user's bad index
 * must be reported.  KFORGE_FUZZ_VERBOSE=1 prints each kernel and its
 * outcome (for writing seeds).
 */
#include "fuzz.h"

#include "kf_buf.h"
#include "sim_record.h"
#include "sim_run.h"

typedef struct fuzz_bytes {
    const uint8_t *p;
    size_t         n;
} fuzz_bytes;

static unsigned take(fuzz_bytes *b)
{
    if (!b->n)
        return 0;
    b->n--;
    return *b->p++;
}

/* A small integer, mostly in the range an index uses, sometimes far out. */
static long number(fuzz_bytes *b)
{
    unsigned c = take(b);
    static const long far[] = { -1, 0, 1, 127, 128, 129, 255, 256, 511, 512, 513, 1 << 20, -(1 << 20),
                                2147483647L, -2147483647L - 1, 4611686018427387904L, -4611686018427387904L };
    if (c < 200)
        return (long)c - 64;
    return far[(c - 200) % (sizeof(far) / sizeof(far[0]))];
}

typedef void (*fuzz_gen)(kf_buf *out, fuzz_bytes *b, int depth);

/* "(A op B)", A and B from `sub` one level deeper. */
static void infix(kf_buf *out, fuzz_bytes *b, int depth, fuzz_gen sub, const char *op)
{
    kf_buf_adds(out, "(");
    sub(out, b, depth - 1);
    kf_buf_addf(out, " %s ", op);
    sub(out, b, depth - 1);
    kf_buf_adds(out, ")");
}

/* An affine index expression over the grids, at most `depth` deep. */
static void expr(kf_buf *out, fuzz_bytes *b, int depth)
{
    unsigned c = take(b);

    if (depth <= 0 || c < 96) {
        switch (c % 8) {
        case 0: kf_buf_adds(out, "i_p"); break;
        case 1: kf_buf_adds(out, "i_f"); break;
        case 2: kf_buf_adds(out, "g.p"); break;
        case 3: kf_buf_adds(out, "g.x"); break;
        case 4: kf_buf_adds(out, "nl.program_id(0)"); break;
        case 5: kf_buf_adds(out, "j_p"); break;
        default: kf_buf_addf(out, "%ld", number(b)); break;
        }
        return;
    }
    switch (c % 6) {
    case 0: infix(out, b, depth, expr, "+"); break;
    case 1: infix(out, b, depth, expr, "-"); break;
    case 2: kf_buf_adds(out, "("); expr(out, b, depth - 1); kf_buf_addf(out, " * %ld)", number(b)); break;
    case 3: kf_buf_addf(out, "(%ld * ", number(b)); expr(out, b, depth - 1); kf_buf_adds(out, ")"); break;
    case 4: kf_buf_adds(out, "("); expr(out, b, depth - 1); kf_buf_addf(out, " // %ld)", number(b)); break;
    default: kf_buf_adds(out, "(-"); expr(out, b, depth - 1); kf_buf_adds(out, ")"); break;
    }
}

/* A mask: a comparison of expressions, or a predicate of masks. */
static void mask(kf_buf *out, fuzz_bytes *b, int depth)
{
    static const char *const cmp[] = { "<", "<=", ">", ">=", "==", "!=" };
    unsigned c = take(b);

    if (depth <= 0 || c < 128) {
        kf_buf_adds(out, "(");
        expr(out, b, 2);
        kf_buf_addf(out, " %s ", cmp[c % 6]);
        expr(out, b, 2);
        kf_buf_adds(out, ")");
        return;
    }
    if (c % 4 < 3) {
        static const char *const joins[] = { "&", "|", "^" };
        infix(out, b, depth, mask, joins[c % 4]);
    } else {
        kf_buf_adds(out, "(~");
        mask(out, b, depth - 1);
        kf_buf_adds(out, ")");
    }
}

/* One index of a tensor access: an expression, a slice or nl.ds. */
static void index_item(kf_buf *out, fuzz_bytes *b)
{
    unsigned c = take(b);

    if (c < 160) {
        expr(out, b, 4);
    } else if (c < 200) {
        long lo = number(b), hi = number(b);
        kf_buf_addf(out, "%ld:%ld", lo, hi);
    } else if (c < 230) {
        long lo = number(b), n = number(b);
        kf_buf_addf(out, "nl.ds(%ld, %ld)", lo, n);
    } else {
        kf_buf_adds(out, ":");
    }
}

static char *kernel(fuzz_bytes *b)
{
    kf_buf s = KF_BUF_INIT;
    long p = 1 + (long)take(b) % 128, f = 1 + (long)take(b) % 512;
    unsigned m = take(b);

    kf_buf_adds(&s, "import neuronxcc.nki.language as nl\n"
                    "def k(a):\n");
    kf_buf_addf(&s, "    out = nl.ndarray((%ld, %ld), dtype=a.dtype, buffer=nl.shared_hbm)\n", p, f);
    kf_buf_addf(&s, "    i_p = nl.arange(%ld)[:, None]\n"
                    "    i_f = nl.arange(%ld)[None, :]\n"
                    "    j_p = nl.arange(%ld)[:, None]\n"
                    "    g = nl.mgrid[0:%ld, 0:%ld]\n", p, f, p, p, f);
    kf_buf_adds(&s, "    t = nl.load(a[");
    index_item(&s, b);
    kf_buf_adds(&s, ", ");
    index_item(&s, b);
    kf_buf_adds(&s, "]");
    if (m & 1) {
        kf_buf_adds(&s, ", mask=");
        mask(&s, b, 3);
    }
    kf_buf_adds(&s, ")\n    nl.store(out[i_p, i_f], value=t");
    if (m & 2) {
        kf_buf_adds(&s, ", mask=");
        mask(&s, b, 3);
    }
    kf_buf_adds(&s, ")\n    return out\n");
    return kf_buf_detach(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_bytes b = { data, size };
    sim_array in;
    sim_array *outs = NULL;
    size_t n_outs = 0;
    sim_record rec;
    sim_error serr;
    sim_run_opts o;
    kf_err e = KF_ERR_INIT;
    kf_code rc;
    char *src;

    if (size > 512)
        return 0;   /* longer inputs only nest deeper than the grammar allows */
    memset(&o, 0, sizeof(o));
    o.entry = "k";
    o.target = "trn2";
    o.numerics = true;
    if (take(&b) & 1) {
        o.grid[0] = 2;
        o.grid[1] = 1;
    }
    memset(&in, 0, sizeof(in));
    snprintf(in.name, sizeof(in.name), "a");
    in.dtype = SIM_DT_FLOAT32;
    in.ndim = 2;
    in.shape[0] = 256;
    in.shape[1] = 512;
    in.data = calloc((size_t)256 * 512, sizeof(float));
    if (!in.data)
        abort();
    src = kernel(&b);
    memset(&serr, 0, sizeof(serr));
    sim_record_init(&rec, "trn2");
    if (getenv("KFORGE_FUZZ_VERBOSE"))   /* for writing seeds: what each input became */
        fprintf(stderr, "----\n%s", src);
    rc = sim_run_source(&o, src, "fuzz.py", &in, 1, &outs, &n_outs, &rec, &serr, &e);
    if (getenv("KFORGE_FUZZ_VERBOSE"))
        fprintf(stderr, "=> %s\n", rc == KF_OK ? "ran" : e.msg);
    FUZZ_CHECK(rc == KF_OK || rc == KF_INVALID || rc == KF_TOO_LARGE, "kforge's own failure %d on\n%s: %s", (int)rc,
               src, e.msg);
    if (rc == KF_OK) {
        FUZZ_CHECK(n_outs == 1 && outs[0].ndim == 2, "the kernel returned %zu outputs", n_outs);
        for (size_t i = 0; i < n_outs; i++)
            sim_array_release(&outs[i]);
        free(outs);
    } else {
        FUZZ_CHECK(e.msg[0] != '\0', "refused without saying why:\n%s", src);
        FUZZ_CHECK(outs == NULL, "a failed run returned outputs");
    }
    sim_record_release(&rec);
    sim_array_release(&in);
    free(src);
    return 0;
}
