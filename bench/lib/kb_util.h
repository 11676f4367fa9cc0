/*
 * kb_util — what the service benchmarks (queue, runs, batches, ui) share:
 * an API token made the way an operator makes one, a SQL statement that
 * must succeed, and a monotonic clock.
 *
 * Ownership: kb_token_create returns a heap string the caller frees.
 * Failure: values, never exits; each benchmark dies its own way (it knows
 * which child processes to stop first).
 */
#ifndef KB_UTIL_H
#define KB_UTIL_H

#include <libpq-fe.h>
#include <stdbool.h>

/* `kforge-api token create --role ROLE --name NAME` run from BUILD/bin
 * against DSN: the token it printed (the last line starting "kf_"), or NULL
 * when it printed none. */
char *kb_token_create(const char *build, const char *dsn, const char *role, const char *name);

/* Run sql; false with *why (PostgreSQL's message, owned by nobody after the
 * next call) when it did not complete. */
bool kb_sql_ok(PGconn *c, const char *sql, char *why, size_t why_len);

/* The id of the token named NAME in api_tokens; 0 when there is none. */
long kb_token_id(PGconn *c, const char *name);

/* Milliseconds on CLOCK_MONOTONIC. */
double kb_now_ms(void);

#endif
