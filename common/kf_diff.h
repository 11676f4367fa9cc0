/*
 * kf_diff — line-based unified diffs: make one (Myers' O(ND) algorithm) and
 * apply one.
 *
 * The texts come from users' kernels and workers' reports, so the work is
 * bounded: a side of more than KF_DIFF_MAX_LINES lines, or a pair whose
 * shortest edit script is longer than KF_DIFF_MAX_EDITS inserted plus
 * deleted lines (after the common head and tail are set aside), is not
 * searched for its shortest script.  The diff is then one hunk that deletes
 * every differing old line and inserts every new one: still a correct
 * unified diff (applying it gives the new text), only not the shortest, and
 * *minimal says so.  Memory stays below about 4 MiB and time below about
 * (lines of both sides) x KF_DIFF_MAX_EDITS line comparisons.
 *
 * Lines end at '\n'; a last line without one is marked with the usual
 * "\ No newline at end of file".  Hunks carry 3 lines of context.
 *
 * Ownership: the caller owns the kf_buf it passes (text is appended) and
 * frees what kf_diff_apply returns.  Failure: kf_diff_unified cannot fail
 * (allocation failure aborts, as everywhere in kforge); kf_diff_apply
 * answers KF_UNPROCESSABLE, saying which hunk and line, for a diff that is
 * malformed or does not fit the base text, and writes nothing.
 */
#ifndef KF_DIFF_H
#define KF_DIFF_H

#include <stdbool.h>

#include "kf_buf.h"
#include "kf_error.h"

#define KF_DIFF_MAX_LINES 20000   /* per side: past it, the whole-replacement hunk */
#define KF_DIFF_MAX_EDITS 1000    /* inserted + deleted lines the search looks for, at most */
#define KF_DIFF_CONTEXT   3       /* lines of context around each change */

/* Append to out the unified diff that turns old_text into new_text, with
 * "--- old_label" / "+++ new_label" headers; nothing when the texts are
 * equal.  *minimal (may be NULL) is false when a bound above was passed and
 * the diff is the whole-replacement hunk. */
void kf_diff_unified(const char *old_text, const char *new_text, const char *old_label, const char *new_label,
                     kf_buf *out, bool *minimal);

/* base with the unified diff applied, in *out (caller frees).  Headers and
 * any text before the first "@@" are skipped; hunks must come in order and
 * their context and deleted lines must match base exactly. */
kf_code kf_diff_apply(const char *base, const char *diff, char **out, kf_err *err);

#endif
