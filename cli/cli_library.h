/*
 * cli_library — `kforge library list|show|export`: the kernel library
 * registry of the API (docs/library.md) from the command line.
 *
 *   list [--op OP] [--target T] [--dtype D] [--backend B] [--limit N]
 *        [--cursor C] [--all]       a table of entries (GET /v1/library)
 *   show ENTRY                      one entry and its history
 *   export DIR [filters] [--force]  every entry the token reads, as
 *                                   DIR/<entry>.py (GET .../kernel) plus
 *                                   DIR/manifest.json
 *
 * export writes each file to a temporary name in DIR, fsyncs it and
 * renames it into place, and writes manifest.json last the same way, so a
 * manifest is only ever there complete and naming files that are complete.
 * Each kernel's SHA-256 is computed while it downloads and recorded in the
 * manifest with the entry, params, latency, provenance and, for a library
 * op, the `kforge-sim run` arguments that validate it against the op's
 * NumPy reference (the reference is in the same file).  A DIR that exists
 * and is not empty is refused unless --force (which then replaces the
 * files of the same names and leaves the others).
 *
 * cli_library_main (cli/library.c, the binary's own: it reads the KFORGE
 * block with agent/ka_lib) returns the process exit status: 0 ok, 1
 * refused by the server or a write failed, 2 usage, 3 API unreachable.
 * The two pure helpers below are libkfcli's (cli/cli_library.c).
 * Ownership: nothing outlives a call but what it returns.
 */
#ifndef CLI_LIBRARY_H
#define CLI_LIBRARY_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "kf_buf.h"

int cli_library_main(int argc, char **argv);

/* An entry id that is safe as a file name: 1..200 of [A-Za-z0-9_.-], not
 * starting with '.' or '-' (the API's rule, checked again here because the
 * name comes from the network). */
bool cli_library_id_ok(const char *id);

/* The manifest record of one exported kernel: the entry's fields, the
 * file's name, size and SHA-256, and, when meta (the file's KFORGE block,
 * may be NULL) names a reference, "check": the `kforge-sim run` arguments
 * (after the file) that validate it.  Caller deletes. */
cJSON *cli_library_manifest_item(const cJSON *entry, const cJSON *meta, const char *file, const char *sha256,
                                 long long bytes);

#endif
