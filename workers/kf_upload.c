/* kf_upload — artifact and provenance reports of a worker (see kf_upload.h). */
#include "kf_upload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_alloc.h"
#include "kf_json.h"

cJSON *kf_upload_take_artifacts(cJSON *obj)
{
    cJSON *a = cJSON_DetachItemFromObjectCaseSensitive(obj, "artifacts"), *f;

    if (!cJSON_IsArray(a)) {
        cJSON_Delete(a);
        return NULL;
    }
    cJSON_ArrayForEach(f, a)
    {
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "name")) ||
            cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "content")) ==
                cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "content_base64"))) {
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

void kf_upload_base64(const void *data, size_t n, kf_buf *out)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    char *o;

    kf_buf_grow(out, (n + 2) / 3 * 4);
    o = out->data + out->len;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *o++ = abc[v >> 18 & 63];
        *o++ = abc[v >> 12 & 63];
        o[0] = '=';
        o[1] = '=';
        if (i + 1 < n)
            o[0] = abc[v >> 6 & 63];
        if (i + 2 < n)
            o[1] = abc[v & 63];
        o += 2;
    }
    out->len = (size_t)(o - out->data);
    out->data[out->len] = '\0';
}

char *kf_upload_artifact_body(int attempt, const char *lease_token, const char *worker, int seq, bool final,
                              const cJSON *file)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(file, "name");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(file, "content");
    const cJSON *b64 = cJSON_GetObjectItemCaseSensitive(file, "content_base64");
    kf_buf b = KF_BUF_INIT;

    if (!cJSON_IsString(name) || (!cJSON_IsString(content) && !cJSON_IsString(b64)))
        return NULL;
    kf_buf_addf(&b, "{\"attempt\":%d,\"lease_token\":", attempt);
    kf_json_add_str(&b, lease_token);
    kf_buf_adds(&b, ",\"worker\":");
    kf_json_add_str(&b, worker);
    kf_buf_addf(&b, ",\"seq\":%d,\"final\":%s,\"name\":", seq, final ? "true" : "false");
    kf_json_add_str(&b, name->valuestring);
    kf_buf_adds(&b, ",\"content_base64\":\"");
    if (cJSON_IsString(content)) {
        kf_upload_base64(content->valuestring, strlen(content->valuestring), &b);
    } else {
        /* already encoded: only the base64 alphabet goes into the JSON string */
        if (strspn(b64->valuestring, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") !=
            strlen(b64->valuestring)) {
            kf_buf_release(&b);
            return NULL;
        }
        kf_buf_adds(&b, b64->valuestring);
    }
    kf_buf_adds(&b, "\"}");
    return kf_buf_detach(&b);
}

char *kf_upload_take_provenance(cJSON *result, const char *worker)
{
    cJSON *p = cJSON_DetachItemFromObjectCaseSensitive(result, "provenance");
    char *s;

    if (!cJSON_IsObject(p)) {
        cJSON_Delete(p);
        return NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(p, "worker");
    cJSON_AddStringToObject(p, "worker", worker);
    s = cJSON_PrintUnformatted(p);
    cJSON_Delete(p);
    return s;
}

