/* kforge-api — the HTTP front end of kforge and its admin subcommands.
 *
 *   kforge-api [serve] [--migrate]     serve the API (default)
 *   kforge-api migrate                 apply the numbered migrations/ SQL files
 *   kforge-api token create --role R --name N
 *   kforge-api config --markdown       the KFORGE_* table for the README
 */
#include "api.h"
#include "kf_alloc.h"
#include "kf_config.h"
#include "kf_log.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static void usage_main(FILE *out)
{
    fprintf(out,
            "usage: kforge-api [COMMAND] [OPTIONS]\n"
            "\n"
            "kforge's HTTP API: jobs, workers' reports, health and metrics.\n"
            "\n"
            "Commands:\n"
            "  serve [--migrate]                   serve HTTP on KFORGE_API_LISTEN (the default command);\n"
            "                                      --migrate applies pending migrations first\n"
            "  migrate                             apply pending migrations (KFORGE_MIGRATIONS_DIR) and exit\n"
            "  token create --role R --name N      make a token (R: admin, user or worker); prints it once\n"
            "  config --markdown                   print the KFORGE_* settings as a Markdown table\n"
            "\n"
            "Each command takes --help.  Exit status: 0 on success, 1 on errors, 2 on bad usage.\n");
    kf_config_print_help(out, KF_USE_API);
}

/* Connect for a subcommand, retrying for up to wait_s (PostgreSQL may be
 * starting alongside us). */
static PGconn *connect_retry(int wait_s, kf_err *err)
{
    for (int i = 0;; i++) {
        PGconn *c = api_pg_connect(kf_config_str(KF_CFG_PG_DSN), err);
        if (c || i >= wait_s * 4)
            return c;
        usleep(250000);
    }
}

static int cmd_migrate(void)
{
    kf_err e = KF_ERR_INIT;
    const char *dir = api_migrations_dir();
    int applied = 0;
    PGconn *c = connect_retry(10, &e);

    if (!c) {
        fprintf(stderr, "kforge-api migrate: %s\n", e.msg);
        return 1;
    }
    if (api_migrate(c, dir, stdout, &applied, &e) != KF_OK) {
        fprintf(stderr, "kforge-api migrate: %s\n", e.msg);
        PQfinish(c);
        return 1;
    }
    printf("schema up to date (%d migration%s applied from %s)\n", applied, applied == 1 ? "" : "s", dir);
    PQfinish(c);
    return 0;
}

static int cmd_token(int argc, char **argv)
{
    static const struct option opts[] = {
        { "role", required_argument, NULL, 'r' },
        { "name", required_argument, NULL, 'n' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *role = NULL, *name = NULL;
    kf_err e = KF_ERR_INIT;
    PGconn *c;
    char *secret;
    int64_t id = 0;
    int o;

    if (argc < 2 || strcmp(argv[1], "create") != 0) {
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
            printf("usage: kforge-api token create --role admin|user|worker --name NAME\n");
            return 0;
        }
        fprintf(stderr, "usage: kforge-api token create --role admin|user|worker --name NAME\n");
        return 2;
    }
    optind = 1;
    while ((o = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'r':
            role = optarg;
            break;
        case 'n':
            name = optarg;
            break;
        case 'h':
            printf("usage: kforge-api token create --role admin|user|worker --name NAME\n\n"
                   "Stores the SHA-256 of a new random token in api_tokens and prints the token once,\n"
                   "on the last line of standard output.  Keep it: it cannot be shown again.\n"
                   "  admin   sees and manages every job\n"
                   "  user    submits jobs and sees only its own\n"
                   "  worker  may only use /v1/internal (kforge-worker's reports), and only for the\n"
                   "          worker whose id is NAME: make one token per worker, named after its\n"
                   "          KFORGE_WORKER_ID (letters, digits and _ . : -)\n");
            return 0;
        default:
            return 2;
        }
    }
    if (!role || !api_role_parse(role) || !name || !*name || strlen(name) > 128) {
        fprintf(stderr, "kforge-api token create: give --role admin|user|worker and --name (1-128 characters)\n");
        return 2;
    }
    if (strcmp(role, "worker") == 0 && !api_worker_id_valid(name)) {
        fprintf(stderr, "kforge-api token create: a worker token's --name is the id of the one worker it speaks "
                        "for (its KFORGE_WORKER_ID): 1-128 letters, digits and _ . : -\n");
        return 2;
    }
    c = connect_retry(10, &e);
    if (!c) {
        fprintf(stderr, "kforge-api token create: %s\n", e.msg);
        return 1;
    }
    secret = api_token_new_secret();
    if (api_token_insert(c, secret, name, role, &id, &e) != KF_OK) {
        fprintf(stderr, "kforge-api token create: %s (did you run kforge-api migrate?)\n", e.msg);
        free(secret);
        PQfinish(c);
        return 1;
    }
    fprintf(stderr, "created %s token %lld named \"%s\"; it is shown once:\n", role, (long long)id, name);
    printf("%s\n", secret);
    free(secret);
    PQfinish(c);
    return 0;
}

static int cmd_config(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--markdown") == 0) {
        kf_config_print_markdown(stdout);
        return 0;
    }
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: kforge-api config --markdown\n\nPrints every KFORGE_* setting of every kforge binary "
               "(name, default, readers, meaning) as a Markdown table.\n");
        return 0;
    }
    fprintf(stderr, "usage: kforge-api config --markdown\n");
    return 2;
}

static int cmd_serve(int argc, char **argv)
{
    kf_err e = KF_ERR_INIT;
    api_server_config cfg;
    api_server *s;
    bool migrate = false;
    const char *boot = kf_config_str(KF_CFG_BOOTSTRAP_TOKEN);
    sigset_t set;
    int sig = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--migrate") == 0) {
            migrate = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: kforge-api serve [--migrate]\n\n"
                   "Serves the HTTP API on KFORGE_API_LISTEN with KFORGE_API_THREADS threads until SIGINT or\n"
                   "SIGTERM.  --migrate applies pending migrations first.  With KFORGE_BOOTSTRAP_TOKEN set, an\n"
                   "admin token with that value is created if missing.  PostgreSQL and Redis may come and go:\n"
                   "requests get 503 while PostgreSQL is away, jobs wait in the outbox while Redis is away.\n");
            kf_config_print_help(stdout, KF_USE_API);
            return 0;
        } else {
            fprintf(stderr, "kforge-api serve: unknown option %s (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (migrate && cmd_migrate() != 0)
        return 1;
    {
        /* Say so at once when the schema is behind: every request would fail. */
        PGconn *c = api_pg_connect(kf_config_str(KF_CFG_PG_DSN), &e);
        if (c) {
            int pending = api_migrations_pending(c, api_migrations_dir());
            if (pending > 0)
                kf_log_error("the database lacks %d migration(s) from %s; run kforge-api migrate "
                             "(or serve --migrate)", pending, api_migrations_dir());
            PQfinish(c);
        } else {
            kf_log_warn("PostgreSQL is not reachable yet; requests get 503 until it is msg=\"%s\"", e.msg);
        }
        kf_err_clear(&e);
    }
    if (boot && *boot) {
        PGconn *c = connect_retry(10, &e);
        if (!c || api_token_bootstrap(c, boot, &e) != KF_OK) {
            fprintf(stderr, "kforge-api: KFORGE_BOOTSTRAP_TOKEN: %s\n", e.msg);
            PQfinish(c);
            return 1;
        }
        PQfinish(c);
        /* the admin token has done its job: out of the environment block
         * that /proc/<pid>/environ shows */
        kf_config_scrub(KF_CFG_BOOTSTRAP_TOKEN);
    }
    /* no process of this user may ptrace the API or read its memory and
     * environment (the database DSN, token hashes in flight) */
    (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

    /* Every thread inherits the blocked signals; main waits for them. */
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    memset(&cfg, 0, sizeof(cfg));
    cfg.listen = kf_config_str(KF_CFG_API_LISTEN);
    cfg.threads = (int)kf_config_int(KF_CFG_API_THREADS);
    if (cfg.threads == 0) {
        /* Two per core: a POST never blocks its thread (api_batch), the
         * other routes wait on PostgreSQL; more threads than that only
         * add context switches (side by side at 32 clients on 2 cores,
         * 16 threads cost 45 us of the API's CPU per POST, 4 cost 40). */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cfg.threads = cores < 2 ? 4 : cores > 128 ? 256 : (int)(2 * cores);
    }
    cfg.conns_per_ip = (int)kf_config_int(KF_CFG_API_CONNS_PER_IP);
    cfg.idle_timeout_s = (int)kf_config_int(KF_CFG_API_IDLE_TIMEOUT_S);
    cfg.max_body = kf_config_int(KF_CFG_MAX_BODY_BYTES);
    cfg.pg_dsn = kf_config_str(KF_CFG_PG_DSN);
    cfg.pg_pool = (int)kf_config_int(KF_CFG_PG_POOL);
    cfg.redis_url = kf_config_str(KF_CFG_REDIS_URL);
    cfg.idem_ttl_s = (int)kf_config_int(KF_CFG_IDEMPOTENCY_TTL_S);
    cfg.default_max_attempts = (int)kf_config_int(KF_CFG_MAX_ATTEMPTS);
    cfg.max_iteration_bytes = kf_config_int(KF_CFG_MAX_ITERATION_BYTES);
    cfg.max_iterations = (int)kf_config_int(KF_CFG_MAX_ITERATIONS);
    cfg.max_artifact_bytes = kf_config_int(KF_CFG_MAX_ARTIFACT_BYTES);
    cfg.cors_origins = kf_config_str(KF_CFG_CORS_ORIGINS);
    if (kf_artifact_store_open(kf_config_str(KF_CFG_ARTIFACT_STORE), &cfg.artifacts, &e) != KF_OK) {
        fprintf(stderr, "kforge-api: %s\n", e.msg);
        return 1;
    }
    cfg.max_streams = (int)kf_config_int(KF_CFG_MAX_STREAMS);
    cfg.max_batch_jobs = kf_config_int(KF_CFG_MAX_BATCH_JOBS);
    cfg.max_open_batches = (int)kf_config_int(KF_CFG_MAX_OPEN_BATCHES);
    cfg.sse_heartbeat_s = (int)kf_config_int(KF_CFG_SSE_HEARTBEAT_S);
    cfg.sse_buffer_bytes = kf_config_int(KF_CFG_SSE_BUFFER_BYTES);
    s = api_server_start(&cfg, &e);
    if (!s) {
        fprintf(stderr, "kforge-api: %s\n", e.msg);
        kf_artifact_store_free(cfg.artifacts);
        return 1;
    }
    kf_log_info("listening addr=%s threads=%d pg_pool=%d", cfg.listen, cfg.threads, cfg.pg_pool);
    sigwait(&set, &sig);
    kf_log_info("stopping signal=%d", sig);
    api_server_stop(s);
    kf_artifact_store_free(cfg.artifacts);
    kf_log_info("stopped");
    return 0;
}

int main(int argc, char **argv)
{
    kf_err e = KF_ERR_INIT;
    const char *cmd = argc > 1 ? argv[1] : "serve";

    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage_main(stdout);
        return 0;
    }
    if (strcmp(cmd, "config") == 0)
        return cmd_config(argc - 1, argv + 1);
    if (kf_config_load(&e) != KF_OK) {
        fprintf(stderr, "kforge-api: %s\n", e.msg);
        return 2;
    }
    if (kf_log_init("api", kf_config_str(KF_CFG_LOG_LEVEL)) != 0) {
        fprintf(stderr, "kforge-api: KFORGE_LOG_LEVEL must be debug, info, warn or error\n");
        return 2;
    }
    if (strcmp(cmd, "serve") == 0)
        return cmd_serve(argc - 1, argv + 1);
    if (cmd[0] == '-')
        return cmd_serve(argc, argv);
    if (strcmp(cmd, "migrate") == 0) {
        if (argc > 2 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
            printf("usage: kforge-api migrate\n\nApplies the numbered *.sql files of %s that schema_migrations "
                   "does not list, in order, each in its own transaction.  Safe to run again.\n",
                   api_migrations_dir());
            return 0;
        }
        return cmd_migrate();
    }
    if (strcmp(cmd, "token") == 0)
        return cmd_token(argc - 1, argv + 1);
    fprintf(stderr, "kforge-api: unknown command \"%s\"\n\n", cmd);
    usage_main(stderr);
    return 2;
}
