#include <string.h>

#include "sim_isa.h"

static const char *const sim_engine_names[] = {
#define XX(id, name, title) name,
    SIM_ENGINE_MAP(XX)
#undef XX
};

static const char *const sim_engine_titles[] = {
#define XX(id, name, title) title,
    SIM_ENGINE_MAP(XX)
#undef XX
};

static const struct {
    const char *name;
    sim_engine engine;
    sim_cost cost;
} sim_ops[] = {
#define XX(id, eng, cost, pname) { pname, SIM_ENG_##eng, SIM_COST_##cost },
    SIM_ISA_MAP(XX)
#undef XX
};

const char *sim_engine_name(sim_engine e)
{
    return (unsigned)e < SIM_ENG__COUNT ? sim_engine_names[e] : "?";
}

const char *sim_engine_title(sim_engine e)
{
    return (unsigned)e < SIM_ENG__COUNT ? sim_engine_titles[e] : "?";
}

sim_engine sim_engine_by_name(const char *name)
{
    for (unsigned e = 0; e < SIM_ENG__COUNT; e++)
        if (strcmp(name, sim_engine_names[e]) == 0)
            return (sim_engine)e;
    return SIM_ENG__COUNT;
}

const char *sim_opcode_name(sim_opcode op)
{
    return (unsigned)op < SIM_OP__COUNT ? sim_ops[op].name : "?";
}

sim_engine sim_opcode_engine(sim_opcode op)
{
    return (unsigned)op < SIM_OP__COUNT ? sim_ops[op].engine : SIM_ENG_SYNC;
}

sim_cost sim_opcode_cost(sim_opcode op)
{
    return (unsigned)op < SIM_OP__COUNT ? sim_ops[op].cost : SIM_COST_CONTROL;
}
