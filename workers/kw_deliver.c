/* kw_deliver — report delivery through the spool (see kw_deliver.h). */
#include "kw_deliver.h"

#include "kw_lease.h"
#include "kf_log.h"

/* The drain time of a SIGTERM is over: a report that cannot even be
 * spooled is given up. */
static bool kw_deliver_give_up(void *ctx)
{
    kw_worker *w = ctx;
    return w->term && kw_drain_over(w);
}

long kw_deliver(kw_worker *w, const char *path, const char *body, char *name_out, size_t name_len)
{
    return kf_spool_deliver(w->spool, w->rep, path, body, name_out, name_len, kw_deliver_give_up, w);
}

kw_wait kw_deliver_wait_on(bool lease_lost, bool drain_over)
{
    return lease_lost || drain_over ? KW_WAIT_LEAVE : KW_WAIT_RETRY;
}

long kw_deliver_final(kw_worker *w, const char *path, const char *body)
{
    char name[128];
    int backoff = KW_BACKOFF_MIN, pending = 0;
    kf_err err = KF_ERR_INIT;
    long st = kw_deliver(w, path, body, name, sizeof(name));

    while (st < 0) {
        if (kw_deliver_wait_on(kw_lease_lost(w), kw_drain_over(w)) == KW_WAIT_LEAVE) {
            kf_log_warn("result left in the spool for later delivery path=%s file=%s", path, name);
            return -1;
        }
        kw_sleep(w, backoff);
        backoff = kw_backoff_next(backoff);
        kf_spool_flush(w->spool, w->rep, &pending, &err);
        if (!kf_spool_has(w->spool, name))
            return 200;
    }
    return st;
}
