/*
 * cli_out — what `kforge` prints for people: aligned tables for list-like
 * answers (jobs, events, iterations, artifacts, compare, the kernel
 * library), one iteration's
 * details, the progress line of `kforge wait` and the final summary.
 *
 * Every renderer reads an API document (the shapes of docs/runs.md and
 * README's HTTP API) and appends text to a kf_buf; none prints, none
 * fails: a field that is missing or of the wrong type shows as "-", so a
 * newer or older server never crashes the client.  Cells are cut at
 * CLI_CELL_MAX characters (between UTF-8 characters) with "...", and every
 * byte below 0x20 in a cell (a newline in a reason, an escape sequence a
 * kernel wrote) shows as a space, so one row stays one line.
 *
 * Ownership: cli_table is the caller's (cli_table_new / cli_table_free,
 * NULL allowed) and copies every cell it is given; the documents stay the
 * caller's.
 */
#ifndef CLI_OUT_H
#define CLI_OUT_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "kf_buf.h"

#define CLI_CELL_MAX 60        /* characters of one cell */
#define CLI_MAX_COLS 12

typedef struct cli_table cli_table;

cli_table *cli_table_new(int ncols, const char *const *headers);
/* One row of ncols cells (NULL shows as "-"). */
void cli_table_add(cli_table *t, const char *const *cells);
/* The header, then the rows, columns padded to the widest cell. */
void cli_table_render(const cli_table *t, kf_buf *out);
int cli_table_rows(const cli_table *t);
void cli_table_free(cli_table *t);

/* GET /v1/jobs's page ({jobs, next_cursor}; "items" is read too). */
void cli_render_jobs(const cJSON *page, kf_buf *out);
/* GET /v1/jobs/{id}/events ({job_id, events}). */
void cli_render_events(const cJSON *doc, kf_buf *out);
/* GET /v1/jobs/{id}/iterations's page. */
void cli_render_iterations(const cJSON *page, kf_buf *out);
/* GET /v1/jobs/{id}/iterations/{seq}: the fields, then what = 0 nothing
 * more, 1 the full source, 2 the diff from the previous iteration. */
void cli_render_iteration(const cJSON *it, int what, kf_buf *out);
/* GET /v1/jobs/{id}/artifacts. */
void cli_render_artifacts(const cJSON *list, kf_buf *out);
/* GET /v1/compare: best per job, params that differ, profile deltas,
 * findings only in one, provenance differences; with_diff adds the
 * unified diffs of the best sources. */
void cli_render_compare(const cJSON *cmp, bool with_diff, kf_buf *out);
/* GET /v1/library's page: one row per entry (id, op, target, dtype,
 * shape, latency, fraction, params, updated). */
void cli_render_library(const cJSON *page, kf_buf *out);
/* GET /v1/library/{entry}: its fields, then its history as a table (when,
 * why, latency before and after, the provenance members that changed). */
void cli_render_library_entry(const cJSON *entry, kf_buf *out);
/* GET /v1/calibration: one row per op and target (count, median and mean
 * |error|, bias, the worst record and its job), then the worst lines. */
void cli_render_calibration(const cJSON *doc, kf_buf *out);
/* A job's one-screen summary (GET /v1/jobs/{id}): state, attempt, best
 * latency and fraction, the error of a job that did not succeed. */
void cli_render_job(const cJSON *job, kf_buf *out);

/* The progress of `kforge wait`, fed with the stream's events
 * (docs/runs.md: `state`, `iteration`).  On a terminal (tty) each call
 * rewrites one line ("\r...", padded, no newline) with the state, the
 * latest seq, the best latency so far, the fraction of the bound and a
 * bar of that fraction; in a pipe each iteration and each state change is
 * one plain line ending in "\n". */
typedef struct cli_progress {
    bool   tty;
    char   state[24];
    int    attempt;
    long   seq;
    double best_ns;           /* 0 until an iteration reported one */
    double fraction;          /* of the best so far; -1 unknown */
    int    n_iterations;
} cli_progress;

void cli_progress_init(cli_progress *p, bool tty);
void cli_progress_event(cli_progress *p, const char *type, const cJSON *data, kf_buf *out);

/* "12.3 us" (or ms / s) of a latency in ns into buf. */
void cli_fmt_latency(double ns, char *buf, size_t cap);

#endif
