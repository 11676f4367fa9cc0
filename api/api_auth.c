/* api_auth — Bearer tokens.  Only SHA-256 hashes of the secrets are stored;
 * the secret is shown once, by `kforge-api token create`. */
#include "api.h"
#include "kf_alloc.h"
#include "kf_log.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *api_role_name(int role)
{
    switch (role) {
    case API_ROLE_WORKER:
        return "worker";
    case API_ROLE_USER:
        return "user";
    case API_ROLE_ADMIN:
        return "admin";
    default:
        return "none";
    }
}

int api_role_parse(const char *s)
{
    if (!s)
        return 0;
    if (strcmp(s, "worker") == 0)
        return API_ROLE_WORKER;
    if (strcmp(s, "user") == 0)
        return API_ROLE_USER;
    if (strcmp(s, "admin") == 0)
        return API_ROLE_ADMIN;
    return 0;
}

/* SHA-256 fetched once: EVP_sha256() makes OpenSSL 3 look the algorithm
 * up in its provider tables on every digest, which cost more than hashing
 * the token itself on each request. */
static EVP_MD *api_sha256;
static pthread_once_t api_sha256_once = PTHREAD_ONCE_INIT;

/* Each thread keeps one digest context: EVP_Digest would allocate and
 * free one per request.  Freed at thread exit. */
static pthread_key_t api_sha256_ctx_key;

static void api_sha256_ctx_free(void *ctx)
{
    EVP_MD_CTX_free(ctx);
}

static void api_sha256_fetch(void)
{
    api_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (pthread_key_create(&api_sha256_ctx_key, api_sha256_ctx_free) != 0)
        abort();
}

void api_token_hash(const char *secret, unsigned char out[32])
{
    unsigned int n = 32;
    const EVP_MD *md;
    EVP_MD_CTX *ctx;

    pthread_once(&api_sha256_once, api_sha256_fetch);
    md = api_sha256 ? api_sha256 : EVP_sha256();
    ctx = pthread_getspecific(api_sha256_ctx_key);
    if (!ctx) {
        ctx = EVP_MD_CTX_new();
        if (!ctx || pthread_setspecific(api_sha256_ctx_key, ctx) != 0) {
            EVP_MD_CTX_free(ctx);
            EVP_Digest(secret, strlen(secret), out, &n, md, NULL);
            return;
        }
    }
    if (EVP_DigestInit_ex2(ctx, md, NULL) != 1 || EVP_DigestUpdate(ctx, secret, strlen(secret)) != 1 ||
        EVP_DigestFinal_ex(ctx, out, &n) != 1)
        EVP_Digest(secret, strlen(secret), out, &n, md, NULL);
}

bool api_worker_id_valid(const char *id)
{
    size_t n = strlen(id);

    if (n == 0 || n > API_NAME_MAX)
        return false;
    for (const char *p = id; *p; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("_.-:", *p)))
            return false;
    }
    return true;
}

static void api_hex(const unsigned char *p, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[p[i] >> 4];
        out[2 * i + 1] = hx[p[i] & 15];
    }
    out[2 * n] = '\0';
}

char *api_token_new_secret(void)
{
    unsigned char raw[32];
    char hex[65];

    if (RAND_bytes(raw, sizeof(raw)) != 1) {
        fprintf(stderr, "kforge-api: the system random generator failed\n");
        abort();
    }
    api_hex(raw, sizeof(raw), hex);
    return kf_asprintf("kf_%s", hex);
}

/* bytea parameter in hex form ("\\x..."), as PostgreSQL also prints one. */
void api_token_hash_hex(const char *secret, char out[67])
{
    unsigned char h[32];
    api_token_hash(secret, h);
    out[0] = '\\';
    out[1] = 'x';
    api_hex(h, 32, out + 2);
}

kf_code api_token_insert(PGconn *c, const char *secret, const char *name, const char *role, int64_t *id,
                         kf_err *err)
{
    char hash[67];
    const char *params[3];
    PGresult *res;
    kf_code rc = KF_OK;

    if (strcmp(role, "worker") == 0 && !api_worker_id_valid(name))
        return kf_err_set(err, KF_INVALID,
                          "a worker token's name is the worker id it speaks for: 1-%d of letters, digits and "
                          "_ . : - (got \"%s\"); give --name the worker's KFORGE_WORKER_ID",
                          API_NAME_MAX, name);
    api_token_hash_hex(secret, hash);
    params[0] = name;
    params[1] = role;
    params[2] = hash;
    res = PQexecParams(c, "INSERT INTO api_tokens (name, role, token_hash) VALUES ($1, $2, $3::bytea) RETURNING id",
                       3, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        rc = kf_err_set(err, KF_DB, "cannot store the token: %s", PQresultErrorMessage(res));
    else if (id)
        *id = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return rc;
}

kf_code api_token_bootstrap(PGconn *c, const char *secret, kf_err *err)
{
    char hash[67];
    const char *params[1];
    PGresult *res;
    kf_code rc = KF_OK;

    if (strlen(secret) < 16)
        return kf_err_set(err, KF_CONFIG, "KFORGE_BOOTSTRAP_TOKEN is shorter than 16 characters; use a long random value");
    api_token_hash_hex(secret, hash);
    params[0] = hash;
    res = PQexecParams(c,
                       "INSERT INTO api_tokens (name, role, token_hash) VALUES ('bootstrap', 'admin', $1::bytea) "
                       "ON CONFLICT (token_hash) DO UPDATE SET role = 'admin', revoked_at = NULL",
                       1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        rc = kf_err_set(err, KF_DB, "cannot store the bootstrap token: %s", PQresultErrorMessage(res));
    PQclear(res);
    return rc;
}

/* A small cache of recently seen tokens saves a database round trip per
 * request.  Entries live API_TOKEN_CACHE_MS, so a revoked token stops
 * working within that time; unknown tokens are never cached. */
#define API_TOKEN_CACHE_SLOTS 256
#define API_TOKEN_CACHE_MS    5000

typedef struct api_token_slot {
    unsigned char hash[32];
    api_principal who;
    long long     expires_ms;   /* 0: empty */
} api_token_slot;

static api_token_slot api_token_cache[API_TOKEN_CACHE_SLOTS];
static pthread_mutex_t api_token_mu = PTHREAD_MUTEX_INITIALIZER;

static long long api_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool api_token_cache_get(const unsigned char h[32], api_principal *who)
{
    api_token_slot *s = &api_token_cache[h[0]];
    bool hit;

    pthread_mutex_lock(&api_token_mu);
    hit = s->expires_ms > api_mono_ms() && CRYPTO_memcmp(s->hash, h, 32) == 0;
    if (hit)
        *who = s->who;
    pthread_mutex_unlock(&api_token_mu);
    return hit;
}

static void api_token_cache_put(const unsigned char h[32], const api_principal *who)
{
    api_token_slot *s = &api_token_cache[h[0]];

    pthread_mutex_lock(&api_token_mu);
    memcpy(s->hash, h, 32);
    s->who = *who;
    s->expires_ms = api_mono_ms() + API_TOKEN_CACHE_MS;
    pthread_mutex_unlock(&api_token_mu);
}

static void api_unauthorized(api_req *r, bool invalid, const char *detail)
{
    r->www_auth = invalid ? "Bearer realm=\"kforge\", error=\"invalid_token\"" : "Bearer realm=\"kforge\"";
    api_reply_problem(r, 401, "unauthorized", "Missing or invalid token", "%s", detail);
}

static const api_stmt api_st_token = {
    0, "kf_token", "SELECT id, role, name FROM api_tokens WHERE token_hash = $1::bytea AND revoked_at IS NULL", 1,
};

bool api_authenticate(api_req *r)
{
    const char *h = api_req_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *tok;
    unsigned char raw[32];
    char hash[67];
    const char *params[1];
    PGresult *res;
    size_t n;

    if (!h) {
        api_unauthorized(r, false, "send Authorization: Bearer <token> (kforge-api token create makes one)");
        return false;
    }
    if (strncasecmp(h, "Bearer ", 7) != 0) {
        api_unauthorized(r, true, "the Authorization scheme must be Bearer");
        return false;
    }
    tok = h + 7;
    while (*tok == ' ')
        tok++;
    n = strlen(tok);
    if (n == 0 || n > 256) {
        api_unauthorized(r, true, "the token is empty or too long");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (tok[i] <= 0x20 || tok[i] >= 0x7f) {
            api_unauthorized(r, true, "the token has characters a kforge token never has");
            return false;
        }
    }
    api_token_hash(tok, raw);
    if (!api_token_cache_get(raw, &r->who)) {
        api_token_hash_hex(tok, hash);
        params[0] = hash;
        res = api_req_stmt(r, &api_st_token, params);
        if (!res)
            return false;
        if (PQntuples(res) != 1) {
            PQclear(res);
            api_unauthorized(r, true, "the token is unknown or revoked");
            return false;
        }
        r->who.token_id = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        r->who.role = api_role_parse(PQgetvalue(res, 0, 1));
        snprintf(r->who.name, sizeof(r->who.name), "%s", PQgetvalue(res, 0, 2));
        PQclear(res);
        api_token_cache_put(raw, &r->who);
        /* Release the connection while the body uploads. */
        api_req_pg_put(r);
    }
    if (!(r->who.role & r->route->roles)) {
        api_reply_problem(r, 403, "forbidden", "Not allowed for this token's role",
                          "a %s token cannot use %s %s", api_role_name(r->who.role), r->method, r->route->pattern);
        return false;
    }
    return true;
}
