/*
 * replay — run a fuzz harness over files without libFuzzer.
 *
 * Linked with one tests/fuzz/fuzz_NAME.c into replay_NAME by every build
 * (gcc or clang, sanitized or not), so the committed corpus of each harness
 * (its seeds and the reproducer of every crash a campaign found) runs in
 * `make test`:
 *
 *   replay_NAME PATH...     each PATH a file or a folder of files
 *
 * Calls LLVMFuzzerInitialize first when the harness defines it, then
 * LLVMFuzzerTestOneInput once per file, in name order within a folder, with
 * the file's bytes in a buffer of exactly their size (so ASan sees a read
 * past the end).  A harness reports a finding by crashing or aborting, as
 * under libFuzzer; replay adds nothing to that.  Exit: 0 after every file
 * ran (printing "replayed N inputs"), 2 when a path cannot be read or holds
 * no input at all (a corpus that went missing must not pass silently).
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    uint8_t *buf;
    size_t n;

    if (!f || fstat(fileno(f), &st) != 0) {
        fprintf(stderr, "replay: cannot read %s: %s\n", path, strerror(errno));
        if (f)
            fclose(f);
        return -1;
    }
    /* malloc(0) may return NULL: give the harness a valid pointer even for
     * an empty input, but only st_size readable bytes. */
    buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    if (!buf) {
        fclose(f);
        fprintf(stderr, "replay: out of memory for %s\n", path);
        return -1;
    }
    n = fread(buf, 1, (size_t)st.st_size, f);
    fclose(f);
    if (n != (size_t)st.st_size) {
        free(buf);
        fprintf(stderr, "replay: short read of %s\n", path);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 1;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file directly in `dir`; -1 on an unreadable folder. */
static int replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int count = 0;

    if (!d) {
        fprintf(stderr, "replay: cannot open %s: %s\n", dir, strerror(errno));
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            char **grown;
            cap = cap ? cap * 2 : 64;
            grown = realloc(names, cap * sizeof(*names));
            if (!grown)
                break;
            names = grown;
        }
        names[n] = strdup(e->d_name);
        if (names[n])
            n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof(*names), name_cmp);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;

        if (count >= 0 && (size_t)snprintf(path, sizeof(path), "%s/%s", dir, names[i]) < sizeof(path) &&
            stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            int rc = replay_file(path);
            count = rc < 0 ? -1 : count + rc;
        }
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv)
{
    int total = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH...  (files or folders of inputs for this fuzz harness)\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        int rc;

        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 2;
        }
        rc = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]);
        if (rc < 0)
            return 2;
        total += rc;
    }
    if (total == 0) {
        fprintf(stderr, "replay: no input found in the paths given\n");
        return 2;
    }
    printf("replayed %d inputs\n", total);
    return 0;
}
