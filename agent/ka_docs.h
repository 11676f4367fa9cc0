/*
 * ka_docs — kforge's own documentation of the simulated NKI API
 * (docs/sim-nki.md) and of the simulator's error codes (docs/sim-errors.md),
 * offline, for the tools that answer a model or an MCP client: `kforge
 * mcp`'s docs tool and the LLM planner's (in kforge tune and in the
 * worker's jobs).
 *
 * ka_docs_query: with query, the sections (at most 6, their text cut at
 * 12,000 bytes, and the lines with every word of the query) containing
 * every word of it, case-insensitively; with section, that section's text;
 * with neither, every title.  only: "nki" or "errors" (NULL: both).  The
 * folder is looked for next to the kernel library (kf_libmeta_dir()/../docs),
 * then ./docs, then <exe>/../../docs and <exe>/../share/kforge/docs.
 *
 * Result: {"sections": [{doc, title, level, text?, truncated?,
 * matching_lines?}], "matches"} (the caller's), or NULL with err set:
 * KF_INVALID (query and section both), KF_NOT_FOUND (no docs folder, no
 * such section), KF_IO (a file that cannot be read).
 */
#ifndef KA_DOCS_H
#define KA_DOCS_H

#include <cjson/cJSON.h>

#include "kf_error.h"

cJSON *ka_docs_query(const char *query, const char *section, const char *only, kf_err *err);

#endif
