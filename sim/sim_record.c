#include "sim_record.h"
#include "kf_alloc.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    unsigned size;
} sim_dtypes[] = {
#define XX(id, name, size) { name, size },
    SIM_DTYPE_MAP(XX)
#undef XX
};

const char *sim_dtype_name(sim_dtype dt)
{
    return (unsigned)dt < SIM_DT__COUNT ? sim_dtypes[dt].name : "?";
}

unsigned sim_dtype_size(sim_dtype dt)
{
    return (unsigned)dt < SIM_DT__COUNT ? sim_dtypes[dt].size : 0;
}

int sim_dtype_from_name(const char *name)
{
    for (int i = 0; i < SIM_DT__COUNT; i++)
        if (strcmp(sim_dtypes[i].name, name) == 0)
            return i;
    return -1;
}

#define SIM_GROW(arr, n, cap)                                          \
    do {                                                               \
        if ((n) == (cap)) {                                            \
            (cap) = (cap) ? (cap) * 2 : 64;                            \
            (arr) = kf_realloc((arr), (cap) * sizeof(*(arr)));         \
        }                                                              \
    } while (0)

void sim_record_init(sim_record *r, const char *target)
{
    memset(r, 0, sizeof(*r));
    strncpy(r->target, target ? target : "", sizeof(r->target) - 1);
    r->spmd_programs = 1;
    (void)sim_record_str(r, "");   /* id 0 is the empty string */
}

void sim_record_release(sim_record *r)
{
    for (size_t i = 0; i < r->n_strs; i++)
        free(r->strs[i]);
    free(r->strs);
    free(r->insns);
    free(r->allocs);
    free(r->locs);
    memset(r, 0, sizeof(*r));
}

sim_insn *sim_record_append(sim_record *r)
{
    sim_insn *in;

    SIM_GROW(r->insns, r->n_insns, r->cap_insns);
    in = &r->insns[r->n_insns++];
    memset(in, 0, sizeof(*in));
    return in;
}

uint32_t sim_record_alloc(sim_record *r, sim_mem mem, sim_dtype dt, uint32_t partitions,
                          uint64_t bytes_per_part, const char *name)
{
    sim_alloc *a;

    SIM_GROW(r->allocs, r->n_allocs, r->cap_allocs);
    a = &r->allocs[r->n_allocs];
    memset(a, 0, sizeof(*a));
    a->id = (uint32_t)r->n_allocs;
    a->mem = (uint8_t)mem;
    a->dtype = (uint8_t)dt;
    a->partitions = partitions;
    a->bytes_per_part = bytes_per_part;
    a->name = sim_record_str(r, name ? name : "");
    a->born = (uint32_t)r->n_insns;
    a->died = UINT32_MAX;
    a->loc = UINT32_MAX;
    a->api = UINT32_MAX;
    a->born_seq = r->n_events++;
    a->died_seq = UINT32_MAX;
    return (uint32_t)r->n_allocs++;
}

void sim_record_free(sim_record *r, uint32_t alloc_id)
{
    if (alloc_id < r->n_allocs && r->allocs[alloc_id].died == UINT32_MAX) {
        r->allocs[alloc_id].died = (uint32_t)r->n_insns;
        r->allocs[alloc_id].died_seq = r->n_events++;
    }
}

void sim_insn_set_imm(sim_insn *in, double value)
{
    float f = (float)value;

    memcpy(&in->imm, &f, sizeof(in->imm));
    in->flags |= SIM_F_IMM;
}

uint32_t sim_record_str(sim_record *r, const char *s)
{
    /* Few distinct strings (files, functions, tensor names): a linear scan
     * from the most recent is fast enough and keeps the record simple. */
    for (size_t i = r->n_strs; i-- > 0;)
        if (strcmp(r->strs[i], s) == 0)
            return (uint32_t)i;
    SIM_GROW(r->strs, r->n_strs, r->cap_strs);
    r->strs[r->n_strs] = kf_strdup(s);
    return (uint32_t)r->n_strs++;
}

uint32_t sim_record_loc(sim_record *r, const char *file, uint32_t line, const char *func)
{
    uint32_t f = sim_record_str(r, file ? file : "");
    uint32_t fn = sim_record_str(r, func ? func : "");

    for (size_t i = r->n_locs; i-- > 0;)
        if (r->locs[i].line == line && r->locs[i].file == f && r->locs[i].func == fn)
            return (uint32_t)i;
    SIM_GROW(r->locs, r->n_locs, r->cap_locs);
    r->locs[r->n_locs].file = f;
    r->locs[r->n_locs].line = line;
    r->locs[r->n_locs].func = fn;
    return (uint32_t)r->n_locs++;
}
