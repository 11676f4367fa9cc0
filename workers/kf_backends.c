/* kf_backends — the table of backends compiled into kforge-worker. */
#include "kf_backend.h"

#include <string.h>

extern const kf_backend kf_backend_diag;
extern const kf_backend kf_backend_sim;

static const kf_backend *const kf_backend_table[] = {
    &kf_backend_diag,
    &kf_backend_sim,
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
