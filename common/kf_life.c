/* kf_life — the transition table, expanded (see kf_life.h). */
#include "kf_life.h"

#include <stdio.h>
#include <string.h>

static const kf_life_def kf_life_table[KF_MOVE__COUNT] = {
#define XX(n, ev, fr, t, q, fl, wh)                                                                          \
    [KF_MOVE_##n] = { .name = #n, .event = (ev), .from = (fr), .to = KF_STATE_##t, .qop = (q), .flags = (fl), \
                      .who = (wh) },
    KF_LIFE_MAP(XX)
#undef XX
};

static const char *const kf_state_names[KF_STATE__COUNT] = {
    [KF_STATE_NONE] = "",
    [KF_STATE_QUEUED] = "queued",
    [KF_STATE_RUNNING] = "running",
    [KF_STATE_RETRYING] = "retrying",
    [KF_STATE_SUCCEEDED] = "succeeded",
    [KF_STATE_FAILED] = "failed",
    [KF_STATE_CANCELLED] = "cancelled",
    [KF_STATE_DEAD] = "dead",
};

static const char *const kf_qop_names[] = {
    [KF_QOP_NONE] = "none",       [KF_QOP_ENQUEUE] = "enqueue", [KF_QOP_LEASE] = "lease",
    [KF_QOP_ACK] = "ack",         [KF_QOP_FAIL] = "fail",       [KF_QOP_REAP] = "reap",
    [KF_QOP_PROMOTE] = "promote", [KF_QOP_CANCEL] = "cancel",
};

const kf_life_def *kf_life_get(kf_life_move m)
{
    if ((unsigned)m >= KF_MOVE__COUNT)
        return NULL;
    return &kf_life_table[m];
}

const char *kf_state_name(kf_state s)
{
    if ((unsigned)s >= KF_STATE__COUNT)
        return "";
    return kf_state_names[s];
}

kf_state kf_state_parse(const char *s)
{
    if (!s)
        return KF_STATE_NONE;
    for (int i = KF_STATE_QUEUED; i < KF_STATE__COUNT; i++)
        if (strcmp(s, kf_state_names[i]) == 0)
            return (kf_state)i;
    return KF_STATE_NONE;
}

bool kf_state_terminal(kf_state s)
{
    return s == KF_STATE_SUCCEEDED || s == KF_STATE_FAILED || s == KF_STATE_CANCELLED || s == KF_STATE_DEAD;
}

const char *kf_life_qop_name(kf_life_qop q)
{
    if ((unsigned)q >= sizeof(kf_qop_names) / sizeof(kf_qop_names[0]))
        return "";
    return kf_qop_names[q];
}

bool kf_life_allows(kf_life_move m, kf_state from)
{
    const kf_life_def *d = kf_life_get(m);

    if (!d || (unsigned)from >= KF_STATE__COUNT)
        return false;
    return (d->from & (1u << from)) != 0;
}

kf_state kf_life_target(kf_life_move m, kf_state from)
{
    const kf_life_def *d = kf_life_get(m);

    if (!kf_life_allows(m, from))
        return KF_STATE_NONE;
    return (d->flags & KF_LIFE_KEEP) ? from : d->to;
}

void kf_states_pg_array(kf_states s, char *out, unsigned n)
{
    size_t len = 0;

    if (n == 0)
        return;
    out[0] = '\0';
    len += (size_t)snprintf(out, n, "{");
    for (int i = KF_STATE_QUEUED; i < KF_STATE__COUNT && len < n; i++)
        if (s & (1u << i))
            len += (size_t)snprintf(out + len, n - len, "%s%s", len > 1 ? "," : "", kf_state_names[i]);
    if (len < n)
        snprintf(out + len, n - len, "}");
}

kf_code kf_life_check(kf_life_move m, kf_state from, kf_err *err)
{
    const kf_life_def *d = kf_life_get(m);
    char allowed[96];

    if (!d || (unsigned)from >= KF_STATE__COUNT)
        return kf_err_set(err, KF_INVALID, "no such job move (%d) or state (%d); this is a bug in the caller",
                          (int)m, (int)from);
    if (kf_life_allows(m, from))
        return KF_OK;
    kf_states_pg_array(d->from, allowed, sizeof(allowed));
    if (d->from == KF_ST(NONE))
        snprintf(allowed, sizeof(allowed), "{} (a job not yet written)");
    return kf_err_set(err, KF_CONFLICT, "job is %s; %s (%s) moves a job only from %s",
                      from == KF_STATE_NONE ? "not yet written" : kf_state_name(from), d->event, d->name, allowed);
}
