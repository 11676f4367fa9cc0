/* api_idem — Idempotency-Key on POST (draft-ietf-httpapi-idempotency-key-header).
 *
 * Keys are scoped to the token that sent them.  A first request inserts an
 * in_flight row (committed at once, so a concurrent duplicate sees it and
 * gets 409); the response is stored when the handler is done (the job
 * route stores it in the same transaction as the job).  A replay answers
 * the stored status, Location and body; the same key with another method,
 * path or body is 422.  5xx answers free the key so the client can retry.
 * Rows expire after KFORGE_IDEMPOTENCY_TTL_S; an in_flight row older than a
 * minute (its request died with the process or the database) is taken over. */
#include "api.h"
#include "kf_log.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The key as the draft defines it: an sf-string (RFC 8941 3.3.3), quotes
 * included.  A bare token is refused rather than guessed at: the same key
 * must mean the same bytes to every client and proxy. */
bool api_idem_parse_key(const char *h, char *out, size_t cap)
{
    const char *p;
    size_t n = 0;

    if (*h != '"')
        return false;
    for (p = h + 1; *p && *p != '"'; p++) {
        char c = *p;
        if (c == '\\') {
            p++;
            if (*p != '"' && *p != '\\')
                return false;
            c = *p;
        } else if ((unsigned char)c < 0x20 || (unsigned char)c > 0x7e) {
            return false;
        }
        if (n + 1 >= cap)
            return false;
        out[n++] = c;
    }
    if (*p != '"' || p[1] != '\0')
        return false;
    out[n] = '\0';
    return n > 0;
}

static void api_idem_fp_param(const unsigned char fp[32], char out[67])
{
    static const char hx[] = "0123456789abcdef";
    out[0] = '\\';
    out[1] = 'x';
    for (int i = 0; i < 32; i++) {
        out[2 + 2 * i] = hx[fp[i] >> 4];
        out[3 + 2 * i] = hx[fp[i] & 15];
    }
    out[66] = '\0';
}

bool api_idem_begin(api_req *r)
{
    const char *h = api_req_header(r, "Idempotency-Key");
    char owner[24], ttl[24], fp[67];
    const char *params[4];
    long status = 0;
    EVP_MD_CTX *md;
    PGresult *res;
    unsigned int fplen = 32;

    if (!h)
        return true;
    if (!api_idem_parse_key(h, r->idem_key, sizeof(r->idem_key))) {
        api_reply_code(r, KF_INVALID, "idempotency-key-invalid",
                       "Idempotency-Key must be a quoted string of 1-255 printable ASCII characters, "
                       "e.g. \"8e03978e-40d5-43e8-bc93-6894a57f9324\"");
        return false;
    }
    md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    EVP_DigestUpdate(md, r->method, strlen(r->method));
    EVP_DigestUpdate(md, "\n", 1);
    EVP_DigestUpdate(md, r->url, strlen(r->url));
    EVP_DigestUpdate(md, "\n", 1);
    EVP_DigestUpdate(md, r->body.data, r->body.len);
    EVP_DigestFinal_ex(md, r->idem_fp, &fplen);
    EVP_MD_CTX_free(md);

    snprintf(owner, sizeof(owner), "%lld", (long long)r->who.token_id);
    snprintf(ttl, sizeof(ttl), "%d", api_req_config(r)->idem_ttl_s);
    api_idem_fp_param(r->idem_fp, fp);
    params[0] = owner;
    params[1] = r->idem_key;
    params[2] = ttl;
    res = api_req_sql(r,
                      "DELETE FROM idempotency_keys WHERE owner_token_id = $1 AND key = $2 AND "
                      "(created_at < now() - make_interval(secs => $3::int) OR "
                      " (state = 'in_flight' AND created_at < now() - interval '60 seconds'))",
                      3, params);
    if (!res)
        return false;
    PQclear(res);
    params[2] = fp;
    res = api_req_sql(r,
                      "INSERT INTO idempotency_keys (owner_token_id, key, fingerprint) VALUES ($1, $2, $3::bytea) "
                      "ON CONFLICT DO NOTHING RETURNING 1",
                      3, params);
    if (!res)
        return false;
    if (PQntuples(res) == 1) {
        PQclear(res);
        r->idem_active = true;
        return true;
    }
    PQclear(res);
    res = api_req_sql(r,
                      "SELECT fingerprint = $3::bytea, state, status, response, location FROM idempotency_keys "
                      "WHERE owner_token_id = $1 AND key = $2",
                      3, params);
    if (!res)
        return false;
    if (PQntuples(res) != 1) {
        r->retry_after = 1;
        api_reply_code(r, KF_CONFLICT, "idempotency-key-in-use",
                       "a request with this Idempotency-Key is being processed; retry shortly");
    } else if (strcmp(PQgetvalue(res, 0, 0), "t") != 0) {
        api_reply_code(r, KF_UNPROCESSABLE, "idempotency-key-mismatch",
                       "this Idempotency-Key was used for a different request (method, path or body); "
                       "use a new key for a new request");
    } else if (strcmp(PQgetvalue(res, 0, 1), "in_flight") == 0) {
        r->retry_after = 1;
        api_reply_code(r, KF_CONFLICT, "idempotency-key-in-use",
                       "a request with this Idempotency-Key is still being processed; retry shortly");
    } else if (api_pg_num(r, res, 0, 2, 100, 599, &status)) {
        api_reply_json_text(r, (int)status, PQgetvalue(res, 0, 3));
        if (status >= 400)
            r->content_type = "application/problem+json";
        if (!PQgetisnull(res, 0, 4))
            snprintf(r->location, sizeof(r->location), "%s", PQgetvalue(res, 0, 4));
        r->replayed = true;
    }
    PQclear(res);
    return false;
}

void api_idem_finish(api_req *r)
{
    char owner[24], status[16];
    const char *params[5];
    PGconn *c;
    PGresult *res;

    if (!r->idem_active || r->idem_stored)
        return;
    /* The reply is already decided: use the connection without api_req_sql,
     * which would answer on failure. */
    {
        kf_err e = KF_ERR_INIT;
        c = api_req_pg_quiet(r, &e);
    }
    if (!c || PQstatus(c) != CONNECTION_OK) {
        kf_log_warn("idempotency key left in flight (database unavailable) req=%s", r->request_id);
        return;
    }
    snprintf(owner, sizeof(owner), "%lld", (long long)r->who.token_id);
    snprintf(status, sizeof(status), "%d", r->status);
    params[0] = owner;
    params[1] = r->idem_key;
    if (r->status >= 500) {
        res = PQexecParams(c, "DELETE FROM idempotency_keys WHERE owner_token_id = $1 AND key = $2", 2, NULL, params,
                           NULL, NULL, 0);
    } else {
        params[2] = status;
        params[3] = r->out.data;
        params[4] = r->location[0] ? r->location : NULL;
        res = PQexecParams(c,
                           "UPDATE idempotency_keys SET state = 'done', status = $3::int, response = $4, location = $5 "
                           "WHERE owner_token_id = $1 AND key = $2",
                           5, NULL, params, NULL, NULL, 0);
    }
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        kf_log_warn("idempotency key not stored req=%s msg=\"%s\"", r->request_id, PQresultErrorMessage(res));
    PQclear(res);
}
