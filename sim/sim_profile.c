/*
 * sim_profile — summary, bounds, findings and per-line attribution over a
 * timed record; see sim_profile.h and docs/profile.md.
 */
#include "sim_profile.h"

#include "kf_alloc.h"
#include "kf_buf.h"
#include "sim_profile_fmt.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name, *title;
} sim_findings[] = {
#define XX(id, name, title) { name, title },
    SIM_FINDING_MAP(XX)
#undef XX
};

const char *sim_finding_name(sim_finding_kind k)
{
    return (unsigned)k < SIM_FIND__COUNT ? sim_findings[k].name : "?";
}

const char *sim_finding_title(sim_finding_kind k)
{
    return (unsigned)k < SIM_FIND__COUNT ? sim_findings[k].title : "?";
}

const char *sim_profile_loc(const sim_profile *p, uint32_t loc, char *buf, size_t len)
{
    const sim_record *r = p->rec;
    if (loc >= r->n_locs) {
        snprintf(buf, len, "?");
        return buf;
    }
    const sim_loc *l = &r->locs[loc];
    const char *file = l->file < r->n_strs ? r->strs[l->file] : "?";
    snprintf(buf, len, "%s:%u", *file ? file : "?", l->line);
    return buf;
}

/* ---- helpers ------------------------------------------------------------- */

/* Finding texts are bounded; a message cut at the buffer's end is fine. */
static void msgf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void msgf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

static uint64_t insn_dma_bytes(const sim_insn *in)
{
    uint64_t b = in->nsrc ? in->src[0].bytes : 0;
    if (in->ndst && in->dst[0].bytes > b)
        b = in->dst[0].bytes;
    return b;
}

static uint64_t insn_pe_flops(const sim_insn *in)
{
    if (in->mm_k && in->mm_m && in->mm_n)
        return 2ull * in->mm_k * in->mm_m * in->mm_n;
    return 2ull * in->partitions * in->partitions * in->elems_per_part;
}

static const char *human_bytes(double b, char *buf, size_t len)
{
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, len, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        snprintf(buf, len, "%.1f MiB", b / (1024.0 * 1024));
    else if (b >= 1024.0)
        snprintf(buf, len, "%.1f KiB", b / 1024.0);
    else
        snprintf(buf, len, "%.0f B", b);
    return buf;
}

static const char *human_ns(double ns, char *buf, size_t len)
{
    if (ns >= 1e6)
        snprintf(buf, len, "%.3f ms", ns / 1e6);
    else if (ns >= 1e3)
        snprintf(buf, len, "%.2f us", ns / 1e3);
    else
        snprintf(buf, len, "%.0f ns", ns);
    return buf;
}

typedef struct loc_key {
    uint32_t loc, file, line;
} loc_key;

static int cmp_loc_key(const void *a, const void *b)
{
    const loc_key *x = a, *y = b;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    return x->line < y->line ? -1 : (x->line > y->line);
}

/* "k.py:41-43, 57" for a set of loc ids: grouped by file, runs merged. */
static void fmt_lines(const sim_profile *p, const uint32_t *locs, unsigned n, char *out,
                      size_t len)
{
    loc_key k[SIM_FINDING_MAX_LOCS] = { { 0, 0, 0 } };
    kf_buf b = KF_BUF_INIT;
    const sim_record *r = p->rec;
    unsigned m = 0;

    for (unsigned i = 0; i < n && i < SIM_FINDING_MAX_LOCS; i++) {
        if (locs[i] >= r->n_locs)
            continue;
        k[m].loc = locs[i];
        k[m].file = r->locs[locs[i]].file;
        k[m].line = r->locs[locs[i]].line;
        m++;
    }
    if (m > 1)
        qsort(k, m, sizeof(k[0]), cmp_loc_key);
    for (unsigned i = 0; i < m;) {
        unsigned j = i;
        while (j + 1 < m && k[j + 1].file == k[i].file && k[j + 1].line <= k[j].line + 1)
            j++;
        if (i == 0 || k[i].file != k[i - 1].file) {
            const char *f = k[i].file < r->n_strs ? r->strs[k[i].file] : "?";
            const char *base = strrchr(f, '/');
            kf_buf_addf(&b, "%s%s:", i ? "; " : "", base ? base + 1 : f);
        } else {
            kf_buf_adds(&b, ",");
        }
        if (k[j].line != k[i].line)
            kf_buf_addf(&b, "%u-%u", k[i].line, k[j].line);
        else
            kf_buf_addf(&b, "%u", k[i].line);
        i = j + 1;
    }
    snprintf(out, len, "%s", m ? b.data : "(no source line)");
    kf_buf_release(&b);
}

/* Per-finding accumulation of cost by source line. */
typedef struct acc {
    double  *by_loc;
    size_t   n;
} acc;

static void acc_reset(acc *a)
{
    memset(a->by_loc, 0, a->n * sizeof(double));
}

static void acc_add(acc *a, uint32_t loc, double v)
{
    if (loc < a->n)
        a->by_loc[loc] += v;
}

/* Copy the top locations of `a` into the finding. */
static void acc_top(const acc *a, sim_finding *f)
{
    f->n_locs = 0;
    for (size_t l = 0; l < a->n; l++) {
        double v = a->by_loc[l];
        if (v <= 0)
            continue;
        unsigned pos = f->n_locs < SIM_FINDING_MAX_LOCS ? f->n_locs : SIM_FINDING_MAX_LOCS;
        while (pos > 0 && f->loc_ns[pos - 1] < v)
            pos--;
        if (pos >= SIM_FINDING_MAX_LOCS)
            continue;
        unsigned last = f->n_locs < SIM_FINDING_MAX_LOCS ? f->n_locs : SIM_FINDING_MAX_LOCS - 1;
        for (unsigned k = last; k > pos; k--) {
            f->locs[k] = f->locs[k - 1];
            f->loc_ns[k] = f->loc_ns[k - 1];
        }
        f->locs[pos] = (uint32_t)l;
        f->loc_ns[pos] = v;
        if (f->n_locs < SIM_FINDING_MAX_LOCS)
            f->n_locs++;
    }
}

typedef struct fctx {
    sim_profile *p;
    acc          a;
    size_t       cap;
    double       dma_wait_ns;   /* most any compute engine waited for DMA data */
} fctx;

static sim_finding *finding_add(fctx *c, sim_finding_kind kind, double cost_ns)
{
    sim_profile *p = c->p;
    if (p->n_findings == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 8;
        p->findings = kf_realloc(p->findings, c->cap * sizeof(sim_finding));
    }
    sim_finding *f = &p->findings[p->n_findings++];
    memset(f, 0, sizeof(*f));
    f->kind = kind;
    f->cost_ns = cost_ns;
    acc_top(&c->a, f);
    return f;
}

/* A finding is worth reporting when it costs at least 1% of the run. */
static int worth(const sim_profile *p, double cost_ns)
{
    return cost_ns > 0 && cost_ns >= 0.01 * p->total_ns;
}

static double busy_frac(const sim_profile *p, uint32_t track)
{
    if (p->total_ns <= 0)
        return 0;
    double f = sim_ps_to_ns(p->tm.track_busy_ps[track]) / p->total_ns;
    return f > 1 ? 1 : f;
}

static double dma_frac(const sim_profile *p)
{
    if (p->total_ns <= 0)
        return 0;
    double f = sim_ps_to_ns(p->tm.dma_engine_busy_max_ps) / p->total_ns;
    return f > 1 ? 1 : f;
}

/* ---- findings ------------------------------------------------------------ */

/* The DMA's own time: the bytes at full bandwidth, or the busiest DMA
 * engine when its queue takes longer.  No overlap or engine balance gets a
 * kernel below it. */
static double dma_time_ns(const sim_profile *p)
{
    double busiest = sim_ps_to_ns(p->tm.dma_engine_busy_max_ps);
    return busiest > p->bounds.memory_ns ? busiest : p->bounds.memory_ns;
}

/* Elementwise instructions VectorE and GpSimd both run. */
static bool insn_elementwise(const sim_insn *in)
{
    return in->opcode == SIM_OP_TENSOR_TENSOR || in->opcode == SIM_OP_TENSOR_SCALAR ||
           in->opcode == SIM_OP_TENSOR_COPY || in->opcode == SIM_OP_TENSOR_REDUCE ||
           in->opcode == SIM_OP_SCALAR_TENSOR_TENSOR;
}


static void find_dma_small(fctx *c)
{
    sim_profile *p = c->p;
    const sim_record *r = p->rec;
    const sim_target *t = &p->tgt;
    double bw = sim_target_dma_bpns(t), extra = 0, chunk_sum = 0;
    uint64_t n = 0, bytes = 0;
    char lines[256], cb[32];

    acc_reset(&c->a);
    for (size_t i = 0; i < r->n_insns; i++) {
        const sim_insn *in = &r->insns[i];
        if (in->engine != SIM_ENG_DMA)
            continue;
        double ch = sim_timing_dma_chunk(in);
        if (ch >= t->dma_saturating_chunk)
            continue;
        double b = (double)insn_dma_bytes(in);
        double e = b / bw * (1.0 / sim_target_dma_efficiency(t, ch) - 1.0);
        extra += e;
        chunk_sum += ch;
        bytes += (uint64_t)b;
        n++;
        acc_add(&c->a, in->loc, e);
    }
    double cost = extra * dma_frac(p);
    if (!n || !worth(p, cost))
        return;
    double avg = chunk_sum / (double)n;
    sim_finding *f = finding_add(c, SIM_FIND_DMA_SMALL, cost);
    fmt_lines(p, f->locs, f->n_locs, lines, sizeof(lines));
    if (avg < t->dma_efficient_chunk)
        msgf(f->message, sizeof(f->message),
             "%llu DMA transfers average %s per partition (descriptor), %s the efficient %.0f B "
             "(%.0f B saturates): move longer contiguous rows per transfer: %s",
             (unsigned long long)n, human_bytes(avg, cb, sizeof(cb)),
             avg < t->dma_efficient_chunk / 2 ? "well below" : "below",
             t->dma_efficient_chunk, t->dma_saturating_chunk, lines);
    else
        msgf(f->message, sizeof(f->message),
             "%llu DMA transfers average %s per partition (descriptor), short of the %.0f B "
             "that saturates the DMA engines: move longer contiguous rows per transfer: %s",
             (unsigned long long)n, human_bytes(avg, cb, sizeof(cb)), t->dma_saturating_chunk,
             lines);
    msgf(f->evidence, sizeof(f->evidence),
             "{\"transfers\":%llu,\"average_chunk_bytes\":%.0f,\"efficient_chunk_bytes\":%.0f,"
             "\"saturating_chunk_bytes\":%.0f,\"bytes\":%llu,\"share_of_dma_bytes\":%.3f}",
             (unsigned long long)n, avg, t->dma_efficient_chunk, t->dma_saturating_chunk,
             (unsigned long long)bytes, p->dma_bytes ? (double)bytes / (double)p->dma_bytes : 0.0);
}

static void find_hbm_reload(fctx *c)
{
    sim_profile *p = c->p;
    const sim_record *r = p->rec;
    double bw = sim_target_dma_bpns(&p->tgt);
    uint64_t *loaded = kf_calloc(r->n_allocs ? r->n_allocs : 1, sizeof(uint64_t));
    char lines[256], b1[32], b2[32];

    for (size_t i = 0; i < r->n_insns; i++) {
        const sim_insn *in = &r->insns[i];
        if (in->engine == SIM_ENG_DMA && in->nsrc && in->src[0].mem == SIM_MEM_HBM)
            loaded[in->src[0].alloc] += in->src[0].bytes;
    }
    for (size_t a = 0; a < r->n_allocs; a++) {
        const sim_alloc *al = &r->allocs[a];
        uint64_t uniq = al->bytes_per_part;
        if (al->mem != SIM_MEM_HBM || !al->is_input || !uniq || loaded[a] < uniq * 3 / 2)
            continue;
        double ratio = (double)loaded[a] / (double)uniq;
        double cost = (double)(loaded[a] - uniq) / bw * dma_frac(p);
        if (!worth(p, cost))
            continue;
        acc_reset(&c->a);
        for (size_t i = 0; i < r->n_insns; i++) {
            const sim_insn *in = &r->insns[i];
            if (in->engine == SIM_ENG_DMA && in->nsrc && in->src[0].alloc == a)
                acc_add(&c->a, in->loc, (double)in->src[0].bytes / bw);
        }
        const char *name = al->name < r->n_strs && *r->strs[al->name] ? r->strs[al->name] : "?";
        sim_finding *f = finding_add(c, SIM_FIND_HBM_RELOAD, cost);
        fmt_lines(p, f->locs, f->n_locs, lines, sizeof(lines));
        msgf(f->message, sizeof(f->message),
                 "input `%.64s` is loaded %.1fx from HBM (%s for %s unique): keep its tiles in "
                 "SBUF across the loop that reloads them: %s",
                 name, ratio, human_bytes((double)loaded[a], b1, sizeof(b1)),
                 human_bytes((double)uniq, b2, sizeof(b2)), lines);
        msgf(f->evidence, sizeof(f->evidence),
                 "{\"tensor\":\"%.64s\",\"loaded_bytes\":%llu,\"unique_bytes\":%llu,"
                 "\"reload_factor\":%.2f}",
                 name, (unsigned long long)loaded[a], (unsigned long long)uniq, ratio);
    }
    free(loaded);
}

static void find_dma_wait(fctx *c)
{
    sim_profile *p = c->p;
    const sim_record *r = p->rec;
    char lines[256], dl[256], tb[32];

    for (unsigned e = 0; e < SIM_ENG_DMA; e++) {
        double stall = 0;
        uint32_t dma_locs[SIM_FINDING_MAX_LOCS];
        unsigned nd = 0;
        uint64_t n = 0;
        int first = 1;
        acc_reset(&c->a);
        for (size_t i = 0; i < r->n_insns; i++) {
            const sim_timed *tm = &p->tm.t[i];
            if (tm->track != e)
                continue;
            /* The engine's first wait is the prologue every kernel has. */
            if (first) {
                first = 0;
                continue;
            }
            if (tm->wait != SIM_WAIT_RAW || tm->wait_on == UINT32_MAX ||
                r->insns[tm->wait_on].engine != SIM_ENG_DMA)
                continue;
            double s = sim_ps_to_ns(tm->start_ps - tm->free_ps);
            stall += s;
            n++;
            acc_add(&c->a, r->insns[i].loc, s);
            uint32_t dloc = r->insns[tm->wait_on].loc;
            unsigned k = 0;
            while (k < nd && dma_locs[k] != dloc)
                k++;
            if (k == nd && nd < SIM_FINDING_MAX_LOCS)
                dma_locs[nd++] = dloc;
        }
        /* Waiting is only avoidable down to the DMA's own time: a kernel
         * whose DMA engines are busy all along is DMA-bound, and the fix is
         * in the bytes it moves (the DMA findings), not in the overlap. */
        double dma_bound = dma_time_ns(p);
        double cost = stall;
        if (cost > p->total_ns - dma_bound)
            cost = p->total_ns - dma_bound;
        if (cost > c->dma_wait_ns)
            c->dma_wait_ns = cost;
        if (!worth(p, cost))
            continue;
        sim_finding *f = finding_add(c, SIM_FIND_DMA_WAIT, cost);
        fmt_lines(p, f->locs, f->n_locs, lines, sizeof(lines));
        fmt_lines(p, dma_locs, nd, dl, sizeof(dl));
        msgf(f->message, sizeof(f->message),
                 "%s engine sat idle %s (%.0f%% of the run) waiting for DMA data at %s; the "
                 "loads are %s: prefetch earlier (more buffers) or move fewer bytes",
                 sim_engine_name((sim_engine)e), human_ns(stall, tb, sizeof(tb)),
                 100.0 * stall / p->total_ns, lines, dl);
        msgf(f->evidence, sizeof(f->evidence),
                 "{\"engine\":\"%s\",\"stall_ns\":%.0f,\"instructions\":%llu,\"share_of_run\":%.3f}",
                 sim_engine_name((sim_engine)e), stall, (unsigned long long)n, stall / p->total_ns);
    }
}

static void find_pe(fctx *c)
{
    sim_profile *p = c->p;
    const sim_record *r = p->rec;
    const sim_target *t = &p->tgt;
    double waste = 0, fp32_waste = 0, ksum = 0, msum = 0, nsum = 0;
    uint64_t n = 0, nk = 0, nm = 0, nn = 0, n32 = 0;
    acc fp32acc = { kf_calloc(c->a.n ? c->a.n : 1, sizeof(double)), c->a.n };
    char lines[256];

    acc_reset(&c->a);
    for (size_t i = 0; i < r->n_insns; i++) {
        const sim_insn *in = &r->insns[i];
        if (in->opcode != SIM_OP_MATMUL)
            continue;
        double d = sim_ps_to_ns(p->tm.t[i].end_ps - p->tm.t[i].start_ps);
        double k = in->mm_k, m = in->mm_m, nn_ = in->mm_n;
        int fp32 = (in->flags & SIM_F_FP32_PE) != 0;
        double f = fp32 ? t->te_fp32_factor : 1;
        double ncyc = nn_ > t->te_moving_min_cycles ? nn_ : t->te_moving_min_cycles;
        double u = (k * m * nn_) / (t->te_rows * t->te_cols * ncyc);
        if (u > 1)
            u = 1;
        double w = d / f * (1 - u);
        n++;
        ksum += k;
        msum += m;
        nsum += nn_;
        nk += k < t->te_rows;
        nm += m < t->te_cols;
        nn += nn_ < 512;
        if (w > 0) {
            waste += w;
            acc_add(&c->a, in->loc, w);
        }
        if (fp32) {
            double s = d * (1 - 1 / f);
            fp32_waste += s;
            n32++;
            acc_add(&fp32acc, in->loc, s);
        }
    }
    double crit = busy_frac(p, SIM_ENG_TENSOR);
    if (n && worth(p, waste * crit)) {
        sim_finding *f = finding_add(c, SIM_FIND_PE_UNDERFILL, waste * crit);
        fmt_lines(p, f->locs, f->n_locs, lines, sizeof(lines));
        msgf(f->message, sizeof(f->message),
                 "matmul tiles average K=%.0f M=%.0f N=%.0f on a %.0fx%.0f array (%llu with K<%.0f, "
                 "%llu with M<%.0f, %llu with N<512): fill K and M to %.0f and N to 512: %s",
                 ksum / (double)n, msum / (double)n, nsum / (double)n, t->te_rows, t->te_cols, (unsigned long long)nk,
                 t->te_rows, (unsigned long long)nm, t->te_cols, (unsigned long long)nn,
                 t->te_rows, lines);
        msgf(f->evidence, sizeof(f->evidence),
                 "{\"matmuls\":%llu,\"avg_k\":%.1f,\"avg_m\":%.1f,\"avg_n\":%.1f,\"k_under\":%llu,"
                 "\"m_under\":%llu,\"n_under_512\":%llu,\"wasted_pe_ns\":%.0f}",
                 (unsigned long long)n, ksum / (double)n, msum / (double)n, nsum / (double)n, (unsigned long long)nk,
                 (unsigned long long)nm, (unsigned long long)nn, waste);
    }
    if (n32 && worth(p, fp32_waste * crit)) {
        memcpy(c->a.by_loc, fp32acc.by_loc, c->a.n * sizeof(double));
        sim_finding *f = finding_add(c, SIM_FIND_FP32_MATMUL, fp32_waste * crit);
        fmt_lines(p, f->locs, f->n_locs, lines, sizeof(lines));
        msgf(f->message, sizeof(f->message),
                 "%llu of %llu matmuls take fp32 operands and run %.0fx slower than bf16; PSUM "
                 "still accumulates in fp32, so cast the operands to bf16 unless the tolerance "
                 "needs fp32 inputs: %s",
                 (unsigned long long)n32, (unsigned long long)n, t->te_fp32_factor, lines);
        msgf(f->evidence, sizeof(f->evidence),
                 "{\"fp32_matmuls\":%llu,\"matmuls\":%llu,\"slowdown\":%.1f,\"extra_ns\":%.0f}",
                 (unsigned long long)n32, (unsigned long long)n, t->te_fp32_factor, fp32_waste);
    }
    free(fp32acc.by_loc);
}

static void find_pressure(fctx *c)
{
    sim_profile *p = c->p;
    const sim_record *r = p->rec;
    char lines[256], tb[32];

    for (int mem = SIM_MEM_SBUF; mem <= SIM_MEM_PSUM; mem++) {
        double stall_eng = 0, stall_dma = 0;
        uint64_t n = 0;
        uint32_t top_alloc = UINT32_MAX;
        double top_v = 0;
        double *by_alloc = kf_calloc(r->n_allocs ? r->n_allocs : 1, sizeof(double));
        acc_reset(&c->a);
        for (size_t i = 0; i < r->n_insns; i++) {
            const sim_timed *tm = &p->tm.t[i];
            const sim_insn *in = &r->insns[i];
            if ((tm->wait != SIM_WAIT_WAR && tm->wait != SIM_WAIT_WAW &&
                 tm->wait != SIM_WAIT_REUSE) || !in->ndst || in->dst[0].mem != mem)
                continue;
            double s = sim_ps_to_ns(tm->start_ps - tm->free_ps);
            if (tm->track >= SIM_TRACK_DMA0)
                stall_dma += s;
            else
                stall_eng += s;
            n++;
            by_alloc[in->dst[0].alloc] += s;
            acc_add(&c->a, in->loc, s);
        }
        for (size_t a = 0; a < r->n_allocs; a++)
            if (by_alloc[a] > top_v) {
                top_v = by_alloc[a];
                top_alloc = (uint32_t)a;
            }
        free(by_alloc);
        /* Queues wait in parallel, and a prefetch that waits for its buffer
         * costs time only when an engine then waits for that DMA: count DMA
         * stalls spread over the queues, capped by the engines' DMA waits. */
        double q = p->dma_queues_used ? (double)p->dma_queues_used : 1;
        double dma_part = stall_dma / q;
        if (dma_part > c->dma_wait_ns)
            dma_part = c->dma_wait_ns;
        double cost = stall_eng + dma_part;
        if (!n || !worth(p, cost))
            continue;
        const char *name = top_alloc != UINT32_MAX && r->allocs[top_alloc].name < r->n_strs
                               ? r->strs[r->allocs[top_alloc].name] : "?";
        sim_finding *f = finding_add(c, SIM_FIND_BUFFER_PRESSURE, cost);
        fmt_lines(p, f->locs, f->n_locs, lines, sizeof(lines));
        char most[80] = "";
        if (*name)
            snprintf(most, sizeof(most), " (most on `%.48s`)", name);
        msgf(f->message, sizeof(f->message),
             "%s pressure: %llu writes waited %s for earlier users of the same %s memory%s to "
             "finish, serialising the pipeline; give it more buffers (double/triple "
             "buffering) or smaller tiles: %s",
             mem == SIM_MEM_PSUM ? "PSUM" : "SBUF", (unsigned long long)n,
             human_ns(stall_eng + stall_dma, tb, sizeof(tb)),
             mem == SIM_MEM_PSUM ? "PSUM" : "SBUF", most, lines);
        msgf(f->evidence, sizeof(f->evidence),
                 "{\"memory\":\"%s\",\"waits\":%llu,\"engine_stall_ns\":%.0f,\"dma_stall_ns\":%.0f,"
                 "\"buffer\":\"%.48s\"}",
                 mem == SIM_MEM_PSUM ? "psum" : "sbuf", (unsigned long long)n, stall_eng,
                 stall_dma, name);
    }
}

/* The saving of moving work to a faster engine is counted only as far as
 * that engine has room for it: with the moved work taking `added` of its
 * time and the engine busy `busy_alt` of the run, the part that fits before
 * it becomes the busiest of all is (run - busy_alt) / added (at most 1);
 * the rest would lengthen the run as much as it shortens the slow engine. */
static void find_slow_engine(fctx *c)
{
    sim_profile *p = c->p;
    const sim_record *r = p->rec;
    double save[3] = { 0 };       /* reciprocal on VectorE, transpose on VectorE, GpSimd ops */
    double added[3] = { 0 };      /* the same work's time on the faster engine */
    static const sim_engine alt_of[3] = { SIM_ENG_SCALAR, SIM_ENG_TENSOR, SIM_ENG_VECTOR };
    double fits[3];
    uint64_t cnt[3] = { 0 };
    char lines[256];
    static const char *const what[3] = {
        "reciprocals run on VectorE at 1/8 of ScalarE's rate: compute them with "
        "nisa.activation(op=reciprocal) on ScalarE",
        "transposes run on VectorE in 32x32 blocks: use nisa.nc_transpose on TensorE "
        "(128x128 per instruction)",
        "elementwise ops run on GpSimd, slower than VectorE for the same op: use VectorE "
        "(engine=nki.isa.vector_engine / the default)",
    };

    acc_reset(&c->a);
    for (size_t i = 0; i < r->n_insns; i++) {
        const sim_insn *in = &r->insns[i];
        int k = -1;
        if (in->opcode == SIM_OP_RECIPROCAL && in->engine == SIM_ENG_VECTOR)
            k = 0;
        else if (in->opcode == SIM_OP_VE_TRANSPOSE && in->engine == SIM_ENG_VECTOR)
            k = 1;
        else if (in->engine == SIM_ENG_GPSIMD && insn_elementwise(in))
            k = 2;
        if (k < 0)
            continue;
        double d = sim_ps_to_ns(p->tm.t[i].end_ps - p->tm.t[i].start_ps);
        double a = sim_ps_to_ns(sim_timing_isolated_ps(&p->tgt, in, alt_of[k], 0));
        if (d <= a)
            continue;
        save[k] += (d - a) * busy_frac(p, in->engine);
        added[k] += a;
        cnt[k]++;
        acc_add(&c->a, in->loc, d - a);
    }
    for (int k = 0; k < 3; k++) {
        double room = p->total_ns - sim_ps_to_ns(p->tm.track_busy_ps[alt_of[k]]);
        fits[k] = added[k] <= 0 ? 1 : room <= 0 ? 0 : room >= added[k] ? 1 : room / added[k];
        save[k] *= fits[k];
    }
    int best = save[0] >= save[1] ? (save[0] >= save[2] ? 0 : 2) : (save[1] >= save[2] ? 1 : 2);
    double total = save[0] + save[1] + save[2];
    if (!worth(p, total))
        return;
    sim_finding *f = finding_add(c, SIM_FIND_SLOW_ENGINE, total);
    fmt_lines(p, f->locs, f->n_locs, lines, sizeof(lines));
    if (fits[best] < 0.95)
        msgf(f->message, sizeof(f->message), "%llu %s (%s has room for about %.0f%% of it): %s",
                 (unsigned long long)cnt[best], what[best], sim_engine_title(alt_of[best]), 100.0 * fits[best], lines);
    else
        msgf(f->message, sizeof(f->message), "%llu %s: %s",
                 (unsigned long long)cnt[best], what[best], lines);
    msgf(f->evidence, sizeof(f->evidence),
             "{\"reciprocal_on_vector\":%llu,\"transpose_on_vector\":%llu,"
             "\"elementwise_on_gpsimd\":%llu,\"saving_ns\":%.0f}",
             (unsigned long long)cnt[0], (unsigned long long)cnt[1], (unsigned long long)cnt[2],
             total);
}

/* VectorE and GpSimd run the same elementwise instructions.  When one of
 * them is busy most of the run and the other mostly idles, moving part of
 * the busy one's elementwise work across shortens the busy engine.  The
 * saving is the balance point: with the work in busy-engine time M and the
 * other engine s times as fast on it, moving x of it equalises
 * busy - x = other + x / s, so x = (busy - other) * s / (1 + s), at most M;
 * and no more than the busy engine's time above the DMA's and the other
 * engines' (past that they set the pace); weighted by the busy engine's
 * share of the run like the others. */
static void find_imbalance(fctx *c)
{
    sim_profile *p = c->p;
    const sim_record *r = p->rec;
    static const sim_engine pair[2] = { SIM_ENG_VECTOR, SIM_ENG_GPSIMD };
    char lines[256], tb[32];

    for (int k = 0; k < 2; k++) {
        sim_engine e = pair[k], o = pair[1 - k];
        double busy = sim_ps_to_ns(p->tm.track_busy_ps[e]), other = sim_ps_to_ns(p->tm.track_busy_ps[o]);
        double on_e = 0, on_o = 0;
        uint64_t n = 0;
        if (busy < 0.5 * p->total_ns || other >= 0.5 * busy)
            continue;
        acc_reset(&c->a);
        for (size_t i = 0; i < r->n_insns; i++) {
            const sim_insn *in = &r->insns[i];
            if (in->engine != e || !insn_elementwise(in))
                continue;
            double a = sim_ps_to_ns(sim_timing_isolated_ps(&p->tgt, in, e, 0));
            double b = sim_ps_to_ns(sim_timing_isolated_ps(&p->tgt, in, o, 0));
            on_e += a;
            on_o += b;
            n++;
            acc_add(&c->a, in->loc, a);
        }
        if (!n || on_o <= 0)
            continue;
        double s = on_e / on_o;
        double x = (busy - other) * s / (1 + s);
        if (x > on_e)
            x = on_e;
        /* balancing shortens the run only while this engine is the
         * slowest resource: not below the DMA time or another engine's */
        double floor_ns = dma_time_ns(p);
        for (unsigned t = 0; t < SIM_ENG_DMA; t++)
            if (t != (unsigned)e && t != (unsigned)o && sim_ps_to_ns(p->tm.track_busy_ps[t]) > floor_ns)
                floor_ns = sim_ps_to_ns(p->tm.track_busy_ps[t]);
        if (x > busy - floor_ns)
            x = busy - floor_ns;
        double cost = x * busy_frac(p, e);
        if (!worth(p, cost))
            continue;
        sim_finding *f = finding_add(c, SIM_FIND_ENGINE_IMBALANCE, cost);
        fmt_lines(p, f->locs, f->n_locs, lines, sizeof(lines));
        msgf(f->message, sizeof(f->message),
             "%s engine is busy %.0f%% of the run while %s is busy %.0f%%; %llu elementwise "
             "instructions on %s could run on %s (at %.2fx the speed): giving it about %s of them "
             "(engine=nki.isa.%s on part of the tiles or taps) balances the two: %s",
             sim_engine_name(e), 100.0 * busy / p->total_ns, sim_engine_name(o), 100.0 * other / p->total_ns,
             (unsigned long long)n, sim_engine_name(e), sim_engine_name(o), s, human_ns(x, tb, sizeof(tb)),
             o == SIM_ENG_GPSIMD ? "gpsimd_engine" : "vector_engine", lines);
        msgf(f->evidence, sizeof(f->evidence),
             "{\"engine\":\"%s\",\"other\":\"%s\",\"busy_ns\":%.0f,\"other_busy_ns\":%.0f,"
             "\"movable_ns\":%.0f,\"other_speed\":%.3f,\"move_ns\":%.0f}",
             sim_engine_name(e), sim_engine_name(o), busy, other, on_e, s, x);
    }
}

/* Many small instructions on VectorE/ScalarE/GpSimd: each pays ~60 cycles
 * per SBUF/PSUM access and at least MIN_II, whatever its size (S7, S30). */
static void find_overhead(fctx *c)
{
    sim_profile *p = c->p;
    const sim_record *r = p->rec;
    char lines[256], tb[32];
    static const sim_engine engs[] = { SIM_ENG_VECTOR, SIM_ENG_SCALAR, SIM_ENG_GPSIMD };

    for (size_t k = 0; k < sizeof(engs) / sizeof(engs[0]); k++) {
        sim_engine e = engs[k];
        double over = 0, busy = sim_ps_to_ns(p->tm.track_busy_ps[e]), elems = 0;
        uint64_t n = 0;
        acc_reset(&c->a);
        for (size_t i = 0; i < r->n_insns; i++) {
            const sim_insn *in = &r->insns[i];
            const sim_timed *tm = &p->tm.t[i];
            if (tm->track != e)
                continue;
            double d = sim_ps_to_ns(tm->end_ps - tm->start_ps);
            double w = sim_ps_to_ns(sim_timing_work_ps(&p->tgt, in));
            if (d <= w)
                continue;
            over += d - w;
            elems += (double)in->elems_per_part;
            n++;
            acc_add(&c->a, in->loc, d - w);
        }
        double cost = over * busy_frac(p, e);
        /* worth reporting when overhead is a large part of a busy engine */
        if (!n || busy <= 0 || over < 0.25 * busy || !worth(p, cost))
            continue;
        sim_finding *f = finding_add(c, SIM_FIND_INSN_OVERHEAD, cost);
        fmt_lines(p, f->locs, f->n_locs, lines, sizeof(lines));
        msgf(f->message, sizeof(f->message),
             "%s engine spends %s (%.0f%% of its busy time) in fixed per-instruction cost "
             "(~%.0f cycles per SBUF/PSUM access, MIN_II %.0f) over %llu instructions averaging "
             "%.0f elements per partition: fuse them (tensor_scalar takes two ops, activation "
             "takes scale/bias and reduces) or work on larger tiles: %s",
             sim_engine_name(e), human_ns(over, tb, sizeof(tb)), 100.0 * over / busy,
             p->tgt.access_bubble_cycles, p->tgt.min_ii_cycles, (unsigned long long)n,
             elems / (double)n, lines);
        msgf(f->evidence, sizeof(f->evidence),
             "{\"engine\":\"%s\",\"overhead_ns\":%.0f,\"busy_ns\":%.0f,\"instructions\":%llu,"
             "\"avg_elems_per_partition\":%.1f}",
             sim_engine_name(e), over, busy, (unsigned long long)n, elems / (double)n);
    }
}

static int cmp_finding(const void *a, const void *b)
{
    const sim_finding *x = a, *y = b;
    if (x->cost_ns != y->cost_ns)
        return x->cost_ns > y->cost_ns ? -1 : 1;
    return (int)x->kind - (int)y->kind;
}

static int cmp_line(const void *a, const void *b)
{
    const sim_line *x = a, *y = b;
    if (x->time_ns != y->time_ns)
        return x->time_ns > y->time_ns ? -1 : 1;
    return x->loc < y->loc ? -1 : (x->loc > y->loc);
}

/* ---- build --------------------------------------------------------------- */

/* Add a region's bytes to the counter of its memory (reads or writes). */
static void add_bytes(const sim_region *g, uint64_t *hbm, uint64_t *sbuf, uint64_t *psum)
{
    if (g->mem == SIM_MEM_HBM)
        *hbm += g->bytes;
    else if (g->mem == SIM_MEM_SBUF)
        *sbuf += g->bytes;
    else
        *psum += g->bytes;
}

static void count(sim_profile *p)
{
    const sim_record *r = p->rec;
    const sim_target *t = &p->tgt;
    uint8_t *qused = kf_calloc(p->tm.n_tracks, 1);

    for (size_t i = 0; i < r->n_insns; i++) {
        const sim_insn *in = &r->insns[i];
        const sim_timed *tm = &p->tm.t[i];
        p->model_flops += in->flops;
        if (in->opcode == SIM_OP_MATMUL) {
            uint64_t hw = insn_pe_flops(in);
            double f = (in->flags & SIM_F_FP32_PE) ? t->te_fp32_factor : 1;
            p->matmul_count++;
            p->matmul_flops += in->flops ? in->flops : hw;
            p->hardware_flops += hw;
            p->adjusted_hardware_flops += (double)hw * f;
        } else if (in->opcode == SIM_OP_PE_TRANSPOSE) {
            uint64_t hw = insn_pe_flops(in);
            p->transpose_flops += hw;
            p->hardware_flops += hw;
            p->adjusted_hardware_flops += (double)hw;
        }
        if (in->opcode == SIM_OP_ACTIVATION || in->opcode == SIM_OP_ACTIVATION_REDUCE) {
            p->activate_count++;
            p->activate_ns += sim_ps_to_ns(tm->end_ps - tm->start_ps);
        }
        for (unsigned k = 0; k < in->nsrc; k++)
            add_bytes(&in->src[k], &p->hbm_read, &p->sbuf_read, &p->psum_read);
        for (unsigned k = 0; k < in->ndst; k++)
            add_bytes(&in->dst[k], &p->hbm_write, &p->sbuf_write, &p->psum_write);
        if (in->nsrc && in->ndst && in->src[0].mem == SIM_MEM_PSUM &&
            in->dst[0].mem == SIM_MEM_SBUF) {
            p->psum_to_sbuf_count++;
            p->psum_to_sbuf_bytes += in->dst[0].bytes;
        }
        if (in->engine == SIM_ENG_DMA) {
            p->dma_count++;
            p->dma_bytes += insn_dma_bytes(in);
            if (!qused[tm->track]) {
                qused[tm->track] = 1;
                p->dma_queues_used++;
            }
        }
    }
    for (size_t a = 0; a < r->n_allocs; a++)
        if (r->allocs[a].mem == SIM_MEM_HBM && (r->allocs[a].is_input || r->allocs[a].is_output))
            p->io_bytes += r->allocs[a].bytes_per_part;
    free(qused);
}

static void lines(sim_profile *p)
{
    const sim_record *r = p->rec;
    sim_line *all = kf_calloc(r->n_locs ? r->n_locs : 1, sizeof(sim_line));
    size_t n = 0;

    for (size_t i = 0; i < r->n_insns; i++) {
        const sim_insn *in = &r->insns[i];
        const sim_timed *tm = &p->tm.t[i];
        if (in->loc >= r->n_locs)
            continue;
        sim_line *l = &all[in->loc];
        l->count++;
        l->time_ns += sim_ps_to_ns(tm->end_ps - tm->start_ps);
        l->engine_ns[in->engine] += sim_ps_to_ns(tm->end_ps - tm->start_ps);
        l->stall_ns += sim_ps_to_ns(tm->start_ps - tm->free_ps);
        l->flops += in->flops;
        if (in->engine == SIM_ENG_DMA)
            l->dma_bytes += insn_dma_bytes(in);
    }
    for (size_t l = 0; l < r->n_locs; l++)
        if (all[l].count) {
            all[l].loc = (uint32_t)l;
            all[l].engine = 0;
            for (int e = 1; e < SIM_ENG__COUNT; e++)
                if (all[l].engine_ns[e] > all[l].engine_ns[all[l].engine])
                    all[l].engine = e;
            all[n++] = all[l];
        }
    qsort(all, n, sizeof(*all), cmp_line);
    p->lines = all;
    p->n_lines = n;
}

static void bounds(sim_profile *p)
{
    const sim_target *t = &p->tgt;
    sim_bounds *b = &p->bounds;
    double bw = sim_target_dma_bpns(t);

    b->compute_ns = (double)p->matmul_flops / sim_target_te_peak_flops(t) * 1e9;
    b->memory_ns = (double)p->dma_bytes / bw;
    b->io_ns = (double)p->io_bytes / bw;
    b->pipeline_ns = sim_ps_to_ns(p->tm.dma_engine_busy_max_ps);
    b->pipeline_engine = "dma";
    for (unsigned e = 0; e < SIM_ENG_DMA; e++)
        if (sim_ps_to_ns(p->tm.track_busy_ps[e]) > b->pipeline_ns) {
            b->pipeline_ns = sim_ps_to_ns(p->tm.track_busy_ps[e]);
            b->pipeline_engine = sim_engine_name((sim_engine)e);
        }
    /* NC-v2's shared access ports serialise their engines' instructions as
     * an engine does its own: a port's busy time is a bound too */
    if (sim_ps_to_ns(p->tm.sbuf_port_busy_ps) > b->pipeline_ns) {
        b->pipeline_ns = sim_ps_to_ns(p->tm.sbuf_port_busy_ps);
        b->pipeline_engine = "sbuf_port";
    }
    if (sim_ps_to_ns(p->tm.psum_port_busy_ps) > b->pipeline_ns) {
        b->pipeline_ns = sim_ps_to_ns(p->tm.psum_port_busy_ps);
        b->pipeline_engine = "psum_port";
    }
    b->tightest = "compute";
    b->tightest_ns = b->compute_ns;
    if (b->memory_ns > b->tightest_ns) {
        b->tightest = "memory";
        b->tightest_ns = b->memory_ns;
    }
    if (b->io_ns > b->tightest_ns) {
        b->tightest = "io";
        b->tightest_ns = b->io_ns;
    }
    if (b->pipeline_ns > b->tightest_ns) {
        b->tightest = "pipeline";
        b->tightest_ns = b->pipeline_ns;
    }
    b->achieved_fraction = p->total_ns > 0 ? b->tightest_ns / p->total_ns : 1.0;
}

kf_code sim_profile_build(const sim_record *rec, const sim_target *tgt, sim_profile **out,
                          kf_err *err)
{
    sim_profile *p = kf_calloc(1, sizeof(*p));
    fctx c;
    kf_code rc;

    *out = NULL;
    if (sim_lower_record(rec, &p->lowered, &p->lower))
        rec = &p->lowered;
    p->tgt = *tgt;
    rc = sim_timing_run(rec, tgt, &p->tm, err);
    /* rule 5 needs the times of the record as written: time, reorder, time again */
    if (!rc && (p->lower.reordered = sim_lower_schedule(rec, &p->tm, &p->scheduled)) > 0) {
        sim_timing_release(&p->tm);
        rec = &p->scheduled;
        rc = sim_timing_run(rec, tgt, &p->tm, err);
    }
    p->rec = rec;
    if (rc) {
        sim_profile_free(p);
        return rc;
    }
    p->total_ns = sim_ps_to_ns(p->tm.total_ps);
    p->active_ns = sim_ps_to_ns(sim_timing_union_ps(&p->tm, NULL, -1));
    p->dma_active_ns = sim_ps_to_ns(p->tm.dma_active_ps);
    count(p);
    lines(p);
    bounds(p);
    memset(&c, 0, sizeof(c));
    c.p = p;
    c.a.n = rec->n_locs;
    c.a.by_loc = kf_calloc(rec->n_locs ? rec->n_locs : 1, sizeof(double));
    find_dma_small(&c);
    find_hbm_reload(&c);
    find_dma_wait(&c);
    find_pe(&c);
    find_pressure(&c);
    find_slow_engine(&c);
    find_overhead(&c);
    find_imbalance(&c);
    free(c.a.by_loc);
    if (p->n_findings)
        qsort(p->findings, p->n_findings, sizeof(sim_finding), cmp_finding);
    *out = p;
    return KF_OK;
}

void sim_profile_free(sim_profile *p)
{
    if (!p)
        return;
    sim_timing_release(&p->tm);
    sim_record_release(&p->lowered);
    sim_record_release(&p->scheduled);
    free(p->findings);
    free(p->lines);
    free(p);
}

/* ---- output -------------------------------------------------------------- */

static cJSON *summary_obj(const sim_profile *p)
{
    const sim_target *t = &p->tgt;
    cJSON *s = cJSON_CreateObject();
    double T = p->total_ns * 1e-9, peak = sim_target_te_peak_flops(t);
    char key[64];

    cJSON_AddNumberToObject(s, "total_time", T);
    cJSON_AddNumberToObject(s, "total_active_time", p->active_ns * 1e-9);
    cJSON_AddNumberToObject(s, "total_active_time_percent",
                            p->total_ns > 0 ? 100.0 * p->active_ns / p->total_ns : 0);
    cJSON_AddNumberToObject(s, "neuroncore_cycle_count", round(p->total_ns * t->nc_clock_ghz));
    cJSON_AddNumberToObject(s, "model_flops", (double)p->model_flops);
    cJSON_AddNumberToObject(s, "hardware_flops", (double)p->hardware_flops);
    cJSON_AddNumberToObject(s, "transpose_flops", (double)p->transpose_flops);
    cJSON_AddNumberToObject(s, "adjusted_hardware_flops", p->adjusted_hardware_flops);
    cJSON_AddNumberToObject(s, "mm_arithmetic_intensity",
                            p->hbm_read + p->hbm_write
                                ? (double)p->matmul_flops / (double)(p->hbm_read + p->hbm_write)
                                : 0);
    cJSON_AddNumberToObject(s, "peak_flops_bandwidth_ratio", peak / (t->hbm_bpns * 1e9));
    cJSON_AddNumberToObject(s, "mfu_estimated_percent",
                            T > 0 ? 100.0 * (double)p->matmul_flops / (peak * T) : 0);
    cJSON_AddNumberToObject(s, "hfu_estimated_percent",
                            T > 0 ? 100.0 * (double)p->hardware_flops / (peak * T) : 0);
    cJSON_AddNumberToObject(s, "mbu_estimated_percent",
                            T > 0 ? 100.0 * (double)(p->hbm_read + p->hbm_write) / T /
                                        (t->hbm_bpns * 1e9)
                                  : 0);
    for (unsigned e = 0; e < SIM_ENG_DMA; e++) {
        const char *en = sim_engine_name((sim_engine)e);
        double busy = sim_ps_to_ns(p->tm.track_busy_ps[e]) * 1e-9;
        snprintf(key, sizeof(key), "%s_engine_instruction_time", en);
        cJSON_AddNumberToObject(s, key, busy);
        snprintf(key, sizeof(key), "%s_engine_active_time", en);
        cJSON_AddNumberToObject(s, key, busy);
        snprintf(key, sizeof(key), "%s_engine_active_time_percent", en);
        cJSON_AddNumberToObject(s, key, T > 0 ? 100.0 * busy / T : 0);
        snprintf(key, sizeof(key), "%s_engine_instruction_count", en);
        cJSON_AddNumberToObject(s, key, (double)p->tm.track_count[e]);
    }
    cJSON_AddNumberToObject(s, "matmul_instruction_count", (double)p->matmul_count);
    cJSON_AddNumberToObject(s, "activate_instruction_count", (double)p->activate_count);
    cJSON_AddNumberToObject(s, "activate_instruction_time", p->activate_ns * 1e-9);
    double dma_time = 0;
    for (uint32_t q = SIM_TRACK_DMA0; q < p->tm.n_tracks; q++)
        dma_time += sim_ps_to_ns(p->tm.track_busy_ps[q]);
    cJSON_AddNumberToObject(s, "dma_active_time", p->dma_active_ns * 1e-9);
    cJSON_AddNumberToObject(s, "dma_active_time_percent",
                            p->total_ns > 0 ? 100.0 * p->dma_active_ns / p->total_ns : 0);
    cJSON_AddNumberToObject(s, "dma_transfer_count", (double)p->dma_count);
    cJSON_AddNumberToObject(s, "dma_transfer_total_bytes", (double)p->dma_bytes);
    cJSON_AddNumberToObject(s, "dma_transfer_average_bytes",
                            p->dma_count ? (double)p->dma_bytes / (double)p->dma_count : 0);
    cJSON_AddNumberToObject(s, "dma_transfer_time", dma_time * 1e-9);
    cJSON_AddNumberToObject(s, "dma_queue_count", (double)p->dma_queues_used);
    cJSON_AddNumberToObject(s, "hbm_read_bytes", (double)p->hbm_read);
    cJSON_AddNumberToObject(s, "hbm_write_bytes", (double)p->hbm_write);
    cJSON_AddNumberToObject(s, "sbuf_read_bytes", (double)p->sbuf_read);
    cJSON_AddNumberToObject(s, "sbuf_write_bytes", (double)p->sbuf_write);
    cJSON_AddNumberToObject(s, "psum_read_bytes", (double)p->psum_read);
    cJSON_AddNumberToObject(s, "psum_write_bytes", (double)p->psum_write);
    cJSON_AddNumberToObject(s, "psum_read_sbuf_write_count", (double)p->psum_to_sbuf_count);
    cJSON_AddNumberToObject(s, "psum_read_sbuf_write_bytes", (double)p->psum_to_sbuf_bytes);
    cJSON_AddNumberToObject(s, "inputs_outputs_weights_size_bytes", (double)p->io_bytes);
    cJSON_AddNumberToObject(s, "lowered_fused_copies", (double)p->lower.fused_copies);
    cJSON_AddNumberToObject(s, "lowered_dead_memsets", (double)p->lower.dead_memsets);
    cJSON_AddNumberToObject(s, "lowered_hoisted", (double)p->lower.hoisted);
    cJSON_AddNumberToObject(s, "lowered_column_scalars", (double)p->lower.column_scalars);
    cJSON_AddNumberToObject(s, "lowered_reordered", (double)p->lower.reordered);
    return s;
}

char *sim_profile_summary_json(const sim_profile *p)
{
    cJSON *s = summary_obj(p);
    char *txt = cJSON_PrintUnformatted(s);
    cJSON_Delete(s);
    return txt;
}

char *sim_profile_json(const sim_profile *p)
{
    cJSON *root = cJSON_CreateObject(), *b, *fa, *la, *waits;
    char lb[512];

    cJSON_AddStringToObject(root, "schema", "kforge-profile/1");
    cJSON_AddStringToObject(root, "target", p->tgt.name);
    cJSON_AddItemToObject(root, "summary", summary_obj(p));
    b = cJSON_AddObjectToObject(root, "bounds");
    cJSON_AddNumberToObject(b, "compute_ns", p->bounds.compute_ns);
    cJSON_AddNumberToObject(b, "memory_ns", p->bounds.memory_ns);
    cJSON_AddNumberToObject(b, "necessary_io_ns", p->bounds.io_ns);
    cJSON_AddNumberToObject(b, "pipeline_ns", p->bounds.pipeline_ns);
    cJSON_AddStringToObject(b, "pipeline_engine", p->bounds.pipeline_engine);
    cJSON_AddStringToObject(b, "tightest", p->bounds.tightest);
    cJSON_AddNumberToObject(b, "tightest_ns", p->bounds.tightest_ns);
    cJSON_AddNumberToObject(b, "total_ns", p->total_ns);
    cJSON_AddNumberToObject(b, "achieved_fraction", p->bounds.achieved_fraction);
    waits = cJSON_AddObjectToObject(root, "stall_ns_by_cause");
    for (int w = 0; w < SIM_WAIT__COUNT; w++)
        if (w != SIM_WAIT_NONE)
            cJSON_AddNumberToObject(waits, sim_wait_name((sim_wait)w),
                                    sim_ps_to_ns(p->tm.wait_ps[w]));
    fa = cJSON_AddArrayToObject(root, "findings");
    for (size_t i = 0; i < p->n_findings; i++) {
        const sim_finding *f = &p->findings[i];
        cJSON *o = cJSON_CreateObject(), *ls, *ev;
        cJSON_AddNumberToObject(o, "rank", (double)(i + 1));
        cJSON_AddStringToObject(o, "kind", sim_finding_name(f->kind));
        cJSON_AddStringToObject(o, "title", sim_finding_title(f->kind));
        cJSON_AddNumberToObject(o, "cost_ns", f->cost_ns);
        cJSON_AddStringToObject(o, "message", f->message);
        ev = cJSON_Parse(f->evidence);
        cJSON_AddItemToObject(o, "evidence", ev ? ev : cJSON_CreateObject());
        ls = cJSON_AddArrayToObject(o, "lines");
        for (unsigned k = 0; k < f->n_locs; k++) {
            cJSON *lo = cJSON_CreateObject();
            cJSON_AddStringToObject(lo, "nki_source_location",
                                    sim_profile_loc(p, f->locs[k], lb, sizeof(lb)));
            cJSON_AddNumberToObject(lo, "cost_ns", f->loc_ns[k]);
            cJSON_AddItemToArray(ls, lo);
        }
        cJSON_AddItemToArray(fa, o);
    }
    la = cJSON_AddArrayToObject(root, "lines");
    for (size_t i = 0; i < p->n_lines; i++) {
        const sim_line *l = &p->lines[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "nki_source_location", sim_profile_loc(p, l->loc, lb, sizeof(lb)));
        cJSON_AddStringToObject(o, "engine", sim_engine_name((sim_engine)l->engine));
        cJSON_AddNumberToObject(o, "instructions", (double)l->count);
        cJSON_AddNumberToObject(o, "time_ns", l->time_ns);
        cJSON *be = cJSON_AddObjectToObject(o, "time_ns_by_engine");
        for (int e = 0; e < SIM_ENG__COUNT; e++)
            if (l->engine_ns[e] > 0)
                cJSON_AddNumberToObject(be, sim_engine_name((sim_engine)e), l->engine_ns[e]);
        cJSON_AddNumberToObject(o, "stall_ns", l->stall_ns);
        cJSON_AddNumberToObject(o, "dma_bytes", (double)l->dma_bytes);
        cJSON_AddNumberToObject(o, "flops", (double)l->flops);
        cJSON_AddItemToArray(la, o);
    }
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    return txt;
}

kf_code sim_profile_write_instructions(const sim_profile *p, FILE *f, kf_err *err)
{
    const sim_record *r = p->rec;
    char **lt = pf_loc_table(p);

    fputs("{\"instructions\":[\n", f);
    for (size_t i = 0; i < r->n_insns; i++) {
        const sim_insn *in = &r->insns[i];
        const sim_timed *tm = &p->tm.t[i];
        pf_line l;
        uint64_t bytes = 0;
        for (unsigned k = 0; k < in->nsrc; k++)
            bytes += in->src[k].bytes;
        for (unsigned k = 0; k < in->ndst; k++)
            bytes += in->dst[k].bytes;
        l.n = 0;
        pf_s(&l, i ? ",\n{\"index\":" : "{\"index\":");
        pf_u64(&l, i);
        pf_s(&l, ",\"engine\":");
        pf_jstr(&l, sim_engine_name((sim_engine)in->engine));
        pf_s(&l, ",\"opcode\":");
        pf_jstr(&l, sim_opcode_name((sim_opcode)in->opcode));
        pf_s(&l, ",\"start_ns\":");
        pf_fixed(&l, tm->start_ps, 3);
        pf_s(&l, ",\"duration_ns\":");
        pf_fixed(&l, tm->end_ps - tm->start_ps, 3);
        pf_s(&l, ",\"wait_ns\":");
        pf_fixed(&l, tm->start_ps - tm->free_ps, 3);
        pf_s(&l, ",\"wait\":");
        pf_jstr(&l, sim_wait_name((sim_wait)tm->wait));
        pf_s(&l, ",\"bytes\":");
        pf_u64(&l, bytes);
        pf_s(&l, ",\"flops\":");
        pf_u64(&l, in->flops);
        pf_s(&l, ",\"nki_source_location\":");
        pf_jstr(&l, pf_loc(lt, p, in->loc));
        pf_s(&l, "}");
        pf_flush(&l, f);
    }
    fputs("\n]}\n", f);
    pf_loc_table_free(lt, p);
    if (fflush(f) != 0 || ferror(f))
        return kf_err_set(err, KF_IO, "writing the instruction table failed: %s",
                          strerror(errno));
    return KF_OK;
}

void sim_profile_print(FILE *f, const sim_profile *p)
{
    const sim_bounds *b = &p->bounds;
    double T = p->total_ns;
    double peak = sim_target_te_peak_flops(&p->tgt);
    char t1[32], t2[32], t3[32], t4[32], t5[32], lb[512];

    fprintf(f, "kforge profile  target %s  %zu instructions\n", p->tgt.name, p->rec->n_insns);
    fprintf(f, "total %s   MFU %.1f%%  HFU %.1f%%  MBU %.1f%%\n", human_ns(T, t1, sizeof(t1)),
            T > 0 ? 100.0 * (double)p->matmul_flops / (peak * T * 1e-9) : 0.0,
            T > 0 ? 100.0 * (double)p->hardware_flops / (peak * T * 1e-9) : 0.0,
            T > 0 ? 100.0 * (double)(p->hbm_read + p->hbm_write) / (T * p->tgt.hbm_bpns) : 0.0);
    fprintf(f, "active ");
    for (unsigned e = 0; e < SIM_ENG_DMA; e++)
        fprintf(f, "%s %.1f%%  ", sim_engine_name((sim_engine)e),
                T > 0 ? 100.0 * sim_ps_to_ns(p->tm.track_busy_ps[e]) / T : 0.0);
    fprintf(f, "dma %.1f%%\n", T > 0 ? 100.0 * p->dma_active_ns / T : 0.0);
    fprintf(f, "dma %llu transfers, %s (avg %s), hbm read %s write %s\n",
            (unsigned long long)p->dma_count, human_bytes((double)p->dma_bytes, t1, sizeof(t1)),
            human_bytes(p->dma_count ? (double)p->dma_bytes / (double)p->dma_count : 0, t2, sizeof(t2)),
            human_bytes((double)p->hbm_read, t3, sizeof(t3)),
            human_bytes((double)p->hbm_write, t4, sizeof(t4)));
    fprintf(f, "bounds: compute %s | memory %s | necessary IO %s | pipeline %s (%s)\n",
            human_ns(b->compute_ns, t1, sizeof(t1)), human_ns(b->memory_ns, t2, sizeof(t2)),
            human_ns(b->io_ns, t3, sizeof(t3)), human_ns(b->pipeline_ns, t4, sizeof(t4)),
            b->pipeline_engine);
    fprintf(f, "        tightest: %s %s, achieved %.1f%% of it\n", b->tightest,
            human_ns(b->tightest_ns, t5, sizeof(t5)), 100.0 * b->achieved_fraction);
    if (!p->n_findings)
        fprintf(f, "findings: none above 1%% of the run\n");
    else
        fprintf(f, "findings (by estimated cost):\n");
    for (size_t i = 0; i < p->n_findings && i < 6; i++) {
        const sim_finding *fd = &p->findings[i];
        fprintf(f, "%2zu. [%s, %.0f%%] %s\n    %s\n", i + 1,
                human_ns(fd->cost_ns, t1, sizeof(t1)), T > 0 ? 100.0 * fd->cost_ns / T : 0.0,
                sim_finding_title(fd->kind), fd->message);
    }
    fprintf(f, "top lines (busy time; stall = waits before starting):\n");
    for (size_t i = 0; i < p->n_lines && i < 5; i++) {
        const sim_line *l = &p->lines[i];
        fprintf(f, "  %-28s %-6s %7llu insns  busy %s  stall %s\n",
                sim_profile_loc(p, l->loc, lb, sizeof(lb)), sim_engine_name((sim_engine)l->engine),
                (unsigned long long)l->count, human_ns(l->time_ns, t1, sizeof(t1)),
                human_ns(l->stall_ns, t2, sizeof(t2)));
    }
    /* The lines that keep the bottleneck engine busy. */
    int pe = -1;
    for (int e = 0; e < SIM_ENG__COUNT; e++)
        if (b->pipeline_engine && strcmp(b->pipeline_engine, sim_engine_name((sim_engine)e)) == 0)
            pe = e;
    if (pe >= 0 && p->n_lines) {
        uint32_t top[3] = { 0, 0, 0 };
        double tv[3] = { 0, 0, 0 };
        for (size_t i = 0; i < p->n_lines; i++) {
            double v = p->lines[i].engine_ns[pe];
            for (int k = 0; k < 3; k++)
                if (v > tv[k]) {
                    for (int j = 2; j > k; j--) {
                        tv[j] = tv[j - 1];
                        top[j] = top[j - 1];
                    }
                    tv[k] = v;
                    top[k] = p->lines[i].loc;
                    break;
                }
        }
        fprintf(f, "busiest engine %s:", b->pipeline_engine);
        for (int k = 0; k < 3 && tv[k] > 0; k++)
            fprintf(f, "%s %s %s", k ? "," : "", sim_profile_loc(p, top[k], lb, sizeof(lb)),
                    human_ns(tv[k], t1, sizeof(t1)));
        fprintf(f, "\n");
    }
}
