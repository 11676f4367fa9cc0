/* Security: every hostile kernel of tests/security/kernels/, run through the
 * standalone `kforge-sim run`, gets nothing out of the evaluation sandbox.
 *
 * kforge-sim runs as a deployment would run it: with a worker-style token
 * in KFORGE_TOKEN and a cloud key in its environment, token files under
 * var/ in its working folder, a secret file its user can read, a TCP and a
 * Unix listener it inherits, and a neighbour process (standing in for
 * kforge-api) whose environment holds an admin token.  Each test checks
 * kforge-sim's stdout, stderr and output files (sec_check_text) and the
 * filesystem outside (sec_check_outside).  See sec_lib.h. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kf_alloc.h"
#include "kf_buf.h"
#include "tests/lib/kf_test.h"
#include "tests/security/sec_lib.h"

/* cppcheck-suppress unknownMacro */
TestSuite(sec_sim, .timeout = 180);
TestSuite(sec_sim_ref, .timeout = 180);

/* The whole file (binary) appended to b; nothing when it cannot be read. */
static void add_file(kf_buf *b, const char *path)
{
    FILE *f = fopen(path, "rb");
    char tmp[65536];
    size_t n;

    if (!f)
        return;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        kf_buf_add(b, tmp, n);
    fclose(f);
    kf_buf_addc(b, '\n');
}

/* Every file of the output folder, for the checks. */
static void add_outputs(kf_buf *all, const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char *p = kf_asprintf("%s/%s", dir, e->d_name);
        add_file(all, p);
        free(p);
    }
    closedir(d);
}

/* Runs attack `name` through kforge-sim run: as the kernel, or (as_ref) as
 * the --check reference of a harmless kernel.  output_symlink has no marker:
 * it must succeed (an output to write proves it ran). */
static void sim_attack(const char *name, bool as_ref)
{
    sec_world w;
    char *admin, *worker, *aws, *src, *kpath, *out, *err, *outdir, *sim, *victim_env[3], *env[3];
    pid_t victim;
    int status;
    long long t0;
    kf_buf all = KF_BUF_INIT;

    char *label = kf_asprintf("%s%s", name, as_ref ? " (as a reference)" : "");

    sec_world_init(&w, "sec-sim");
    worker = sec_marker();
    admin = sec_marker();
    aws = sec_marker();
    sec_plant(&w, worker, admin, NULL);
    sec_add_secret(&w, aws);
    sec_listen_tcp(&w);
    sec_listen_unix(&w);

    /* a neighbour holding the admin token in its environment, as kforge-api does */
    victim_env[0] = kf_asprintf("KFORGE_BOOTSTRAP_TOKEN=%s", admin);
    victim_env[1] = kf_asprintf("AWS_SECRET_ACCESS_KEY=%s", aws);
    victim_env[2] = NULL;
    char *vlog = kf_asprintf("%s/victim.log", w.dir);
    victim = kf_test_spawn((char *[]){ "/bin/sleep", "300", NULL }, victim_env, vlog);
    sec_add_victim(&w, victim);

    outdir = kf_asprintf("%s/out", w.dir);
    w.output_dir = kf_strdup(outdir);
    src = as_ref ? sec_reference_source(&w, name) : sec_kernel_source(&w, name);
    kpath = kf_asprintf("%s/kernel.py", w.dir);
    kf_test_write_file(kpath, as_ref ? sec_benign_kernel : src);
    char *rpath = kf_asprintf("%s/reference.py", w.dir);
    if (as_ref)
        kf_test_write_file(rpath, src);
    out = kf_asprintf("%s/stdout", w.dir);
    err = kf_asprintf("%s/stderr", w.dir);
    sim = kf_test_bin("kforge-sim");
    env[0] = kf_asprintf("KFORGE_TOKEN=%s", worker);
    env[1] = kf_asprintf("AWS_SECRET_ACCESS_KEY=%s", aws);
    env[2] = NULL;
    char *argv[] = { sim, "run", kpath, "--entry", "kernel", "--input", "x=shape:128x128:f32", "--output-dir",
                     outdir, "--timeout", "90", "--json", as_ref ? "--check" : NULL, rpath, NULL, NULL };
    char *root = NULL;
    if (strcmp(name, "import_root_escape") == 0) {
        /* an import root beside the secrets, holding a module and symbolic
         * links to each secret file, absolute and relative, and to its parent */
        root = kf_asprintf("%s/importroot", w.dir);
        cr_assert_eq(mkdir(root, 0755), 0);
        char *mod = kf_asprintf("%s/rootmod.py", root);
        kf_test_write_file(mod, "VALUE = 1\n");
        free(mod);
        size_t dl = strlen(w.dir);
        for (int i = 0; i < w.n_secret_files; i++) {
            char *l = kf_asprintf("%s/abs%d", root, i);
            cr_assert_eq(symlink(w.secret_files[i], l), 0);
            free(l);
            if (strncmp(w.secret_files[i], w.dir, dl) == 0 && w.secret_files[i][dl] == '/') {
                char *t = kf_asprintf("..%s", w.secret_files[i] + dl);
                l = kf_asprintf("%s/rel%d", root, i);
                cr_assert_eq(symlink(t, l), 0);
                free(l);
                free(t);
            }
        }
        char *up = kf_asprintf("%s/up", root);
        cr_assert_eq(symlink("..", up), 0);
        free(up);
        argv[12] = "--path";
        argv[13] = root;
    }

    t0 = kf_test_now_ms();
    status = sec_run(argv, env, w.dir, out, err, 150000);
    cr_log_info("attack %s: kforge-sim took %lld ms", label, kf_test_now_ms() - t0);
    cr_expect_neq(status, -1, "attack %s: kforge-sim did not finish within 150 s (traced? stopped?)", label);
    cr_expect_eq(kill(victim, 0), 0, "attack %s: the neighbour process was killed", label);

    add_file(&all, out);
    add_file(&all, err);
    add_outputs(&all, outdir);
    if (strcmp(name, "output_symlink") == 0) {
        cr_expect(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "attack %s: kforge-sim did not run the kernel to its end (status %#x): %.600s", label,
                  (unsigned)status, all.data);
        sec_check_leaks(&w, label, "kforge-sim's stdout, stderr and outputs", all.data, all.len, 1u << 20);
    } else {
        sec_check_text(&w, label, "kforge-sim's stdout, stderr and outputs", all.data, all.len, 1u << 20);
    }
    sec_check_outside(&w, label);

    kf_test_stop(victim, SIGKILL, 2000);
    kf_buf_release(&all);
    free(vlog);
    for (int i = 0; i < 2; i++) {
        free(env[i]);
        free(victim_env[i]);
    }
    free(sim);
    free(outdir);
    free(out);
    free(err);
    free(kpath);
    free(rpath);
    free(root);
    free(label);
    free(src);
    free(aws);
    free(admin);
    free(worker);
    sec_world_release(&w);
}

/* Every kernel file has its test below and every test its kernel file; a
 * kernel has the prelude's place and an entry `kernel`, and its source never
 * holds a marker itself (the job record keeps the source: a marker there
 * would pass or fail a test without the kernel running). */
Test(sec_sim, every_attack_kernel_is_listed_and_well_formed)
{
    const char *root = kf_test_env_opt("KFORGE_TEST_ROOT") ? kf_test_env_opt("KFORGE_TEST_ROOT") : ".";
    char *dir = kf_asprintf("%s/tests/security/kernels", root);
    DIR *d = opendir(dir);
    struct dirent *e;
    int files = 0, listed = 0;

    cr_assert_not_null(d, "cannot list %s", dir);
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        bool found = false;
        if (n < 4 || strcmp(e->d_name + n - 3, ".py") != 0)
            continue;
        char *path = kf_asprintf("%s/%s", dir, e->d_name);
        char *src = kf_test_read_file(path);
        cr_expect(!strstr(src, "LEAK:") && !strstr(src, "DENIED:"), "%s holds a marker literally", path);
        free(path);
        if (e->d_name[0] == '_') {
            free(src);
            continue;
        }
        files++;
        cr_expect(strstr(src, "\n# @@PRELUDE@@\n") && strstr(src, "\ndef kernel(x):\n"),
                  "%s/%s lacks the prelude line or `def kernel(x):`", dir, e->d_name);
        free(src);
        for (int i = 0; sec_attacks[i]; i++)
            found = found || (strlen(sec_attacks[i]) == n - 3 && strncmp(sec_attacks[i], e->d_name, n - 3) == 0);
        for (int i = 0; sec_sim_attacks[i]; i++)
            found = found ||
                    (strlen(sec_sim_attacks[i]) == n - 3 && strncmp(sec_sim_attacks[i], e->d_name, n - 3) == 0);
        for (int i = 0; sec_worker_attacks[i]; i++)
            found = found || (strlen(sec_worker_attacks[i]) == n - 3 &&
                              strncmp(sec_worker_attacks[i], e->d_name, n - 3) == 0);
        cr_expect(found, "%s/%s is in none of the attack lists (tests/security/sec_lib.h)", dir, e->d_name);
    }
    closedir(d);
    for (int i = 0; sec_attacks[i]; i++)
        listed++;
    for (int i = 0; sec_sim_attacks[i]; i++)
        listed++;
    for (int i = 0; sec_worker_attacks[i]; i++)
        listed++;
    cr_expect_eq(files, listed, "%d kernel files, %d attacks listed", files, listed);
    free(dir);
}

#define SIM_ATTACK(name)   \
    Test(sec_sim, name)    \
    {                      \
        sim_attack(#name, false); \
    }
SEC_ATTACKS(SIM_ATTACK)
SEC_SIM_ATTACKS(SIM_ATTACK)

#define SIM_REF_ATTACK(name)     \
    Test(sec_sim_ref, name)      \
    {                            \
        sim_attack(#name, true); \
    }
SEC_REF_ATTACKS(SIM_REF_ATTACK)
