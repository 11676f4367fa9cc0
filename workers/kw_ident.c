/* kw_ident — token, id and spool of this worker (see kw_ident.h). */
#include "kw_ident.h"

#include "kf_alloc.h"
#include "kf_config.h"
#include "kf_log.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kf_code kw_ident_token(kw_worker *w, kf_err *err)
{
    const char *file = kf_config_str(KF_CFG_TOKEN_FILE);
    const char *env = kf_config_str(KF_CFG_TOKEN);
    bool in_env = env && *env;

    if (file && *file) {
        w->token = kf_report_token_read(file, err);
        if (in_env)
            kf_log_warn("both KFORGE_TOKEN_FILE and KFORGE_TOKEN are set: using the file, removing KFORGE_TOKEN "
                        "from the environment");
    } else if (in_env) {
        w->token = kf_strdup(env);
        kf_log_warn("KFORGE_TOKEN in the environment is deprecated: put the token in a file only this user can "
                    "read (chmod 600) and set KFORGE_TOKEN_FILE to it; removed from this worker's environment");
    } else {
        kf_err_set(err, KF_CONFIG, "no token: set KFORGE_TOKEN_FILE to a file (mode 0600) holding a worker token "
                                   "made with `kforge-api token create --role worker --name WORKER_ID`");
    }
    /* KFORGE_TOKEN holds a secret in the environment, which every child
     * inherits and /proc/<pid>/environ shows: blank its bytes, unset it */
    kf_config_scrub(KF_CFG_TOKEN);
    return w->token ? KF_OK : err->code;
}

/* The API's whoami answer (body of a 200) checked against the configured id. */
static kf_code kw_ident_answer(kw_worker *w, const char *body, const char *configured, kf_err *err)
{
    cJSON *j = cJSON_Parse(body);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "worker_id");
    kf_code rc = KF_OK;

    if (!cJSON_IsString(id) || !*id->valuestring || strlen(id->valuestring) >= sizeof(w->id))
        rc = kf_err_set(err, KF_CONFIG, "the API at %s did not say which worker this token belongs to", w->api_url);
    else if (configured && *configured && strcmp(configured, id->valuestring) != 0)
        rc = kf_err_set(err, KF_CONFIG,
                        "KFORGE_WORKER_ID is %s but this worker's token belongs to worker %s: set "
                        "KFORGE_WORKER_ID=%s (or leave it empty), or give this worker a token of its own "
                        "(kforge-api token create --role worker --name %s)",
                        configured, id->valuestring, id->valuestring, configured);
    else
        snprintf(w->id, sizeof(w->id), "%s", id->valuestring);
    cJSON_Delete(j);
    return rc;
}

kf_code kw_ident_whoami(kw_worker *w, const char *configured, kf_err *err)
{
    int backoff = KW_BACKOFF_MIN;
    bool warned = false;
    char body[1024];

    for (;;) {
        long st = kf_report_get(w->rep, "/v1/internal/whoami", body, sizeof(body));
        if (st == 200)
            return kw_ident_answer(w, body, configured, err);
        if (st == 401)
            return kf_err_set(err, KF_CONFIG, "the API at %s does not know this worker's token (revoked, or the "
                                              "wrong file?): make one with `kforge-api token create --role worker "
                                              "--name WORKER_ID`", w->api_url);
        if (st == 403)
            return kf_err_set(err, KF_CONFIG, "this token is not a worker token: make one with `kforge-api token "
                                              "create --role worker --name WORKER_ID`");
        if (configured && *configured) {
            snprintf(w->id, sizeof(w->id), "%s", configured);
            kf_log_warn("cannot ask the API which worker this token belongs to (status=%ld); going on as %s",
                        st, w->id);
            return KF_OK;
        }
        if (!warned)
            kf_log_warn("waiting for the API at %s to learn this worker's id from its token (status=%ld); set "
                        "KFORGE_WORKER_ID to start without it", w->api_url, st);
        warned = true;
        kw_sleep(w, backoff);
        backoff = kw_backoff_next(backoff);
        if (w->term)
            return kf_err_set(err, KF_CONFIG, "stopped before the API answered");
    }
}

kf_spool *kw_ident_spool(const kw_worker *w, kf_err *err)
{
    const char *root = kf_config_str(KF_CFG_SPOOL_DIR);
    char *dir = kf_asprintf("%s/%s", root && *root ? root : ".", w->id);
    kf_spool *sp = kf_spool_open(dir, err);
    DIR *d = opendir(root && *root ? root : ".");
    struct dirent *e;

    while (d && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] != '.' && n > 4 && strcmp(e->d_name + n - 4, ".rpt") == 0) {
            kf_log_warn("reports spooled by an older kforge-worker wait in %s: move each into the folder of the "
                        "worker that wrote it (%s/<worker id>/) to have them sent", root, root);
            break;
        }
    }
    if (d)
        closedir(d);
    free(dir);
    return sp;
}
