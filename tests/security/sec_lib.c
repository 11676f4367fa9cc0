/* sec_lib — the outside world of the security tests (sec_lib.h). */
#include "tests/security/sec_lib.h"

#include "kf_alloc.h"
#include "tests/lib/kf_test.h"

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <netinet/in.h>

#define SEC_TARGET_TEXT "the original content of a file outside the sandbox\n"

const char *const sec_attacks[] = {
#define SEC_NAME(name) #name,
    SEC_ATTACKS(SEC_NAME)
#undef SEC_NAME
    NULL,
};

const char *const sec_sim_attacks[] = {
#define SEC_NAME(name) #name,
    SEC_SIM_ATTACKS(SEC_NAME)
#undef SEC_NAME
    NULL,
};

const char *const sec_worker_attacks[] = {
#define SEC_NAME(name) #name,
    SEC_WORKER_ATTACKS(SEC_NAME)
#undef SEC_NAME
    NULL,
};

const char *const sec_ref_attacks[] = {
#define SEC_NAME(name) #name,
    SEC_REF_ATTACKS(SEC_NAME)
#undef SEC_NAME
    NULL,
};

const char sec_benign_kernel[] =
    "import nki\n"
    "import nki.language as nl\n"
    "import nki.isa as nisa\n"
    "\n"
    "\n"
    "@nki.jit\n"
    "def kernel(x):\n"
    "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
    "    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)\n"
    "    nisa.dma_copy(dst=t, src=x)\n"
    "    nisa.dma_copy(dst=out, src=t)\n"
    "    return out\n";

static const char *sec_root(void)
{
    const char *r = kf_test_env_opt("KFORGE_TEST_ROOT");
    return r ? r : ".";
}

char *sec_marker(void)
{
    unsigned char raw[16];
    char hex[33];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

    cr_assert(fd >= 0 && read(fd, raw, sizeof(raw)) == (ssize_t)sizeof(raw), "cannot read /dev/urandom");
    close(fd);
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    return kf_asprintf("KFSECRET-%s", hex);
}

const char *sec_short(const char *secret, char buf[24])
{
    snprintf(buf, 24, "%.14s...", secret);
    return buf;
}

void sec_world_init(sec_world *w, const char *tag)
{
    char *m = sec_marker();

    memset(w, 0, sizeof(*w));
    w->dir = kf_test_tmpdir(tag);
    /* the folder holds the planted secrets: readable by the worker's user only */
    chmod(w->dir, 0700);
    w->tmp_name = kf_asprintf("sectest-tmp-%s", m + 9);
    w->target_file = kf_asprintf("%s/target-file", w->dir);
    kf_test_write_file(w->target_file, SEC_TARGET_TEXT);
    free(m);
}

void sec_world_release(sec_world *w)
{
    char *p = kf_asprintf("/tmp/%s", w->tmp_name);

    unlink(p);
    free(p);
    for (int i = 0; i < w->n_listen; i++)
        close(w->listen_fds[i]);
    for (int i = 0; i < w->n_secrets; i++)
        free(w->secrets[i]);
    for (int i = 0; i < w->n_unix; i++)
        free(w->unix_sockets[i]);
    for (int i = 0; i < w->n_secret_files; i++)
        free(w->secret_files[i]);
    for (int i = 0; i < w->n_decoys; i++)
        free(w->decoy_dirs[i]);
    free(w->tmp_name);
    free(w->output_dir);
    free(w->target_file);
    free(w->dir);
    memset(w, 0, sizeof(*w));
}

void sec_add_secret(sec_world *w, const char *value)
{
    cr_assert_lt(w->n_secrets, SEC_MAX);
    cr_assert(value && strlen(value) >= 16, "a secret too short to look for");
    w->secrets[w->n_secrets++] = kf_strdup(value);
}

void sec_add_victim(sec_world *w, pid_t pid)
{
    cr_assert_lt(w->n_victims, SEC_MAX);
    w->victims[w->n_victims++] = (int)pid;
}

void sec_add_port(sec_world *w, int port)
{
    cr_assert_lt(w->n_ports, SEC_MAX);
    w->ports[w->n_ports++] = port;
}

void sec_add_unix_socket(sec_world *w, const char *path)
{
    cr_assert_lt(w->n_unix, SEC_MAX);
    w->unix_sockets[w->n_unix++] = kf_strdup(path);
}

static void sec_write_mode(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    size_t n = strlen(text);

    cr_assert(fd >= 0, "cannot create %s: %s", path, strerror(errno));
    cr_assert_eq(write(fd, text, n), (ssize_t)n, "cannot write %s", path);
    fchmod(fd, mode);
    close(fd);
}

void sec_add_decoy(sec_world *w, const char *path)
{
    cr_assert_lt(w->n_decoys, SEC_MAX);
    mkdir(path, 0755);
    w->decoy_dirs[w->n_decoys++] = kf_strdup(path);
}

void sec_plant(sec_world *w, const char *worker_token, const char *admin_token, const char *extra_decoy)
{
    char *var = kf_asprintf("%s/var", w->dir);
    char *files[3] = { kf_asprintf("%s/worker-token", var), kf_asprintf("%s/admin-token", var),
                       kf_asprintf("%s/secret.txt", w->dir) };
    char *secret = sec_marker();
    char *text;

    mkdir(var, 0700);
    text = kf_asprintf("%s\n", worker_token);
    sec_write_mode(files[0], text, 0600);
    free(text);
    text = kf_asprintf("%s\n", admin_token);
    sec_write_mode(files[1], text, 0600);
    free(text);
    text = kf_asprintf("db_password=%s\n", secret);
    sec_write_mode(files[2], text, 0644);
    free(text);
    sec_add_secret(w, worker_token);
    sec_add_secret(w, admin_token);
    sec_add_secret(w, secret);
    for (int i = 0; i < 3; i++) {
        cr_assert_lt(w->n_secret_files, SEC_MAX);
        w->secret_files[w->n_secret_files++] = files[i];
    }
    text = kf_asprintf("%s/decoy-kernels", w->dir);
    sec_add_decoy(w, text);
    free(text);
    text = kf_asprintf("%s/decoy-bin", w->dir);
    sec_add_decoy(w, text);
    free(text);
    if (extra_decoy)
        sec_add_decoy(w, extra_decoy);
    free(secret);
    free(var);
}

void sec_listen_tcp(sec_world *w)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);   /* no CLOEXEC: children inherit it, as a worker's would */

    cr_assert(fd >= 0 && w->n_listen < SEC_MAX);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 64) == 0, "listen: %s",
              strerror(errno));
    getsockname(fd, (struct sockaddr *)&a, &len);
    w->listen_fds[w->n_listen++] = fd;
    sec_add_port(w, ntohs(a.sin_port));
}

void sec_listen_unix(sec_world *w)
{
    struct sockaddr_un a;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    char *path = kf_asprintf("%s/service.sock", w->dir);

    cr_assert(fd >= 0 && w->n_listen < SEC_MAX);
    cr_assert_lt(strlen(path), sizeof(a.sun_path), "socket path too long: %s", path);
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, path, strlen(path) + 1);
    unlink(path);
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 64) == 0, "listen %s: %s", path,
              strerror(errno));
    w->listen_fds[w->n_listen++] = fd;
    sec_add_unix_socket(w, path);
    free(path);
}

/* kforge's own folders a kernel must not write: the kernel library and the
 * binaries. */
static char *sec_bin_dir(void)
{
    char *bin = kf_test_bin("kforge-sim");
    char *d = kf_strdup(dirname(bin));
    free(bin);
    return d;
}

static cJSON *sec_str_array(char *const *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
    return a;
}

static cJSON *sec_int_array(const int *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static char *sec_config(const sec_world *w)
{
    cJSON *c = cJSON_CreateObject();
    char ns[64] = "";
    ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
    char *bin = sec_bin_dir();
    char *real_dirs[2] = { kf_asprintf("%s/kernels", sec_root()), bin };
    char *real_files[2] = { kf_asprintf("%s/kernels/add.py", sec_root()), kf_asprintf("%s/kforge", bin) };
    char *text;

    cr_assert_gt(n, 0, "readlink /proc/self/ns/pid: %s", strerror(errno));
    ns[n] = '\0';
    cJSON_AddStringToObject(c, "host_pidns", ns);
    cJSON_AddItemToObject(c, "victims", sec_int_array(w->victims, w->n_victims));
    cJSON_AddItemToObject(c, "secret_files", sec_str_array(w->secret_files, w->n_secret_files));
    cJSON_AddItemToObject(c, "ports", sec_int_array(w->ports, w->n_ports));
    cJSON_AddItemToObject(c, "unix_sockets", sec_str_array(w->unix_sockets, w->n_unix));
    cJSON_AddItemToObject(c, "decoy_dirs", sec_str_array(w->decoy_dirs, w->n_decoys));
    cJSON_AddItemToObject(c, "real_dirs", sec_str_array(real_dirs, 2));
    cJSON_AddItemToObject(c, "real_files", sec_str_array(real_files, 2));
    cJSON_AddStringToObject(c, "tmp_name", w->tmp_name);
    cJSON_AddStringToObject(c, "output_dir", w->output_dir ? w->output_dir : "");
    cJSON_AddStringToObject(c, "target_file", w->target_file);
    cJSON_AddNumberToObject(c, "worker_uid", (double)getuid());
    cJSON_AddNumberToObject(c, "worker_gid", (double)getgid());
    text = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    free(real_dirs[0]);
    free(real_files[0]);
    free(real_files[1]);
    free(bin);
    return text;
}

/* text with the first `needle` replaced by `with`. */
static char *sec_replace(const char *text, const char *needle, const char *with)
{
    const char *at = strstr(text, needle);

    cr_assert_not_null(at, "no %s to replace", needle);
    return kf_asprintf("%.*s%s%s", (int)(at - text), text, with, at + strlen(needle));
}

char *sec_kernel_source(const sec_world *w, const char *name)
{
    char *kpath = kf_asprintf("%s/tests/security/kernels/%s.py", sec_root(), name);
    char *ppath = kf_asprintf("%s/tests/security/kernels/_prelude.py", sec_root());
    char *kernel = kf_test_read_file(kpath);
    char *prelude = kf_test_read_file(ppath);
    char *config = sec_config(w);
    char *filled = sec_replace(prelude, "@@CONFIG@@", config);
    char *src = sec_replace(kernel, "# @@PRELUDE@@", filled);

    free(kpath);
    free(ppath);
    free(kernel);
    free(prelude);
    free(config);
    free(filled);
    return src;
}

char *sec_reference_source(const sec_world *w, const char *name)
{
    char *src = sec_kernel_source(w, name);
    char *ref = sec_replace(src, "\n@nki.jit\ndef kernel(x):\n", "\ndef kernel(x):\n");

    free(src);
    return ref;
}

static bool sec_check(const sec_world *w, const char *name, const char *where, const char *text, size_t len,
                      size_t max_bytes, bool need_marker)
{
    const char *leak;
    bool ok = true;
    char sb[24];

    if (!text) {
        text = "";
        len = 0;
    }
    leak = memmem(text, len, "LEAK:", 5);
    if (leak) {
        size_t n = 0, left = len - (size_t)(leak - text);
        while (n < left && n < 400 && leak[n] != '\n' && leak[n] != '"')   /* to the end of the message */
            n++;
        cr_expect_fail("attack %s: the kernel got something out (%s): %.*s", name, where, (int)n, leak);
        ok = false;
    }
    for (int i = 0; i < w->n_secrets; i++) {
        if (memmem(text, len, w->secrets[i], strlen(w->secrets[i]))) {
            cr_expect_fail("attack %s: planted secret %s came back in %s", name, sec_short(w->secrets[i], sb), where);
            ok = false;
        }
    }
    if (len > max_bytes) {
        cr_expect_fail("attack %s: %zu bytes came back in %s (at most %zu expected)", name, len, where, max_bytes);
        ok = false;
    }
    if (need_marker && !leak && !memmem(text, len, "DENIED:", 7)) {
        cr_expect_fail("attack %s: no DENIED marker in %s, so the kernel did not run to its end: %.*s", name,
                       where, (int)(len < 600 ? len : 600), text);
        ok = false;
    }
    return ok;
}

bool sec_check_text(const sec_world *w, const char *name, const char *where, const char *text, size_t len,
                    size_t max_bytes)
{
    return sec_check(w, name, where, text, len, max_bytes, true);
}

bool sec_check_leaks(const sec_world *w, const char *name, const char *where, const char *text, size_t len,
                     size_t max_bytes)
{
    return sec_check(w, name, where, text, len, max_bytes, false);
}

/* Names "sectest-*" in dir, removed; the first one in *found. */
static int sec_sweep(const char *dir, char **found)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "sectest-", 8) != 0)
            continue;
        char *p = kf_asprintf("%s/%s", dir, e->d_name);
        if (!*found)
            *found = kf_strdup(p);
        unlink(p);
        free(p);
        n++;
    }
    closedir(d);
    return n;
}

bool sec_check_outside(const sec_world *w, const char *name)
{
    char *bin = sec_bin_dir();
    char *kernels = kf_asprintf("%s/kernels", sec_root());
    char *tmp = kf_asprintf("/tmp/%s", w->tmp_name);
    char *found = NULL;
    int n = 0;
    struct stat st;

    for (int i = 0; i < w->n_decoys; i++)
        n += sec_sweep(w->decoy_dirs[i], &found);
    n += sec_sweep(kernels, &found);
    n += sec_sweep(bin, &found);
    if (stat(tmp, &st) == 0) {
        if (!found)
            found = kf_strdup(tmp);
        unlink(tmp);
        n++;
    }
    {
        char buf[sizeof(SEC_TARGET_TEXT) + 1] = "";
        int fd = open(w->target_file, O_RDONLY | O_CLOEXEC);
        ssize_t got = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (got != (ssize_t)strlen(SEC_TARGET_TEXT) || memcmp(buf, SEC_TARGET_TEXT, (size_t)got) != 0) {
            if (!found)
                found = kf_strdup(w->target_file);
            n++;
            kf_test_write_file(w->target_file, SEC_TARGET_TEXT);
        }
    }
    cr_expect_eq(n, 0, "attack %s: %d file(s) written outside the sandbox, e.g. %s", name, n, found ? found : "");
    free(found);
    free(tmp);
    free(kernels);
    free(bin);
    return n == 0;
}

int sec_run(char *const argv[], char *const env[], const char *cwd, const char *out_path, const char *err_path,
            int timeout_ms)
{
    long long end = kf_test_now_ms() + timeout_ms;
    int status = 0;
    pid_t pid = fork();

    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0 || err < 0 || chdir(cwd) != 0)
            _exit(126);
        dup2(out, 1);
        dup2(err, 2);
        close(out);
        close(err);
        for (size_t i = 0; env && env[i]; i++)
            putenv(env[i]);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    while (kf_test_now_ms() < end) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        kf_test_sleep_ms(10);
    }
    /* a traced or stopped kforge-sim: wake it, then end it */
    kill(pid, SIGCONT);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}
