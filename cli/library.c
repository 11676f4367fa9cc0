/* cli_library — `kforge library list|show|export` (see cli_library.h). */
#include "cli_library.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/ka_lib.h"
#include "cli/cli_http.h"
#include "cli/cli_out.h"
#include "kf_alloc.h"
#include "kf_config.h"
#include "kf_fs.h"
#include "kf_num.h"

enum { LIB_OK = 0, LIB_REFUSED = 1, LIB_USAGE = 2, LIB_UNREACHABLE = 3 };

#define LIB_MAX_PAGES  1000             /* pages followed at most (--all, export) */
#define LIB_MAX_KERNEL (64LL << 20)     /* bytes of one kernel file */

typedef struct lib_opts {
    const char *op, *target, *dtype, *backend, *cursor;
    int         limit;
    bool        all, json, quiet, force;
} lib_opts;

static void lib_usage(FILE *out)
{
    fprintf(out,
            "usage: kforge library list [--op OP] [--target T] [--dtype D] [--backend B] [--limit N]\n"
            "                           [--cursor C] [--all] [--json]\n"
            "       kforge library show ENTRY [--json]\n"
            "       kforge library export DIR [--op OP] [--target T] [--dtype D] [--backend B] [--force]\n"
            "\n"
            "The kernel library: the best known kernel per op (or user kernel), shape, dtype, target and\n"
            "backend, kept by kforge-api from every succeeded generate and optimize job (docs/library.md).\n"
            "\n"
            "  list     a table of the entries this token reads (entries of library ops are shared by\n"
            "           every user; a user kernel's only by its owner and admins), in id order; --all\n"
            "           follows every page, otherwise a last line `more: ...` gives the next page\n"
            "  show     one entry: its kernel, params, latency, provenance and every change (history)\n"
            "  export   every entry (the filters apply) as DIR/<entry>.py, the kernel with a header\n"
            "           comment naming where it comes from, plus DIR/manifest.json: for each file its\n"
            "           entry, params, latency, provenance, sha256 and, for a library op, \"check\": the\n"
            "           kforge-sim arguments that validate it against the op's reference (run them in\n"
            "           DIR: kforge-sim run <entry>.py --entry ... --check <entry>.py --ref-entry ...).\n"
            "           Files are written to a temporary name and renamed; manifest.json comes last.\n"
            "           A DIR that exists and is not empty is refused unless --force.\n"
            "\n"
            "Options of every command: --json (the API's JSON; list: every page read, in one document),\n"
            "--quiet, --help.\n"
            "Exit status: 0 ok, 1 refused by the server or a file not written, 2 usage, 3 API unreachable.\n");
}

/* ---- requests ------------------------------------------------------------------ */

/* GET path; *out the parsed answer (caller deletes); with echo the answer
 * is printed as it came.  Returns the exit code. */
static int lib_get(const char *path, bool echo, cJSON **out)
{
    cli_resp r = CLI_RESP_INIT;
    int code = LIB_OK;

    *out = NULL;
    if (cli_http("GET", path, NULL, NULL, &r) != 0) {
        cli_print_unreachable(&r);
        code = LIB_UNREACHABLE;
    } else if (r.status >= 400) {
        cli_print_problem(&r);
        code = LIB_REFUSED;
    } else {
        if (echo)
            printf("%s%s", r.body.data, (r.body.len && r.body.data[r.body.len - 1] == '\n') ? "" : "\n");
        *out = cJSON_Parse(r.body.data);
        if (!*out) {
            fprintf(stderr, "kforge: %s%s answered %ld with a body that is not JSON\n", kf_config_str(KF_CFG_API_URL),
                    path, r.status);
            code = LIB_REFUSED;
        }
    }
    cli_resp_release(&r);
    return code;
}

/* "/v1/library?op=..&.." with o's filters, limit and the cursor. */
static char *lib_list_path(const lib_opts *o, const char *cursor, int limit)
{
    CURL *esc = curl_easy_init();
    const char *keys[] = { "op", "target", "dtype", "backend", "cursor" };
    const char *vals[] = { o->op, o->target, o->dtype, o->backend, cursor };
    kf_buf q = KF_BUF_INIT;

    kf_buf_addf(&q, "/v1/library?limit=%d", limit);
    for (int i = 0; i < 5; i++) {
        char *v;
        if (!vals[i])
            continue;
        v = curl_easy_escape(esc, vals[i], 0);
        kf_buf_addf(&q, "&%s=%s", keys[i], v);
        curl_free(v);
    }
    curl_easy_cleanup(esc);
    return kf_buf_detach(&q);
}

/* Every page (or one, without all) into one {"items": [...], "next_cursor"}. */
static int lib_pages(const lib_opts *o, bool all, int limit, cJSON **out)
{
    cJSON *acc = cJSON_CreateObject(), *items = cJSON_AddArrayToObject(acc, "items");
    char *cursor = o->cursor ? kf_strdup(o->cursor) : NULL;
    int code = LIB_OK, pages = 0;

    for (;;) {
        char *path = lib_list_path(o, cursor, limit);
        cJSON *page = NULL, *it;
        const cJSON *nc;
        code = lib_get(path, false, &page);
        free(path);
        if (code != LIB_OK) {
            cJSON_Delete(page);
            break;
        }
        while ((it = cJSON_DetachItemFromArray(cJSON_GetObjectItemCaseSensitive(page, "items"), 0)) != NULL)
            cJSON_AddItemToArray(items, it);
        nc = cJSON_GetObjectItemCaseSensitive(page, "next_cursor");
        free(cursor);
        cursor = cJSON_IsString(nc) ? kf_strdup(nc->valuestring) : NULL;
        cJSON_Delete(page);
        if (!cursor || !all || ++pages >= LIB_MAX_PAGES)
            break;
    }
    if (cursor)
        cJSON_AddStringToObject(acc, "next_cursor", cursor);
    else
        cJSON_AddNullToObject(acc, "next_cursor");
    free(cursor);
    if (code != LIB_OK) {
        cJSON_Delete(acc);
        acc = NULL;
    }
    *out = acc;
    return code;
}

/* ---- list, show ----------------------------------------------------------------- */

static int lib_list(const lib_opts *o)
{
    cJSON *page = NULL;
    int code = lib_pages(o, o->all, o->limit > 0 ? o->limit : 50, &page);
    kf_buf b = KF_BUF_INIT;

    if (code == LIB_OK && !o->quiet) {
        if (o->json) {
            char *t = cJSON_PrintUnformatted(page);
            printf("%s\n", t);
            free(t);
        } else {
            cli_render_library(page, &b);
            fputs(b.data, stdout);
        }
    }
    kf_buf_release(&b);
    cJSON_Delete(page);
    return code;
}

static int lib_show(const lib_opts *o, const char *id)
{
    char *path;
    cJSON *e = NULL;
    int code;
    kf_buf b = KF_BUF_INIT;

    if (!cli_library_id_ok(id)) {
        fprintf(stderr, "kforge: '%s' is not a library entry id (kforge library list shows them)\n", id);
        return LIB_USAGE;
    }
    path = kf_asprintf("/v1/library/%s", id);
    code = lib_get(path, o->json && !o->quiet, &e);
    if (code == LIB_OK && !o->json && !o->quiet) {
        cli_render_library_entry(e, &b);
        fputs(b.data, stdout);
    }
    kf_buf_release(&b);
    cJSON_Delete(e);
    free(path);
    return code;
}

/* ---- export --------------------------------------------------------------------- */

/* Whether dir exists and holds anything; -1 (errno) when it cannot be read. */
static int lib_dir_used(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int used = 0;

    if (!d)
        return errno == ENOENT ? 0 : -1;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            used = 1;
            break;
        }
    closedir(d);
    return used;
}

/* Flush, fsync and close f, then rename tmp to dest; false (after saying
 * why, tmp removed) on failure. */
static bool lib_commit(FILE *f, const char *tmp, const char *dest)
{
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;

    if (fclose(f) != 0)
        ok = false;
    if (!ok || rename(tmp, dest) != 0) {
        fprintf(stderr, "kforge: cannot write %s: %s\n", dest, strerror(errno));
        unlink(tmp);
        return false;
    }
    return true;
}

/* The folder's own entry made durable after renames into it. */
static void lib_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* Download one entry's kernel to dir/<id>.py; its manifest record into
 * *item.  The exit code. */
static int lib_export_one(const char *dir, const cJSON *entry, cJSON **item)
{
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(entry, "id"));
    char *file = NULL, *dest = NULL, *tmp = NULL, *path = NULL, *text = NULL;
    char sha[65] = "";
    long long bytes = 0;
    cli_resp r = CLI_RESP_INIT;
    cJSON *meta = NULL;
    FILE *f;
    int code = LIB_OK;

    *item = NULL;
    if (!cli_library_id_ok(id)) {
        fprintf(stderr, "kforge: the API listed an entry id that is not a safe file name; skipped\n");
        return LIB_REFUSED;
    }
    file = kf_asprintf("%s.py", id);
    dest = kf_asprintf("%s/%s", dir, file);
    tmp = kf_asprintf("%s/.%s.kforge-part", dir, file);
    path = kf_asprintf("/v1/library/%s/kernel", id);
    f = fopen(tmp, "w+b");
    if (!f) {
        fprintf(stderr, "kforge: cannot write %s: %s\n", tmp, strerror(errno));
        code = LIB_REFUSED;
        goto out;
    }
    if (cli_http_download(path, f, LIB_MAX_KERNEL, sha, &bytes, &r) != 0 && r.status < 300) {
        if (r.status == 0)
            cli_print_unreachable(&r);
        else
            fprintf(stderr, "kforge: downloading %s: %s\n", id, r.err);
        code = r.status == 0 ? LIB_UNREACHABLE : LIB_REFUSED;
    } else if (r.status >= 300) {
        cli_print_problem(&r);
        code = LIB_REFUSED;
    }
    if (code != LIB_OK) {
        fclose(f);
        unlink(tmp);
        goto out;
    }
    /* The KFORGE block names the reference and the inputs (library ops). */
    rewind(f);
    {
        kf_buf b = KF_BUF_INIT;
        char chunk[65536];
        size_t n;
        kf_err e = KF_ERR_INIT;
        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
            kf_buf_add(&b, chunk, n);
        text = kf_buf_detach(&b);
        if (ka_lib_meta_from_text(text, file, &meta, &e) != KF_OK)
            meta = NULL;
    }
    if (!lib_commit(f, tmp, dest)) {
        code = LIB_REFUSED;
        goto out;
    }
    *item = cli_library_manifest_item(entry, meta, file, sha, bytes);
out:
    cli_resp_release(&r);
    cJSON_Delete(meta);
    free(text);
    free(file);
    free(dest);
    free(tmp);
    free(path);
    return code;
}

static int lib_export(const lib_opts *o, const char *dir)
{
    cJSON *all = NULL, *manifest = NULL, *kernels;
    const cJSON *e;
    char *mpath = NULL, *mtmp = NULL, *text = NULL, stamp[32];
    int used = lib_dir_used(dir), code, n = 0;
    time_t now = time(NULL);
    FILE *f;

    if (used < 0) {
        fprintf(stderr, "kforge: cannot read %s: %s\n", dir, strerror(errno));
        return LIB_USAGE;
    }
    if (used && !o->force) {
        fprintf(stderr, "kforge: %s is not empty; export into an empty or new folder, or add --force to write over "
                        "the files of the same names\n",
                dir);
        return LIB_USAGE;
    }
    if (kf_mkdir_p(dir, 0755) != 0) {
        fprintf(stderr, "kforge: cannot create %s: %s\n", dir, strerror(errno));
        return LIB_REFUSED;
    }
    code = lib_pages(o, true, 200, &all);
    if (code != LIB_OK)
        return code;
    manifest = cJSON_CreateObject();
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cJSON_AddStringToObject(manifest, "format", "kforge-library-export/1");
    cJSON_AddStringToObject(manifest, "api", kf_config_str(KF_CFG_API_URL));
    cJSON_AddStringToObject(manifest, "exported_at", stamp);
    kernels = cJSON_AddArrayToObject(manifest, "kernels");
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(all, "items"))
    {
        cJSON *item = NULL;
        code = lib_export_one(dir, e, &item);
        if (code != LIB_OK)
            goto out;
        cJSON_AddItemToArray(kernels, item);
        n++;
    }
    mpath = kf_asprintf("%s/manifest.json", dir);
    mtmp = kf_asprintf("%s/.manifest.json.kforge-part", dir);
    text = cJSON_Print(manifest);
    f = fopen(mtmp, "wb");
    if (!f || fputs(text, f) == EOF || fputc('\n', f) == EOF) {
        fprintf(stderr, "kforge: cannot write %s: %s\n", mtmp, strerror(errno));
        if (f)
            fclose(f);
        unlink(mtmp);
        code = LIB_REFUSED;
        goto out;
    }
    if (!lib_commit(f, mtmp, mpath)) {
        code = LIB_REFUSED;
        goto out;
    }
    lib_sync_dir(dir);
    if (o->json && !o->quiet)
        printf("%s\n", text);
    else if (!o->quiet)
        printf("exported %d kernel%s to %s (manifest.json lists them)\n", n, n == 1 ? "" : "s", dir);
out:
    cJSON_Delete(all);
    cJSON_Delete(manifest);
    free(mpath);
    free(mtmp);
    free(text);
    return code;
}

/* ---- main ------------------------------------------------------------------------ */

/* A filter value: 1..64 of [A-Za-z0-9_.]; false after saying why. */
static bool lib_filter_ok(const char *name, const char *v)
{
    size_t n = strlen(v);
    if (n >= 1 && n <= 69 && strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.") == n)
        return true;
    fprintf(stderr, "kforge: --%s %s: give a name such as rmsnorm, trn2, bfloat16 or sim\n", name, v);
    return false;
}

int cli_library_main(int argc, char **argv)
{
    enum { O_OP = 256, O_TARGET, O_DTYPE, O_BACKEND, O_LIMIT, O_CURSOR, O_ALL, O_JSON, O_FORCE };
    static const struct option opts[] = {
        { "op", required_argument, NULL, O_OP },         { "target", required_argument, NULL, O_TARGET },
        { "dtype", required_argument, NULL, O_DTYPE },   { "backend", required_argument, NULL, O_BACKEND },
        { "limit", required_argument, NULL, O_LIMIT },   { "cursor", required_argument, NULL, O_CURSOR },
        { "all", no_argument, NULL, O_ALL },             { "json", no_argument, NULL, O_JSON },
        { "force", no_argument, NULL, O_FORCE },         { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },              { NULL, 0, NULL, 0 },
    };
    lib_opts o;
    kf_err err = KF_ERR_INIT;
    const char *sub;
    int c, code, n;

    memset(&o, 0, sizeof(o));
    optind = 1;
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        lib_usage(stdout);
        return LIB_OK;
    }
    if (argc < 2 || (strcmp(argv[1], "list") != 0 && strcmp(argv[1], "show") != 0 && strcmp(argv[1], "export") != 0)) {
        lib_usage(stderr);
        return LIB_USAGE;
    }
    sub = argv[1];
    optind = 2;
    while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case O_OP: ok = lib_filter_ok("op", optarg); o.op = optarg; break;
        case O_TARGET: ok = lib_filter_ok("target", optarg); o.target = optarg; break;
        case O_DTYPE: ok = lib_filter_ok("dtype", optarg); o.dtype = optarg; break;
        case O_BACKEND: ok = lib_filter_ok("backend", optarg); o.backend = optarg; break;
        case O_LIMIT: {
            long v = 0;
            ok = kf_num_long(optarg, 1, 200, &v, &err) == KF_OK;
            if (!ok)
                fprintf(stderr, "kforge: --limit: %s\n", err.msg);
            o.limit = (int)v;
            break;
        }
        case O_CURSOR:
            ok = cli_library_id_ok(optarg);
            if (!ok)
                fprintf(stderr, "kforge: --cursor: pass the next_cursor a page gave, unchanged\n");
            o.cursor = optarg;
            break;
        case O_ALL: o.all = true; break;
        case O_JSON: o.json = true; break;
        case O_FORCE: o.force = true; break;
        case 'q': o.quiet = true; break;
        case 'h': lib_usage(stdout); return LIB_OK;
        default: lib_usage(stderr); return LIB_USAGE;
        }
        if (!ok)
            return LIB_USAGE;
    }
    n = argc - optind;
    if ((strcmp(sub, "list") == 0 && n != 0) || (strcmp(sub, "list") != 0 && n != 1)) {
        lib_usage(stderr);
        return LIB_USAGE;
    }
    if (kf_config_load(&err) != KF_OK) {
        fprintf(stderr, "kforge: %s\n", err.msg);
        return LIB_USAGE;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (strcmp(sub, "list") == 0)
        code = lib_list(&o);
    else if (strcmp(sub, "show") == 0)
        code = lib_show(&o, argv[optind]);
    else
        code = lib_export(&o, argv[optind]);
    curl_global_cleanup();
    return code;
}
