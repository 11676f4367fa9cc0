/*
 * kf_json — bounded JSON parsing and field-by-field validation over cJSON.
 *
 * kf_json_parse() is the one way kforge turns untrusted bytes into a cJSON
 * tree: it checks UTF-8 first (cJSON does not), bounds the nesting depth,
 * refuses what cJSON alone would accept and alter (numbers with leading
 * zeros or other strtod-only forms, raw control characters in strings,
 * \u0000, which would cut a string), refuses trailing bytes and duplicate
 * member names, and says where the text went wrong.
 *
 * The kf_fields_* functions validate one member of an object and record a
 * kf_field_error {field, rule, detail} for each violation instead of
 * stopping at the first, so an API can answer with every problem at once.
 * Field paths are dotted ("budget.iterations", "inputs.x.shape[1]").
 * Rules are short stable words clients can match on: required, type, enum,
 * range, length, pattern, count, unknown, exclusive, format.
 *
 * Ownership: kf_json_parse() gives the caller a tree to cJSON_Delete().
 * kf_fields is a plain value (no heap).  Getters return pointers into the
 * tree they were given.
 */
#ifndef KF_JSON_H
#define KF_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kf_buf.h"
#include "kf_error.h"

#define KF_JSON_MAX_DEPTH 32

/* True when s[0..n) is well-formed UTF-8 (no overlongs, no surrogates,
 * nothing above U+10FFFF). *bad_at gets the offset of the first bad byte. */
bool kf_utf8_valid(const char *s, size_t n, size_t *bad_at);

/* Parse exactly one RFC 8259 JSON value from buf[0..len) (need not be
 * NUL-terminated) with nesting at most max_depth and no \u0000.  KF_INVALID with a message naming the byte
 * offset on failure; *out is NULL then. */
kf_code kf_json_parse(const char *buf, size_t len, int max_depth, cJSON **out, kf_err *err);

/* Nesting depth of a tree (a scalar is 0, [] or {} is 1). */
int kf_json_depth(const cJSON *v);

/* v as compact JSON, appended to b: the layout of cJSON_PrintUnformatted,
 * integers below 2^53 in full digits, and every other number in the
 * fewest of 15 or 17 significant digits that read back as the same double
 * (cJSON's own printer may round: 0.1 + 0.2 comes out as 0.3). */
void kf_json_write(kf_buf *b, const cJSON *v);

/* kf_json_write as a string the caller frees with free(); aborts when out
 * of memory, as every kforge allocation does. */
char *kf_json_print(const cJSON *v);

/* Append s as a JSON string literal (quoted; ", \ and control characters
 * escaped; other bytes as they are, so s should be UTF-8). */
void kf_json_add_str(kf_buf *b, const char *s);

/* ---- field validation ---------------------------------------------------- */

#define KF_FIELD_ERRORS_MAX 16

/* Each text is cut to its buffer between characters (kf_utf8_cut), so an
 * error about a member name of any UTF-8 stays UTF-8. */
typedef struct kf_field_error {
    char field[96];    /* dotted path of the member */
    char rule[24];     /* which rule it broke */
    char detail[192];  /* a sentence for people */
} kf_field_error;

typedef struct kf_fields {
    int            n;          /* errors recorded (at most KF_FIELD_ERRORS_MAX) */
    int            dropped;    /* further errors not recorded */
    kf_field_error e[KF_FIELD_ERRORS_MAX];
} kf_fields;

void kf_fields_init(kf_fields *f);
void kf_fields_add(kf_fields *f, const char *field, const char *rule, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A one-line summary of the errors ("budget.iterations: range (...); ..."). */
void kf_fields_summary(const kf_fields *f, char *out, size_t cap);

/* printf into a field path, truncating quietly (paths are for people)
 * between characters. */
void kf_field_pathf(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Join a parent path and a member name ("" parent → name). */
void kf_field_path(char *out, size_t cap, const char *parent, const char *name);

/* Record an "unknown" error for every member of obj not named in allowed
 * (NULL-terminated).  Returns the number found. */
int kf_fields_refuse_unknown(kf_fields *f, const cJSON *obj, const char *parent, const char *const *allowed);

/* Each getter looks up obj[name] (case-sensitive).  Absent: if required, a
 * "required" error; otherwise *out keeps its default and the call returns
 * false.  Present but wrong: a type/range/length/enum/pattern error and
 * false.  True only when a valid value was stored. */
bool kf_fields_int(kf_fields *f, const cJSON *obj, const char *parent, const char *name, bool required,
                   int64_t min, int64_t max, int64_t *out);
bool kf_fields_num(kf_fields *f, const cJSON *obj, const char *parent, const char *name, bool required,
                   double min, double max, double *out);
bool kf_fields_bool(kf_fields *f, const cJSON *obj, const char *parent, const char *name, bool required,
                    bool *out);
/* String of 1..max_len bytes (min_len may be 0). */
bool kf_fields_str(kf_fields *f, const cJSON *obj, const char *parent, const char *name, bool required,
                   size_t min_len, size_t max_len, const char **out);
/* One of the NULL-terminated `values`. */
bool kf_fields_enum(kf_fields *f, const cJSON *obj, const char *parent, const char *name, bool required,
                    const char *const *values, const char **out);
/* An object (or array when want_array) member. */
bool kf_fields_obj(kf_fields *f, const cJSON *obj, const char *parent, const char *name, bool required,
                   bool want_array, const cJSON **out);

/* True when s is 1..max_len of [A-Za-z_][A-Za-z0-9_]* (extra = more allowed
 * characters after the first, e.g. ".-"). */
bool kf_ident_valid(const char *s, size_t max_len, const char *extra);

#endif
