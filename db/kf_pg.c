/* kf_pg — the shared PostgreSQL layer (kf_pg.h). */
#include "kf_pg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Longest piece of a server message carried into a kf_err. */
#define KF_PG_MSG_MAX 300

/* Whether the last statement that failed on this thread lost a
 * serialization check or a deadlock (kf_pg_txn's cue to run again). */
static _Thread_local bool kf_pg_lost_race;

PGconn *kf_pg_connect(const char *dsn, const char *app, kf_err *err)
{
    static const char *const keys[] = { "dbname", "connect_timeout", "options", "application_name", NULL };
    const char *vals[] = { dsn, "3", "-c TimeZone=UTC", app, NULL };
    PGconn *c = PQconnectdbParams(keys, vals, 1);

    if (PQstatus(c) != CONNECTION_OK) {
        const char *m = PQerrorMessage(c);
        size_t n = strcspn(m, "\n");

        n = kf_utf8_cut(m, n < KF_PG_MSG_MAX ? n : KF_PG_MSG_MAX);
        kf_err_set(err, KF_UNAVAILABLE, "PostgreSQL is unreachable (%.*s); check KFORGE_PG_DSN and that the server runs",
                   (int)n, m);
        PQfinish(c);
        return NULL;
    }
    return c;
}

static const char *kf_pg_state(const PGresult *res)
{
    return res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
}

bool kf_pg_retry_txn(const PGresult *res)
{
    const char *st = kf_pg_state(res);

    return st && (strcmp(st, "40001") == 0 || strcmp(st, "40P01") == 0);
}

bool kf_pg_transient(PGconn *c, const PGresult *res)
{
    const char *st;

    if (!c || PQstatus(c) != CONNECTION_OK || !res)
        return true;
    if (!(st = kf_pg_state(res)))
        return true;
    /* 08: connection exceptions; 57P01-03: admin/crash shutdown, cannot
     * connect now; 53300: too many connections; 55P03: lock not
     * available. */
    return strncmp(st, "08", 2) == 0 || strcmp(st, "57P01") == 0 || strcmp(st, "57P02") == 0 ||
           strcmp(st, "57P03") == 0 || strcmp(st, "53300") == 0 || strcmp(st, "55P03") == 0 || kf_pg_retry_txn(res);
}

/* err from a failed statement: the step, the verdict and the server's
 * first line with its SQLSTATE. */
static void kf_pg_fail(PGconn *c, const PGresult *res, const char *what, kf_err *err)
{
    const char *msg = res ? PQresultErrorMessage(res) : NULL;
    const char *st = kf_pg_state(res);
    size_t n;
    bool transient = kf_pg_transient(c, res);

    if (kf_pg_retry_txn(res))
        kf_pg_lost_race = true;
    if (!msg || !*msg)
        msg = PQerrorMessage(c);
    n = strcspn(msg, "\n");
    n = kf_utf8_cut(msg, n < KF_PG_MSG_MAX ? n : KF_PG_MSG_MAX);
    kf_err_set(err, transient ? KF_UNAVAILABLE : KF_DB, "%s: PostgreSQL %s (%.*s%s%s%s)", what,
               transient ? "is unavailable or the transaction must be retried; retry shortly"
                         : "refused the statement",
               (int)n, msg, st ? " [" : "", st ? st : "", st ? "]" : "");
}

static PGresult *kf_pg_check(PGconn *c, PGresult *res, const char *what, kf_err *err)
{
    ExecStatusType s = PQresultStatus(res);

    if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK)
        return res;
    kf_pg_fail(c, res, what, err);
    PQclear(res);
    return NULL;
}

PGresult *kf_pg_exec(PGconn *c, const char *what, const char *sql, int n, const char *const *params,
                     const int *lengths, const int *formats, kf_err *err)
{
    return kf_pg_check(c, PQexecParams(c, sql, n, NULL, params, lengths, formats, 0), what, err);
}

PGresult *kf_pg_exec_stmt(PGconn *c, kf_pg_prepared *prep, const kf_pg_stmt *st, const char *const *params,
                          const int *lengths, const int *formats, kf_err *err)
{
    uint64_t bit = 1ULL << (st->id & 63);

    if (!prep)
        return kf_pg_exec(c, st->name, st->sql, st->nparams, params, lengths, formats, err);
    if (!(*prep & bit)) {
        PGresult *res = kf_pg_check(c, PQprepare(c, st->name, st->sql, st->nparams, NULL), st->name, err);
        if (!res)
            return NULL;
        PQclear(res);
        *prep |= bit;
    }
    return kf_pg_check(c, PQexecPrepared(c, st->name, st->nparams, params, lengths, formats, 0), st->name, err);
}

kf_code kf_pg_run(PGconn *c, const char *what, const char *sql, int n, const char *const *params, kf_err *err)
{
    PGresult *res = kf_pg_exec(c, what, sql, n, params, NULL, NULL, err);

    if (!res)
        return err->code;
    PQclear(res);
    return KF_OK;
}

void kf_pg_rollback(PGconn *c)
{
    if (c && PQtransactionStatus(c) != PQTRANS_IDLE && PQtransactionStatus(c) != PQTRANS_UNKNOWN) {
        PGresult *r = PQexec(c, "ROLLBACK");
        PQclear(r);
    }
}

kf_code kf_pg_txn(PGconn *c, int tries, kf_pg_txn_body body, void *ud, kf_err *err)
{
    kf_code rc = KF_OK;

    for (int t = 1; t <= (tries > 0 ? tries : 1); t++) {
        kf_err e = KF_ERR_INIT;

        kf_pg_lost_race = false;
        rc = kf_pg_run(c, "BEGIN", "BEGIN", 0, NULL, &e);
        if (rc == KF_OK)
            rc = body(c, ud, &e);
        if (rc == KF_OK)
            rc = kf_pg_run(c, "COMMIT", "COMMIT", 0, NULL, &e);
        if (rc == KF_OK)
            return KF_OK;
        kf_pg_rollback(c);
        *err = e;
        if (!kf_pg_lost_race || PQstatus(c) != CONNECTION_OK)
            return rc;
        /* Lost to a concurrent transaction: pause 1..2^t ms, then again. */
        {
            long ms = 1 + rand() % (1L << (t < 8 ? t : 8));
            struct timespec d = { ms / 1000, (ms % 1000) * 1000000L };
            nanosleep(&d, NULL);
        }
    }
    return rc;
}

/* ---- binary arrays ---------------------------------------------------------- */

/* Header: dimensions, has-nulls, element type, length, lower bound. */
#define KF_PG_ARRAY_HEAD 20

static void kf_pg_be32(unsigned char *x, uint32_t v)
{
    x[0] = (unsigned char)(v >> 24);
    x[1] = (unsigned char)(v >> 16);
    x[2] = (unsigned char)(v >> 8);
    x[3] = (unsigned char)v;
}

static void kf_pg_add32(kf_buf *b, uint32_t v)
{
    unsigned char x[4];

    kf_pg_be32(x, v);
    kf_buf_add(b, x, 4);
}

static void kf_pg_add64(kf_buf *b, uint64_t v)
{
    kf_pg_add32(b, (uint32_t)(v >> 32));
    kf_pg_add32(b, (uint32_t)v);
}

void kf_pg_array_init(kf_pg_array *a, uint32_t oid, size_t reserve_elems)
{
    static const unsigned char zero[KF_PG_ARRAY_HEAD];

    memset(a, 0, sizeof(*a));
    kf_buf_init(&a->buf);
    kf_buf_grow(&a->buf, KF_PG_ARRAY_HEAD + reserve_elems * 12);
    kf_buf_add(&a->buf, zero, sizeof(zero));
    a->oid = oid;
}

void kf_pg_array_release(kf_pg_array *a)
{
    kf_buf_release(&a->buf);
}

void kf_pg_array_null(kf_pg_array *a)
{
    kf_pg_add32(&a->buf, UINT32_MAX);   /* length -1 */
    a->has_null = true;
    a->n++;
}

void kf_pg_array_text(kf_pg_array *a, const char *s)
{
    size_t n;

    if (!s) {
        kf_pg_array_null(a);
        return;
    }
    n = strlen(s);
    kf_pg_add32(&a->buf, (uint32_t)n);
    kf_buf_add(&a->buf, s, n);
    a->n++;
}

void kf_pg_array_jsonb(kf_pg_array *a, const char *json)
{
    size_t n;

    if (!json) {
        kf_pg_array_null(a);
        return;
    }
    n = strlen(json);
    kf_pg_add32(&a->buf, (uint32_t)n + 1);
    kf_buf_addc(&a->buf, 1);   /* jsonb's binary form: version 1, then the text */
    kf_buf_add(&a->buf, json, n);
    a->n++;
}

void kf_pg_array_int4(kf_pg_array *a, int32_t v)
{
    kf_pg_add32(&a->buf, 4);
    kf_pg_add32(&a->buf, (uint32_t)v);
    a->n++;
}

void kf_pg_array_int8(kf_pg_array *a, int64_t v)
{
    kf_pg_add32(&a->buf, 8);
    kf_pg_add64(&a->buf, (uint64_t)v);
    a->n++;
}

/* Microseconds from 1970-01-01 to PostgreSQL's epoch, 2000-01-01 UTC. */
#define KF_PG_EPOCH_US 946684800000000LL

void kf_pg_array_timestamptz(kf_pg_array *a, int64_t unix_us)
{
    kf_pg_add32(&a->buf, 8);
    kf_pg_add64(&a->buf, (uint64_t)(unix_us - KF_PG_EPOCH_US));
    a->n++;
}

static int kf_pg_hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

bool kf_pg_array_uuid(kf_pg_array *a, const char *id)
{
    unsigned char raw[16];
    int k = 0;

    if (!id || strlen(id) != 36) {
        a->bad = true;
        return false;
    }
    for (int i = 0; i < 36; i++) {
        int v;
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (id[i] != '-') {
                a->bad = true;
                return false;
            }
            continue;
        }
        if ((v = kf_pg_hex(id[i])) < 0) {
            a->bad = true;
            return false;
        }
        if (k % 2 == 0)
            raw[k / 2] = (unsigned char)(v << 4);
        else
            raw[k / 2] |= (unsigned char)v;
        k++;
    }
    kf_pg_add32(&a->buf, 16);
    kf_buf_add(&a->buf, raw, 16);
    a->n++;
    return true;
}

bool kf_pg_array_done(kf_pg_array *a)
{
    unsigned char *h = (unsigned char *)a->buf.data;

    kf_pg_be32(h, 1);                   /* one dimension */
    kf_pg_be32(h + 4, a->has_null);
    kf_pg_be32(h + 8, a->oid);
    kf_pg_be32(h + 12, a->n);
    kf_pg_be32(h + 16, 1);              /* lower bound */
    return !a->bad;
}
