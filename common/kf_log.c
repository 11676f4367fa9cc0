#include "kf_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

kf_log_level kf_log__level = KF_LOG_INFO;
static char kf_log_comp[32] = "kforge";
static const char *const kf_log_names[] = { "debug", "info", "warn", "error" };

int kf_log_init(const char *comp, const char *level_name)
{
    if (comp)
        snprintf(kf_log_comp, sizeof(kf_log_comp), "%s", comp);
    if (!level_name || !*level_name)
        return 0;
    for (int i = 0; i < 4; i++) {
        if (strcmp(level_name, kf_log_names[i]) == 0) {
            kf_log__level = (kf_log_level)i;
            return 0;
        }
    }
    return -1;
}

void kf_log__write(kf_log_level lvl, const char *fmt, ...)
{
    char line[4096];
    struct timespec ts;
    struct tm tm;
    size_t n;
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03ldZ level=%s comp=%s pid=%d msg=",
                          ts.tv_nsec / 1000000L, kf_log_names[lvl], kf_log_comp, (int)getpid());
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - n, fmt, ap);
    va_end(ap);
    n = strlen(line);
    if (n >= sizeof(line) - 1)
        n = sizeof(line) - 2;
    line[n++] = '\n';
    (void)!write(STDERR_FILENO, line, n);
}
