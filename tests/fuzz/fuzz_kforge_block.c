/*
 * fuzz_kforge_block — the KFORGE block of a user's kernel source, read the
 * way a worker reads an `optimize` job: ka_lib_meta_from_text finds and
 * parses `KFORGE = {...}`, ka_space_from_tunables binds its declarations
 * (constraints, addresses, defaults, dim names) to the job's tunables and
 * inputs, and the tuner then checks settings (ka_space_legal, which
 * evaluates every constraint) and prints them (ka_space_kwargs/params).
 * A block that declares inputs is also bound as a library template would
 * be (ka_lib_bind), since the same reader serves both.
 *
 * Promises checked: no crash or UB on any source; a refusal says why;
 * every setting the space holds can be checked and printed, and its
 * kwargs are strict JSON.
 */
#include "fuzz.h"

#include <cjson/cJSON.h>

#include "ka_lib.h"
#include "kf_json.h"

static const char tunables_json[] = "{\"TILE_F\":[128,256,512],\"BUFS\":[1,2],\"MODE\":[\"a\",\"b\"]}";

static void problem(ka_problem *pb)
{
    memset(pb, 0, sizeof(*pb));
    snprintf(pb->entry, sizeof(pb->entry), "kernel");
    snprintf(pb->target, sizeof(pb->target), "trn2");
    pb->n_inputs = 2;
    for (int i = 0; i < 2; i++) {
        snprintf(pb->inputs[i].name, sizeof(pb->inputs[i].name), "%s", i ? "w" : "x");
        pb->inputs[i].dtype = SIM_DT_FLOAT32;
        pb->inputs[i].ndim = 2;
        pb->inputs[i].shape[0] = 128;
        pb->inputs[i].shape[1] = i ? 256 : 512;
        pb->inputs[i].std = 1;
    }
}

static void check_space(const ka_space *sp)
{
    int idx[KA_MAX_TUNABLES] = { 0 };

    /* Every setting of a small space, else the first 64 in order. */
    for (int step = 0; step < 64; step++) {
        kf_err e = KF_ERR_INIT;
        const char *why = NULL;
        bool ok = false;
        char *kw;
        cJSON *params, *v = NULL;
        int k;

        if (ka_space_legal(sp, idx, &ok, &why, &e) != KF_OK)
            FUZZ_CHECK(e.msg[0] != '\0', "a constraint failed without saying why");
        kw = ka_space_kwargs(sp, idx, NULL);
        FUZZ_CHECK(kw && kf_json_parse(kw, strlen(kw), KF_JSON_MAX_DEPTH, &v, &e) == KF_OK,
                   "the kwargs of a setting are not strict JSON: %s", kw ? kw : "(null)");
        cJSON_Delete(v);
        free(kw);
        params = ka_space_params(sp, idx);
        FUZZ_CHECK(cJSON_IsObject(params), "params are not an object");
        cJSON_Delete(params);
        for (k = 0; k < sp->n; k++) {
            if (++idx[k] < sp->t[k].n_values)
                break;
            idx[k] = 0;
        }
        if (k == sp->n)
            break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *src = fuzz_cstr(data, size);
    cJSON *meta = NULL, *tun = cJSON_Parse(tunables_json);
    kf_err e = KF_ERR_INIT;
    ka_problem pb;
    ka_space sp;
    kf_code rc;

    rc = ka_lib_meta_from_text(src, "the source", &meta, &e);
    if (rc != KF_OK) {
        FUZZ_CHECK(meta == NULL, "a refused block left a document behind");
        FUZZ_CHECK(e.msg[0] != '\0', "refused without saying why");
        goto out;
    }
    FUZZ_CHECK(cJSON_IsObject(meta), "the block is not an object");
    problem(&pb);
    memset(&sp, 0, sizeof(sp));
    if (ka_space_from_tunables(tun, meta, &pb, &sp, &e) == KF_OK)
        check_space(&sp);
    else
        FUZZ_CHECK(e.msg[0] != '\0', "a space refused without saying why");
    ka_space_release(&sp);
    ka_problem_release(&pb);

    if (cJSON_GetObjectItemCaseSensitive(meta, "inputs")) {
        static const int64_t shapes[2][KA_MAX_DIMS] = { { 128, 512 }, { 512, 256 } };
        static const int ndims[2] = { 2, 2 };

        memset(&pb, 0, sizeof(pb));
        memset(&sp, 0, sizeof(sp));
        if (ka_lib_bind(meta, "fuzz.py", shapes, ndims, 2, SIM_DT_BFLOAT16, "trn2", &pb, &sp, &e) == KF_OK)
            check_space(&sp);
        else
            FUZZ_CHECK(e.msg[0] != '\0', "a template refused without saying why");
        ka_space_release(&sp);
        ka_problem_release(&pb);
    }
out:
    cJSON_Delete(meta);
    cJSON_Delete(tun);
    free(src);
    return 0;
}
