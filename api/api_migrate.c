/* api_migrate — numbered, forward-only SQL migrations.
 *
 * Files named NNNN_name.sql are applied in numeric order, each in its own
 * transaction together with its schema_migrations row, under an advisory
 * lock so that two processes migrating at once do not race.  Applying is
 * idempotent: recorded versions are skipped. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_config.h"
#include "kf_fs.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KF_SOURCE_DIR
#define KF_SOURCE_DIR "."
#endif

/* Any 64-bit number; identifies kforge's migration lock. */
#define API_MIGRATE_LOCK "7310585924301187"

/* A migration file larger than this is not one of kforge's. */
enum { API_MIGRATION_MAX_BYTES = 16 << 20 };

typedef struct api_mig {
    long  version;
    char *name;   /* file name */
} api_mig;

/* KFORGE_MIGRATIONS_DIR, else `make install`'s share/kforge/migrations
 * beside the binary, else the source tree the binary was built from. */
const char *api_migrations_dir(void)
{
    static char buf[PATH_MAX];
    static const char *const rels[] = { "../share/kforge/migrations" };
    const char *d = kf_config_str(KF_CFG_MIGRATIONS_DIR);
    if (d && *d)
        return d;
    d = kf_fs_data_dir(rels, 1, buf, sizeof(buf));
    return d ? d : KF_SOURCE_DIR "/migrations";
}

static int api_mig_cmp(const void *a, const void *b)
{
    const api_mig *x = a, *y = b;
    return (x->version > y->version) - (x->version < y->version);
}

/* NNNN_name.sql → version, or -1 when the name does not fit. */
static long api_mig_version(const char *name)
{
    size_t n = strlen(name), i = 0;
    long v = 0;

    if (n < 6 || strcmp(name + n - 4, ".sql") != 0)
        return -1;
    while (name[i] >= '0' && name[i] <= '9' && i < 9)
        v = v * 10 + (name[i++] - '0');
    if (i == 0 || name[i] != '_')
        return -1;
    return v;
}

static bool api_exec_ok(PGconn *c, const char *sql, kf_err *err, const char *what)
{
    PGresult *r = PQexec(c, sql);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok)
        kf_err_set(err, KF_DB, "%s: %s", what, PQresultErrorMessage(r));
    PQclear(r);
    return ok;
}

kf_code api_migrate(PGconn *c, const char *dir, FILE *out, int *applied, kf_err *err)
{
    DIR *d = NULL;
    struct dirent *de;
    api_mig *migs = NULL;
    size_t n = 0, cap = 0;
    kf_code rc = KF_OK;
    bool locked = false;

    *applied = 0;
    d = opendir(dir);
    if (!d) {
        rc = kf_err_set(err, KF_CONFIG, "cannot open the migrations folder %s: %s; set KFORGE_MIGRATIONS_DIR", dir,
                        strerror(errno));
        goto out;
    }
    while ((de = readdir(d)) != NULL) {
        long v = api_mig_version(de->d_name);
        if (v < 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            migs = kf_realloc(migs, cap * sizeof(*migs));
        }
        migs[n].version = v;
        migs[n].name = kf_strdup(de->d_name);
        n++;
    }
    if (n > 1)
        qsort(migs, n, sizeof(*migs), api_mig_cmp);
    for (size_t i = 1; i < n; i++) {
        if (migs[i].version == migs[i - 1].version) {
            rc = kf_err_set(err, KF_CONFIG, "two migrations share number %ld: %s and %s", migs[i].version,
                            migs[i - 1].name, migs[i].name);
            goto out;
        }
    }
    if (!api_exec_ok(c, "SET client_min_messages = warning", err, "migrate") ||
        !api_exec_ok(c, "SELECT pg_advisory_lock(" API_MIGRATE_LOCK ")", err, "taking the migration lock")) {
        rc = KF_DB;
        goto out;
    }
    locked = true;
    if (!api_exec_ok(c,
                     "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, "
                     "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
                     err, "creating schema_migrations")) {
        rc = KF_DB;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        char ver[24], *path, *sql;
        const char *params[2];
        PGresult *r;
        bool done;

        snprintf(ver, sizeof(ver), "%ld", migs[i].version);
        params[0] = ver;
        params[1] = migs[i].name;
        r = PQexecParams(c, "SELECT 1 FROM schema_migrations WHERE version = $1::int", 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            rc = kf_err_set(err, KF_DB, "reading schema_migrations: %s", PQresultErrorMessage(r));
            PQclear(r);
            goto out;
        }
        done = PQntuples(r) == 1;
        PQclear(r);
        if (done)
            continue;
        path = kf_asprintf("%s/%s", dir, migs[i].name);
        sql = kf_fs_read_file(path, API_MIGRATION_MAX_BYTES, err);
        free(path);
        if (!sql) {
            rc = KF_IO;
            goto out;
        }
        if (!api_exec_ok(c, "BEGIN", err, migs[i].name) || !api_exec_ok(c, sql, err, migs[i].name)) {
            free(sql);
            (void)api_exec_ok(c, "ROLLBACK", NULL, "rollback");
            rc = KF_DB;
            goto out;
        }
        free(sql);
        r = PQexecParams(c, "INSERT INTO schema_migrations (version, name) VALUES ($1::int, $2)", 2, NULL, params,
                         NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            rc = kf_err_set(err, KF_DB, "recording %s: %s", migs[i].name, PQresultErrorMessage(r));
            PQclear(r);
            (void)api_exec_ok(c, "ROLLBACK", NULL, "rollback");
            goto out;
        }
        PQclear(r);
        if (!api_exec_ok(c, "COMMIT", err, migs[i].name)) {
            rc = KF_DB;
            goto out;
        }
        (*applied)++;
        if (out)
            fprintf(out, "applied %s\n", migs[i].name);
    }
out:
    if (locked)
        (void)api_exec_ok(c, "SELECT pg_advisory_unlock(" API_MIGRATE_LOCK ")", NULL, "unlock");
    for (size_t i = 0; i < n; i++)
        free(migs[i].name);
    free(migs);
    if (d)
        closedir(d);
    return rc;
}

int api_migrations_pending(PGconn *c, const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int pending = 0;

    if (!d)
        return -1;
    while ((de = readdir(d)) != NULL) {
        long v = api_mig_version(de->d_name);
        char ver[24];
        const char *params[1] = { ver };
        PGresult *r;

        if (v < 0)
            continue;
        snprintf(ver, sizeof(ver), "%ld", v);
        r = PQexecParams(c, "SELECT 1 FROM schema_migrations WHERE version = $1::int", 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) == 0)
            pending++;
        PQclear(r);
    }
    closedir(d);
    return pending;
}
