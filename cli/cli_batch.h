/*
 * cli_batch — `kforge batch`: submit a batch (a template x matrix file, or
 * every library op on some targets), follow its progress, list, cancel,
 * and print its report against a baseline (docs/batches.md).
 *
 * Talks to kforge-api as the other commands do (cli_http.h; KFORGE_API_URL,
 * KFORGE_TOKEN).  Returns the process exit status: 0 ok, 1 refused by the
 * server or (with --wait) a job of the batch did not succeed, 2 usage,
 * 3 API unreachable, 4 --timeout passed while waiting.
 */
#ifndef CLI_BATCH_H
#define CLI_BATCH_H

/* argv[0] is "batch"; curl_global_init and kf_config_load are done. */
int cli_batch_main(int argc, char **argv);

#endif
