/*
 * fuzz_config — settings as the binaries read them at start-up: the Redis
 * URL (kf_queue_url_parse, which kf_queue_connect uses) and every KFORGE_*
 * variable through the config loader (kf_config_load).  The first byte
 * picks the Redis URL (0) or a setting; the rest is the value.
 *
 * Promises checked:
 *  - an accepted Redis URL has a non-empty host of name characters, a port
 *    in 1..65535 and a database in 0..1000; a refusal never quotes what
 *    may be a password (the text before the URL's last '@' shows as ***);
 *  - an accepted integer setting reads back within its documented range;
 *    a refused one names the variable.
 */
#include "fuzz.h"

#include <stdbool.h>

#include "kf_config.h"
#include "kf_queue.h"

typedef struct fuzz_setting {
    const char *name;
    bool        is_int;
    long        min, max;
    kf_config_id id;
} fuzz_setting;

static const fuzz_setting settings[] = {
#define XX(id, type, def, min, max, users, help) { "KFORGE_" #id, (#type)[0] == 'I', min, max, KF_CFG_##id },
    KF_CONFIG_MAP(XX)
#undef XX
};
#define N_SETTINGS (sizeof(settings) / sizeof(settings[0]))

static void redis_url(const char *url)
{
    kf_queue_url u;
    kf_err e = KF_ERR_INIT;
    const char *at = strrchr(url, '@');

    if (kf_queue_url_parse(url, &u, &e) == KF_OK) {
        FUZZ_CHECK(u.host && u.host[0], "accepted %s without a host", url);
        FUZZ_CHECK(strspn(u.host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") ==
                       strlen(u.host),
                   "host '%s'", u.host);
        FUZZ_CHECK(u.port >= 1 && u.port <= 65535, "port %d", u.port);
        FUZZ_CHECK(u.db >= 0 && u.db <= 1000, "db %d", u.db);
        kf_queue_url_release(&u);
        return;
    }
    FUZZ_CHECK(u.host == NULL && u.user == NULL && u.password == NULL, "a refused URL left strings behind");
    if (at) {
        /* The URL as quoted (between the message's first pair of quotes)
         * shows nothing before its last '@'. */
        const char *q1 = strchr(e.msg, '\'');
        FUZZ_CHECK(q1 && (strncmp(q1 + 1, "***@", 4) == 0 || strncmp(q1 + 1, "redis://***@", 12) == 0 ||
                          strncmp(q1 + 1, "rediss://***@", 13) == 0),
                   "the error shows what may be credentials: %s", e.msg);
    }
}

static void setting(const fuzz_setting *s, const char *value)
{
    /* putenv with one buffer, not setenv: glibc's setenv keeps every old
     * value it replaced, and millions of runs would grow without bound. */
    static char entry[8192];
    kf_err e = KF_ERR_INIT;

    if ((size_t)snprintf(entry, sizeof(entry), "%s=%s", s->name, value) >= sizeof(entry) || putenv(entry) != 0)
        return;
    if (kf_config_load(&e) == KF_OK) {
        if (s->is_int) {
            long v = kf_config_int(s->id);
            FUZZ_CHECK(v >= s->min && v <= s->max, "%s=%s read as %ld, outside %ld..%ld", s->name, value, v, s->min,
                       s->max);
        }
        FUZZ_CHECK(strcmp(kf_config_str(s->id), value) == 0, "%s reads back as %s", s->name, kf_config_str(s->id));
    } else {
        FUZZ_CHECK(strstr(e.msg, s->name) != NULL, "the error does not name %s: %s", s->name, e.msg);
    }
    unsetenv(s->name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *value;
    unsigned pick;

    if (size < 1)
        return 0;
    value = fuzz_cstr(data + 1, size - 1);
    pick = data[0] % (N_SETTINGS + 1);
    if (pick == 0)
        redis_url(value);
    else
        setting(&settings[pick - 1], value);
    free(value);
    return 0;
}
