/* kf_jobprob — a user job's kernel as a ka_problem (see kf_jobprob.h). */
#include "kf_jobprob.h"

#include <errno.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "sim/sim_input.h"

const char *kf_jobprob_str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Lower-case hex SHA-256 of a file into out[65]; false when unreadable. */
bool kf_jobprob_sha256(const char *path, char out[65])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[EVP_MAX_MD_SIZE], buf[65536];
    unsigned mdlen = 0;
    EVP_MD_CTX *c;
    FILE *f = fopen(path, "rb");
    size_t n;
    bool ok;

    if (!f)
        return false;
    c = EVP_MD_CTX_new();
    ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1;
    while (ok && (n = fread(buf, 1, sizeof(buf), f)) > 0)
        ok = EVP_DigestUpdate(c, buf, n) == 1;
    ok = ok && !ferror(f) && EVP_DigestFinal_ex(c, md, &mdlen) == 1 && mdlen == 32;
    EVP_MD_CTX_free(c);
    fclose(f);
    if (!ok)
        return false;
    for (size_t i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
    return true;
}

kf_code kf_jobprob_write(const char *dir, const char *name, const char *text, char *path, size_t len, kf_err *err)
{
    FILE *f;
    snprintf(path, len, "%s/%s", dir, name);
    f = fopen(path, "w");
    if (!f)
        return kf_err_set(err, KF_IO, "cannot write %s: %s", path, strerror(errno));
    fputs(text, f);
    if (fclose(f) != 0)
        return kf_err_set(err, KF_IO, "writing %s failed", path);
    return KF_OK;
}

/* One dimension of a shape from the job, checked again here rather than
 * trusted to the API's validation (kf_job_spec_check): an integer number
 * of 1..KF_JOB_MAX_DIM elements, at most KA_MAX_DIMS of them, converted
 * only once it is known to fit. */
kf_code kf_jobprob_dim(const cJSON *d, int k, int64_t *out, const char *what, kf_err *err)
{
    double v = cJSON_IsNumber(d) ? d->valuedouble : 0;

    if (k >= KA_MAX_DIMS)
        return kf_err_set(err, KF_UNPROCESSABLE, "%s has more than %d dimensions", what, KA_MAX_DIMS);
    if (!(v >= 1 && v <= (double)KF_JOB_MAX_DIM) || v != floor(v))
        return kf_err_set(err, KF_UNPROCESSABLE, "%s: dimension %d is not a whole number of 1 to %lld elements", what,
                          k, (long long)KF_JOB_MAX_DIM);
    *out = (int64_t)v;
    return KF_OK;
}

/* The user's kernel (and reference) as files, the inputs from the spec. */
kf_code kf_jobprob_user(const kf_job_payload *job, const char *dir, const char *backend, ka_problem *pb, kf_err *err)
{
    const cJSON *spec = job->spec, *in;
    const char *src = kf_jobprob_str(spec, "source"), *ref = kf_jobprob_str(spec, "reference"), *entry = kf_jobprob_str(spec, "entry");
    kf_code rc;

    memset(pb, 0, sizeof(*pb));
    snprintf(pb->target, sizeof(pb->target), "%s", job->target);
    snprintf(pb->entry, sizeof(pb->entry), "%s", entry ? entry : "");
    rc = kf_jobprob_write(dir, "kernel.py", src ? src : "", pb->source_path, sizeof(pb->source_path), err);
    if (rc)
        return rc;
    if (ref) {
        rc = kf_jobprob_write(dir, "reference.py", ref, pb->ref_path, sizeof(pb->ref_path), err);
        if (rc)
            return rc;
        snprintf(pb->ref_entry, sizeof(pb->ref_entry), "%s", pb->entry);
    }
    cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(spec, "inputs"))
    {
        ka_input *pi = &pb->inputs[pb->n_inputs < KA_MAX_INPUTS ? pb->n_inputs : 0];
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(in, "shape"), *d;
        int dt = sim_input_dtype(kf_jobprob_str(in, "dtype"));
        if (pb->n_inputs >= KA_MAX_INPUTS)
            return kf_err_set(err, KF_UNPROCESSABLE, "more than %d inputs; the %s backend takes at most %d",
                              KA_MAX_INPUTS, backend, KA_MAX_INPUTS);
        snprintf(pi->name, sizeof(pi->name), "%s", in->string);
        if (dt < 0)
            return kf_err_set(err, KF_UNPROCESSABLE, "input %s: dtype %s is not supported by the %s backend", in->string,
                              kf_jobprob_str(in, "dtype"), backend);
        pi->dtype = (sim_dtype)dt;
        pi->std = 1.0;
        cJSON_ArrayForEach(d, shape)
        {
            if (kf_jobprob_dim(d, pi->ndim, &pi->shape[pi->ndim], in->string, err) != KF_OK)
                return KF_UNPROCESSABLE;
            pi->ndim++;
        }
        pb->n_inputs++;
    }
    return KF_OK;
}

