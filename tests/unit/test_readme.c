/* The README's configuration table is the one the binaries declare
 * (common/kf_config.h); scripts/readme-config.sh regenerates it. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_config.h"
#include "tests/lib/kf_test.h"

Test(readme, config_table_matches_the_declaration)
{
    const char *root = getenv("KFORGE_TEST_ROOT");
    char *path = kf_asprintf("%s/README.md", root ? root : ".");
    char *readme = kf_test_read_file(path);
    char *want = NULL;
    size_t want_len = 0;
    FILE *mem = open_memstream(&want, &want_len);
    const char *begin = strstr(readme, "<!-- config:begin -->\n");
    const char *end = strstr(readme, "<!-- config:end -->");

    kf_config_print_markdown(mem);
    fclose(mem);
    cr_assert(begin && end && end > begin, "README.md lacks the config markers");
    begin += strlen("<!-- config:begin -->\n");
    cr_assert_eq((size_t)(end - begin), want_len,
                 "README's configuration table is out of date: run scripts/readme-config.sh");
    cr_assert(memcmp(begin, want, want_len) == 0,
              "README's configuration table is out of date: run scripts/readme-config.sh");
    free(want);
    free(readme);
    free(path);
}
