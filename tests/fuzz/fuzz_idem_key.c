/*
 * fuzz_idem_key — the Idempotency-Key header of POST /v1/jobs
 * (api_idem_parse_key): an sf-string, "..." with \" and \\ escapes.
 *
 * Promises checked: nothing is written past the caller's buffer (the
 * capacity, picked by the first byte, is exact for ASan); an accepted key is
 * 1..cap-1 bytes of printable ASCII, and quoting it again gives a header
 * that parses to the same key.
 */
#include "fuzz.h"

#include "api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t cap, n;
    char *h, *out, *out2, *requoted;

    if (size < 1)
        return 0;
    cap = 1 + data[0] % 256;
    h = fuzz_cstr(data + 1, size - 1);
    out = malloc(cap);
    if (!out)
        abort();
    if (api_idem_parse_key(h, out, cap)) {
        n = strnlen(out, cap);
        FUZZ_CHECK(n > 0 && n < cap, "key of %zu bytes in a buffer of %zu", n, cap);
        requoted = malloc(2 * n + 3);
        out2 = malloc(cap);
        if (!requoted || !out2)
            abort();
        {
            size_t k = 0;
            requoted[k++] = '"';
            for (size_t i = 0; i < n; i++) {
                FUZZ_CHECK(out[i] >= 0x20 && out[i] <= 0x7e, "byte 0x%02x in a key", (unsigned char)out[i]);
                if (out[i] == '"' || out[i] == '\\')
                    requoted[k++] = '\\';
                requoted[k++] = out[i];
            }
            requoted[k++] = '"';
            requoted[k] = '\0';
        }
        FUZZ_CHECK(api_idem_parse_key(requoted, out2, cap) && strcmp(out, out2) == 0, "%s does not round-trip",
                   requoted);
        free(out2);
        free(requoted);
    }
    free(out);
    free(h);
    return 0;
}
