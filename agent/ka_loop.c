/* ka_loop — the tuning loop and its planners (see ka_loop.h). */
#include "ka_loop.h"
#include "ka_result.h"

#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "ka_eval.h"
#include "sim_isa.h"
#include "sim_target.h"

enum {
    KA_DEF_PATIENCE = 8,
    KA_DEF_SEEDS = 3,
    KA_MAX_ENUM = 200000,          /* settings the exhaustive/random planners enumerate */
};

static double ka_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *ka_planner_name(ka_planner p)
{
    switch (p) {
    case KA_PLAN_EXHAUSTIVE: return "exhaustive";
    case KA_PLAN_RANDOM: return "random";
    default: return "guided";
    }
}

int ka_planner_parse(const char *s)
{
    if (!s)
        return -1;
    if (strcmp(s, "guided") == 0 || strcmp(s, "builtin") == 0)
        return KA_PLAN_GUIDED;
    if (strcmp(s, "exhaustive") == 0 || strcmp(s, "grid") == 0)
        return KA_PLAN_EXHAUSTIVE;
    if (strcmp(s, "random") == 0)
        return KA_PLAN_RANDOM;
    return -1;
}

static void ka_sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[32];
    unsigned int n = 0;
    EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
    for (unsigned i = 0; i < 32; i++)
        snprintf(out + (size_t)2 * i, 3, "%02x", md[i]);
}

int ka_default_jobs(void)
{
    cpu_set_t set;
    int n;
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return 1;
    n = CPU_COUNT(&set);
    return n < 1 ? 1 : (n > KA_MAX_JOBS ? KA_MAX_JOBS : n);
}

/* ---- helpers ------------------------------------------------------------ */

static char *ka_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    kf_buf b;
    char chunk[8192];
    size_t n;
    if (!f)
        return NULL;
    kf_buf_init(&b);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0 && b.len < (16u << 20))
        kf_buf_add(&b, chunk, n);
    fclose(f);
    return kf_buf_detach(&b);
}

/* What a timing result depends on besides the kernel and its inputs: the
 * simulator build and the target's description file (a cached result must
 * not outlive a change of either). */
static void ka_model_hash(const char *target, char out[65])
{
    const char *dir = sim_target_default_dir();
    char *path = dir ? kf_asprintf("%s/%s.json", dir, target) : NULL;
    char *desc = path ? ka_slurp(path) : NULL;
    char *all = kf_asprintf("%s|%s|%s", ka_cache_identity(), target, desc ? desc : "");

    ka_sha256_hex(all, strlen(all), out);
    free(all);
    free(desc);
    free(path);
}

static double jnum(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *jstr(const cJSON *o, const char *k, const char *dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

static bool jbool(const cJSON *o, const char *k)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k));
}

static void ka_fmt_value(const cJSON *v, char *buf, size_t len)
{
    if (cJSON_IsString(v))
        snprintf(buf, len, "\"%s\"", v->valuestring);
    else if (cJSON_IsBool(v))
        snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "True" : "False");
    else if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15)
        snprintf(buf, len, "%.0f", v->valuedouble);
    else if (cJSON_IsNumber(v))
        snprintf(buf, len, "%.17g", v->valuedouble);
    else
        snprintf(buf, len, "None");
}

static void ka_fmt_params(const ka_space *sp, const int *idx, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < sp->n && o + 8 < len; i++) {
        char v[96];
        ka_fmt_value(cJSON_GetArrayItem(sp->t[i].values, idx[i]), v, sizeof(v));
        o += (size_t)snprintf(buf + o, len - o, "%s%s=%s", i ? " " : "", sp->t[i].name, v);
    }
}

static double ka_us(double ns)
{
    return ns / 1000.0;
}

char *ka_specialize_source(const char *path, const char *entry, const cJSON *params)
{
    char *src = ka_slurp(path), pat[160];
    const char *def, *p, *close;
    kf_buf out;
    int depth = 0;

    if (!src)
        return NULL;
    snprintf(pat, sizeof(pat), "def %s(", entry);
    def = strstr(src, pat);
    if (!def || !params || !cJSON_GetArraySize(params))
        return src;
    for (close = def + strlen(pat) - 1; *close; close++) {
        if (*close == '(' || *close == '[')
            depth++;
        else if ((*close == ')' || *close == ']') && --depth == 0)
            break;
    }
    if (!*close)
        return src;
    kf_buf_init(&out);
    p = src;
    while (p < close) {
        const cJSON *hit = NULL, *prm;
        if (p > def && (p[-1] == '(' || p[-1] == ' ' || p[-1] == ',' || p[-1] == '\n')) {
            cJSON_ArrayForEach(prm, params)
            {
                size_t n = strlen(prm->string);
                if (strncmp(p, prm->string, n) == 0 && p[n] == '=') {
                    hit = prm;
                    break;
                }
            }
        }
        if (hit) {
            char v[128];
            size_t n = strlen(hit->string);
            const char *q = p + n + 1;
            int d2 = 0;
            char quote = 0;
            for (; q < close; q++) {
                if (quote) {
                    if (*q == quote)
                        quote = 0;
                    continue;
                }
                if (*q == '"' || *q == '\'')
                    quote = *q;
                else if (*q == '(' || *q == '[')
                    d2++;
                else if (*q == ')' || *q == ']')
                    d2--;
                else if (*q == ',' && d2 == 0)
                    break;
            }
            ka_fmt_value(hit, v, sizeof(v));
            kf_buf_add(&out, p, n + 1);
            kf_buf_adds(&out, v);
            p = q;
        } else {
            kf_buf_addc(&out, *p++);
        }
    }
    kf_buf_adds(&out, p);
    free(src);
    return kf_buf_detach(&out);
}

/* ---- the tuner state ----------------------------------------------------- */

typedef struct ka_seen {
    int    idx[KA_MAX_TUNABLES];
    int    state;        /* 0 pruned, 1 compile error, 2 evaluated */
    int    valid;        /* -1 not validated, 0 wrong, 1 correct */
    double latency;
} ka_seen;

typedef struct ka_prop {
    int    idx[KA_MAX_TUNABLES];
    int    moved;        /* the tunable the move is about (-1: several) */
    int    tier;         /* 3 pattern, 2 finding, 1 neighbour, 0 pair */
    double score;
    char   reason[400];
} ka_prop;

typedef struct ka_tuner {
    const ka_problem *pb;
    const ka_space   *sp;
    const ka_opts    *o;
    const ka_hooks   *h;
    ka_cache         *cache;
    char              src_hash[65];
    char              model_hash[65];   /* simulator build + target file; "" for a memory cache */
    char              ref_hash[65];     /* the reference file and entry; "" without one */
    char             *source;
    ka_seen          *seen;
    size_t            n_seen, cap_seen;
    ka_prop          *q;
    size_t            nq, capq;
    bool              pairs_done;
    /* enumerated order (exhaustive/random) */
    int              *order;       /* n_order settings, sp->n ints each */
    size_t            n_order, pos_order;
    /* best */
    bool              have_best;
    int               best[KA_MAX_TUNABLES];
    double            best_lat, best_floor;
    cJSON            *best_timing;
    int               best_iter;
    /* counts */
    int               iter, evals, pruned, validations, rejected, compile_errors, since_improve;
    double            t_start, eval_s, sim_s;
    ka_result         res;          /* path, trace, default: the result as it grows (ka_result.h) */
    /* the template's default setting (or the nearest legal one), and
     * whether the guided planner still owes it an evaluation because the
     * fixed-cost prior started elsewhere */
    int               def_idx[KA_MAX_TUNABLES];
    bool              have_def, default_due;
    int               default_info_idx[KA_MAX_TUNABLES];   /* the setting res.def describes */
    /* the warm start (ka_opts.warm_params): whether the search started
     * from it, and why not when it did not */
    bool              warm_used;
    char              warm_note[200];
    /* speed (ka_opts.jobs, memory_mib): the concurrency, the budget, the
     * largest resident set (KiB) a validation child computing the
     * reference, one reading it, and a timing child have had */
    int               jobs;
    long              budget_kib, rss_ref_kib, rss_val_kib, rss_tim_kib;
    /* the reference outputs per seed, computed once (the seeds are the
     * run's, the reference sees no tunable): files in a private folder */
    char              ref_dir[256];
    bool              ref_have[KA_MAX_SEEDS];
    /* the seeded inputs per seed, made once in that folder (ka_store_inputs):
     * whether stored, and whether making or storing them failed (the
     * children then make them, as without a folder) */
    bool              in_have[KA_MAX_SEEDS], in_failed[KA_MAX_SEEDS];
    /* timing results evaluated ahead of the serial order (--jobs), by key;
     * taken as evaluations when the planner reaches them */
    cJSON            *ahead;
} ka_tuner;

static ka_seen *ka_seen_find(ka_tuner *t, const int *idx)
{
    for (size_t i = 0; i < t->n_seen; i++)
        if (memcmp(t->seen[i].idx, idx, sizeof(int) * (size_t)t->sp->n) == 0)
            return &t->seen[i];
    return NULL;
}

static ka_seen *ka_seen_add(ka_tuner *t, const int *idx, int state)
{
    ka_seen *s;
    if (t->n_seen == t->cap_seen) {
        t->cap_seen = t->cap_seen ? 2 * t->cap_seen : 64;
        t->seen = kf_realloc(t->seen, t->cap_seen * sizeof(*t->seen));
    }
    s = &t->seen[t->n_seen++];
    memset(s, 0, sizeof(*s));
    memcpy(s->idx, idx, sizeof(int) * (size_t)t->sp->n);
    s->state = state;
    s->valid = -1;
    return s;
}

/* Whether idx is the template's default setting (or its nearest legal one). */
static bool ka_is_default(const ka_tuner *t, const int *idx)
{
    return t->have_def && memcmp(idx, t->def_idx, sizeof(int) * (size_t)t->sp->n) == 0;
}

static void ka_push_moved(ka_tuner *t, const int *idx, int moved, int tier, double score, const char *reason);

static void ka_push(ka_tuner *t, const int *idx, int tier, double score, const char *reason)
{
    int moved = -1;
    for (int i = 0; i < t->sp->n; i++) {
        if (idx[i] != t->best[i])
            moved = moved == -1 ? i : -2;
    }
    ka_push_moved(t, idx, moved < 0 ? -1 : moved, tier, score, reason);
}

static void ka_push_moved(ka_tuner *t, const int *idx, int moved, int tier, double score, const char *reason)
{
    ka_prop *p;
    for (size_t i = 0; i < t->nq; i++) {
        if (memcmp(t->q[i].idx, idx, sizeof(int) * (size_t)t->sp->n) == 0) {
            if (tier > t->q[i].tier || (tier == t->q[i].tier && score > t->q[i].score)) {
                t->q[i].tier = tier;
                t->q[i].score = score;
                snprintf(t->q[i].reason, sizeof(t->q[i].reason), "%s", reason);
            }
            return;
        }
    }
    if (ka_seen_find(t, idx))
        return;
    if (t->nq == t->capq) {
        t->capq = t->capq ? 2 * t->capq : 64;
        t->q = kf_realloc(t->q, t->capq * sizeof(*t->q));
    }
    p = &t->q[t->nq++];
    memcpy(p->idx, idx, sizeof(int) * (size_t)t->sp->n);
    p->moved = moved;
    p->tier = tier;
    p->score = score;
    snprintf(p->reason, sizeof(p->reason), "%s", reason);
}

static bool ka_pop(ka_tuner *t, ka_prop *out)
{
    size_t bi = 0;
    if (t->nq == 0)
        return false;
    for (size_t i = 1; i < t->nq; i++) {
        if (t->q[i].tier > t->q[bi].tier || (t->q[i].tier == t->q[bi].tier && t->q[i].score > t->q[bi].score))
            bi = i;
    }
    *out = t->q[bi];
    t->q[bi] = t->q[--t->nq];
    return true;
}

static const char *ka_move_text(const ka_space *sp, int ti, int from, int to, char *buf, size_t len)
{
    char a[96], b[96];
    ka_fmt_value(cJSON_GetArrayItem(sp->t[ti].values, from), a, sizeof(a));
    ka_fmt_value(cJSON_GetArrayItem(sp->t[ti].values, to), b, sizeof(b));
    snprintf(buf, len, "%s %s -> %s", sp->t[ti].name, a, b);
    return buf;
}

/* Moves from the best setting: what its findings ask for, then neighbours. */
static void ka_plan_from_best(ka_tuner *t)
{
    const ka_space *sp = t->sp;
    const cJSON *findings = cJSON_GetObjectItemCaseSensitive(t->best_timing, "findings"), *f;
    double gap = t->best_lat - t->best_floor;
    int idx[KA_MAX_TUNABLES];
    char why[400], mv[200];

    t->nq = 0;
    t->pairs_done = false;
    cJSON_ArrayForEach(f, findings)
    {
        const char *kind = jstr(f, "kind", "");
        double cost = jnum(f, "cost_ns", 0);
        const cJSON *lines = cJSON_GetObjectItemCaseSensitive(f, "lines");
        const char *at = jstr(cJSON_GetArrayItem(lines, 0), "loc", "");
        for (int i = 0; i < sp->n; i++) {
            const cJSON *dir = sp->t[i].addresses ? cJSON_GetObjectItemCaseSensitive(sp->t[i].addresses, kind) : NULL;
            int cur = t->best[i];
            if (!dir || !cJSON_IsString(dir))
                continue;
            /* A finding that costs a large share of the run may need more
             * than two steps of its tunable: propose the longer jumps too,
             * ranked after the near ones. */
            int reach = cost >= 0.25 * t->best_lat ? sp->t[i].n_values : 2;
            for (int j = 0; j < sp->t[i].n_values; j++) {
                int step = j - cur;
                double w;
                if (step == 0)
                    continue;
                if (strcmp(dir->valuestring, "up") == 0 && (step < 1 || step > reach))
                    continue;
                if (strcmp(dir->valuestring, "down") == 0 && (step > -1 || step < -reach))
                    continue;
                w = 1.0 / (double)abs(step);
                memcpy(idx, t->best, sizeof(idx));
                idx[i] = j;
                snprintf(why, sizeof(why), "%s costs %.1f us%s%s; %s addresses it", kind, ka_us(cost),
                         at[0] ? " at " : "", at, ka_move_text(sp, i, cur, j, mv, sizeof(mv)));
                ka_push(t, idx, 2, cost * w, why);
            }
        }
    }
    for (int i = 0; i < sp->n; i++) {
        for (int d = -1; d <= 1; d += 2) {
            int j = t->best[i] + d;
            if (j < 0 || j >= sp->t[i].n_values)
                continue;
            memcpy(idx, t->best, sizeof(idx));
            idx[i] = j;
            snprintf(why, sizeof(why), "no finding points elsewhere and %.1f us remain to the bound; trying the neighbour %s",
                     ka_us(gap), ka_move_text(sp, i, t->best[i], j, mv, sizeof(mv)));
            ka_push(t, idx, 1, gap, why);
        }
    }
}

static void ka_plan_pairs(ka_tuner *t)
{
    const ka_space *sp = t->sp;
    int idx[KA_MAX_TUNABLES];
    char why[400], m1[200], m2[200];
    t->pairs_done = true;
    /* line search: every other value of each tunable, nearest first */
    for (int a = 0; a < sp->n; a++) {
        for (int j = 0; j < sp->t[a].n_values; j++) {
            int dist = abs(j - t->best[a]);
            if (dist < 2)
                continue;
            memcpy(idx, t->best, sizeof(idx));
            idx[a] = j;
            snprintf(why, sizeof(why), "every single move from the best was tried; a longer jump along one "
                     "tunable: %s", ka_move_text(sp, a, t->best[a], j, m1, sizeof(m1)));
            ka_push(t, idx, 0, 2.0 / dist, why);
        }
    }
    for (int a = 0; a < sp->n; a++) {
        for (int b = a + 1; b < sp->n; b++) {
            for (int da = -1; da <= 1; da += 2) {
                for (int db = -1; db <= 1; db += 2) {
                    int ja = t->best[a] + da, jb = t->best[b] + db;
                    if (ja < 0 || jb < 0 || ja >= sp->t[a].n_values || jb >= sp->t[b].n_values)
                        continue;
                    memcpy(idx, t->best, sizeof(idx));
                    idx[a] = ja;
                    idx[b] = jb;
                    snprintf(why, sizeof(why), "every single move from the best was tried; trying the pair %s, %s",
                             ka_move_text(sp, a, t->best[a], ja, m1, sizeof(m1)),
                             ka_move_text(sp, b, t->best[b], jb, m2, sizeof(m2)));
                    ka_push(t, idx, 0, 1, why);
                }
            }
        }
    }
}

static uint64_t ka_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Every legal setting, in lexicographic order (exhaustive) or shuffled
 * (random); illegal ones are counted as pruned. */
static kf_code ka_enumerate(ka_tuner *t, kf_err *err)
{
    const ka_space *sp = t->sp;
    int idx[KA_MAX_TUNABLES] = { 0 };
    size_t total = 1;
    for (int i = 0; i < sp->n; i++) {
        total *= (size_t)sp->t[i].n_values;
        if (total > KA_MAX_ENUM)
            return kf_err_set(err, KF_INVALID, "the space has more than %d settings; use the guided planner", KA_MAX_ENUM);
    }
    t->order = kf_malloc(total * (size_t)(sp->n ? sp->n : 1) * sizeof(int));
    for (size_t k = 0; k < total; k++) {
        bool ok = true;
        kf_code rc = ka_space_legal(sp, idx, &ok, NULL, err);
        if (rc)
            return rc;
        if (ok)
            memcpy(t->order + t->n_order++ * (size_t)sp->n, idx, sizeof(int) * (size_t)sp->n);
        else
            t->pruned++;
        for (int i = sp->n - 1; i >= 0; i--) {
            if (++idx[i] < sp->t[i].n_values)
                break;
            idx[i] = 0;
        }
    }
    if (t->o->planner == KA_PLAN_RANDOM && t->n_order > 1) {
        uint64_t s = t->o->seed ^ 0x5eedULL;
        for (size_t i = t->n_order - 1; i > 0; i--) {
            size_t j = (size_t)(ka_rng(&s) % (i + 1));
            for (int d = 0; d < sp->n; d++) {
                int tmp = t->order[i * (size_t)sp->n + (size_t)d];
                t->order[i * (size_t)sp->n + (size_t)d] = t->order[j * (size_t)sp->n + (size_t)d];
                t->order[j * (size_t)sp->n + (size_t)d] = tmp;
            }
        }
    }
    return KF_OK;
}

/* The next candidate; false when the planner has nothing left. */
static kf_code ka_next(ka_tuner *t, ka_prop *out, bool *have, kf_err *err)
{
    const ka_space *sp = t->sp;
    *have = false;
    if (t->o->planner != KA_PLAN_GUIDED) {
        while (t->pos_order < t->n_order) {
            const int *idx = t->order + t->pos_order++ * (size_t)sp->n;
            if (ka_seen_find(t, idx))
                continue;
            memset(out, 0, sizeof(*out));
            out->moved = -1;
            memcpy(out->idx, idx, sizeof(int) * (size_t)sp->n);
            snprintf(out->reason, sizeof(out->reason), "%s search: setting %zu of %zu",
                     ka_planner_name(t->o->planner), t->pos_order, t->n_order);
            *have = true;
            return KF_OK;
        }
        return KF_OK;
    }
    for (;;) {
        bool ok = true;
        const char *why = NULL;
        kf_code rc;
        if (!ka_pop(t, out)) {
            if (!t->have_best || t->pairs_done)
                return KF_OK;
            ka_plan_pairs(t);
            continue;
        }
        if (ka_seen_find(t, out->idx))
            continue;
        rc = ka_space_legal(sp, out->idx, &ok, &why, err);
        if (rc)
            return rc;
        if (!ok) {
            ka_seen_add(t, out->idx, 0);
            t->pruned++;
            if (out->moved >= 0 && t->have_best) {
                /* repair: keep the move, change one or two other tunables
                 * as little as possible (sum of index steps) until the
                 * constraints hold */
                int fix[KA_MAX_TUNABLES], best_fix[KA_MAX_TUNABLES], best_d = 1 << 30;
                bool found = false;
                for (int j1 = 0; j1 < sp->n; j1++) {
                    for (int j2 = j1; j2 < sp->n; j2++) {
                        if (j1 == out->moved || j2 == out->moved)
                            continue;
                        for (int v1 = 0; v1 < sp->t[j1].n_values; v1++) {
                            for (int v2 = 0; v2 < sp->t[j2].n_values; v2++) {
                                int d;
                                if (j1 == j2 && v2 != v1)
                                    continue;
                                memcpy(fix, out->idx, sizeof(fix));
                                fix[j1] = v1;
                                fix[j2] = v2;
                                d = abs(v1 - out->idx[j1]) + (j2 != j1 ? abs(v2 - out->idx[j2]) : 0);
                                if (d == 0 || d >= best_d || ka_seen_find(t, fix))
                                    continue;
                                rc = ka_space_legal(sp, fix, &ok, NULL, err);
                                if (rc)
                                    return rc;
                                if (ok) {
                                    best_d = d;
                                    memcpy(best_fix, fix, sizeof(fix));
                                    found = true;
                                }
                            }
                        }
                    }
                }
                if (found) {
                    char why2[1200], mv[200];
                    size_t o = (size_t)snprintf(why2, sizeof(why2), "%s, with", out->reason);
                    for (int j = 0; j < sp->n && o < sizeof(why2); j++) {
                        if (best_fix[j] != out->idx[j])
                            o += (size_t)snprintf(why2 + o, sizeof(why2) - o, " %s",
                                                  ka_move_text(sp, j, out->idx[j], best_fix[j], mv, sizeof(mv)));
                    }
                    if (o < sizeof(why2))
                        snprintf(why2 + o, sizeof(why2) - o, " so that \"%s\" holds", why ? why : "");
                    memcpy(out->idx, best_fix, sizeof(best_fix));
                    snprintf(out->reason, sizeof(out->reason), "%.399s", why2);
                }
                if (found) {
                    *have = true;
                    return KF_OK;
                }
            }
            continue;
        }
        *have = true;
        return KF_OK;
    }
}

/* The template's default setting, or when it breaks a constraint the
 * nearest legal setting that moves one tunable (fewest steps first).
 * *found is false when no such setting exists. */
static kf_code ka_default_setting(ka_tuner *t, int *idx, bool *found, kf_err *err)
{
    const ka_space *sp = t->sp;
    bool ok = true;
    kf_code rc;
    *found = false;
    for (int i = 0; i < sp->n; i++)
        idx[i] = sp->t[i].def;
    rc = ka_space_legal(sp, idx, &ok, NULL, err);
    if (rc || ok) {
        *found = ok;
        return rc;
    }
    for (int dist = 1; dist < 64; dist++) {
        for (int k = 0; k < 2 * sp->n; k++) {
            int i = k / 2, j = sp->t[i].def + (k % 2 ? dist : -dist);
            if (j < 0 || j >= sp->t[i].n_values)
                continue;
            idx[i] = j;
            rc = ka_space_legal(sp, idx, &ok, NULL, err);
            if (rc || ok) {
                *found = ok;
                return rc;
            }
            idx[i] = sp->t[i].def;
        }
    }
    return KF_OK;
}

/* Which way a tunable cuts a fixed cost, by what it declares it addresses:
 * +1 when raising it does, -1 when lowering it does, 0 when it is not one.
 * A PE tile (tensor_underfilled) fills TensorE's 128x128 array and its
 * 512-wide moving side, so each matmul's fixed issue cost buys more work.
 * A tile size (dma_small_transfers and instruction_overhead the same way)
 * amortises the per-DMA and per-instruction costs; it counts only when
 * `tiles` is set.  Work splits, engine choices and reuse blocks that
 * address one of them alone are not moved. */
static int ka_fixed_cost_dir(const ka_tunable *tu, bool tiles)
{
    const char *pe, *d1, *d2, *dir = NULL;
    if (!tu->addresses)
        return 0;
    pe = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tu->addresses, "tensor_underfilled"));
    d1 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tu->addresses, "dma_small_transfers"));
    d2 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tu->addresses, "instruction_overhead"));
    if (pe)
        dir = pe;
    else if (tiles && d1 && d2 && strcmp(d1, d2) == 0)
        dir = d1;
    if (!dir)
        return 0;
    if (strcmp(dir, "up") == 0)
        return 1;
    return strcmp(dir, "down") == 0 ? -1 : 0;
}

/* The fixed-cost prior: every DMA, every instruction and every matmul pays
 * a fixed cost whatever its size, and tiles too small to amortise it are
 * the usual first limiter.  So each tunable that cuts one
 * (ka_fixed_cost_dir) is moved, in declaration order, as far that way as
 * the constraints allow with the others as they stand; the profile of that
 * setting then says what to give back (buffer_pressure and
 * engine_waits_on_dma point the other way).  Tile sizes move only for ops
 * without TensorE work (`tiles`): for matmul-like ops the blocks trade
 * operand reuse against pipeline depth, and the template's default is the
 * better start.  idx holds a legal setting on entry and on return. */
static kf_code ka_prior(ka_tuner *t, int *idx, bool tiles, kf_err *err)
{
    const ka_space *sp = t->sp;
    for (int i = 0; i < sp->n; i++) {
        int dir = ka_fixed_cost_dir(&sp->t[i], tiles), keep = idx[i];
        if (dir == 0)
            continue;
        for (int j = dir > 0 ? sp->t[i].n_values - 1 : 0; j != keep; j -= dir) {
            bool ok = false;
            kf_code rc;
            idx[i] = j;
            rc = ka_space_legal(sp, idx, &ok, NULL, err);
            if (rc)
                return rc;
            if (ok)
                break;
            idx[i] = keep;
        }
    }
    return KF_OK;
}

/* The warm start's setting: each tunable's value in o->warm_params, found
 * in its declared list; false with t->warm_note saying why not. */
static kf_code ka_warm_setting(ka_tuner *t, int *idx, bool *found, kf_err *err)
{
    const ka_space *sp = t->sp;
    const char *why = NULL;
    bool ok = false;
    kf_code rc;

    *found = false;
    if (!cJSON_IsObject(t->o->warm_params)) {
        snprintf(t->warm_note, sizeof(t->warm_note), "its params are not an object");
        return KF_OK;
    }
    for (int i = 0; i < sp->n; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(t->o->warm_params, sp->t[i].name), *c;
        int k = 0;
        idx[i] = -1;
        cJSON_ArrayForEach(c, sp->t[i].values)
        {
            if (v && cJSON_Compare(v, c, true)) {
                idx[i] = k;
                break;
            }
            k++;
        }
        if (idx[i] < 0) {
            snprintf(t->warm_note, sizeof(t->warm_note), "%s %s", sp->t[i].name,
                     v ? "has a value the template does not declare" : "is missing from its params");
            return KF_OK;
        }
    }
    rc = ka_space_legal(sp, idx, &ok, &why, err);
    if (rc)
        return rc;
    if (!ok) {
        snprintf(t->warm_note, sizeof(t->warm_note), "its params break the constraint \"%.150s\"", why ? why : "");
        return KF_OK;
    }
    *found = true;
    return KF_OK;
}

/* The first setting of the guided planner: the warm start's when it
 * applies, else the fixed-cost prior applied to the template's default
 * (t->def_idx, set by ka_tune).  Defaults that break a constraint are
 * counted as pruned. */
static kf_code ka_start(ka_tuner *t, ka_prop *out, bool *have, kf_err *err)
{
    const ka_space *sp = t->sp;
    bool legal = t->have_def;      /* the defaults themselves hold, or def_idx moved off them */
    char what[300] = "";
    kf_code rc;
    memset(out, 0, sizeof(*out));
    out->moved = -1;
    if (t->o->warm_entry) {
        bool found = false;
        kf_code wrc = ka_warm_setting(t, out->idx, &found, err);
        if (wrc)
            return wrc;
        if (found) {
            char params[300];
            ka_fmt_params(sp, out->idx, params, sizeof(params));
            t->warm_used = true;
            snprintf(out->reason, sizeof(out->reason),
                     "warm start from library entry %.200s (%.100s), the best known params for this op and shape",
                     t->o->warm_entry, sp->n ? params : "no tunables");
            *have = true;
            return KF_OK;
        }
    }
    for (int i = 0; i < sp->n; i++) {
        out->idx[i] = sp->t[i].def;
        legal = legal && t->def_idx[i] == sp->t[i].def;
    }
    if (!legal) {
        t->pruned++;
        ka_seen_add(t, out->idx, 0);
    }
    if (!t->have_def)
        return ka_next(t, out, have, err);
    memcpy(out->idx, t->def_idx, sizeof(out->idx));
    rc = ka_prior(t, out->idx, t->pb->op_flops_set && t->pb->op_flops <= 0, err);
    if (rc)
        return rc;
    for (int i = 0, o = 0; i < sp->n; i++) {
        char mv[200];
        if (out->idx[i] != t->def_idx[i] && o < (int)sizeof(what))
            o += snprintf(what + o, sizeof(what) - (size_t)o, "%s%s", o ? ", " : "",
                          ka_move_text(sp, i, t->def_idx[i], out->idx[i], mv, sizeof(mv)));
    }
    t->default_due = what[0] != 0;
    if (what[0])
        snprintf(out->reason, sizeof(out->reason),
                 "baseline: fixed per-DMA, per-instruction and per-matmul costs dominate small tiles, so the "
                 "search starts from the %s setting with its tiles as large as the constraints allow (%.140s); the "
                 "default itself is evaluated if the search ends by itself",
                 legal ? "template's default" : "nearest legal", what);
    else
        snprintf(out->reason, sizeof(out->reason), "%s",
                 legal ? "baseline: the template's default setting"
                       : "baseline: the defaults break a constraint; the nearest legal setting");
    *have = true;
    return KF_OK;
}

static void ka_trim_checks(cJSON *val)
{
    /* keep the failing checks and the first passing one */
    cJSON *checks = cJSON_GetObjectItemCaseSensitive(val, "checks"), *c, *next;
    bool kept_pass = false;
    for (c = checks ? checks->child : NULL; c; c = next) {
        next = c->next;
        if (jbool(c, "pass")) {
            if (kept_pass)
                cJSON_Delete(cJSON_DetachItemViaPointer(checks, c));
            kept_pass = true;
        }
    }
}

static const char *ka_first_failure(const cJSON *val)
{
    const cJSON *c, *e = cJSON_GetObjectItemCaseSensitive(val, "error");
    if (e)
        return jstr(e, "message", "the kernel failed");
    if (cJSON_GetObjectItemCaseSensitive(val, "ref_error"))
        return jstr(val, "ref_error", "the reference failed");
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(val, "checks"))
        if (!jbool(c, "pass"))
            return jstr(c, "message", "mismatch");
    return "mismatch";
}

/* How many children of one kind may run together: the memory budget over
 * the largest resident set one of them has had (the first runs alone, so
 * unknown is 1), at most the jobs. */
static int ka_concurrency(const ka_tuner *t, long rss_kib)
{
    long k;
    if (t->jobs <= 1 || rss_kib <= 0)
        return 1;
    k = t->budget_kib / rss_kib;
    return k < 1 ? 1 : (k > t->jobs ? t->jobs : (int)k);
}

static void ka_note_rss(long *slot, const cJSON *res)
{
    long v = (long)jnum(res, "max_rss_kib", 0);
    if (v > *slot)
        *slot = v;
}

static void ka_timing_key(const ka_tuner *t, const char *kwargs, char hex[65])
{
    kf_buf key;

    kf_buf_init(&key);
    kf_buf_addf(&key, "%s|%s|%s|%s|%s|%s", t->src_hash, t->pb->entry, kwargs, t->pb->target, t->model_hash,
                "timing");
    for (int i = 0; i < t->pb->n_inputs; i++) {
        kf_buf_addf(&key, "|%s:%d", t->pb->inputs[i].name, (int)t->pb->inputs[i].dtype);
        for (int d = 0; d < t->pb->inputs[i].ndim; d++)
            kf_buf_addf(&key, "x%lld", (long long)t->pb->inputs[i].shape[d]);
    }
    ka_sha256_hex(key.data, key.len, hex);
    kf_buf_release(&key);
}

/* The settings the planner will ask for after `cur`, as far as it can be
 * told now: the guided planner's queue in pop order (what a new best would
 * re-plan is not known yet), the enumerated order otherwise; legal,
 * not evaluated, not cached and not already ahead.  At most `max`. */
static int ka_upcoming(ka_tuner *t, const int *cur, int (*out)[KA_MAX_TUNABLES], int max)
{
    const ka_space *sp = t->sp;
    int n = 0;

    if (t->o->planner != KA_PLAN_GUIDED) {
        for (size_t p = t->pos_order; p < t->n_order && n < max; p++) {
            const int *idx = t->order + p * (size_t)sp->n;
            if (memcmp(idx, cur, sizeof(int) * (size_t)sp->n) != 0 && !ka_seen_find(t, idx))
                memcpy(out[n++], idx, sizeof(int) * (size_t)sp->n);
        }
    } else {
        size_t nq = t->nq;
        ka_prop *q = kf_malloc((nq ? nq : 1) * sizeof(*q));
        if (nq)
            memcpy(q, t->q, nq * sizeof(*q));
        while (nq > 0 && n < max) {
            size_t bi = 0;
            bool ok = false, dup = false;
            for (size_t i = 1; i < nq; i++)
                if (q[i].tier > q[bi].tier || (q[i].tier == q[bi].tier && q[i].score > q[bi].score))
                    bi = i;
            memcpy(out[n], q[bi].idx, sizeof(int) * (size_t)sp->n);
            q[bi] = q[--nq];
            for (int k = 0; k < n; k++)
                dup = dup || memcmp(out[k], out[n], sizeof(int) * (size_t)sp->n) == 0;
            if (dup || memcmp(out[n], cur, sizeof(int) * (size_t)sp->n) == 0 || ka_seen_find(t, out[n]))
                continue;
            if (ka_space_legal(sp, out[n], &ok, NULL, NULL) != KF_OK || !ok)
                continue;
            n++;
        }
        free(q);
    }
    /* drop the ones a cache or an earlier batch already holds */
    for (int k = 0; k < n;) {
        char *kw = ka_space_kwargs(sp, out[k], t->pb->fixed_kwargs), hex[65];
        ka_timing_key(t, kw, hex);
        free(kw);
        if (ka_cache_get(t->cache, hex) || cJSON_GetObjectItemCaseSensitive(t->ahead, hex)) {
            memmove(out[k], out[k + 1], sizeof(out[0]) * (size_t)(n - k - 1));
            n--;
        } else {
            k++;
        }
    }
    return n;
}

/* A timing evaluation's result for idx: from the cache (*cached), from an
 * evaluation run ahead of its turn (counted now, as the serial loop would
 * count it), or run now; with jobs, the next settings the planner will ask
 * for run side by side with it and wait in t->ahead.  *wall is the
 * evaluation's own wall time (0 when cached); *waited the time this call
 * spent waiting for evaluations, which the loop's own time excludes
 * (evaluations run side by side overlap, so their walls do not add up). */
static kf_code ka_timing(ka_tuner *t, const int *idx, const char *kwargs, cJSON **res, bool *cached, double *wall,
                         double *waited, kf_err *err)
{
    char hex[65];
    const cJSON *hit;
    cJSON *ahead;
    kf_code rc;

    *cached = false;
    *wall = 0;
    *waited = 0;
    ka_timing_key(t, kwargs, hex);
    hit = ka_cache_get(t->cache, hex);
    if (hit) {
        *res = cJSON_Duplicate(hit, true);
        *cached = true;
        return KF_OK;
    }
    ahead = cJSON_DetachItemFromObjectCaseSensitive(t->ahead, hex);
    if (ahead) {
        *res = ahead;
    } else {
        int conc = ka_concurrency(t, t->rss_tim_kib), more[KA_MAX_JOBS][KA_MAX_TUNABLES], n = 0;
        ka_eval_req reqs[KA_MAX_JOBS];
        cJSON *results[KA_MAX_JOBS] = { NULL };
        char *kws[KA_MAX_JOBS] = { NULL };

        if (conc > 1)
            n = ka_upcoming(t, idx, more, conc - 1);
        memset(reqs, 0, sizeof(reqs));
        for (int k = 0; k <= n; k++) {
            kws[k] = k == 0 ? NULL : ka_space_kwargs(t->sp, more[k - 1], t->pb->fixed_kwargs);
            reqs[k].pb = t->pb;
            reqs[k].kwargs_json = k == 0 ? kwargs : kws[k];
            reqs[k].mode = KA_EVAL_TIMING;
        }
        double w0 = ka_now();
        rc = ka_eval_run_many(reqs, n + 1, n + 1, false, results, err);
        *waited = ka_now() - w0;
        for (int k = 1; k <= n; k++) {
            char h2[65];
            if (rc == KF_OK && results[k]) {
                ka_note_rss(&t->rss_tim_kib, results[k]);
                ka_timing_key(t, kws[k], h2);
                cJSON_AddItemToObject(t->ahead, h2, results[k]);
            } else {
                cJSON_Delete(results[k]);
            }
            free(kws[k]);
        }
        if (rc) {
            cJSON_Delete(results[0]);
            return rc;
        }
        *res = results[0];
    }
    ka_note_rss(&t->rss_tim_kib, *res);
    *wall = jnum(*res, "wall_seconds", 0);
    t->evals++;
    /* sandbox failures (limits, crashes) are not cached: they may be transient */
    if (jbool(*res, "ok") || cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(*res, "error"), "line"))
        ka_cache_put(t->cache, hex, *res);
    return KF_OK;
}

/* The key of a validation verdict: everything a validation's result is a
 * function of.  The kernel (source, entry, settings), the inputs (names,
 * dtypes, shapes, spread) and their seeds, the reference (its file and
 * entry), the tolerances and the model (simulator build and target file,
 * for a cache on disk).  The simulator and the reference are deterministic,
 * so a verdict under this key is the one a new run would give. */
static void ka_validation_key(const ka_tuner *t, const ka_eval_req *r, char hex[65])
{
    kf_buf key;

    kf_buf_init(&key);
    kf_buf_addf(&key, "%s|%s|%s|%s|%s|%s|%s|%d|%g|%g", t->src_hash, t->pb->entry, r->kwargs_json, t->pb->target,
                t->model_hash, t->ref_hash, "validate", r->n_seeds, r->rtol, r->atol);
    for (int s = 0; s < r->n_seeds; s++)
        kf_buf_addf(&key, "|s%llu", (unsigned long long)r->seeds[s]);
    for (int i = 0; i < t->pb->n_inputs; i++) {
        const ka_input *in = &t->pb->inputs[i];
        kf_buf_addf(&key, "|%s:%d:%.17g", in->name, (int)in->dtype, in->std);
        for (int d = 0; d < in->ndim; d++)
            kf_buf_addf(&key, "x%lld", (long long)in->shape[d]);
    }
    ka_sha256_hex(key.data, key.len, hex);
    kf_buf_release(&key);
}

/* One verdict from the per-seed results, as one child running the seeds in
 * order and stopping at the first failing one would give it. */
static cJSON *ka_merge_seeds(cJSON **parts, int n, double wall)
{
    cJSON *m = cJSON_CreateObject(), *checks = cJSON_AddArrayToObject(m, "checks");
    bool ok = true, pass = true;
    double sim_s = 0, ref_s = 0, computed = 0, read = 0, in_read = 0;
    long rss = 0;
    int ran = 0;

    for (int i = 0; i < n && parts[i]; i++) {
        const cJSON *c, *e = cJSON_GetObjectItemCaseSensitive(parts[i], "error");
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(parts[i], "checks"))
            cJSON_AddItemToArray(checks, cJSON_Duplicate(c, true));
        ran++;
        computed += jnum(parts[i], "ref_computed", 0);
        read += jnum(parts[i], "ref_read", 0);
        in_read += jnum(parts[i], "inputs_read", 0);
        sim_s += jnum(parts[i], "sim_seconds", 0);
        ref_s += jnum(parts[i], "ref_seconds", 0);
        if ((long)jnum(parts[i], "max_rss_kib", 0) > rss)
            rss = (long)jnum(parts[i], "max_rss_kib", 0);
        if (e && !cJSON_GetObjectItemCaseSensitive(m, "error"))
            cJSON_AddItemToObject(m, "error", cJSON_Duplicate(e, true));
        if (cJSON_GetObjectItemCaseSensitive(parts[i], "ref_error") && !cJSON_GetObjectItemCaseSensitive(m, "ref_error"))
            cJSON_AddStringToObject(m, "ref_error", jstr(parts[i], "ref_error", ""));
        ok = ok && jbool(parts[i], "ok");
        pass = pass && jbool(parts[i], "pass");
        if (!jbool(parts[i], "pass"))
            break;
    }
    cJSON_AddBoolToObject(m, "ok", ok);
    cJSON_AddBoolToObject(m, "pass", pass && ok);
    cJSON_AddNumberToObject(m, "sim_seconds", sim_s);
    cJSON_AddNumberToObject(m, "ref_seconds", ref_s);
    cJSON_AddNumberToObject(m, "seeds_run", ran);
    cJSON_AddNumberToObject(m, "ref_computed", computed);
    cJSON_AddNumberToObject(m, "ref_read", read);
    cJSON_AddNumberToObject(m, "inputs_read", in_read);
    cJSON_AddNumberToObject(m, "wall_seconds", wall);
    cJSON_AddNumberToObject(m, "max_rss_kib", (double)rss);
    if (parts[0])
        cJSON_AddStringToObject(m, "isolation", jstr(parts[0], "isolation", ""));
    return m;
}

/* One seed's inputs made and stored (a thread of ka_store_inputs). */
typedef struct ka_in_job {
    const ka_problem *pb;
    uint64_t          seed;
    const char       *path;
    bool              ok;
} ka_in_job;

static void *ka_in_make(void *arg)
{
    ka_in_job *j = arg;
    sim_array *in = NULL;
    kf_err e = KF_ERR_INIT;

    j->ok = ka_eval_inputs(j->pb, j->seed, &in, &e) == KF_OK &&
            ka_ref_write(j->path, in, (size_t)j->pb->n_inputs, &e) == KF_OK;
    for (int i = 0; in && i < j->pb->n_inputs; i++)
        sim_array_release(&in[i]);
    free(in);
    return NULL;
}

/* The inputs of seeds [from, to) of `seeds` stored in the run's folder
 * (paths[s]) once per run, made side by side up to the run's concurrency:
 * every candidate's validation of a seed reads the same inputs instead of
 * making them again (normal samples cost about a second per 32 Mi
 * elements).  A seed whose inputs cannot be made or stored is left to
 * the children, which make them as they would without a folder. */
static void ka_store_inputs(ka_tuner *t, const uint64_t *seeds, char (*paths)[300], int from, int to)
{
    ka_in_job jobs[KA_MAX_SEEDS];
    pthread_t th[KA_MAX_SEEDS];
    bool started[KA_MAX_SEEDS] = { false };
    int idx[KA_MAX_SEEDS], n = 0;

    for (int s = from; s < to; s++)
        if (!t->in_have[s] && !t->in_failed[s])
            idx[n++] = s;
    for (int k0 = 0; k0 < n; k0 += t->jobs > 0 ? t->jobs : 1) {
        int k1 = k0 + (t->jobs > 0 ? t->jobs : 1);
        k1 = k1 < n ? k1 : n;
        for (int k = k0; k < k1; k++) {
            int s = idx[k];
            jobs[k] = (ka_in_job){ t->pb, seeds[s], paths[s], false };
            /* the last of a round runs here; a thread that cannot start, too */
            started[k] = k + 1 < k1 && pthread_create(&th[k], NULL, ka_in_make, &jobs[k]) == 0;
            if (!started[k])
                ka_in_make(&jobs[k]);
        }
        for (int k = k0; k < k1; k++) {
            if (started[k])
                pthread_join(th[k], NULL);
            t->in_have[idx[k]] = jobs[k].ok;
            t->in_failed[idx[k]] = !jobs[k].ok;
        }
    }
}

/* Validate one candidate on n_seeds seeded input sets.  The seeds derive
 * from the run's seed only: every candidate meets the same inputs, so a
 * failure can be replayed exactly, a verdict can come from the cache (a
 * re-tune of an unchanged kernel on an unchanged simulator costs no
 * validation, *cached), and the reference's outputs on each seed are
 * computed once per run (when the reference takes none of the tunables)
 * and read by the next candidates' validations.  One child per seed: the
 * first seed runs alone (a candidate that fails it stops there; its child's
 * resident set sizes the rest), then the others side by side as the memory
 * budget allows, stopping at the first failing seed in seed order.
 * Sandbox failures (limits, crashes) are not cached: they may be
 * transient. */
static kf_code ka_validate(ka_tuner *t, const char *kwargs, cJSON **res, bool *cached, kf_err *err)
{
    ka_eval_req base, reqs[KA_MAX_SEEDS];
    cJSON *parts[KA_MAX_SEEDS] = { NULL };
    char hex[65], paths[KA_MAX_SEEDS][300], in_paths[KA_MAX_SEEDS][300];
    const cJSON *hit;
    cJSON *names = cJSON_CreateArray();
    char *names_json;
    double t0 = ka_now();
    int n;
    kf_code rc = KF_OK;

    *cached = false;
    memset(&base, 0, sizeof(base));
    base.pb = t->pb;
    base.kwargs_json = kwargs;
    base.mode = KA_EVAL_VALIDATE;
    base.rtol = base.atol = -1;
    base.n_seeds = t->o->n_seeds > 0 ? t->o->n_seeds : KA_DEF_SEEDS;
    if (base.n_seeds > KA_MAX_SEEDS)
        base.n_seeds = KA_MAX_SEEDS;
    for (int s = 0; s < base.n_seeds; s++) {
        uint64_t z = t->o->seed * 0x100000001b3ULL + (uint64_t)s + 1;
        base.seeds[s] = ka_rng(&z) & 0xffffffffULL;
    }
    ka_validation_key(t, &base, hex);
    hit = ka_cache_get(t->cache, hex);
    if (hit) {
        *res = cJSON_Duplicate(hit, true);
        *cached = true;
        cJSON_Delete(names);
        return KF_OK;
    }
    t->validations++;
    for (int i = 0; i < t->sp->n; i++)
        cJSON_AddItemToArray(names, cJSON_CreateString(t->sp->t[i].name));
    names_json = cJSON_PrintUnformatted(names);
    cJSON_Delete(names);
    n = base.n_seeds;
    for (int s = 0; s < n; s++) {
        reqs[s] = base;
        reqs[s].n_seeds = 1;
        reqs[s].seeds[0] = base.seeds[s];
        reqs[s].tunables_json = names_json;
        if (t->ref_dir[0]) {
            snprintf(paths[s], sizeof(paths[s]), "%s/seed%d.ref", t->ref_dir, s);
            snprintf(in_paths[s], sizeof(in_paths[s]), "%s/seed%d.in", t->ref_dir, s);
            if (t->ref_have[s])
                reqs[s].ref_in[0] = paths[s];
            else
                reqs[s].ref_out[0] = paths[s];
        }
    }
    /* each seed's inputs made once, when a validation first needs them */
    if (t->ref_dir[0])
        ka_store_inputs(t, base.seeds, in_paths, 0, 1);
    for (int s = 0; s < n; s++)
        reqs[s].in_in[0] = t->in_have[s] ? in_paths[s] : NULL;
    rc = ka_eval_run(&reqs[0], &parts[0], err);
    if (rc == KF_OK && jbool(parts[0], "pass") && n > 1) {
        long rss;
        ka_note_rss(t->ref_have[0] ? &t->rss_val_kib : &t->rss_ref_kib, parts[0]);
        rss = t->ref_have[1] ? t->rss_val_kib : t->rss_ref_kib;
        if (t->ref_dir[0])
            ka_store_inputs(t, base.seeds, in_paths, 1, n);
        for (int s = 1; s < n; s++)
            reqs[s].in_in[0] = t->in_have[s] ? in_paths[s] : NULL;
        rc = ka_eval_run_many(&reqs[1], n - 1, ka_concurrency(t, rss), true, &parts[1], err);
    }
    for (int s = 0; s < n; s++) {
        const cJSON *st;
        if (!parts[s])
            continue;
        ka_note_rss(t->ref_have[s] ? &t->rss_val_kib : &t->rss_ref_kib, parts[s]);
        cJSON_ArrayForEach(st, cJSON_GetObjectItemCaseSensitive(parts[s], "ref_stored"))
            if (st->valueint == 0)
                t->ref_have[s] = true;
    }
    if (rc == KF_OK) {
        *res = ka_merge_seeds(parts, n, ka_now() - t0);
        if (jbool(*res, "ok") ||
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(*res, "error"), "line"))
            ka_cache_put(t->cache, hex, *res);
    }
    for (int s = 0; s < n; s++)
        cJSON_Delete(parts[s]);
    free(names_json);
    return rc;
}

static cJSON *ka_profile_part(const cJSON *timing, bool cached)
{
    cJSON *p = cJSON_CreateObject();
    static const char *const keys[] = { "latency_ns", "floor_ns", "bound_kind", "bounds", "summary", "lines", NULL };
    for (int i = 0; keys[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(timing, keys[i]);
        if (v)
            cJSON_AddItemToObject(p, keys[i], cJSON_Duplicate(v, true));
    }
    cJSON_AddBoolToObject(p, "cached", cached);
    return p;
}

/* One iteration: evaluate `c`, validate when it would be the new best,
 * update the planner, report. */
static kf_code ka_iterate(ka_tuner *t, const ka_prop *c, kf_err *err)
{
    const ka_space *sp = t->sp;
    double t0 = ka_now(), wall_eval = 0, waited = 0, wall_val = 0, sim = 0;
    char *kwargs = ka_space_kwargs(sp, c->idx, t->pb->fixed_kwargs);
    cJSON *timing = NULL, *val = NULL;
    ka_trace_row *tr;
    ka_iter it;
    bool cached = false, better = false, correct = false, validated = false, cancel_mid = false, val_cached = false;
    const char *val_note = "";
    double lat = 0, floor_ns = 0;
    char *const reason = it.reason;
    const size_t reason_len = sizeof(it.reason);
    char params_txt[512];
    ka_seen *s;
    kf_code rc;

    memset(&it, 0, sizeof(it));
    it.compile_cached = -1;
    t->iter++;
    it.iteration = t->iter;
    ka_fmt_params(sp, c->idx, params_txt, sizeof(params_txt));
    if (t->iter == 1 && t->h && t->h->status) {
        char what[700];
        snprintf(what, sizeof(what), "iteration 1: simulating %s (timing only)", sp->n ? params_txt : "the kernel");
        t->h->status(t->h->ctx, what);
    }
    rc = ka_timing(t, c->idx, kwargs, &timing, &cached, &wall_eval, &waited, err);
    if (rc)
        goto out;
    sim += jnum(timing, "sim_seconds", 0) * (cached ? 0 : 1);
    if (t->iter == 1 && t->source)
        it.source = t->source;
    it.params = ka_space_params(sp, c->idx);
    if (!jbool(timing, "ok")) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(timing, "error");
        it.compiled = false;
        it.compile_error = e ? cJSON_Duplicate(e, true) : NULL;
        (void)ka_seen_add(t, c->idx, 1);
        t->compile_errors++;
        t->since_improve++;
        snprintf(reason, reason_len, "%s; it does not compile: %s", c->reason, jstr(e, "message", "error"));
        it.action = "reject";
        it.has_correct = true;
        it.correct = false;
        goto record;
    }
    it.compiled = true;
    it.compile_cached = cached;
    lat = jnum(timing, "latency_ns", 0);
    floor_ns = jnum(timing, "floor_ns", 0);
    s = ka_seen_add(t, c->idx, 2);
    s->latency = lat;
    better = !t->have_best || lat < t->best_lat * (1 - 1e-9);
    if ((better || t->o->validate_each) && t->h && t->h->cancelled && t->h->cancelled(t->h->ctx)) {
        /* cancelled between the two evaluations: not validated, so not best */
        cancel_mid = true;
    } else if (better || t->o->validate_each) {
        double v0 = ka_now();
        if (t->h && t->h->status) {
            char what[700];
            snprintf(what, sizeof(what), "iteration %d: validating %s against the reference on %d seeded input "
                     "sets (full numerics; large shapes take a while)", t->iter, sp->n ? params_txt : "the kernel",
                     t->o->n_seeds > 0 ? t->o->n_seeds : KA_DEF_SEEDS);
            t->h->status(t->h->ctx, what);
        }
        rc = ka_validate(t, kwargs, &val, &val_cached, err);
        if (rc)
            goto out;
        wall_val = ka_now() - v0;
        sim += jnum(val, "sim_seconds", 0) * (val_cached ? 0 : 1);
        cJSON_DeleteItemFromObjectCaseSensitive(val, "cached");
        cJSON_AddBoolToObject(val, "cached", val_cached);
        validated = true;
        correct = jbool(val, "pass");
        s->valid = correct ? 1 : 0;
        ka_trim_checks(val);
    }
    /* a verdict from the cache says so, in the iteration and its reason */
    if (val_cached)
        val_note = " (the cached verdict of this same kernel, settings, inputs and simulator)";
    it.validation = val ? cJSON_Duplicate(val, true) : NULL;
    it.verdict = validated ? (correct ? KA_VERDICT_PASS : KA_VERDICT_FAIL) : KA_VERDICT_SKIPPED;
    if (!validated)
        it.skip_reason = cancel_mid ? "the job was cancelled before validation"
                                    : "not faster than the best: explored timing-only, not validated";
    it.profile = ka_profile_part(timing, cached);
    {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(timing, "findings");
        it.findings = f ? cJSON_Duplicate(f, true) : NULL;
    }
    if (cancel_mid) {
        snprintf(reason, reason_len, "%s; %.1f us, but the job was cancelled before it could be validated",
                 c->reason, ka_us(lat));
        it.action = "explore";
    } else if (better && correct) {
        int prev[KA_MAX_TUNABLES];
        bool had = t->have_best;
        double prev_lat = t->best_lat;
        memcpy(prev, t->best, sizeof(prev));
        memcpy(t->best, c->idx, sizeof(t->best));
        t->best_lat = lat;
        t->best_floor = floor_ns;
        cJSON_Delete(t->best_timing);
        t->best_timing = cJSON_Duplicate(timing, true);
        t->have_best = true;
        t->best_iter = t->iter;
        t->since_improve = 0;
        if (had)
            snprintf(reason, reason_len, "%s; %.1f us is %.1f%% faster than the best (%.1f us) and validated%s: accepted",
                     c->reason, ka_us(lat), 100.0 * (prev_lat - lat) / prev_lat, ka_us(prev_lat), val_note);
        else
            snprintf(reason, reason_len, "%s; %.1f us (%.2f of the bound), validated%s: the starting point", c->reason,
                     ka_us(lat), floor_ns > 0 ? floor_ns / lat : 0, val_note);
        it.action = had ? "accept" : "baseline";
        if (t->o->artifacts) {
            cJSON *params = ka_space_params(sp, c->idx), *arts = NULL;
            rc = ka_artifacts(t->pb, kwargs, params, 0, &arts, err);
            cJSON_Delete(params);
            if (rc)
                goto out;
            it.artifacts = arts;
        }
        {
            ka_step *st = ka_result_add_step(&t->res);
            st->iteration = t->iter;
            st->params = ka_space_params(sp, c->idx);
            st->latency_ns = lat;
            st->fraction_of_bound = floor_ns > 0 ? floor_ns / lat : 0;
            snprintf(st->reason, sizeof(st->reason), "%s", c->reason);
        }
        if (t->o->planner == KA_PLAN_GUIDED) {
            ka_plan_from_best(t);
            /* keep going in the direction that just paid off */
            if (had) {
                int diff = -1, nd = 0;
                for (int i = 0; i < sp->n; i++)
                    if (prev[i] != c->idx[i]) {
                        diff = i;
                        nd++;
                    }
                if (nd == 1) {
                    int j = c->idx[diff] + (c->idx[diff] - prev[diff]);
                    if (j >= 0 && j < sp->t[diff].n_values) {
                        int idx[KA_MAX_TUNABLES];
                        char why[400], mv[200];
                        memcpy(idx, c->idx, sizeof(idx));
                        idx[diff] = j;
                        snprintf(why, sizeof(why), "the last move paid off; continuing it: %s",
                                 ka_move_text(sp, diff, c->idx[diff], j, mv, sizeof(mv)));
                        ka_push(t, idx, 3, lat, why);
                    }
                }
            }
        }
    } else if (better && !correct) {
        t->rejected++;
        t->since_improve++;
        snprintf(reason, reason_len, "%s; %.1f us would be the best but it is wrong (%s%s): rejected", c->reason,
                 ka_us(lat), ka_first_failure(val), val_note);
        it.action = "reject";
    } else {
        t->since_improve++;
        snprintf(reason, reason_len, "%s; %.1f us is not faster than the best (%.1f us)", c->reason, ka_us(lat),
                 ka_us(t->best_lat));
        it.action = "explore";
    }
    /* `default` is the template's default setting; until it is evaluated
     * (exhaustive and random order may never reach it) the first setting */
    if (!t->res.has_default || ka_is_default(t, c->idx)) {
        ka_setting *d = &t->res.def;
        ka_setting_release(d);
        memcpy(t->default_info_idx, c->idx, sizeof(t->default_info_idx));
        t->res.has_default = true;
        d->params = ka_space_params(sp, c->idx);
        d->latency_ns = lat;
        d->floor_ns = floor_ns;
        d->fraction_of_bound = floor_ns > 0 ? floor_ns / lat : 0;
        d->correct = correct;
        d->validated = validated;
    }
    it.has_latency = true;
    it.latency_ns = lat;
    it.has_correct = validated;
    it.correct = correct;
record:
    {
        double total = ka_now() - t0;
        it.has_timings = true;
        it.eval_ms = wall_eval * 1e3;
        it.validate_ms = wall_val * 1e3;
        it.sim_ms = sim * 1e3;
        it.overhead_ms = (total - waited - wall_val) * 1e3;
        it.total_ms = total * 1e3;
        t->eval_s += waited + wall_val;
        t->sim_s += sim;
    }
    tr = ka_result_add_trace(&t->res);
    tr->iteration = t->iter;
    snprintf(tr->params, sizeof(tr->params), "%s", params_txt);
    tr->latency_ns = lat;
    tr->best_ns = t->have_best ? t->best_lat : 0;
    tr->cached = cached;
    tr->action = it.action;
    if (t->h && t->h->progress)
        t->h->progress(t->h->ctx, &it);
out:
    ka_iter_release(&it);
    cJSON_Delete(timing);
    cJSON_Delete(val);
    free(kwargs);
    return rc;
}

/* Whether tunable i can take one step `dir` (+1 up, -1 down) from idx
 * with the others as they are and the constraints still holding. */
static bool ka_can_step(const ka_space *sp, const int *idx, int i, int dir)
{
    int probe[KA_MAX_TUNABLES];
    bool ok = false;

    if (idx[i] + dir < 0 || idx[i] + dir >= sp->t[i].n_values)
        return false;
    memcpy(probe, idx, sizeof(probe));
    probe[i] += dir;
    return ka_space_legal(sp, probe, &ok, NULL, NULL) == KF_OK && ok;
}

void ka_finding_text(const ka_space *sp, const int *idx, const cJSON *finding, kf_buf *out)
{
    const char *kind = jstr(finding, "kind", "");
    char limits[400] = "";
    size_t o = 0;
    int addressing = 0, movable = 0;

    for (int i = 0; i < sp->n && kind[0]; i++) {
        const char *dir = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sp->t[i].addresses, kind));
        bool up, down;
        char v[96];
        if (!dir)
            continue;
        addressing++;
        up = strcmp(dir, "down") != 0 && ka_can_step(sp, idx, i, 1);
        down = strcmp(dir, "up") != 0 && ka_can_step(sp, idx, i, -1);
        if (up || down) {
            movable++;
            continue;
        }
        ka_fmt_value(cJSON_GetArrayItem(sp->t[i].values, idx[i]), v, sizeof(v));
        if (o + 8 < sizeof(limits))
            o += (size_t)snprintf(limits + o, sizeof(limits) - o, "%s%s=%s is already the %s allowed", o ? "; " : "",
                                  sp->t[i].name, v,
                                  strcmp(dir, "up") == 0     ? "largest"
                                  : strcmp(dir, "down") == 0 ? "smallest"
                                                             : "only value");
    }
    kf_buf_addf(out, "- **%s** (%.1f us): ", kind, ka_us(jnum(finding, "cost_ns", 0)));
    if (addressing > 0 && movable == 0)
        kf_buf_addf(out, "%s. The tunables that address it cannot go further (%s), so what remains is in the "
                         "kernel's structure, not its settings.\n",
                    jstr(finding, "title", kind), limits);
    else
        kf_buf_addf(out, "%s\n", jstr(finding, "message", ""));
}

/* What a profile's `pipeline_engine` names, for the report: an engine as
 * the hardware guides spell it (sim_isa.h), the busiest DMA engine, or one
 * of NC-v2's shared ports (sim_profile.h). */
static const char *ka_engine_title(const char *e)
{
    sim_engine id = sim_engine_by_name(e);
    if (strcmp(e, "dma") == 0)
        return "one DMA engine";
    if (strcmp(e, "sbuf_port") == 0)
        return "the SBUF port VectorE and GpSimd share on NC-v2";
    if (strcmp(e, "psum_port") == 0)
        return "the PSUM port VectorE and ScalarE share on NC-v2";
    return id < SIM_ENG__COUNT ? sim_engine_title(id) : e;
}

void ka_reach_text(const cJSON *timing, kf_buf *out)
{
    static const char *const engines[] = { "tensor", "vector", "scalar", "gpsimd" };
    const cJSON *bounds = cJSON_GetObjectItemCaseSensitive(timing, "bounds");
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(timing, "summary");
    double floor_ns = jnum(timing, "floor_ns", 0), latency = jnum(timing, "latency_ns", 0);
    double pipe = jnum(bounds, "pipeline_ns", 0), total_s = jnum(sum, "total_time", 0);
    const char *kind = jstr(timing, "bound_kind", "op's"), *eng = jstr(bounds, "pipeline_engine", "");
    double busy[4];
    int order[4], n = 0;

    if (floor_ns <= 0 || pipe <= 0 || latency <= 0)
        return;
    /* 2% of slack: the floor and the engine time are computed differently */
    if (pipe <= floor_ns * 1.02) {
        kf_buf_addf(out, "- No engine's own work stands between this kernel and the %s bound (%.1f us): the busiest, "
                         "%s, is busy %.1f us. The rest of the gap is overlap and waiting (the findings below).\n",
                    kind, ka_us(floor_ns), ka_engine_title(eng), ka_us(pipe));
        return;
    }
    kf_buf_addf(out, "- The %s bound (%.1f us) is out of this kernel's reach at this setting: %s alone is busy %.1f us, "
                     "so however well the engines overlap the kernel reaches at most %.2f of the bound (it runs at %.2f "
                     "of that time). Getting closer needs less work there (another formulation of the op, or work moved "
                     "where it does not queue), not another setting of the ones searched.\n",
                kind, ka_us(floor_ns), ka_engine_title(eng), ka_us(pipe), floor_ns / pipe, pipe / latency);
    if (total_s <= 0)
        return;
    for (int i = 0; i < 4; i++) {
        char key[64];
        snprintf(key, sizeof(key), "%s_engine_active_time_percent", engines[i]);
        busy[i] = jnum(sum, key, 0) / 100.0 * total_s * 1e9;
        if (busy[i] <= 0)
            continue;
        int j = n++;
        while (j > 0 && busy[order[j - 1]] < busy[i]) {   /* busiest first */
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    kf_buf_addf(out, "- Busy time per engine:");
    for (int k = 0; k < n; k++)
        kf_buf_addf(out, "%s %s %.1f us (%.0f%%)", k ? "," : "", ka_engine_title(engines[order[k]]),
                    ka_us(busy[order[k]]), 100.0 * busy[order[k]] / latency);
    kf_buf_addf(out, "%s DMA in flight %.1f us (%.0f%%).\n", n ? "," : "",
                ka_us(jnum(sum, "dma_active_time_percent", 0) / 100.0 * total_s * 1e9),
                jnum(sum, "dma_active_time_percent", 0));
}

/* The Markdown report, from the result's fields, into t->res.report. */
static void ka_report(ka_tuner *t, const char *stop_msg)
{
    kf_buf md;
    const ka_problem *pb = t->pb;
    const ka_result *r = &t->res;
    char params[512];

    kf_buf_init(&md);
    kf_buf_addf(&md, "# kforge tune: %s on %s\n\n", pb->op[0] ? pb->op : pb->entry, pb->target);
    kf_buf_addf(&md, "Inputs:");
    for (int i = 0; i < pb->n_inputs; i++) {
        kf_buf_addf(&md, "%s %s ", i ? "," : "", pb->inputs[i].name);
        for (int d = 0; d < pb->inputs[i].ndim; d++)
            kf_buf_addf(&md, "%s%lld", d ? "x" : "", (long long)pb->inputs[i].shape[d]);
        kf_buf_addf(&md, " %s", sim_dtype_name(pb->inputs[i].dtype));
    }
    kf_buf_addf(&md, ". Planner: %s.\n\n", ka_planner_name(t->o->planner));
    if (t->o->warm_entry && t->warm_used)
        kf_buf_addf(&md, "Warm start from library entry %s: the search started from its params.\n\n",
                    t->o->warm_entry);
    else if (t->o->warm_entry)
        kf_buf_addf(&md, "Warm start from library entry %s not used: %s.\n\n", t->o->warm_entry,
                    t->o->planner != KA_PLAN_GUIDED ? "only the guided planner starts from one" : t->warm_note);
    if (!t->have_best) {
        kf_buf_addf(&md, "**No correct kernel**: no candidate passed validation. %s\n", stop_msg);
    } else {
        double dl = r->has_default ? r->def.latency_ns : 0;
        ka_fmt_params(t->sp, t->best, params, sizeof(params));
        kf_buf_addf(&md, "**Best**: %.1f us, %.2f of the %s bound (%.1f us); profiler: %.2f of its tightest bound (%s).\n\n",
                    ka_us(t->best_lat), t->best_floor > 0 ? t->best_floor / t->best_lat : 0,
                    jstr(t->best_timing, "bound_kind", "?"), ka_us(t->best_floor),
                    jnum(cJSON_GetObjectItemCaseSensitive(t->best_timing, "bounds"), "achieved_fraction", 0),
                    jstr(cJSON_GetObjectItemCaseSensitive(t->best_timing, "bounds"), "tightest", "?"));
        kf_buf_addf(&md, "Tunables: `%s`\n\n", t->sp->n ? params : "(none)");
        if (dl > 0) {
            char dp[512];
            ka_fmt_params(t->sp, t->default_info_idx, dp, sizeof(dp));
            kf_buf_addf(&md, "%s (`%s`): %.1f us (%.2f of the bound); speed-up %.2fx.\n\n",
                        ka_is_default(t, t->default_info_idx) ? "The template's default" : "Starting point",
                        t->sp->n ? dp : "(none)", ka_us(dl), r->def.fraction_of_bound,
                        dl / t->best_lat);
        }
        kf_buf_addf(&md, "## Path\n\n| iteration | tunables | latency (us) | fraction of bound | why |\n|---|---|---|---|---|\n");
        for (size_t i = 0; i < r->n_path; i++) {
            const ka_step *pe = &r->path[i];
            const cJSON *v;
            kf_buf ptxt;
            kf_buf_init(&ptxt);
            cJSON_ArrayForEach(v, pe->params)
            {
                char vb[96];
                ka_fmt_value(v, vb, sizeof(vb));
                kf_buf_addf(&ptxt, "%s%s=%s", ptxt.len ? " " : "", v->string, vb);
            }
            kf_buf_addf(&md, "| %d | `%s` | %.1f | %.2f | %s |\n", pe->iteration, ptxt.data ? ptxt.data : "",
                        ka_us(pe->latency_ns), pe->fraction_of_bound, pe->reason);
            kf_buf_release(&ptxt);
        }
        kf_buf_addf(&md, "\n## How close it can get\n\n");
        ka_reach_text(t->best_timing, &md);
        kf_buf_addf(&md, "\n## What still limits it\n\n");
        {
            const cJSON *f;
            int n = 0;
            cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(t->best_timing, "findings"))
            {
                if (n++ >= 3)
                    break;
                ka_finding_text(t->sp, t->best, f, &md);
            }
            if (n == 0)
                kf_buf_addf(&md, "- no finding above 1%% of the run; the rest is the %s engine's own time\n",
                            jstr(cJSON_GetObjectItemCaseSensitive(t->best_timing, "bounds"), "pipeline_engine", "busiest"));
        }
    }
    kf_buf_addf(&md, "\n## Search\n\n%d iterations, %d simulator evaluations, %lu cache hits, %d settings pruned by "
                     "constraints, %d validations, %d faster-but-wrong candidates rejected, %d compile errors. "
                     "Stopped: %s\n",
                t->iter, t->evals, ka_cache_hits(t->cache), t->pruned, t->validations, t->rejected, t->compile_errors,
                stop_msg);
    t->res.report = kf_buf_detach(&md);
}

kf_code ka_tune(const ka_problem *pb, const ka_space *sp, const ka_opts *o, const ka_hooks *h, cJSON **result,
                kf_err *err)
{
    ka_tuner t;
    ka_prop c;
    bool have = false, own_cache = o->cache == NULL;
    int max_it = o->max_iterations > 0 ? o->max_iterations : KA_DEF_ITERATIONS;
    int patience = o->patience == 0 ? KA_DEF_PATIENCE : o->patience;
    const char *stop = "exhausted";
    char stop_msg[256];
    kf_code rc = KF_OK;

    *result = NULL;
    memset(&t, 0, sizeof(t));
    t.pb = pb;
    t.sp = sp;
    t.o = o;
    t.h = h;
    t.cache = own_cache ? ka_cache_new() : o->cache;
    t.t_start = ka_now();
    t.jobs = o->jobs > 0 ? (o->jobs > KA_MAX_JOBS ? KA_MAX_JOBS : o->jobs) : ka_default_jobs();
    t.budget_kib = (long)(o->memory_mib ? o->memory_mib : KA_DEF_MEMORY_MIB) * 1024L;
    t.ahead = cJSON_CreateObject();
    /* the per-run reference store: a private folder of this process */
    if (pb->ref_path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(t.ref_dir, sizeof(t.ref_dir), "%s/kforge-ref-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(t.ref_dir))
            t.ref_dir[0] = '\0';     /* no store: every validation runs the reference */
    }
    t.source = ka_slurp(pb->source_path);
    if (!t.source) {
        rc = kf_err_set(err, KF_IO, "cannot read the kernel source '%s'", pb->source_path);
        goto out;
    }
    ka_sha256_hex(t.source, strlen(t.source), t.src_hash);
    /* Only a cache on disk can outlive this build or the target file; a
     * memory cache needs no model hash (and then skips hashing the binary). */
    if (ka_cache_dir(t.cache))
        ka_model_hash(pb->target, t.model_hash);
    if (pb->ref_path[0]) {
        char *ref = ka_slurp(pb->ref_path);
        char *all = kf_asprintf("%s|%s", pb->ref_entry, ref ? ref : "(unreadable)");
        ka_sha256_hex(all, strlen(all), t.ref_hash);
        free(all);
        free(ref);
    }
    /* every planner reports the template's default when it evaluates it */
    rc = ka_default_setting(&t, t.def_idx, &t.have_def, err);
    if (rc)
        goto out;
    if (o->planner != KA_PLAN_GUIDED) {
        rc = ka_enumerate(&t, err);
        if (rc)
            goto out;
        rc = ka_next(&t, &c, &have, err);
    } else {
        rc = ka_start(&t, &c, &have, err);
        if (t.warm_used && patience > 0)
            patience = patience / 2 > 2 ? patience / 2 : 2;
    }
    if (rc)
        goto out;
    snprintf(stop_msg, sizeof(stop_msg), "every candidate the planner could propose was tried");
    while (have) {
        if (h && h->cancelled && h->cancelled(h->ctx)) {
            stop = "cancelled";
            snprintf(stop_msg, sizeof(stop_msg), "the job was cancelled");
            break;
        }
        rc = ka_iterate(&t, &c, err);
        if (rc)
            goto out;
        if (t.have_best && ((o->goal_fraction > 0 && t.best_floor / t.best_lat >= o->goal_fraction) ||
                            (o->goal_latency_ns > 0 && t.best_lat <= o->goal_latency_ns))) {
            stop = "goal";
            snprintf(stop_msg, sizeof(stop_msg), "goal reached (%.1f us, %.2f of the bound)", ka_us(t.best_lat),
                     t.best_floor / t.best_lat);
            break;
        }
        if (t.iter >= max_it) {
            stop = "budget_iterations";
            snprintf(stop_msg, sizeof(stop_msg), "iteration budget of %d used", max_it);
            break;
        }
        if (o->max_seconds > 0 && ka_now() - t.t_start >= o->max_seconds) {
            stop = "budget_seconds";
            snprintf(stop_msg, sizeof(stop_msg), "time budget of %.0f s used", o->max_seconds);
            break;
        }
        if (patience > 0 && t.have_best && t.since_improve >= patience) {
            stop = "no_improvement";
            snprintf(stop_msg, sizeof(stop_msg), "%d iterations without improvement", patience);
            break;
        }
        rc = ka_next(&t, &c, &have, err);
        if (rc)
            goto out;
        if (!have && !t.have_best)
            snprintf(stop_msg, sizeof(stop_msg), "no candidate passed validation");
    }
    /* The prior started elsewhere: when the search ended by itself (no
     * improvement, nothing left), the template's default gets one more
     * evaluation so the report compares with it; a goal, a budget or a
     * cancel is respected, and `default` is then the starting setting. */
    if (t.default_due && (strcmp(stop, "no_improvement") == 0 || strcmp(stop, "exhausted") == 0) &&
        !ka_seen_find(&t, t.def_idx)) {
        char params[300];
        memset(&c, 0, sizeof(c));
        memcpy(c.idx, t.def_idx, sizeof(c.idx));
        c.moved = -1;
        ka_fmt_params(sp, t.def_idx, params, sizeof(params));
        snprintf(c.reason, sizeof(c.reason), "after the search: the template's default setting (%s), "
                 "for the report's comparison", params);
        rc = ka_iterate(&t, &c, err);
        if (rc)
            goto out;
    }
    if (o->warm_entry) {
        t.res.warm_entry = o->warm_entry;
        t.res.warm_params = o->warm_params ? cJSON_Duplicate(o->warm_params, true) : NULL;
        t.res.warm_used = t.warm_used;
        snprintf(t.res.warm_note, sizeof(t.res.warm_note), "%s",
                 t.warm_used                      ? "the search started from the entry's params"
                 : o->planner != KA_PLAN_GUIDED ? "only the guided planner starts from one"
                                                  : t.warm_note);
    }
    t.res.op = pb->op;
    t.res.entry = pb->entry;
    t.res.target = pb->target;
    t.res.planner = ka_planner_name(o->planner);
    t.res.correct = t.have_best;
    if (t.have_best) {
        char *kw = ka_space_kwargs(sp, t.best, pb->fixed_kwargs);
        t.res.best.params = ka_space_params(sp, t.best);
        t.res.best.source = ka_specialize_source(pb->source_path, pb->entry, t.res.best.params);
        t.res.best.kwargs = cJSON_Parse(kw);
        free(kw);
        t.res.best.iteration = t.best_iter;
        t.res.best.latency_ns = t.best_lat;
        t.res.best.floor_ns = t.best_floor;
        snprintf(t.res.best.bound_kind, sizeof(t.res.best.bound_kind), "%s", jstr(t.best_timing, "bound_kind", ""));
        t.res.best.bounds = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(t.best_timing, "bounds"), true);
        t.res.best.summary = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(t.best_timing, "summary"), true);
        t.res.best.findings = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(t.best_timing, "findings"), true);
    }
    t.res.stop_reason = stop;
    snprintf(t.res.stop_message, sizeof(t.res.stop_message), "%s", stop_msg);
    t.res.iterations = t.iter;
    t.res.evaluations = t.evals;
    t.res.cache_hits = ka_cache_hits(t.cache);
    t.res.pruned = t.pruned;
    t.res.validations = t.validations;
    t.res.rejected = t.rejected;
    t.res.compile_errors = t.compile_errors;
    t.res.wall_s = ka_now() - t.t_start;
    t.res.eval_s = t.eval_s;
    t.res.sim_s = t.sim_s;
    ka_report(&t, stop_msg);
    *result = ka_result_json(&t.res);
out:
    if (t.ref_dir[0]) {
        for (int s = 0; s < KA_MAX_SEEDS; s++) {
            char *f = kf_asprintf("%s/seed%d.ref", t.ref_dir, s), *fi = kf_asprintf("%s/seed%d.in", t.ref_dir, s);
            unlink(f);
            unlink(fi);
            free(f);
            free(fi);
        }
        rmdir(t.ref_dir);
    }
    cJSON_Delete(t.ahead);
    if (own_cache)
        ka_cache_free(t.cache);
    ka_result_release(&t.res);
    cJSON_Delete(t.best_timing);
    free(t.seen);
    free(t.q);
    free(t.order);
    free(t.source);
    return rc;
}

/* ---- one-shot evaluations ------------------------------------------------ */

kf_code ka_artifacts(const ka_problem *pb, const char *kwargs_json, const cJSON *params, unsigned timeout_s,
                     cJSON **out, kf_err *err)
{
    static const char *const docs[] = { "profile.json", "instructions.json", "trace.json", NULL };
    char *src = ka_specialize_source(pb->source_path, pb->entry, params);
    cJSON *arr = cJSON_CreateArray(), *res = NULL, *f;
    const cJSON *d;
    ka_eval_req r;
    kf_code rc;

    *out = NULL;
    f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "name", "kernel.py");
    cJSON_AddStringToObject(f, "content", src ? src : "");
    cJSON_AddItemToArray(arr, f);
    free(src);
    memset(&r, 0, sizeof(r));
    r.pb = pb;
    r.kwargs_json = kwargs_json;
    r.mode = KA_EVAL_TIMING;
    r.timeout_s = timeout_s;
    r.documents = true;
    rc = ka_eval_run(&r, &res, err);
    if (rc) {
        cJSON_Delete(arr);
        return rc;
    }
    d = cJSON_GetObjectItemCaseSensitive(res, "documents");
    for (int i = 0; docs[i] && cJSON_IsObject(d); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, docs[i]);
        if (!cJSON_IsString(v) || strlen(v->valuestring) > KA_ARTIFACT_MAX_BYTES)
            continue;
        f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", docs[i]);
        cJSON_AddStringToObject(f, "content", v->valuestring);
        cJSON_AddItemToArray(arr, f);
    }
    cJSON_Delete(res);
    *out = arr;
    return KF_OK;
}

kf_code ka_profile_once(const ka_problem *pb, const char *kwargs_json, unsigned timeout_s, cJSON **result,
                        kf_err *err)
{
    ka_eval_req r;
    memset(&r, 0, sizeof(r));
    r.pb = pb;
    r.kwargs_json = kwargs_json;
    r.mode = KA_EVAL_TIMING;
    r.timeout_s = timeout_s;
    return ka_eval_run(&r, result, err);
}

void ka_validate_req(ka_eval_req *r, const ka_problem *pb, const char *kwargs_json, uint64_t seed, int n_seeds,
                     unsigned timeout_s)
{
    memset(r, 0, sizeof(*r));
    r->pb = pb;
    r->kwargs_json = kwargs_json;
    r->mode = KA_EVAL_VALIDATE;
    r->timeout_s = timeout_s;
    r->rtol = r->atol = -1;
    r->n_seeds = n_seeds > 0 ? (n_seeds > KA_MAX_SEEDS ? KA_MAX_SEEDS : n_seeds) : KA_DEF_SEEDS;
    for (int s = 0; s < r->n_seeds; s++) {
        uint64_t z = seed + (uint64_t)s * 977ULL + 1;
        r->seeds[s] = ka_rng(&z) & 0xffffffffULL;
    }
}

kf_code ka_validate_once(const ka_problem *pb, const char *kwargs_json, uint64_t seed, int n_seeds,
                         unsigned timeout_s, cJSON **result, kf_err *err)
{
    ka_eval_req r;
    ka_validate_req(&r, pb, kwargs_json, seed, n_seeds, timeout_s);
    return ka_eval_run(&r, result, err);
}
