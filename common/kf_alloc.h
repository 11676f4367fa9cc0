/*
 * kf_alloc — allocation that cannot return NULL.
 *
 * kforge's daemons treat exhausted memory as fatal: kf_malloc and friends
 * print the size that failed and abort(), so callers never carry an
 * out-of-memory branch that no test can reach.  Memory they return is owned
 * by the caller and released with free().
 */
#ifndef KF_ALLOC_H
#define KF_ALLOC_H

#include <stddef.h>

void *kf_malloc(size_t n);
void *kf_calloc(size_t count, size_t size);
void *kf_realloc(void *p, size_t n);
char *kf_strdup(const char *s);
char *kf_strndup(const char *s, size_t n);

/* printf into a fresh heap string (caller frees). */
char *kf_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
