/*
 * fuzz_library — what the kernel library reads from the network
 * (docs/library.md): an entry id, as `GET /v1/library/{entry}` and the
 * list's `cursor=` take it (kf_library_id_valid) and as `kforge library`
 * takes one from the API to name a file (cli_library_id_ok); and an
 * entry's JSON with a kernel's KFORGE block, as `kforge library export`
 * turns them into a manifest record (cli_library_manifest_item).  The
 * first byte picks the input: even, an id; odd, an entry and a block
 * separated by the first NUL.
 *
 * Promises checked:
 *  - an id is accepted only as 1..200 of [A-Za-z0-9_.-] not starting with
 *    '.' or '-' (so never "..", a '/', or a hidden file), and the API's and
 *    the CLI's checks agree on every input;
 *  - a manifest record always names the file and SHA-256 it was given;
 *    its "check", when present, runs that file, checks against that same
 *    file, and gives every input as NAME=shape:D[xD...]:DTYPE with each D
 *    a whole number >= 1.
 */
#include "fuzz.h"

#include <ctype.h>

#include "cli/cli_library.h"
#include "kf_library.h"

static void id(const char *s)
{
    bool api = kf_library_id_valid(s), cli = cli_library_id_ok(s);
    size_t n = strlen(s);

    FUZZ_CHECK(api == cli, "the API and the CLI disagree on %s", s);
    if (!api)
        return;
    FUZZ_CHECK(n >= 1 && n <= 200, "accepted an id of %zu bytes", n);
    FUZZ_CHECK(s[0] != '.' && s[0] != '-', "accepted %s", s);
    for (const char *p = s; *p; p++)
        FUZZ_CHECK(isalnum((unsigned char)*p) || *p == '_' || *p == '.' || *p == '-', "accepted %s", s);
}

/* NAME=shape:D[xD...]:DTYPE */
static bool input_ok(const char *a)
{
    const char *p = strstr(a, "=shape:");
    if (!p || p == a)
        return false;
    p += 7;
    for (;;) {
        if (!isdigit((unsigned char)*p) || *p == '0')
            return false;
        while (isdigit((unsigned char)*p))
            p++;
        if (*p != 'x')
            break;
        p++;
    }
    return *p == ':' && p[1] != '\0';
}

static void manifest(const char *entry_text, const char *meta_text)
{
    cJSON *entry = cJSON_Parse(entry_text), *meta = cJSON_Parse(meta_text);
    cJSON *m = cli_library_manifest_item(entry, meta, "k.py", "ab", 7);
    const cJSON *check = cJSON_GetObjectItemCaseSensitive(m, "check"), *a;
    int files = 0;
    bool want_input = false;

    FUZZ_CHECK(m && strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file")), "k.py") == 0,
               "the record names its file");
    FUZZ_CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "sha256")), "ab") == 0, "and its sha");
    FUZZ_CHECK(cJSON_IsArray(check) || cJSON_IsNull(check), "check is a list or null");
    cJSON_ArrayForEach(a, check)
    {
        const char *s = cJSON_GetStringValue(a);
        FUZZ_CHECK(s != NULL, "check holds strings");
        if (want_input)
            FUZZ_CHECK(input_ok(s), "a malformed --input %s", s);
        want_input = strcmp(s, "--input") == 0;
        files += strcmp(s, "k.py") == 0;
    }
    if (cJSON_IsArray(check)) {
        FUZZ_CHECK(strcmp(cJSON_GetStringValue(cJSON_GetArrayItem(check, 0)), "run") == 0, "check runs");
        FUZZ_CHECK(strcmp(cJSON_GetStringValue(cJSON_GetArrayItem(check, 1)), "k.py") == 0, "the file");
        FUZZ_CHECK(files >= 2, "and checks against it");
    }
    cJSON_Delete(m);
    cJSON_Delete(entry);
    cJSON_Delete(meta);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s;

    if (size < 1)
        return 0;
    s = fuzz_cstr(data + 1, size - 1);
    if (data[0] % 2 == 0) {
        id(s);
    } else {
        size_t n = strlen(s);
        manifest(s, n < size - 1 ? s + n + 1 : "");
    }
    free(s);
    return 0;
}
