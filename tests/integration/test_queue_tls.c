/* kf_queue over rediss:// (kf_tls): a real redis-server listening for TLS
 * only, with certificates the test makes with the openssl command: a round
 * trip of queue calls (one payload larger than a TLS record), names and
 * addresses checked against the certificate, an untrusted server, a plain
 * client on the TLS port and the reverse, client certificates, and a Redis
 * restart under a connected handle. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_config.h"
#include "kf_queue.h"
#include "tests/lib/kf_test.h"

static char *dir;
static int tls_port;
static pid_t redis_pid;

static void sh(const char *fmt, const char *arg)
{
    char *cmd = kf_asprintf(fmt, arg);
    int rc = system(cmd);
    cr_assert_eq(rc, 0, "failed: %s", cmd);
    free(cmd);
}

/* A CA, a server certificate for DNS:localhost only (no IP address: the
 * address checks below rely on it), a client certificate, and an
 * unrelated CA. */
static void make_certs(void)
{
    sh("cd %s && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=kforge-test-ca "
       ">/dev/null 2>&1 && openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.pem -days 2 "
       "-subj /CN=other-ca >/dev/null 2>&1",
       dir);
    char *ext = kf_asprintf("%s/srv.ext", dir);
    kf_test_write_file(ext, "subjectAltName=DNS:localhost\n");
    free(ext);
    sh("cd %s && openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=localhost >/dev/null 2>&1 "
       "&& openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 "
       "-extfile srv.ext >/dev/null 2>&1",
       dir);
    sh("cd %s && openssl req -newkey rsa:2048 -nodes -keyout cli.key -out cli.csr -subj /CN=kforge-worker "
       ">/dev/null 2>&1 && openssl x509 -req -in cli.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cli.pem "
       "-days 2 >/dev/null 2>&1",
       dir);
}

/* redis-server from PATH (kf_test_spawn takes a path). */
static char *redis_server(void)
{
    const char *path = getenv("PATH");
    char *copy = kf_strdup(path ? path : "/usr/bin:/bin"), *save = NULL, *found = NULL;

    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char *p = kf_asprintf("%s/redis-server", d);
        if (access(p, X_OK) == 0)
            found = p;
        else
            free(p);
    }
    free(copy);
    cr_assert_not_null(found, "redis-server is not on PATH");
    return found;
}

static void start_redis(bool auth_clients)
{
    char port[16], yes[] = "yes", no[] = "no", *cert = kf_asprintf("%s/srv.pem", dir), *key = kf_asprintf("%s/srv.key", dir),
                   *ca = kf_asprintf("%s/ca.pem", dir), *log = kf_asprintf("%s/redis.log", dir);
    char *bin = redis_server();
    char *argv[] = { bin, "--port", "0", "--tls-port", port, "--tls-cert-file", cert,
                     "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", auth_clients ? yes : no,
                     "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", NULL };
    char *env[] = { NULL };
    long long deadline = kf_test_now_ms() + 10000;
    char *ready = NULL;

    snprintf(port, sizeof(port), "%d", tls_port);
    unlink(log);                           /* a restart must not read the last server's "Ready" */
    redis_pid = kf_test_spawn(argv, env, log);
    while (kf_test_now_ms() < deadline) {
        ready = access(log, R_OK) == 0 ? kf_test_read_file(log) : NULL;
        if (ready && strstr(ready, "Ready to accept connections"))
            break;
        free(ready);
        ready = NULL;
        kf_test_sleep_ms(50);
    }
    cr_assert_not_null(ready, "redis-server with TLS did not start; see %s", log);
    free(ready);
    free(bin);
    free(cert);
    free(key);
    free(ca);
    free(log);
}

static void stop_redis(void)
{
    if (redis_pid > 0)
        kf_test_stop(redis_pid, SIGTERM, 5000);
    redis_pid = 0;
}

static void set_files(const char *ca, const char *cert, const char *key)
{
    char *p;
    kf_err e = KF_ERR_INIT;
    p = ca ? kf_asprintf("%s/%s", dir, ca) : kf_strdup("");
    setenv("KFORGE_REDIS_CA_FILE", p, 1);
    free(p);
    p = cert ? kf_asprintf("%s/%s", dir, cert) : kf_strdup("");
    setenv("KFORGE_REDIS_CERT_FILE", p, 1);
    free(p);
    p = key ? kf_asprintf("%s/%s", dir, key) : kf_strdup("");
    setenv("KFORGE_REDIS_KEY_FILE", p, 1);
    free(p);
    cr_assert_eq(kf_config_load(&e), KF_OK, "%s", e.msg);
}

static void setup(void)
{
    signal(SIGPIPE, SIG_IGN);              /* as kforge's daemons do: hiredis writes to a closed socket */
    dir = kf_test_tmpdir("queue-tls");
    make_certs();
    tls_port = kf_test_free_port();
    start_redis(false);
    set_files("ca.pem", NULL, NULL);
}

static void teardown(void)
{
    stop_redis();
    free(dir);
}

/* cppcheck-suppress unknownMacro */
TestSuite(queue_tls, .init = setup, .fini = teardown, .timeout = 60);

static kf_queue *open_q(const char *host)
{
    char *url = kf_asprintf("rediss://%s:%d/3", host, tls_port);
    kf_err e = KF_ERR_INIT;
    kf_queue *q = kf_queue_connect(url, &e);
    cr_assert_not_null(q, "%s", e.msg);
    free(url);
    return q;
}

/* KF_OK, or the error of a stats call (which connects first). */
static kf_code try_stats(kf_queue *q, kf_err *e)
{
    kf_queue_stats st;
    return kf_queue_stats_get(q, NULL, &st, e);
}

Test(queue_tls, round_trip_with_a_payload_larger_than_a_record)
{
    kf_queue *q = open_q("localhost");
    kf_err e = KF_ERR_INIT;
    bool created = false, got = false;
    size_t big = 300000;
    char *payload = kf_malloc(big + 16);
    const char *targets[1] = { "trn2" };
    kf_queue_lease l;

    memset(payload, 'x', big + 16);
    snprintf(payload, 10, "{\"spec\":\"");
    payload[9] = 'x';
    snprintf(payload + 9 + big, 3, "\"}");
    kf_queue_job j = { .id = "11111111-2222-4333-8444-555555555555", .kind = "diag", .target = "trn2",
                       .backend = "diag", .priority = 5, .attempt = 0, .max_attempts = 3, .payload = payload };
    cr_assert_eq(kf_queue_enqueue(q, &j, &created, &e), KF_OK, "%s", e.msg);
    cr_assert(created);
    cr_assert_eq(kf_queue_lease_job(q, &(kf_queue_caps){ targets, 1, (const char *const[]){ "diag", "sim" }, 2 }, "w-tls", 30000, &l, &got, &e), KF_OK, "%s", e.msg);
    cr_assert(got);
    cr_assert_str_eq(l.id, j.id);
    cr_assert_eq(strlen(l.payload), strlen(payload), "the whole payload came back through the relay");
    cr_assert_eq(memcmp(l.payload, payload, strlen(payload)), 0);
    cr_assert_eq(kf_queue_ack(q, l.id, l.token, &e), KF_OK, "%s", e.msg);
    kf_queue_lease_free(&l);
    free(payload);
    kf_queue_free(q);
}

Test(queue_tls, the_certificate_must_name_the_host)
{
    kf_queue *q = open_q("127.0.0.1");   /* the certificate names DNS:localhost only */
    kf_err e = KF_ERR_INIT;
    cr_assert_eq(try_stats(q, &e), KF_REDIS);
    cr_assert(strstr(e.msg, "cannot trust") && strstr(e.msg, "the URL's host must be a name"), "%s", e.msg);
    kf_queue_free(q);
}

Test(queue_tls, an_untrusted_certificate_is_refused_with_what_to_set)
{
    kf_queue *q;
    kf_err e = KF_ERR_INIT;

    set_files("other.pem", NULL, NULL);   /* a CA that did not sign the server's certificate */
    q = open_q("localhost");
    cr_assert_eq(try_stats(q, &e), KF_REDIS);
    cr_assert(strstr(e.msg, "cannot trust") && strstr(e.msg, "KFORGE_REDIS_CA_FILE"), "%s", e.msg);
    kf_queue_free(q);
    set_files(NULL, NULL, NULL);          /* the system's CAs do not know the test CA either */
    q = open_q("localhost");
    cr_assert_eq(try_stats(q, &e), KF_REDIS);
    cr_assert(strstr(e.msg, "cannot trust"), "%s", e.msg);
    kf_queue_free(q);
}

Test(queue_tls, a_bad_ca_file_is_a_configuration_error)
{
    kf_queue *q;
    kf_err e = KF_ERR_INIT;

    set_files("srv.ext", NULL, NULL);
    q = open_q("localhost");
    cr_assert_eq(try_stats(q, &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "KFORGE_REDIS_CA_FILE"), "%s", e.msg);
    kf_queue_free(q);
    set_files("ca.pem", "cli.pem", NULL);
    q = open_q("localhost");
    cr_assert_eq(try_stats(q, &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "KFORGE_REDIS_KEY_FILE"), "%s", e.msg);
    kf_queue_free(q);
    set_files("ca.pem", "cli.pem", "other.key");
    q = open_q("localhost");
    cr_assert_eq(try_stats(q, &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "client certificate"), "%s", e.msg);
    kf_queue_free(q);
}

Test(queue_tls, plain_and_tls_do_not_mix)
{
    char *url = kf_asprintf("redis://localhost:%d/3", tls_port);
    kf_err e = KF_ERR_INIT;
    kf_queue *q = kf_queue_connect(url, &e);

    cr_assert_not_null(q, "%s", e.msg);
    cr_assert_eq(try_stats(q, &e), KF_REDIS, "a plain client gets no answer from a TLS port");
    kf_queue_free(q);
    free(url);
    /* rediss:// to the harness's plain Redis: the handshake fails, and says where to look */
    url = kf_asprintf("rediss://localhost:%s/3", kf_test_env("KFORGE_TEST_REDIS_PORT"));
    q = kf_queue_connect(url, &e);
    cr_assert_not_null(q, "%s", e.msg);
    cr_assert_eq(try_stats(q, &e), KF_REDIS);
    cr_assert(strstr(e.msg, "TLS"), "%s", e.msg);
    kf_queue_free(q);
    free(url);
}

Test(queue_tls, client_certificates)
{
    kf_queue *q;
    kf_err e = KF_ERR_INIT;

    stop_redis();
    start_redis(true);
    q = open_q("localhost");
    cr_assert_neq(try_stats(q, &e), KF_OK, "a server that asks for a client certificate refuses a client without");
    kf_queue_free(q);
    set_files("ca.pem", "cli.pem", "cli.key");
    q = open_q("localhost");
    cr_assert_eq(try_stats(q, &e), KF_OK, "%s", e.msg);
    kf_queue_free(q);
}

Test(queue_tls, a_restart_costs_one_error_then_the_handle_reconnects)
{
    kf_queue *q = open_q("localhost");
    kf_err e = KF_ERR_INIT;
    long long deadline;
    kf_code rc;

    cr_assert_eq(try_stats(q, &e), KF_OK, "%s", e.msg);
    stop_redis();
    cr_assert_eq(try_stats(q, &e), KF_REDIS, "the relay ends with the server, and the call fails at once");
    start_redis(false);
    deadline = kf_test_now_ms() + 10000;
    do {
        rc = try_stats(q, &e);
    } while (rc != KF_OK && kf_test_now_ms() < deadline && (kf_test_sleep_ms(100), 1));
    cr_assert_eq(rc, KF_OK, "%s", e.msg);
    kf_queue_free(q);
}

Test(queue_tls, url_forms)
{
    kf_queue_url u;
    kf_err e = KF_ERR_INIT;

    cr_assert_eq(kf_queue_url_parse("rediss://app:s3cret@cache.example.com:6380/2", &u, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(u.tls, 1);
    cr_assert_str_eq(u.host, "cache.example.com");
    cr_assert_str_eq(u.user, "app");
    cr_assert_eq(u.port, 6380);
    cr_assert_eq(u.db, 2);
    kf_queue_url_release(&u);
    cr_assert_eq(kf_queue_url_parse("redis://cache:6379", &u, &e), KF_OK, "%s", e.msg);
    cr_assert_eq(u.tls, 0);
    kf_queue_url_release(&u);
    cr_assert_eq(kf_queue_url_parse("redisss://cache", &u, &e), KF_CONFIG);
    cr_assert(strstr(e.msg, "rediss://"), "%s", e.msg);
}
