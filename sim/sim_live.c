/* sim_live — liveness and placement of on-chip tiles (see sim_live.h). */
#include "sim_live.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "sim_core.h"

#define BANK ((uint64_t)SIMC_PSUM_BANK_BYTES)

/* ---- liveness ------------------------------------------------------------ */

static void touch(sim_record *rec, const sim_region *r, uint32_t i)
{
    sim_alloc *a;
    if (r->alloc >= rec->n_allocs)
        return;
    a = &rec->allocs[r->alloc];
    if (a->mem == SIM_MEM_HBM)
        return;
    if (a->live_first == UINT32_MAX)
        a->live_first = i;
    a->live_used = 1;
    a->live_last = i;
}

/* Time keys: instruction i at position 2i+1, the gap before instruction b
 * at 2b, ordered within a gap by the allocation/release sequence. */
#define SEQ_BITS 31
#define SEQ_MASK (((uint64_t)1 << SEQ_BITS) - 1)

static uint64_t key_insn(uint64_t i)
{
    return (2 * i + 1) << SEQ_BITS;
}

static uint64_t key_gap(uint64_t b, uint32_t seq)
{
    return (2 * b) << SEQ_BITS | (seq & SEQ_MASK);
}

typedef struct live_ctx {
    sim_alloc *al;
    uint64_t  *s, *e;        /* per allocation: first and last key it is live (inclusive) */
} live_ctx;

static void liveness(sim_record *rec, live_ctx *lc)
{
    for (size_t a = 0; a < rec->n_allocs; a++) {
        rec->allocs[a].live_first = UINT32_MAX;
        rec->allocs[a].live_last = 0;
        rec->allocs[a].live_used = 0;
    }
    for (size_t i = 0; i < rec->n_insns; i++) {
        const sim_insn *in = &rec->insns[i];
        for (unsigned k = 0; k < in->nsrc && k < SIM_INSN_MAX_SRC; k++)
            touch(rec, &in->src[k], (uint32_t)i);
        for (unsigned k = 0; k < in->ndst && k < SIM_INSN_MAX_DST; k++)
            touch(rec, &in->dst[k], (uint32_t)i);
    }
    for (size_t a = 0; a < rec->n_allocs; a++) {
        sim_alloc *al = &rec->allocs[a];
        if (al->live_used) {
            lc->s[a] = key_insn(al->live_first);
            lc->e[a] = key_insn(al->live_last);
            continue;
        }
        /* Never used: held while Python holds it (a kernel keeping tiles in
         * a list keeps their memory), which may be between instructions. */
        al->live_first = al->born;
        al->live_last = al->died == UINT32_MAX ? (uint32_t)rec->n_insns : al->died;
        lc->s[a] = key_gap(al->born, al->born_seq);
        lc->e[a] = al->died == UINT32_MAX ? key_gap(rec->n_insns, (uint32_t)SEQ_MASK)
                                          : key_gap(al->died, al->died_seq) - 1;
        if (lc->e[a] < lc->s[a])
            lc->e[a] = lc->s[a];
    }
}

/* ---- placement ----------------------------------------------------------- */

/* The first legal offset at or after `at` for a. */
static uint64_t legal_pos(const sim_alloc *a, uint64_t at)
{
    if (a->place == SIM_PLACE_BANKS)
        return (at + BANK - 1) / BANK * BANK;
    if (a->place == SIM_PLACE_IN_BANK && a->reserve <= BANK && at / BANK != (at + a->reserve - 1) / BANK)
        return (at / BANK + 1) * BANK;
    return at;
}

static bool time_overlap(const live_ctx *lc, uint32_t a, uint32_t b)
{
    return lc->s[a] <= lc->e[b] && lc->s[b] <= lc->e[a];
}

static bool byte_overlap(const sim_alloc *a, uint64_t a_off, const sim_alloc *b)
{
    return a_off < b->live_offset + b->reserve && b->live_offset < a_off + a->reserve;
}

typedef struct plan_fail {
    uint32_t id;              /* the tile that found no place (UINT32_MAX: none) */
    uint32_t other;           /* a hint conflict: the hinted tile it collides with */
    bool     hint_conflict;
} plan_fail;

static int cmp_id(uint32_t x, uint32_t y)
{
    return x < y ? -1 : (x > y);
}

static int cmp_by_start(const void *x, const void *y, void *ctx)
{
    const live_ctx *lc = ctx;
    uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
    const sim_alloc *a = &lc->al[i], *b = &lc->al[j];
    bool fa = a->place == SIM_PLACE_FIXED, fb = b->place == SIM_PLACE_FIXED;
    if (lc->s[i] != lc->s[j])
        return lc->s[i] < lc->s[j] ? -1 : 1;
    if (fa != fb)
        return fa ? -1 : 1;
    if (a->reserve != b->reserve)
        return a->reserve > b->reserve ? -1 : 1;
    return cmp_id(i, j);
}

static int cmp_by_size(const void *x, const void *y, void *ctx)
{
    const live_ctx *lc = ctx;
    uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
    const sim_alloc *a = &lc->al[i], *b = &lc->al[j];
    bool fa = a->place == SIM_PLACE_FIXED, fb = b->place == SIM_PLACE_FIXED;
    if (fa != fb)
        return fa ? -1 : 1;
    if (a->reserve != b->reserve)
        return a->reserve > b->reserve ? -1 : 1;
    if (lc->s[i] != lc->s[j])
        return lc->s[i] < lc->s[j] ? -1 : 1;
    return cmp_id(i, j);
}

static int cmp_by_offset(const void *x, const void *y, void *ctx)
{
    const live_ctx *lc = ctx;
    uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
    if (lc->al[i].live_offset != lc->al[j].live_offset)
        return lc->al[i].live_offset < lc->al[j].live_offset ? -1 : 1;
    return cmp_id(i, j);
}

/* A hinted tile against the tiles in `others` (count n): 0 when its bytes
 * are free, -1 with *f filled when they are not. */
static int place_fixed(const sim_alloc *al, uint32_t id, const uint32_t *others, size_t n,
                       uint64_t cap, plan_fail *f)
{
    const sim_alloc *a = &al[id];
    if (a->hint_offset > cap || cap - a->hint_offset < a->reserve) {
        f->id = id;
        return -1;
    }
    for (size_t j = 0; j < n; j++) {
        if (byte_overlap(a, a->hint_offset, &al[others[j]])) {
            f->id = id;
            f->other = others[j];
            f->hint_conflict = al[others[j]].place == SIM_PLACE_FIXED;
            return -1;
        }
    }
    return 0;
}

/* The lowest (best_fit: the tightest) legal offset for a among `live`
 * (sorted by offset; they may overlap each other) below cap. */
static int find_gap(const sim_alloc *al, const sim_alloc *a, const uint32_t *live, size_t n,
                    uint64_t cap, bool best_fit, uint64_t *off)
{
    uint64_t prev_end = 0, best = UINT64_MAX, best_waste = UINT64_MAX;
    for (size_t j = 0; j <= n; j++) {
        uint64_t gap_end = j < n ? al[live[j]].live_offset : cap;
        uint64_t pos = legal_pos(a, prev_end);
        if (gap_end > cap)
            gap_end = cap;
        if (pos <= gap_end && gap_end - pos >= a->reserve) {
            uint64_t waste = gap_end - prev_end - a->reserve;
            if (!best_fit) {
                *off = pos;
                return 0;
            }
            if (waste < best_waste) {
                best = pos;
                best_waste = waste;
            }
        }
        if (j < n && al[live[j]].live_offset + al[live[j]].reserve > prev_end)
            prev_end = al[live[j]].live_offset + al[live[j]].reserve;
    }
    if (best == UINT64_MAX)
        return -1;
    *off = best;
    return 0;
}

/* Liveness order, best fit: the tiles live at each start are the only
 * constraints. */
static int place_sweep(live_ctx *lc, uint32_t *ids, size_t n, uint64_t cap, plan_fail *f)
{
    sim_alloc *al = lc->al;
    uint32_t *live = kf_malloc((n ? n : 1) * sizeof(*live));
    size_t nl = 0;
    int rc = 0;

    qsort_r(ids, n, sizeof(*ids), cmp_by_start, lc);
    for (size_t i = 0; i < n && rc == 0; i++) {
        sim_alloc *a = &al[ids[i]];
        size_t k = 0, at;
        uint64_t off;
        for (size_t j = 0; j < nl; j++)
            if (lc->e[live[j]] >= lc->s[ids[i]])
                live[k++] = live[j];
        nl = k;
        if (a->place == SIM_PLACE_FIXED) {
            if (place_fixed(al, ids[i], live, nl, cap, f) < 0) {
                rc = -1;
                break;
            }
            off = a->hint_offset;
        } else if (find_gap(al, a, live, nl, cap, true, &off) < 0) {
            f->id = ids[i];
            rc = -1;
            break;
        }
        a->live_offset = off;
        for (at = nl; at > 0 && cmp_by_offset(&live[at - 1], &ids[i], lc) > 0; at--)
            live[at] = live[at - 1];
        live[at] = ids[i];
        nl++;
    }
    free(live);
    return rc;
}

/* Decreasing size, lowest offset clear of every placed tile whose
 * liveness overlaps: places what the sweep's greedy order fragments. */
static int place_by_size(live_ctx *lc, uint32_t *ids, size_t n, uint64_t cap, plan_fail *f)
{
    sim_alloc *al = lc->al;
    uint32_t *conf = kf_malloc((n ? n : 1) * sizeof(*conf));
    int rc = 0;

    qsort_r(ids, n, sizeof(*ids), cmp_by_size, lc);
    for (size_t i = 0; i < n && rc == 0; i++) {
        sim_alloc *a = &al[ids[i]];
        size_t nc = 0;
        uint64_t off;
        for (size_t j = 0; j < i; j++)
            if (time_overlap(lc, ids[i], ids[j]))
                conf[nc++] = ids[j];
        if (a->place == SIM_PLACE_FIXED) {
            if (place_fixed(al, ids[i], conf, nc, cap, f) < 0)
                rc = -1;
            else
                a->live_offset = a->hint_offset;
            continue;
        }
        qsort_r(conf, nc, sizeof(*conf), cmp_by_offset, lc);
        if (find_gap(al, a, conf, nc, cap, false, &off) < 0) {
            f->id = ids[i];
            rc = -1;
        } else {
            a->live_offset = off;
        }
    }
    free(conf);
    return rc;
}

/* ---- errors -------------------------------------------------------------- */

static const char *rstr(const sim_record *rec, uint32_t id)
{
    return id < rec->n_strs && rec->strs[id] ? rec->strs[id] : "";
}

static const sim_loc *rloc(const sim_record *rec, uint32_t id)
{
    return id < rec->n_locs ? &rec->locs[id] : NULL;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* "line 12" in the error's file, else "other.py:12"; "?" when unknown. */
static void where(const sim_record *rec, uint32_t loc, const char *err_file, char *buf, size_t len)
{
    const sim_loc *l = rloc(rec, loc);
    if (!l)
        snprintf(buf, len, "?");
    else if (strcmp(rstr(rec, l->file), err_file) == 0)
        snprintf(buf, len, "line %u", l->line);
    else
        snprintf(buf, len, "%s:%u", base_name(rstr(rec, l->file)), l->line);
}

/* Where key k is in the program: the instruction at or after it. */
static void where_key(const sim_record *rec, uint64_t k, const char *err_file, char *buf, size_t len)
{
    uint64_t pos = k >> SEQ_BITS, i = pos / 2;
    if (i < rec->n_insns)
        where(rec, rec->insns[i].loc, err_file, buf, len);
    else
        snprintf(buf, len, "the end");
}

static int cmp_listing(const void *x, const void *y, void *ctx)
{
    const live_ctx *lc = ctx;
    uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
    if (lc->al[i].reserve != lc->al[j].reserve)
        return lc->al[i].reserve > lc->al[j].reserve ? -1 : 1;
    return cmp_id(i, j);
}

/* The tiles of ids live at key t into live[]; their count. */
static size_t live_at(const live_ctx *lc, const uint32_t *ids, size_t n, uint64_t t, uint32_t *live)
{
    size_t nl = 0;
    for (size_t i = 0; i < n; i++)
        if (lc->s[ids[i]] <= t && t <= lc->e[ids[i]])
            live[nl++] = ids[i];
    return nl;
}

/* Append the tiles of `ids` live at key t, largest first, to buf. */
static void list_live(const sim_record *rec, live_ctx *lc, const uint32_t *ids, size_t n, uint64_t t,
                      const char *err_file, char *buf, size_t len)
{
    uint32_t *live = kf_malloc((n ? n : 1) * sizeof(*live));
    size_t nl = live_at(lc, ids, n, t, live), used = strlen(buf), shown = 0;

    qsort_r(live, nl, sizeof(*live), cmp_listing, lc);
    for (size_t i = 0; i < nl; i++) {
        const sim_alloc *a = &rec->allocs[live[i]];
        char at[80], since[96], item[320];
        const char *name = rstr(rec, a->name);
        int w;
        where(rec, a->loc, err_file, at, sizeof(at));
        if (!a->live_used)
            snprintf(since, sizeof(since), "never used, held by the kernel");
        else if (a->live_first < rec->n_insns)
            where(rec, rec->insns[a->live_first].loc, err_file, since, sizeof(since));
        else
            snprintf(since, sizeof(since), "?");
        w = snprintf(item, sizeof(item), "%s%s%.48s%s %llu B from %s (live since %s)", shown ? "; " : "",
                     name[0] ? "'" : "", name[0] ? name : "unnamed", name[0] ? "'" : "",
                     (unsigned long long)a->reserve, at, since);
        if (w < 0 || used + (size_t)w + 24 >= len) {
            snprintf(buf + used, len - used, "%s+%zu more", shown ? "; " : "", nl - i);
            break;
        }
        memcpy(buf + used, item, (size_t)w + 1);
        used += (size_t)w;
        shown++;
    }
    free(live);
}

static void set_err(const sim_record *rec, sim_error *serr, sim_error_code code, const sim_alloc *a)
{
    const sim_loc *l = rloc(rec, a->loc);
    sim_error_clear(serr);
    serr->code = code;
    if (l) {
        snprintf(serr->file, sizeof(serr->file), "%s", rstr(rec, l->file));
        serr->line = (int)l->line;
        snprintf(serr->func, sizeof(serr->func), "%s", rstr(rec, l->func));
    }
    snprintf(serr->api, sizeof(serr->api), "%s", rstr(rec, a->api));
}

/* ---- per memory ---------------------------------------------------------- */

typedef struct live_ev {
    uint64_t key;
    int64_t  delta;
} live_ev;

static int cmp_ev(const void *x, const void *y)
{
    const live_ev *a = x, *b = y;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return (a->delta > b->delta) - (a->delta < b->delta);   /* ends first */
}

/* Most bytes live at once among ids, and the first key where it is reached. */
static uint64_t peak_of(const live_ctx *lc, const uint32_t *ids, size_t n, uint64_t *peak_key)
{
    live_ev *ev = kf_malloc((2 * n + 1) * sizeof(*ev));
    uint64_t peak = 0;
    int64_t cur = 0;
    for (size_t i = 0; i < n; i++) {
        ev[2 * i].key = lc->s[ids[i]];
        ev[2 * i].delta = (int64_t)lc->al[ids[i]].reserve;
        ev[2 * i + 1].key = lc->e[ids[i]] + 1;
        ev[2 * i + 1].delta = -(int64_t)lc->al[ids[i]].reserve;
    }
    qsort(ev, 2 * n, sizeof(*ev), cmp_ev);
    *peak_key = 0;
    for (size_t i = 0; i < 2 * n; i++) {
        cur += ev[i].delta;
        if (cur > 0 && (uint64_t)cur > peak) {
            peak = (uint64_t)cur;
            *peak_key = ev[i].key;
        }
    }
    free(ev);
    return peak;
}

static int plan_mem(sim_record *rec, live_ctx *lc, sim_mem mem, uint64_t cap, sim_live_stats *st,
                    sim_error *serr)
{
    sim_alloc *al = rec->allocs;
    uint32_t *ids = kf_malloc((rec->n_allocs ? rec->n_allocs : 1) * sizeof(*ids));
    const char *mname = mem == SIM_MEM_SBUF ? "SBUF" : "PSUM";
    size_t n = 0;
    uint64_t peak, peak_key, extent = 0;
    plan_fail f = { UINT32_MAX, UINT32_MAX, false };
    int rc;

    for (size_t a = 0; a < rec->n_allocs; a++) {
        if (al[a].mem != mem || al[a].reserve == 0)
            continue;
        ids[n++] = (uint32_t)a;
        al[a].live_offset = 0;
    }
    peak = peak_of(lc, ids, n, &peak_key);
    rc = place_sweep(lc, ids, n, cap, &f);
    if (rc < 0 && !f.hint_conflict && peak <= cap && n <= SIM_LIVE_REPLACE_MAX) {
        f.id = UINT32_MAX;
        f.other = UINT32_MAX;
        rc = place_by_size(lc, ids, n, cap, &f);
    }
    if (rc == 0) {
        for (size_t i = 0; i < n; i++)
            if (al[ids[i]].live_offset + al[ids[i]].reserve > extent)
                extent = al[ids[i]].live_offset + al[ids[i]].reserve;
    } else if (f.hint_conflict) {
        const sim_alloc *a = &al[f.id], *b = &al[f.other];
        char at[80];
        const char *other = rstr(rec, b->name);
        uint64_t a_end = a->hint_offset + a->reserve, b_end = b->live_offset + b->reserve;
        set_err(rec, serr, SIM_E_BAD_ARGUMENT, a);
        where(rec, b->loc, serr->file, at, sizeof(at));
        snprintf(serr->values, sizeof(serr->values),
                 "the allocation hint puts this %s tile at bytes [%llu, %llu) of each partition, "
                 "where the hinted tile %s%.48s%s from %s lives at the same time at [%llu, %llu)",
                 mname, (unsigned long long)a->hint_offset,
                 (unsigned long long)a_end, other[0] ? "'" : "",
                 other[0] ? other : "(unnamed)", other[0] ? "'" : "", at,
                 (unsigned long long)b->live_offset, (unsigned long long)b_end);
    } else {
        sim_error_code code = mem == SIM_MEM_SBUF ? SIM_E_SBUF_CAPACITY : SIM_E_PSUM_CAPACITY;
        uint64_t t;
        char at[80];
        if (peak > cap) {
            /* the tile that takes the live bytes over the capacity at the peak */
            uint64_t sum = 0;
            uint32_t *live = kf_malloc((n ? n : 1) * sizeof(*live));
            size_t nl = live_at(lc, ids, n, peak_key, live);
            qsort_r(live, nl, sizeof(*live), cmp_by_start, lc);
            if (nl)
                f.id = live[nl - 1];
            for (size_t i = 0; i < nl; i++) {
                sum += al[live[i]].reserve;
                if (sum > cap) {
                    f.id = live[i];
                    break;
                }
            }
            free(live);
            t = peak_key;
            set_err(rec, serr, code, &al[f.id]);
            where_key(rec, t, serr->file, at, sizeof(at));
            snprintf(serr->values, sizeof(serr->values),
                     "size: %llu bytes per partition live at once at %s, capacity %llu; live: ",
                     (unsigned long long)peak, at, (unsigned long long)cap);
        } else {
            const sim_alloc *a = &al[f.id];
            t = lc->s[f.id];
            set_err(rec, serr, code, a);
            snprintf(serr->values, sizeof(serr->values),
                     "fragmentation: a tile of %llu bytes per partition%s finds no gap although "
                     "at most %llu of %llu bytes are live at once; live: ",
                     (unsigned long long)a->reserve,
                     a->place == SIM_PLACE_IN_BANK ? " (inside one 2 KiB bank)"
                     : a->place == SIM_PLACE_BANKS ? " (whole banks)"
                     : a->place == SIM_PLACE_FIXED ? " (at its hinted address)" : "",
                     (unsigned long long)peak, (unsigned long long)cap);
        }
        list_live(rec, lc, ids, n, t, serr->file, serr->values, sizeof(serr->values));
    }
    if (st) {
        uint64_t pi = (peak_key >> SEQ_BITS) / 2;
        st->peak[mem] = peak;
        st->peak_at[mem] = pi < rec->n_insns ? (uint32_t)pi : (uint32_t)rec->n_insns;
        st->extent[mem] = extent;
    }
    free(ids);
    return rc;
}

int sim_live_plan(sim_record *rec, uint64_t sbuf_capacity, uint64_t psum_capacity,
                  sim_live_stats *stats, sim_error *serr)
{
    live_ctx lc;
    int rc;

    if (stats)
        memset(stats, 0, sizeof(*stats));
    if (!rec || rec->n_allocs == 0)
        return 0;
    lc.al = rec->allocs;
    lc.s = kf_calloc(rec->n_allocs, sizeof(*lc.s));
    lc.e = kf_calloc(rec->n_allocs, sizeof(*lc.e));
    liveness(rec, &lc);
    rc = plan_mem(rec, &lc, SIM_MEM_SBUF, sbuf_capacity, stats, serr);
    if (rc == 0)
        rc = plan_mem(rec, &lc, SIM_MEM_PSUM, psum_capacity, stats, serr);
    free(lc.s);
    free(lc.e);
    return rc;
}
