/* sim_error — the simulator's error table (see sim_error.h). */
#include "sim_error.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    const char *rule;
} sim_errors[] = {
#define XX(id, rule) { #id, rule },
    SIM_ERROR_MAP(XX)
#undef XX
};

const char *sim_error_name(sim_error_code c)
{
    return (unsigned)c < SIM_E__COUNT ? sim_errors[c].name : "?";
}

const char *sim_error_rule(sim_error_code c)
{
    return (unsigned)c < SIM_E__COUNT ? sim_errors[c].rule : "?";
}

void sim_error_clear(sim_error *e)
{
    if (e)
        memset(e, 0, sizeof(*e));
}

void sim_error_format(const sim_error *e, char *buf, unsigned len)
{
    if (!buf || len == 0)
        return;
    snprintf(buf, len, "%s:%d: error SIM_E_%s%s%s: %s%s%s%s",
             e->file[0] ? e->file : "<kernel>", e->line, sim_error_name(e->code),
             e->api[0] ? " in " : "", e->api, sim_error_rule(e->code),
             e->values[0] ? " (" : "", e->values, e->values[0] ? ")" : "");
}
