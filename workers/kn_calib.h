/*
 * kn_calib — the calibration record of one device profile: what the device
 * measured next to what kforge's simulator predicts for the same kernel,
 * shapes, dtypes and target (docs/neuron-backend.md "Calibration").  The
 * neuron backend's pure part, like kn_map: no process, no file.
 *
 *   kn_calib_record        from the device's profile document
 *                          (kn_map_profile: latency_ns is the median of the
 *                          timed runs, profiled_ns neuron-explorer's
 *                          total_time, summary its Summary fields), the
 *                          device's Instruction rows (NULL when the profile
 *                          gave none) and the simulator's timing evaluation
 *                          of the same kernel (ka_eval_run, KA_EVAL_TIMING:
 *                          its latency_ns and summary) with its profile.json
 *                          document (NULL when absent): the record
 *                          {"seq", "kernel_sha256", "params",
 *                          "device_latency_ns", "device_profile_ns",
 *                          "sim_ns", "engines", "lines"}, or NULL when either
 *                          side has no positive time;
 *   kn_calib_instructions  the Instruction rows of neuron-explorer's full
 *                          JSON output (its "instruction" or "Instruction"
 *                          array), or NULL.
 *
 * engines: for tensor, vector, scalar, gpsimd and dma, the active time as a
 * percent of the run on each side ({"device_percent", "sim_percent"}:
 * Summary `<engine>_engine_active_time_percent`, `dma_active_time_percent`),
 * only where both sides give it.
 * lines: per source line ("kernel.py:17": the file's base name), the summed
 * duration_ns of the device's Instruction rows and the simulator's time for
 * that line on the compute engines (profile.json lines[].time_ns less its
 * "dma" part: the Instruction table holds compute-engine instructions only,
 * DMA transfers are DmaPacket rows); the KN_CALIB_LINES lines with the
 * largest |device_ns - sim_ns|, largest first; empty without Instruction
 * rows.  A line on one side only counts 0 on the other.
 *
 * Ownership: the record is a new cJSON object the caller frees; the inputs
 * stay the caller's.
 */
#ifndef KN_CALIB_H
#define KN_CALIB_H

#include <cjson/cJSON.h>

enum {
    KN_CALIB_LINES = 10,        /* worst lines kept per record */
    KN_CALIB_MAX_LOCS = 4096,   /* distinct source lines compared (more are ignored) */
};

cJSON *kn_calib_record(const cJSON *device_prof, const cJSON *instructions, const cJSON *sim,
                       const cJSON *sim_profile_doc, int seq, const char *kernel_sha256, const cJSON *params);

const cJSON *kn_calib_instructions(const cJSON *doc);

#endif
