/* kb_util — see kb_util.h. */
#include "kb_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kf_alloc.h"
#include "kf_num.h"

char *kb_token_create(const char *build, const char *dsn, const char *role, const char *name)
{
    char *cmd = kf_asprintf("KFORGE_PG_DSN='%s' %s/bin/kforge-api token create --role %s --name %s 2>/dev/null", dsn,
                            build, role, name);
    FILE *f = popen(cmd, "r");
    char line[512], *tok = NULL;

    while (f && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "kf_", 3) == 0) {
            free(tok);
            tok = kf_strdup(line);
        }
    }
    if (f)
        pclose(f);
    free(cmd);
    return tok;
}

bool kb_sql_ok(PGconn *c, const char *sql, char *why, size_t why_len)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    bool ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;

    if (!ok)
        snprintf(why, why_len, "%s", PQresultErrorMessage(r));
    PQclear(r);
    return ok;
}

long kb_token_id(PGconn *c, const char *name)
{
    const char *params[1] = { name };
    PGresult *r = PQexecParams(c, "SELECT id FROM api_tokens WHERE name = $1", 1, NULL, params, NULL, NULL, 0);
    long id = 0;

    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 ||
        kf_num_long(PQgetvalue(r, 0, 0), 1, 1000000000, &id, NULL) != KF_OK)
        id = 0;
    PQclear(r);
    return id;
}

double kb_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}
