/* api_ui — the team dashboard's files (ui/), embedded in the binary at
 * build time by tools/embed.c, served at /ui/ (docs/dashboard.md).
 *
 * The files hold no data: every number the dashboard shows it fetches from
 * the public /v1 routes with the token the person pasted, so these routes
 * are public.  Each answer carries a strict Content-Security-Policy (only
 * this origin's scripts, styles and connections; no inline script, no
 * frames), X-Content-Type-Options: nosniff, and a strong ETag (the SHA-256
 * of the bytes) that If-None-Match answers with 304.  Nothing here fails
 * but a name that is not an asset (404). */
#include "api.h"

#include <string.h>

#define API_UI_CSP                                                                                         \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "                \
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

const api_asset *api_ui_asset(const char *name)
{
    for (int i = 0; i < api_n_ui_assets; i++)
        if (strcmp(api_ui_assets[i].name, name) == 0)
            return &api_ui_assets[i];
    return NULL;
}

static void api_ui_send(api_req *r, const api_asset *a)
{
    const char *inm = api_req_header(r, MHD_HTTP_HEADER_IF_NONE_MATCH);

    r->csp = API_UI_CSP;
    /* Not immutable: the names carry no version, so a browser revalidates
     * (a 304 without the bytes while the build is the same). */
    r->cache_control = "no-cache";
    snprintf(r->etag, sizeof(r->etag), "%s", a->etag);
    if (inm && api_etag_listed(inm, a->etag)) {
        r->status = 304;
        return;
    }
    r->status = 200;
    r->content_type = a->content_type;
    kf_buf_reset(&r->out);
    kf_buf_add(&r->out, a->data, (size_t)a->size);
}

void api_h_ui_redirect(api_req *r)
{
    snprintf(r->location, sizeof(r->location), "/ui/");
    r->csp = API_UI_CSP;
    r->status = 302;
}

void api_h_ui_index(api_req *r)
{
    const api_asset *a = api_ui_asset("index.html");

    if (!a) {
        /* The Makefile embeds every file of ui/, index.html among them. */
        api_reply_code(r, KF_INTERNAL, "internal", "this build has no ui/index.html embedded");
        return;
    }
    api_ui_send(r, a);
}

void api_h_ui_asset(api_req *r)
{
    const api_asset *a = api_ui_asset(r->param);
    char name[64];

    if (!a) {
        size_t n = 0;
        for (const char *p = r->param; *p && n + 1 < sizeof(name); p++) {
            char ch = '?';   /* the name as it may appear in a reply: printable ASCII */
            if (*p > 0x20 && *p < 0x7f && *p != '"' && *p != '\\')
                ch = *p;
            name[n++] = ch;
        }
        name[n] = '\0';
        api_reply_code(r, KF_NOT_FOUND, "not-found", "the dashboard has no file named %s; open /ui/", name);
        return;
    }
    api_ui_send(r, a);
}

bool api_route_is_ui(const api_route *r)
{
    return r->handler == api_h_ui_redirect || r->handler == api_h_ui_index || r->handler == api_h_ui_asset;
}
