/* api_auth — Bearer tokens.  Only SHA-256 hashes of the secrets are stored;
 * the secret is shown once, by `kforge-api token create`.  Valid tokens are
 * cached for a few seconds; failed authentications are counted per client
 * address and answered 429 past a bound (see api_auth_fail_note). */
#include "api.h"
#include "kf_alloc.h"
#include "kf_log.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
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
    else if (id) {
        long v = 0;
        rc = kf_db_num(res, 0, 0, 1, LONG_MAX, &v, err);
        *id = v;
    }
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

/* ---- failed authentications per client address ------------------------------
 *
 * A fixed table of API_AUTH_FAIL_SLOTS slots, one address each, picked by
 * a keyed hash of the address (a process-random key, so nobody can aim two
 * addresses at one slot); a new address takes over its slot.  A slot
 * counts the 401s of a fixed window of API_AUTH_FAIL_WINDOW_MS that starts
 * at the address's first failure; past API_AUTH_FAIL_MAX failures in the
 * window each further one is answered 429 with Retry-After (the window's
 * end) instead of 401.  Only failures are counted and consulted, so a valid
 * token is never slowed, even from a limited address (its token is still
 * checked).  128 KiB in all, behind one mutex held for a few loads and
 * stores. */
#define API_AUTH_FAIL_SLOTS     4096
#define API_AUTH_FAIL_MAX       20
#define API_AUTH_FAIL_WINDOW_MS 60000

typedef struct api_fail_slot {
    unsigned char addr[16];       /* IPv6, or IPv4 mapped (::ffff:a.b.c.d) */
    long long     window_start_ms;
    int           failures;       /* in the window; 0: slot empty */
} api_fail_slot;

static api_fail_slot api_fail_table[API_AUTH_FAIL_SLOTS];
static pthread_mutex_t api_fail_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t api_fail_key;
static pthread_once_t api_fail_once = PTHREAD_ONCE_INIT;

static void api_fail_key_init(void)
{
    if (RAND_bytes((unsigned char *)&api_fail_key, sizeof(api_fail_key)) != 1)
        api_fail_key = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid();
}

/* The address as 16 bytes; false for families other than IPv4 and IPv6. */
static bool api_fail_addr(const struct sockaddr *sa, unsigned char out[16])
{
    memset(out, 0, 16);
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &in->sin_addr, 4);
        return true;
    }
    if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        memcpy(out, &in6->sin6_addr, 16);
        return true;
    }
    return false;
}

bool api_auth_fail_note(const struct sockaddr *sa, long long now_ms, int *retry_after_s)
{
    unsigned char a[16];
    uint64_t h;
    api_fail_slot *s;
    bool limited = false;

    *retry_after_s = 0;
    if (!api_fail_addr(sa, a))
        return false;
    pthread_once(&api_fail_once, api_fail_key_init);
    h = 0xcbf29ce484222325ULL ^ api_fail_key;   /* FNV-1a, keyed */
    for (int i = 0; i < 16; i++)
        h = (h ^ a[i]) * 0x100000001b3ULL;
    s = &api_fail_table[(h ^ (h >> 32)) % API_AUTH_FAIL_SLOTS];
    pthread_mutex_lock(&api_fail_mu);
    if (s->failures == 0 || memcmp(s->addr, a, 16) != 0 || now_ms - s->window_start_ms >= API_AUTH_FAIL_WINDOW_MS ||
        now_ms < s->window_start_ms) {
        memcpy(s->addr, a, 16);
        s->window_start_ms = now_ms;
        s->failures = 0;
    }
    if (s->failures < INT_MAX)
        s->failures++;
    if (s->failures > API_AUTH_FAIL_MAX) {
        long long left = s->window_start_ms + API_AUTH_FAIL_WINDOW_MS - now_ms;
        limited = true;
        *retry_after_s = (int)((left + 999) / 1000);
        if (*retry_after_s < 1)
            *retry_after_s = 1;
    }
    pthread_mutex_unlock(&api_fail_mu);
    return limited;
}

/* 401, or 429 once the client's address has failed too often. */
static void api_unauthorized(api_req *r, bool invalid, const char *detail)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    int retry = 0;

    if (ci && api_auth_fail_note(ci->client_addr, api_mono_ms(), &retry)) {
        r->retry_after = retry;
        /* Literal: no kf_code maps to 429; rate limiting exists only at this edge. */
        api_reply_problem(r, 429, "rate-limited", "Too many requests",
                          "more than %d requests from this address had a missing, unknown or revoked token within "
                          "%d s; check the token (kforge-api token create makes one) and retry after the number of "
                          "seconds in Retry-After",
                          API_AUTH_FAIL_MAX, API_AUTH_FAIL_WINDOW_MS / 1000);
        return;
    }
    r->www_auth = invalid ? "Bearer realm=\"kforge\", error=\"invalid_token\"" : "Bearer realm=\"kforge\"";
    api_reply_code(r, KF_UNAUTHORIZED, "unauthorized", "%s", detail);
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
    long token_id = 0;

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
        if (!api_pg_num(r, res, 0, 0, 1, LONG_MAX, &token_id)) {
            PQclear(res);
            return false;
        }
        r->who.token_id = token_id;
        r->who.role = api_role_parse(PQgetvalue(res, 0, 1));
        snprintf(r->who.name, sizeof(r->who.name), "%s", PQgetvalue(res, 0, 2));
        PQclear(res);
        api_token_cache_put(raw, &r->who);
        /* Release the connection while the body uploads. */
        api_req_pg_put(r);
    }
    if (!(r->who.role & r->route->roles)) {
        api_reply_code(r, KF_FORBIDDEN, "forbidden",
                       "a %s token cannot use %s %s", api_role_name(r->who.role), r->method, r->route->pattern);
        return false;
    }
    return true;
}

/* GET /v1/whoami: the calling user or admin token's name and role, from the
 * principal authenticated for this request (no query, no database read), so
 * a client such as the dashboard offers admin-only actions to admins only. */
void api_h_whoami(api_req *r)
{
    static const char *const allowed[] = { NULL };
    cJSON *o;

    if (!api_req_query_known(r, allowed))
        return;
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", r->who.name);
    cJSON_AddStringToObject(o, "role", api_role_name(r->who.role));
    api_reply_json(r, 200, o);
    cJSON_Delete(o);
}
