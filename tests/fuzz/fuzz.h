/*
 * fuzz.h — what every harness in tests/fuzz/ shares.
 *
 * A harness is one file, fuzz_NAME.c, that defines LLVMFuzzerTestOneInput
 * (and, when it needs a set-up once per process, LLVMFuzzerInitialize). It
 * feeds the bytes to one parser of untrusted input and checks the parser's
 * promises beyond "does not crash": FUZZ_CHECK aborts with a message when
 * one breaks, which libFuzzer (and replay) treat as a finding.
 *
 * Ownership: fuzz_cstr returns a heap copy the caller frees.  Nothing here
 * keeps state between inputs.
 */
#ifndef KF_FUZZ_H
#define KF_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a NUL-terminated string (bytes after an embedded NUL are
 * kept but invisible to string functions, as they would be to a C parser
 * reading a header or an environment variable). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* A broken promise: say which, and abort so the input is kept. */
#define FUZZ_CHECK(cond, ...)                                                        \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "fuzz: %s:%d: broken promise: %s: ", __FILE__, __LINE__, \
                    #cond);                                                          \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            abort();                                                                 \
        }                                                                            \
    } while (0)

#endif
