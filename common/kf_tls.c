/* kf_tls — see kf_tls.h. */
#include "kf_tls.h"

#include "kf_alloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { KT_BUF = 16384 };

struct kf_tls_relay {
    SSL_CTX  *ctx;
    SSL      *ssl;
    int       net_fd;        /* the TCP connection, non-blocking */
    int       loc_fd;        /* the relay's end of the socket pair, non-blocking */
    pthread_t thread;
    bool      started;
};

static int64_t kt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int kt_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Wait until fd is ready for `events` or the deadline passes: 1 ready, 0
 * timed out, -1 error. */
static int kt_wait(int fd, short events, int64_t deadline)
{
    for (;;) {
        struct pollfd p = { .fd = fd, .events = events };
        int64_t left = deadline - kt_now_ms();
        int n;
        if (left <= 0)
            return 0;
        n = poll(&p, 1, left > 60000 ? 60000 : (int)left);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* The OpenSSL error queue's first entry (cleared), or `dflt`. */
static const char *kt_ssl_reason(char *buf, size_t len, const char *dflt)
{
    unsigned long e = ERR_get_error();
    ERR_clear_error();
    if (!e)
        return dflt;
    ERR_error_string_n(e, buf, len);
    return buf;
}

static kf_code kt_connect_tcp(const char *host, int port, int64_t deadline, kf_code code, int *out,
                              kf_err *err)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
    char ps[16];
    int rc, last = 0;

    snprintf(ps, sizeof(ps), "%d", port);
    rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0)
        return kf_err_set(err, code, "cannot resolve Redis host %s: %s; check the host of KFORGE_REDIS_URL", host,
                          gai_strerror(rc));
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        if (kt_nonblock(fd) == 0 && (connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS)) {
            int w = kt_wait(fd, POLLOUT, deadline), soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (w == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) {
                freeaddrinfo(res);
                *out = fd;
                return KF_OK;
            }
            last = w == 0 ? ETIMEDOUT : soerr ? soerr : errno;
        } else {
            last = errno;
        }
        close(fd);
    }
    freeaddrinfo(res);
    return kf_err_set(err, code, "cannot connect to Redis at %s:%d: %s; is Redis running and listening for TLS there?",
                      host, port, strerror(last ? last : ECONNREFUSED));
}

static kf_code kt_context(const kf_tls_opts *o, SSL_CTX **out, kf_err *err)
{
    char why[256];
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

    if (!ctx)
        return kf_err_set(err, KF_INTERNAL, "cannot create a TLS context: %s",
                          kt_ssl_reason(why, sizeof(why), "out of memory"));
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (o->ca_file && *o->ca_file) {
        if (SSL_CTX_load_verify_locations(ctx, o->ca_file, NULL) != 1) {
            SSL_CTX_free(ctx);
            return kf_err_set(err, KF_CONFIG, "cannot load the CA file %s (KFORGE_REDIS_CA_FILE): %s", o->ca_file,
                              kt_ssl_reason(why, sizeof(why), "not a PEM certificate bundle"));
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        SSL_CTX_free(ctx);
        return kf_err_set(err, KF_CONFIG, "cannot load the system's CA certificates: %s; set KFORGE_REDIS_CA_FILE",
                          kt_ssl_reason(why, sizeof(why), "unknown error"));
    }
    if (o->cert_file && *o->cert_file) {
        if (!o->key_file || !*o->key_file) {
            SSL_CTX_free(ctx);
            return kf_err_set(err, KF_CONFIG, "KFORGE_REDIS_CERT_FILE is set but KFORGE_REDIS_KEY_FILE is not: a "
                                              "client certificate needs its private key");
        }
        if (SSL_CTX_use_certificate_chain_file(ctx, o->cert_file) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx, o->key_file, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(ctx) != 1) {
            SSL_CTX_free(ctx);
            return kf_err_set(err, KF_CONFIG, "cannot use the client certificate %s with the key %s: %s", o->cert_file,
                              o->key_file, kt_ssl_reason(why, sizeof(why), "they do not match"));
        }
    } else if (o->key_file && *o->key_file) {
        SSL_CTX_free(ctx);
        return kf_err_set(err, KF_CONFIG, "KFORGE_REDIS_KEY_FILE is set but KFORGE_REDIS_CERT_FILE is not");
    }
    *out = ctx;
    return KF_OK;
}

static kf_code kt_handshake(kf_tls_relay *r, const char *host, int port, int64_t deadline, kf_code code,
                            kf_err *err)
{
    struct in6_addr a6;
    struct in_addr a4;
    bool is_ip = inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1;
    char why[256];

    r->ssl = SSL_new(r->ctx);
    if (!r->ssl || SSL_set_fd(r->ssl, r->net_fd) != 1)
        return kf_err_set(err, KF_INTERNAL, "cannot start a TLS session: %s",
                          kt_ssl_reason(why, sizeof(why), "out of memory"));
    if (is_ip) {
        if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(r->ssl), host) != 1)
            return kf_err_set(err, KF_INTERNAL, "cannot check the certificate against %s", host);
    } else {
        /* SSL_set_tlsext_host_name() is a macro that casts its argument to
           void *; hand it a writable copy (a DNS name is at most 253 bytes). */
        char sni[256];
        if (strlen(host) >= sizeof(sni))
            return kf_err_set(err, code, "Redis host name '%.64s...' is longer than a DNS name can be", host);
        memcpy(sni, host, strlen(host) + 1);
        if (SSL_set_tlsext_host_name(r->ssl, sni) != 1 || SSL_set1_host(r->ssl, host) != 1)
            return kf_err_set(err, KF_INTERNAL, "cannot check the certificate against %s", host);
    }
    for (;;) {
        int rc = SSL_connect(r->ssl), e, w;
        if (rc == 1)
            return KF_OK;
        e = SSL_get_error(r->ssl, rc);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            w = kt_wait(r->net_fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline);
            if (w == 1)
                continue;
            return kf_err_set(err, code, "TLS handshake with Redis at %s:%d timed out; is that port TLS?", host,
                              port);
        }
        if (SSL_get_verify_result(r->ssl) != X509_V_OK) {
            long v = SSL_get_verify_result(r->ssl);
            ERR_clear_error();
            return kf_err_set(err, code,
                              "Redis at %s:%d presented a certificate kforge cannot trust: %s; %s", host, port,
                              X509_verify_cert_error_string(v),
                              v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH
                                  ? "the URL's host must be a name (or address) the certificate is issued for"
                                  : "set KFORGE_REDIS_CA_FILE to the CA that signed it");
        }
        return kf_err_set(err, code, "TLS handshake with Redis at %s:%d failed: %s; is that port TLS?", host, port,
                          kt_ssl_reason(why, sizeof(why), "the server closed the connection"));
    }
}

/* Move bytes both ways until either side closes or fails.  Every pass
 * tries all four moves; only a pass that moves nothing waits in poll. */
static void *kt_relay_main(void *arg)
{
    kf_tls_relay *r = arg;
    char *up = kf_malloc(KT_BUF), *down = kf_malloc(KT_BUF);
    size_t up_len = 0, up_off = 0, down_len = 0, down_off = 0;

    for (;;) {
        bool moved = false, tls_rd = false, tls_wr = false;
        int e;

        if (down_len == 0) {                       /* TLS -> buffer */
            int n = SSL_read(r->ssl, down, KT_BUF);
            if (n > 0) {
                down_len = (size_t)n;
                down_off = 0;
                moved = true;
            } else if ((e = SSL_get_error(r->ssl, n)) == SSL_ERROR_WANT_READ) {
                tls_rd = true;
            } else if (e == SSL_ERROR_WANT_WRITE) {
                tls_wr = true;
            } else {
                break;                             /* closed by the server, or a TLS error */
            }
        }
        if (down_len > 0) {                        /* buffer -> local */
            ssize_t w = send(r->loc_fd, down + down_off, down_len - down_off, MSG_NOSIGNAL);
            if (w > 0) {
                down_off += (size_t)w;
                if (down_off == down_len)
                    down_len = 0;
                moved = true;
            } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                break;
            }
        }
        if (up_len == 0) {                         /* local -> buffer */
            ssize_t n = read(r->loc_fd, up, KT_BUF);
            if (n > 0) {
                up_len = (size_t)n;
                up_off = 0;
                moved = true;
            } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                break;                             /* the library closed its end */
            }
        }
        if (up_len > 0) {                          /* buffer -> TLS */
            int w = SSL_write(r->ssl, up + up_off, (int)(up_len - up_off));
            if (w > 0) {
                up_off += (size_t)w;
                if (up_off == up_len)
                    up_len = 0;
                moved = true;
            } else if ((e = SSL_get_error(r->ssl, w)) == SSL_ERROR_WANT_READ) {
                tls_rd = true;
            } else if (e == SSL_ERROR_WANT_WRITE) {
                tls_wr = true;
            } else {
                break;
            }
        }
        if (moved)
            continue;
        {
            struct pollfd p[2] = {
                { .fd = r->loc_fd, .events = (short)((up_len == 0 ? POLLIN : 0) | (down_len > 0 ? POLLOUT : 0)) },
                { .fd = r->net_fd, .events = (short)((tls_rd ? POLLIN : 0) | (tls_wr ? POLLOUT : 0)) },
            };
            if (poll(p, 2, -1) < 0 && errno != EINTR)
                break;
            if ((p[0].revents & (POLLERR | POLLNVAL)) || (p[1].revents & (POLLERR | POLLNVAL)))
                break;
        }
    }
    ERR_clear_error();
    (void)SSL_shutdown(r->ssl);                    /* best effort, non-blocking */
    ERR_clear_error();
    shutdown(r->loc_fd, SHUT_RDWR);                /* the library reads end-of-file */
    free(up);
    free(down);
    return NULL;
}

kf_code kf_tls_relay_open(const char *host, int port, const kf_tls_opts *o, kf_code code, int *fd,
                          kf_tls_relay **out, kf_err *err)
{
    kf_tls_relay *r = kf_calloc(1, sizeof(*r));
    int64_t deadline = kt_now_ms() + (o->timeout_ms > 0 ? o->timeout_ms : 1);
    int sp[2] = { -1, -1 };
    kf_code rc;

    *fd = -1;
    *out = NULL;
    r->net_fd = r->loc_fd = -1;
    if ((rc = kt_context(o, &r->ctx, err)) != KF_OK ||
        (rc = kt_connect_tcp(host, port, deadline, code, &r->net_fd, err)) != KF_OK ||
        (rc = kt_handshake(r, host, port, deadline, code, err)) != KF_OK)
        goto fail;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0 || kt_nonblock(sp[1]) != 0) {
        rc = kf_err_set(err, KF_INTERNAL, "cannot make the TLS relay's socket pair: %s", strerror(errno));
        goto fail;
    }
    r->loc_fd = sp[1];
    if (pthread_create(&r->thread, NULL, kt_relay_main, r) != 0) {
        rc = kf_err_set(err, KF_INTERNAL, "cannot start the TLS relay thread");
        goto fail;
    }
    r->started = true;
    *fd = sp[0];
    *out = r;
    return KF_OK;
fail:
    if (sp[0] >= 0)
        close(sp[0]);
    kf_tls_relay_free(r);
    return rc;
}

void kf_tls_relay_free(kf_tls_relay *r)
{
    if (!r)
        return;
    if (r->started)
        pthread_join(r->thread, NULL);
    if (r->ssl)
        SSL_free(r->ssl);
    if (r->ctx)
        SSL_CTX_free(r->ctx);
    if (r->net_fd >= 0)
        close(r->net_fd);
    if (r->loc_fd >= 0)
        close(r->loc_fd);
    free(r);
}
