/*
 * kf_tls — a TLS client session handed to a library that speaks only plain
 * sockets, through a local socket pair and a relay thread.
 *
 * Debian 12's hiredis (0.14) has no TLS, while managed Redis services
 * (rediss://) require it.  kf_tls_relay_open() connects to host:port over
 * TCP, completes a TLS handshake (TLS 1.2 or later; the server's certificate
 * verified against ca_file, or the system's CAs when ca_file is NULL, and its
 * name or IP address against host; a client certificate when cert_file and
 * key_file are given) and returns *fd, one end of an AF_UNIX socket pair.
 * A thread relays bytes between the other end and the TLS session until
 * either side closes: the caller hands *fd to the library (redisConnectFd)
 * as if it were the TCP connection.
 *
 * Ownership: the caller owns *fd and the relay.  Closing *fd ends the relay;
 * kf_tls_relay_free() (NULL-safe) must come after that close, and joins the
 * thread.  A TLS error or the server closing the session closes the relay's
 * end, so the library sees end-of-file on *fd and reconnects as for any
 * dropped connection.  As with any socket a library writes to, the process
 * should ignore SIGPIPE (kforge's daemons do); the relay's own writes to
 * the socket pair never raise it.
 *
 * Failure: KF_CONFIG for certificate or key files that cannot be loaded,
 * KF_REDIS (the connection's own code, given by the caller as `code`) for a
 * name that does not resolve, a refused or timed-out connection or a failed
 * handshake; each message says what to check (the CA file for an unverified
 * certificate, the URL's host for a name mismatch).  Nothing is left open.
 */
#ifndef KF_TLS_H
#define KF_TLS_H

#include "kf_error.h"

typedef struct kf_tls_relay kf_tls_relay;

typedef struct kf_tls_opts {
    const char *ca_file;     /* PEM CA bundle; NULL or "": the system's CAs */
    const char *cert_file;   /* PEM client certificate chain; NULL or "": none */
    const char *key_file;    /* its PEM private key (with cert_file) */
    int         timeout_ms;  /* connect + handshake, >= 1 */
} kf_tls_opts;

kf_code kf_tls_relay_open(const char *host, int port, const kf_tls_opts *o, kf_code code, int *fd,
                          kf_tls_relay **out, kf_err *err);
void kf_tls_relay_free(kf_tls_relay *r);

#endif
