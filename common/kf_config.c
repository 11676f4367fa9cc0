#include "kf_config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum kf_cfg_type { KF_CFG_T_STR, KF_CFG_T_INT };

typedef struct kf_cfg_def {
    const char *name;
    enum kf_cfg_type type;
    const char *def;
    long min, max;
    unsigned users;
    const char *doc;
} kf_cfg_def;

static const kf_cfg_def kf_cfg_defs[] = {
#define XX(id, type, def, min, max, users, doc) \
    { "KFORGE_" #id, KF_CFG_T_##type, def, min, max, users, doc },
    KF_CONFIG_MAP(XX)
#undef XX
};

static const char *kf_cfg_str_val[KF__CFG_COUNT];
static long kf_cfg_int_val[KF__CFG_COUNT];
static int kf_cfg_loaded;

extern char **environ;

static kf_code kf_cfg_parse_int(const kf_cfg_def *d, const char *s, long *out, kf_err *err)
{
    char *end = NULL;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0')
        return kf_err_set(err, KF_CONFIG, "%s=\"%s\" is not an integer; set it to a number between %ld and %ld",
                          d->name, s, d->min, d->max);
    if (v < d->min || v > d->max)
        return kf_err_set(err, KF_CONFIG, "%s=%ld is out of range; use a value between %ld and %ld",
                          d->name, v, d->min, d->max);
    *out = v;
    return KF_OK;
}

kf_code kf_config_load(kf_err *err)
{
    for (char **e = environ; e && *e; e++) {
        const char *eq;
        size_t n;
        int known = 0;

        if (strncmp(*e, "KFORGE_", 7) != 0)
            continue;
        eq = strchr(*e, '=');
        n = eq ? (size_t)(eq - *e) : strlen(*e);
        /* KFORGE_TEST_* and KFORGE_BENCH_* belong to the test harness and
         * the benchmark scripts (bench/), not to the binaries they run. */
        if ((n > 12 && strncmp(*e, "KFORGE_TEST_", 12) == 0) || (n > 13 && strncmp(*e, "KFORGE_BENCH_", 13) == 0))
            continue;
        for (size_t i = 0; i < KF__CFG_COUNT; i++) {
            if (strlen(kf_cfg_defs[i].name) == n && strncmp(kf_cfg_defs[i].name, *e, n) == 0) {
                known = 1;
                break;
            }
        }
        if (!known)
            return kf_err_set(err, KF_CONFIG, "unknown setting %.*s; see --help for the KFORGE_* variables",
                              (int)n, *e);
    }
    for (size_t i = 0; i < KF__CFG_COUNT; i++) {
        const kf_cfg_def *d = &kf_cfg_defs[i];
        const char *v = getenv(d->name);

        if (!v)
            v = d->def;
        kf_cfg_str_val[i] = v;
        if (d->type == KF_CFG_T_INT) {
            kf_code rc = kf_cfg_parse_int(d, v, &kf_cfg_int_val[i], err);
            if (rc != KF_OK)
                return rc;
        }
    }
    kf_cfg_loaded = 1;
    return KF_OK;
}

void kf_config_scrub(kf_config_id id)
{
    const char *name = kf_cfg_defs[id].name;
    size_t n = strlen(name);

    for (char **e = environ; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            explicit_bzero(*e + n + 1, strlen(*e + n + 1));
    unsetenv(name);
    if (kf_cfg_loaded && kf_cfg_str_val[id] && *kf_cfg_str_val[id])
        kf_cfg_str_val[id] = "";
}

const char *kf_config_str(kf_config_id id)
{
    if (!kf_cfg_loaded)
        return kf_cfg_defs[id].def;
    return kf_cfg_str_val[id];
}

long kf_config_int(kf_config_id id)
{
    if (!kf_cfg_loaded)
        return strtol(kf_cfg_defs[id].def, NULL, 10);
    return kf_cfg_int_val[id];
}

const char *kf_config_name(kf_config_id id)
{
    return kf_cfg_defs[id].name;
}

void kf_config_print_help(FILE *out, unsigned users)
{
    fprintf(out, "\nEnvironment:\n");
    for (size_t i = 0; i < KF__CFG_COUNT; i++) {
        const kf_cfg_def *d = &kf_cfg_defs[i];
        if (!(d->users & users))
            continue;
        fprintf(out, "  %-26s %s (default: \"%s\")\n", d->name, d->doc, d->def);
    }
}

void kf_config_print_markdown(FILE *out)
{
    static const char *const names[] = { "api", "scheduler", "worker", "cli", "sim" };

    fprintf(out, "| variable | default | read by | meaning |\n|---|---|---|---|\n");
    for (size_t i = 0; i < KF__CFG_COUNT; i++) {
        const kf_cfg_def *d = &kf_cfg_defs[i];
        int first = 1;

        fprintf(out, "| `%s` | `%s` | ", d->name, d->def);
        for (int b = 0; b < 5; b++) {
            if (d->users & (1u << b)) {
                fprintf(out, "%s%s", first ? "" : ", ", names[b]);
                first = 0;
            }
        }
        fprintf(out, " | %s |\n", d->doc);
    }
}
