#include "kf_test.h"
#include "kf_alloc.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

const char *kf_test_env_opt(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

const char *kf_test_env(const char *name)
{
    const char *v = kf_test_env_opt(name);
    if (!v)
        cr_assert_fail("%s is not set: run integration tests through `make test` (tests/run.sh)", name);
    return v;
}

char *kf_test_redis_url(int db)
{
    return kf_asprintf("redis://127.0.0.1:%s/%d", kf_test_env("KFORGE_TEST_REDIS_PORT"), db);
}

char *kf_test_fresh_db(void)
{
    static int seq;
    const char *port = kf_test_env("KFORGE_TEST_PG_PORT");
    char *admin = kf_asprintf("host=127.0.0.1 port=%s user=postgres dbname=postgres", port);
    char *name = kf_asprintf("kft_%d_%d_%lld", (int)getpid(), seq++, kf_test_now_ms() % 100000);
    char *sql = kf_asprintf("CREATE DATABASE %s OWNER kforge", name);
    PGconn *c = PQconnectdb(admin);
    PGresult *r;
    char *dsn;

    cr_assert(PQstatus(c) == CONNECTION_OK, "cannot reach test PostgreSQL: %s", PQerrorMessage(c));
    r = PQexec(c, sql);
    cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK, "create database: %s", PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    dsn = kf_asprintf("host=127.0.0.1 port=%s user=kforge dbname=%s", port, name);
    free(admin);
    free(name);
    free(sql);
    return dsn;
}

char *kf_test_bin(const char *name)
{
    const char *root = kf_test_env_opt("KFORGE_TEST_ROOT");
    const char *build = kf_test_env_opt("KFORGE_TEST_BUILD");
    return kf_asprintf("%s/%s/bin/%s", root ? root : ".", build ? build : "build", name);
}

char *kf_test_root(void)
{
    const char *r = kf_test_env_opt("KFORGE_TEST_ROOT");
    return kf_strdup(r && *r ? r : ".");
}

char *kf_test_bin_abs(const char *name)
{
    char *b = kf_test_bin(name), *abs = realpath(b, NULL);
    cr_assert_not_null(abs, "%s exists", b);
    free(b);
    return abs;
}

int kf_test_sh(const char *cmd, char **out)
{
    const size_t cap = (size_t)1 << 22;
    char buf[4096];
    size_t len = 0, n;
    FILE *p = popen(cmd, "r");
    char *o = kf_malloc(cap);
    int st;

    cr_assert_not_null(p, "popen %s: %s", cmd, strerror(errno));
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
        if (len + n < cap) {       /* past the cap: read on, keep the start */
            memcpy(o + len, buf, n);
            len += n;
        }
    o[len] = '\0';
    st = pclose(p);
    *out = o;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

pid_t kf_test_spawn(char *const argv[], char *const env[], const char *log_path)
{
    pid_t pid = fork();

    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        if (log_path) {
            int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
                close(fd);
            }
        }
        for (size_t i = 0; env && env[i]; i++)
            putenv(env[i]);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

int kf_test_run_cmd(char *const argv[], char *const env[], const char *out_path, char **token)
{
    char line[512];
    int status = 0;
    FILE *f;

    unlink(out_path);
    waitpid(kf_test_spawn(argv, env, out_path), &status, 0);
    if (token) {
        *token = NULL;
        f = fopen(out_path, "r");
        while (f && fgets(line, sizeof(line), f)) {
            line[strcspn(line, "\n")] = '\0';
            if (strncmp(line, "kf_", 3) == 0) {
                free(*token);
                *token = kf_strdup(line);
            }
        }
        if (f)
            fclose(f);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int kf_test_stop(pid_t pid, int sig, int timeout_ms)
{
    int status = 0;
    long long end = kf_test_now_ms() + timeout_ms;

    kill(pid, sig);
    while (kf_test_now_ms() < end) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        if (r < 0)
            return -1;
        kf_test_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return status;
}

long long kf_test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void kf_test_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

int kf_test_free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int port;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "bind: %s", strerror(errno));
    getsockname(fd, (struct sockaddr *)&a, &len);
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

char *kf_test_tmpdir(const char *tag)
{
    const char *base = kf_test_env_opt("KFORGE_TEST_TMP");
    static int seq;
    char *p = kf_asprintf("%s/%s-%d-%d", base ? base : "/tmp", tag, (int)getpid(), seq++);
    mkdir(p, 0755);
    return p;
}

void kf_test_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0, "cannot write %s", path);
}

char *kf_test_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *text;
    long n;

    cr_assert_not_null(f, "cannot read %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    cr_assert_geq(n, 0);
    rewind(f);
    text = kf_malloc((size_t)n + 1);
    cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n, "cannot read %s", path);
    text[n] = '\0';
    fclose(f);
    return text;
}
