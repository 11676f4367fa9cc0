/*
 * sim_target — loading target files; see sim_target.h.
 */
#include "sim_target.h"

#include "kf_config.h"
#include "kf_fs.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { SIM_TARGET_MAX_FILE = 256 * 1024 };

/* One row of the field table, for the loader's loop. */
typedef struct sim_target_field {
    const char *section;
    const char *key;
    size_t      offset;
    double      lo, hi;
} sim_target_field;

static const sim_target_field sim_target_fields[] = {
#define XX(sec, key, field, lo, hi) { #sec, #key, offsetof(sim_target, field), lo, hi },
    SIM_TARGET_FIELDS(XX)
#undef XX
};
enum { SIM_TARGET_NFIELDS = sizeof(sim_target_fields) / sizeof(sim_target_fields[0]) };

static int sim_target_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;

    if (n == 0 || n > 15)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static int sim_target_is_dir(const char *p)
{
    struct stat st;
    return p && *p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static char sim_target_pinned[PATH_MAX];

void sim_target_pin_dir(const char *dir)
{
    snprintf(sim_target_pinned, sizeof(sim_target_pinned), "%s", dir ? dir : "");
}

const char *sim_target_default_dir(void)
{
    static char dir[PATH_MAX];
    const char *cfg = kf_config_str(KF_CFG_SIM_TARGETS);
    static const char *const rel[] = { "../../sim/targets", "../../../sim/targets", "../share/kforge/targets" };

    if (sim_target_pinned[0])
        return sim_target_pinned;
    if (cfg && *cfg) {
        snprintf(dir, sizeof(dir), "%s", cfg);
        return sim_target_is_dir(dir) ? dir : NULL;
    }
    if (sim_target_is_dir("sim/targets"))
        return "sim/targets";
    /* build/bin/kforge-sim, build/tests/unit/test_x and an install. */
    return kf_fs_data_dir(rel, 3, dir, sizeof(dir));
}

static char *sim_target_slurp(const char *path, kf_err *err, kf_code *code)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n;

    if (!f) {
        *code = errno == ENOENT ? KF_NOT_FOUND : KF_IO;
        kf_err_set(err, *code, "cannot open target file '%s': %s", path, strerror(errno));
        return NULL;
    }
    buf = malloc(SIM_TARGET_MAX_FILE + 1);
    if (!buf)
        abort();
    n = fread(buf, 1, SIM_TARGET_MAX_FILE + 1, f);
    fclose(f);
    if (n > SIM_TARGET_MAX_FILE) {
        free(buf);
        *code = kf_err_set(err, KF_CONFIG, "target file '%s' is over %d bytes", path,
                           SIM_TARGET_MAX_FILE);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* Checks that `sec` has only keys of the table (a typo is an error). */
static kf_code sim_target_unknown_keys(const cJSON *sec, const char *secname, const char *path,
                                       kf_err *err)
{
    const cJSON *it;

    cJSON_ArrayForEach(it, sec) {
        int known = strcmp(secname, "dma") == 0 && strcmp(it->string, "chunk_efficiency") == 0;
        for (int i = 0; i < SIM_TARGET_NFIELDS && !known; i++)
            known = strcmp(sim_target_fields[i].section, secname) == 0 &&
                    strcmp(sim_target_fields[i].key, it->string) == 0;
        if (!known)
            return kf_err_set(err, KF_CONFIG, "target file '%s': unknown key '%s.%s'", path,
                              secname, it->string);
    }
    return KF_OK;
}

/* dma.chunk_efficiency: a sourced table of [bytes, efficiency] points. */
static kf_code sim_target_parse_eff(const cJSON *root, const char *path, sim_target *t,
                                    kf_err *err)
{
    const cJSON *ent = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "dma"), "chunk_efficiency");
    const cJSON *val = cJSON_GetObjectItemCaseSensitive(ent, "value");
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(ent, "source");
    const cJSON *pt;

    if (!cJSON_IsArray(val) || cJSON_GetArraySize(val) < 1 ||
        cJSON_GetArraySize(val) > SIM_TARGET_MAX_EFF || !cJSON_IsString(src) ||
        strlen(src->valuestring) < 2)
        return kf_err_set(err, KF_CONFIG,
                          "target file '%s': 'dma.chunk_efficiency' needs a \"value\" of 1..%d "
                          "[bytes, efficiency] pairs and a \"source\"", path, SIM_TARGET_MAX_EFF);
    t->dma_eff_n = 0;
    cJSON_ArrayForEach(pt, val) {
        const cJSON *b = cJSON_GetArrayItem(pt, 0), *e = cJSON_GetArrayItem(pt, 1);
        unsigned i = t->dma_eff_n;
        if (!cJSON_IsArray(pt) || cJSON_GetArraySize(pt) != 2 || !cJSON_IsNumber(b) ||
            !cJSON_IsNumber(e) || !(b->valuedouble > 0) || !(e->valuedouble > 0) ||
            e->valuedouble > 1 || (i > 0 && b->valuedouble <= t->dma_eff_bytes[i - 1]))
            return kf_err_set(err, KF_CONFIG,
                              "target file '%s': 'dma.chunk_efficiency' point %u must be "
                              "[bytes > previous, 0 < efficiency <= 1]", path, i);
        t->dma_eff_bytes[i] = b->valuedouble;
        t->dma_eff_val[i] = e->valuedouble;
        t->dma_eff_n++;
    }
    return KF_OK;
}

static kf_code sim_target_parse(const char *path, const char *text, sim_target *t, kf_err *err)
{
    cJSON *root = cJSON_Parse(text);
    const cJSON *it;
    kf_code rc = KF_OK;

    if (!root || !cJSON_IsObject(root)) {
        rc = kf_err_set(err, KF_CONFIG, "target file '%s' is not a JSON object", path);
        goto out;
    }
    it = cJSON_GetObjectItemCaseSensitive(root, "generation");
    if (cJSON_IsString(it))
        snprintf(t->generation, sizeof(t->generation), "%s", it->valuestring);
    cJSON_ArrayForEach(it, root) {
        if (!cJSON_IsObject(it))
            continue;
        rc = sim_target_unknown_keys(it, it->string, path, err);
        if (rc)
            goto out;
    }
    for (int i = 0; i < SIM_TARGET_NFIELDS; i++) {
        const sim_target_field *f = &sim_target_fields[i];
        const cJSON *sec = cJSON_GetObjectItemCaseSensitive(root, f->section);
        const cJSON *ent = cJSON_GetObjectItemCaseSensitive(sec, f->key);
        const cJSON *val = cJSON_GetObjectItemCaseSensitive(ent, "value");
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(ent, "source");

        if (!ent) {
            rc = kf_err_set(err, KF_CONFIG, "target file '%s': missing '%s.%s'", path,
                            f->section, f->key);
            goto out;
        }
        if (!cJSON_IsNumber(val)) {
            rc = kf_err_set(err, KF_CONFIG, "target file '%s': '%s.%s.value' must be a number",
                            path, f->section, f->key);
            goto out;
        }
        if (!cJSON_IsString(src) || strlen(src->valuestring) < 2) {
            rc = kf_err_set(err, KF_CONFIG,
                            "target file '%s': '%s.%s' needs a \"source\" (a reference key such "
                            "as S7, or \"chosen: why\")", path, f->section, f->key);
            goto out;
        }
        if (!(val->valuedouble >= f->lo && val->valuedouble <= f->hi)) {
            rc = kf_err_set(err, KF_CONFIG, "target file '%s': '%s.%s' = %g is outside [%g, %g]",
                            path, f->section, f->key, val->valuedouble, f->lo, f->hi);
            goto out;
        }
        memcpy((char *)t + f->offset, &val->valuedouble, sizeof(double));
    }
    rc = sim_target_parse_eff(root, path, t, err);
    if (rc)
        goto out;
    if (t->dma_saturating_chunk < t->dma_efficient_chunk) {
        rc = kf_err_set(err, KF_CONFIG,
                        "target file '%s': dma.saturating_chunk_bytes must be >= "
                        "dma.efficient_chunk_bytes", path);
        goto out;
    }
out:
    cJSON_Delete(root);
    return rc;
}

kf_code sim_target_load_file(const char *path, sim_target *out, kf_err *err)
{
    kf_code rc = KF_OK;
    char *text;
    const char *base;
    size_t blen;

    memset(out, 0, sizeof(*out));
    text = sim_target_slurp(path, err, &rc);
    if (!text)
        return rc;
    base = strrchr(path, '/');
    base = base ? base + 1 : path;
    blen = strcspn(base, ".");
    if (blen >= sizeof(out->name))
        blen = sizeof(out->name) - 1;
    memcpy(out->name, base, blen);
    snprintf(out->path, sizeof(out->path), "%s", path);
    rc = sim_target_parse(path, text, out, err);
    free(text);
    return rc;
}

kf_code sim_target_load(const char *name, const char *dir, sim_target *out, kf_err *err)
{
    char path[PATH_MAX];

    memset(out, 0, sizeof(*out));
    if (!sim_target_name_ok(name))
        return kf_err_set(err, KF_INVALID,
                          "target '%s' is not a valid name: use trn1, inf2, trn2, trn3 or the "
                          "base name of a file in the targets folder", name ? name : "");
    if (!dir)
        dir = sim_target_default_dir();
    if (!dir) {
        const char *cfg = kf_config_str(KF_CFG_SIM_TARGETS);
        if (cfg && *cfg)
            return kf_err_set(err, KF_CONFIG,
                              "KFORGE_SIM_TARGETS='%.200s' is not a folder: point it at the "
                              "folder that holds <target>.json", cfg);
        return kf_err_set(err, KF_NOT_FOUND,
                          "no targets folder found: set KFORGE_SIM_TARGETS to the folder that "
                          "holds <target>.json (sim/targets in the source tree)");
    }
    if (snprintf(path, sizeof(path), "%s/%s.json", dir, name) >= (int)sizeof(path))
        return kf_err_set(err, KF_INVALID, "targets folder path is too long: %.64s...", dir);
    if (access(path, R_OK) != 0)
        return kf_err_set(err, KF_NOT_FOUND,
                          "unknown target '%s': no file %s (add one to define a target)", name,
                          path);
    return sim_target_load_file(path, out, err);
}

double sim_target_te_peak_flops(const sim_target *t)
{
    return t->te_rows * t->te_cols * 2.0 * t->te_clock_ghz * 1e9;
}

double sim_target_dma_bpns(const sim_target *t)
{
    return t->dma_aggregate_bpns < t->hbm_bpns ? t->dma_aggregate_bpns : t->hbm_bpns;
}

double sim_target_dma_efficiency(const sim_target *t, double c)
{
    unsigned n = t->dma_eff_n;

    if (n == 0)
        return 1.0;
    if (c <= t->dma_eff_bytes[0]) {
        /* below the table, every descriptor costs like the smallest chunk */
        double x = c > 1 ? c : 1;
        return t->dma_eff_val[0] * x / t->dma_eff_bytes[0];
    }
    for (unsigned i = 1; i < n; i++)
        if (c <= t->dma_eff_bytes[i]) {
            double x = (c - t->dma_eff_bytes[i - 1]) / (t->dma_eff_bytes[i] - t->dma_eff_bytes[i - 1]);
            return t->dma_eff_val[i - 1] + x * (t->dma_eff_val[i] - t->dma_eff_val[i - 1]);
        }
    return t->dma_eff_val[n - 1];
}
