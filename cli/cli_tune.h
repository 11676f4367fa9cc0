/*
 * cli_tune — `kforge tune`: the tuning loop run locally, no service.
 *
 * Tunes a library op (kforge tune softmax --shape 4096x8192 --dtype bf16
 * --target trn2) or a user kernel (kforge tune my_kernel.py --entry NAME
 * --reference ref.py --input x=shape:4096x8192:bf16 --tunables '{...}') with
 * the same loop the worker's sim backend runs (agent/ka_loop.h), printing a
 * progress line per iteration, and writes the best kernel, the report, the
 * result and the iterations to --output-dir.  Returns the process exit
 * status (0 a correct kernel was found, 1 none was, 2 usage or job error).
 */
#ifndef CLI_TUNE_H
#define CLI_TUNE_H

int cli_tune_main(int argc, char **argv);

#endif
