/*
 * sim_profile_fmt — fast writers for the profile's large JSON files (the
 * instruction table and the trace have one object per instruction, millions
 * for big kernels): integers and fixed-point times formatted by hand into a
 * line buffer, flushed with one fwrite per object.  Internal to sim_profile.c
 * and sim_trace.c.
 */
#ifndef SIM_PROFILE_FMT_H
#define SIM_PROFILE_FMT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "sim_profile.h"

typedef struct pf_line {
    char   buf[2048];
    size_t n;
} pf_line;

static inline void pf_raw(pf_line *l, const char *s, size_t n)
{
    if (n > sizeof(l->buf) - l->n)
        n = sizeof(l->buf) - l->n;
    memcpy(l->buf + l->n, s, n);
    l->n += n;
}

static inline void pf_s(pf_line *l, const char *s)
{
    pf_raw(l, s, strlen(s));
}

static inline void pf_u64(pf_line *l, uint64_t v)
{
    char t[24];
    int i = 0;
    do {
        t[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (i > 0 && l->n < sizeof(l->buf))
        l->buf[l->n++] = t[--i];
}

/* v / 10^digits with exactly `digits` decimals (ps -> ns: 3, ps -> us: 6). */
static inline void pf_fixed(pf_line *l, uint64_t v, unsigned digits)
{
    uint64_t div = 1;
    for (unsigned i = 0; i < digits; i++)
        div *= 10;
    pf_u64(l, v / div);
    pf_raw(l, ".", 1);
    uint64_t frac = v % div;
    for (uint64_t d = div / 10; d > 0; d /= 10) {
        char c = (char)('0' + (frac / d) % 10);
        pf_raw(l, &c, 1);
    }
}

/* A JSON string with its quotes. */
static inline void pf_jstr(pf_line *l, const char *s)
{
    pf_raw(l, "\"", 1);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            char e[2] = { '\\', (char)ch };
            pf_raw(l, e, 2);
        } else if (ch < 0x20) {
            char e[8];
            snprintf(e, sizeof(e), "\\u%04x", ch);
            pf_s(l, e);
        } else {
            pf_raw(l, (const char *)&ch, 1);
        }
    }
    pf_raw(l, "\"", 1);
}

/* "file:line" of every record location, made once per file written. */
static inline char **pf_loc_table(const sim_profile *p)
{
    size_t n = p->rec->n_locs;
    char **t = kf_calloc(n ? n : 1, sizeof(char *));
    char lb[512];
    for (size_t i = 0; i < n; i++)
        t[i] = kf_strdup(sim_profile_loc(p, (uint32_t)i, lb, sizeof(lb)));
    return t;
}

static inline const char *pf_loc(char **t, const sim_profile *p, uint32_t loc)
{
    return loc < p->rec->n_locs ? t[loc] : "?";
}

static inline void pf_loc_table_free(char **t, const sim_profile *p)
{
    for (size_t i = 0; t && i < p->rec->n_locs; i++)
        free(t[i]);
    free(t);
}

static inline void pf_flush(pf_line *l, FILE *f)
{
    fwrite(l->buf, 1, l->n, f);
    l->n = 0;
}

#endif
