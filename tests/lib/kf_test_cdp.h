/*
 * kf_test_cdp — a small Chrome DevTools Protocol client for the browser
 * tests (tests/integration/test_ui.c): Debian's headless Chromium started
 * with --remote-debugging-pipe, spoken to over the pipe (we write commands
 * to its fd 3, read replies and events from its fd 4; each message is JSON
 * ended by a NUL byte), with cJSON.
 *
 * One page (a target made with Target.createTarget, attached in flat mode)
 * per client.  Every console error (Runtime.consoleAPICalled of type
 * error), uncaught exception (Runtime.exceptionThrown) and error log entry
 * (Log.entryAdded of level error: failed loads, CSP violations) the page
 * produces is recorded, so a test can fail on any of them.  Every wait has
 * a deadline; a browser that dies or stops answering makes the call fail
 * with a message, never hang.  kf_cdp_stop ends the browser (SIGTERM, then
 * SIGKILL) and frees everything.
 */
#ifndef KF_TEST_CDP_H
#define KF_TEST_CDP_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct kf_cdp kf_cdp;

/* The Chromium binary: $KFORGE_CHROMIUM, else chromium or chromium-browser
 * in /usr/bin (caller frees); NULL when none is installed. */
char *kf_cdp_find_browser(void);

/* Start browser headless at width x height with a fresh profile in
 * profile_dir, log to log_path, and open a blank page with the Runtime,
 * Log and Page domains enabled.  NULL with the reason in why when it does
 * not start or answer within 30 s. */
kf_cdp *kf_cdp_start(const char *browser, const char *profile_dir, const char *log_path, int width, int height,
                     char *why, size_t cap);
void kf_cdp_stop(kf_cdp *c);

/* Send method with params (taken over; may be NULL) to the page and wait
 * timeout_ms for its answer: the "result" object (caller deletes), or NULL
 * with the error in why. */
cJSON *kf_cdp_call(kf_cdp *c, const char *method, cJSON *params, int timeout_ms, char *why, size_t cap);

/* Navigate the page and wait for its load event. */
bool kf_cdp_navigate(kf_cdp *c, const char *url, int timeout_ms, char *why, size_t cap);

/* Evaluate a JavaScript expression in the page (promises awaited) and
 * return its value as JSON (caller deletes); NULL with why on an exception
 * or a timeout. */
cJSON *kf_cdp_eval(kf_cdp *c, const char *expr, int timeout_ms, char *why, size_t cap);

/* The expression's value as a number (NaN when not a number) or as a
 * string (caller frees; NULL when not a string). */
double kf_cdp_eval_num(kf_cdp *c, const char *expr);
char *kf_cdp_eval_str(kf_cdp *c, const char *expr);

/* Evaluate expr every 100 ms until it is true; false after timeout_ms. */
bool kf_cdp_wait(kf_cdp *c, const char *expr, int timeout_ms);

/* A PNG of the whole page (at most 8000 CSS pixels high) written to path. */
bool kf_cdp_screenshot(kf_cdp *c, const char *path, char *why, size_t cap);

/* The console errors, exceptions and error log entries seen so far, one
 * per line ("" when none).  Owned by c. */
const char *kf_cdp_errors(const kf_cdp *c);

#endif
