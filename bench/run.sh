#!/usr/bin/env bash
# kforge benchmarks (make bench): bench/run.sh [PART...]
#
# Each part is a function bench_<part>; with no arguments every part runs.
# Parts print what they measured and the ratio to their target.  They are
# not tests: they need a built tree ($BUILD, default build) and a quiet
# machine, and they take minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SIM=$BUILD/bin/kforge-sim
PY=/usr/bin/python3          # Debian's python3, the one with NumPy
TMP=$(mktemp -d /tmp/kforge-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# A field of kforge-sim's --json document (dotted path).
json_field() { # FILE PATH
  "$PY" -c 'import json,sys
d = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    d = d[k]
print(d)' "$1" "$2"
}

# Simulated bf16 4096^3 matmul (the fully optimized tutorial stage, current
# API) against NumPy's float32 a @ b in the same run, and the simulator's
# peak resident memory against the bytes of the kernel's HBM tensors.
bench_sim_matmul() {
  local n=${KFORGE_BENCH_MATMUL_N:-4096} out=$TMP/mm.json np=$TMP/np.json
  echo "== sim_matmul: bf16 ${n}x${n}x${n}, tests/kernels/current/matmul.py:matmul_optimized"
  "$SIM" run tests/kernels/current/matmul.py --entry matmul_optimized --target trn2 \
      --input lhsT=shape:${n}x${n}:bf16:seed=1 --input rhs=shape:${n}x${n}:bf16:seed=2 \
      --kwargs '{"BLOCK_M": 2, "BLOCK_N": 2, "BLOCK_K": 2}' --output-dir "$TMP/mm" \
      --timeout 3600 --memory 16384 --json >"$out"
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "   kforge-sim failed (exit $rc):"; head -c 2000 "$out"; echo; return 1
  fi
  "$PY" bench/sim_numpy_gemm.py "$n" >"$np" || { echo "   NumPy run failed"; return 1; }
  "$PY" - "$out" "$np" "$n" <<'PYEOF'
import json, sys
sim, npy, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
flops = 2 * n ** 3
ks = sim["kernel_seconds"]
sim_gf = flops / ks / 1e9
hbm = 2 * n * n * 2 + n * n * 2            # lhsT, rhs and out, bf16
rss = sim["sandbox"]["max_rss_kib"] * 1024
print(f"   simulator: {ks:.2f} s in the kernel ({sim['sandbox']['wall_seconds']:.2f} s wall), "
      f"{sim_gf:.2f} GFLOP/s, {sim['instructions']['total']} instructions "
      f"(BLAS {sim.get('blas', '?')}, the core the CPU's flags allow)")
print(f"   NumPy fp32 a@b: {npy['seconds']:.3f} s, {npy['gflops']:.2f} GFLOP/s "
      f"(BLAS {npy['blas'].get('openblas_core', '?')}: {', '.join(npy['blas']['libraries'])})")
print(f"   ratio simulator/NumPy: {sim_gf / npy['gflops']:.3f} (target >= 0.5)")
print(f"   peak RSS {rss / 2**20:.0f} MiB vs HBM tensors {hbm / 2**20:.0f} MiB: "
      f"{rss / hbm:.2f}x (target <= 2)")
PYEOF
}

# Trace overhead: NKI calls per second with numerics off, on a kernel of
# many small ops (bench/sim_small_ops.py: 2 * ITERS + 3 calls).
bench_sim_calls() {
  local iters=${KFORGE_BENCH_CALLS_ITERS:-100000} out=$TMP/calls.json
  echo "== sim_calls: $((2 * iters + 3)) small NKI calls, --no-numerics"
  "$SIM" run bench/sim_small_ops.py --entry small_ops --target trn2 --no-numerics \
      --input x=shape:128x8:fp32 --kwargs "{\"ITERS\": $iters}" --output-dir "$TMP/calls" \
      --timeout 1800 --json >"$out"
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "   kforge-sim failed (exit $rc):"; head -c 2000 "$out"; echo; return 1
  fi
  "$PY" - "$out" "$iters" <<'PYEOF'
import json, sys
sim, iters = json.load(open(sys.argv[1])), int(sys.argv[2])
calls = 2 * iters + 3
ks = sim["kernel_seconds"]
print(f"   {calls} calls, {sim['instructions']['total']} instructions in {ks:.3f} s "
      f"(interpreter start-up included): {calls / ks:,.0f} calls/s (target >= 200,000)")
PYEOF
}

# Timing model: simulated instructions per second in timing-only mode on
# synthetic records shaped like the 4096^3 bf16 matmul and flash-attention
# forward (bench/sim_timing_synth.h), and the profile's cost next to it.
bench_sim_timing() {
  echo "== sim_timing: timing model speed (target >= 1,000,000 instructions/s) and profile cost"
  "$BUILD/bench/sim_timing_bench" trn2
}

# The evaluation sandbox's cost: a trivial evaluation before (unconfined)
# and after (strict), alternating in one run, next to a real evaluation.
bench_sandbox() {
  echo "== sandbox: start-up cost per evaluation (target: adds <= 20 ms)"
  "$BUILD/bench/sandbox_bench" "${KFORGE_BENCH_SANDBOX_ROUNDS:-200}" 20
}

# Queue and pipeline parts (queue_*) live in their own file.
. bench/queue.sh

# The artifact store (db/kf_artifact.h): write and read MB/s of the
# PostgreSQL and folder backends against a raw COPY of the same bytes, on a
# migrated database of the queue parts' PostgreSQL (issue 15).  ARTIFACT_BENCH_MIB
# sets the payload (not KFORGE_*: kforge-api migrate refuses unknown KFORGE_ names).
bench_artifacts() {
  echo "== artifacts: store write/read MB/s vs raw COPY (${ARTIFACT_BENCH_MIB:-8} MiB trace JSON)"
  queue_prepare || return 1
  mkdir -p "$TMP/artifacts"
  "$BUILD/bench/artifact_bench" "$KFB_PG_DSN" "$TMP/artifacts" "${ARTIFACT_BENCH_MIB:-8}" 5
}
. bench/sse.sh
# Agent parts (agent_*: quality, search efficiency, loop overhead).
. bench/agent_bench.sh
# The runs read side (runs: filtered lists, iteration pages, compare).
. bench/runs.sh
# Batches (batches: a 10,000-job batch, interactive dispatch beside it).
. bench/batches.sh
# The kernel library re-tuned twice through make run's stack (library).
. bench/library.sh
# The dashboard (ui: first render of the Jobs view with 10,000 jobs).
. bench/ui.sh
# The LLM planner's loop overhead on a scripted transcript (llm).
. bench/llm.sh

parts=("$@")
if [ ${#parts[@]} -eq 0 ]; then
  mapfile -t parts < <(declare -F | awk '{print $3}' | sed -n 's/^bench_//p')
fi
status=0
for p in "${parts[@]}"; do
  if ! declare -F "bench_$p" >/dev/null; then
    echo "no benchmark part '$p'"; status=3; continue
  fi
  "bench_$p" || status=1
done
exit $status
