/*
 * sim_build — which simulator this is, for a job's provenance.
 *
 * sim_build_id() is "src-sha256:<16 hex>": the start of the SHA-256 of the
 * simulator's sources (every .c and .h file of sim/ but this one, in name order),
 * computed by make when sim_build.o is compiled (sim/module.mk) and
 * rebuilt whenever one of them changes.  Two runs with the same id ran
 * the same simulator code; the target description is hashed apart
 * (provenance.target_hash).  Never fails; a static string.
 */
#ifndef SIM_BUILD_H
#define SIM_BUILD_H

const char *sim_build_id(void);

#endif
