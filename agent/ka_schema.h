/*
 * ka_schema — the JSON Schema subset kforge's tool schemas use, checked
 * against untrusted arguments (an MCP client's, a language model's).
 *
 * Keywords: type (object, array, string, boolean, number, integer: a
 * number must be finite), enum, minimum/maximum, minLength/maxLength (in
 * bytes), pattern (only the job-id form kforge's schemas use: the value
 * must be hexadecimal digits and '-'), minItems/maxItems, items, required,
 * properties and additionalProperties false.  Other keywords are ignored
 * (description, title...).  The walk follows the schema, which is
 * kforge's own and bounded, so the value's depth cannot make it recurse
 * deeper than the schema does.
 *
 * Failure: false with the first violation in msg, naming where
 * ("inputs[0].shape: must have 1 to 8 items"; "arguments" for the top).
 * No heap is kept.
 */
#ifndef KA_SCHEMA_H
#define KA_SCHEMA_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* where: the path of v ("" for the whole arguments object). */
bool ka_schema_check(const cJSON *schema, const cJSON *v, const char *where, char *msg, size_t n);

#endif
