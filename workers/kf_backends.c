/* kf_backends — the table of backends compiled into kforge-worker. */
#include "kf_backend.h"

#include <stdio.h>
#include <string.h>

extern const kf_backend kf_backend_diag;
extern const kf_backend kf_backend_sim;
extern const kf_backend kf_backend_neuron;
extern const kf_backend kf_backend_hybrid;

static const kf_backend *const kf_backend_table[] = {
    &kf_backend_diag,
    &kf_backend_sim,
    &kf_backend_neuron,
    &kf_backend_hybrid,
    NULL,
};

const kf_backend *const *kf_backend_all(void)
{
    return kf_backend_table;
}

const kf_backend *kf_backend_find(const char *name, const char *kind)
{
    if (!name || !kind)
        return NULL;
    for (size_t i = 0; kf_backend_table[i]; i++) {
        const kf_backend *b = kf_backend_table[i];
        if (strcmp(b->name, name) != 0)
            continue;
        for (size_t k = 0; b->kinds[k]; k++) {
            if (strcmp(b->kinds[k], kind) == 0)
                return b;
        }
    }
    return NULL;
}

bool kf_backend_available(const kf_backend *b)
{
    return !b->available || b->available(b);
}

bool kf_backend_healthy(const char *name, char *why, size_t len)
{
    if (len)
        why[0] = '\0';
    for (size_t i = 0; kf_backend_table[i]; i++) {
        const kf_backend *b = kf_backend_table[i];
        char w[512] = "";
        if (strcmp(b->name, name) != 0 || !kf_backend_available(b) || !b->health)
            continue;
        if (!b->health(b, w, sizeof(w))) {
            snprintf(why, len, "%s", w[0] ? w : "unhealthy");
            return false;
        }
    }
    return true;
}
