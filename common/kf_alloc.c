#include "kf_alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void kf_oom(size_t n)
{
    fprintf(stderr, "kforge: out of memory allocating %zu bytes\n", n);
    abort();
}

void *kf_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        kf_oom(n);
    return p;
}

void *kf_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        kf_oom(count * size);
    return p;
}

void *kf_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        kf_oom(n);
    return q;
}

char *kf_strdup(const char *s)
{
    return kf_strndup(s, strlen(s));
}

char *kf_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = kf_malloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

char *kf_asprintf(const char *fmt, ...)
{
    va_list ap;
    int n;
    char *p;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        kf_oom(0);
    p = kf_malloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}
