/*
 * sim_trace — a profile's timeline as Chrome trace-event JSON.
 *
 * The file is {"traceEvents":[...], "displayTimeUnit":"ns", "otherData":{}}
 * in the Trace Event Format that Perfetto and chrome://tracing load: one
 * process (pid 1, the NeuronCore), one thread per engine and per DMA queue
 * named by "M" (metadata) events, and one "X" (complete) event per
 * instruction with ts/dur in microseconds, cat = engine, name = opcode,
 * args = source line, bytes, flops and what it waited for.  Tracks never
 * overlap: every track runs its instructions in order.
 *
 * Ownership: writes to a caller-owned FILE (or a path it opens and closes).
 * Failure: KF_IO when writing fails.
 */
#ifndef SIM_TRACE_H
#define SIM_TRACE_H

#include <stdio.h>

#include "kf_error.h"
#include "sim_profile.h"

kf_code sim_trace_write(const sim_profile *p, FILE *f, kf_err *err);
kf_code sim_trace_write_file(const sim_profile *p, const char *path, kf_err *err);

#endif
