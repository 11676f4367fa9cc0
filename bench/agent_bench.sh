# Agent parts of bench/run.sh (sourced): quality of the tuned library
# kernels, search efficiency of the planners, loop overhead.
#   KFORGE_BENCH_AGENT_OPS      ops (default: every library op)
#   KFORGE_BENCH_AGENT_TARGETS  targets for quality (default: trn2 trn1)
#   KFORGE_BENCH_AGENT_SCALE    search shapes = reference shapes / SCALE (default 4)
#   KFORGE_BENCH_AGENT_RANDOM   random-search seeds (default 5)
AGENT_OPS=${KFORGE_BENCH_AGENT_OPS:-"matmul softmax rmsnorm layernorm swiglu add transpose2d flash_attention avgpool2d depthwise_conv2d"}
AGENT_TARGETS=${KFORGE_BENCH_AGENT_TARGETS:-"trn2 trn1"}

# Fraction of the bound (max of the compute and necessary-IO bounds) the
# built-in planner reaches at each op's reference shapes, next to the
# template's default setting, and the most of the bound the tuned kernel's
# busiest engine allows; goals (issue 19): >= 0.93 for matmul, softmax,
# rmsnorm, layernorm and swiglu, >= 0.60 for flash attention and depthwise
# conv2d, >= 0.70 for the rest.  Also the loop's overhead per iteration.
bench_agent_quality() {
  local out=$TMP/agent_quality.jsonl
  echo "== agent_quality: fraction of the bound at the reference shapes (bf16), default vs tuned"
  : >"$out"
  for t in $AGENT_TARGETS; do
    for op in $AGENT_OPS; do
      "$BUILD/bench/agent_bench" quality "$t" "$op" >>"$out" || echo "   $op on $t failed"
    done
  done
  "$PY" bench/agent_tables.py quality "$out"
  cp "$out" "${KFORGE_BENCH_AGENT_KEEP:-/dev/null}" 2>/dev/null || true
}

# Evaluations each planner needs to reach 98% of the best setting that
# exhaustive search finds over the same space (trn2, reference shapes /
# SCALE); target: guided <= 25% of exhaustive and fewer than random's median.
bench_agent_search() {
  local out=$TMP/agent_search.jsonl scale=${KFORGE_BENCH_AGENT_SCALE:-4} nr=${KFORGE_BENCH_AGENT_RANDOM:-5}
  echo "== agent_search: evaluations to reach 98% of exhaustive search's best (trn2, shapes / $scale)"
  : >"$out"
  for op in $AGENT_OPS; do
    "$BUILD/bench/agent_bench" search trn2 "$op" "$scale" "$nr" >>"$out" || echo "   $op failed"
  done
  "$PY" bench/agent_tables.py search "$out"
}

# Speed of one tune as a user runs it (issue 19): `kforge tune softmax
# --shape 4096x8192 --dtype bf16 --target trn2`, wall time (target <= 30 s)
# and the peak resident memory of the largest process it ran (the CLI or a
# sandboxed evaluation; target <= 600 MB), with the setting it chose and its
# fraction of the bound, so a faster tune can be checked to choose the same.
# OpenBLAS picks its kernels from the CPU (OPENBLAS_CORETYPE is unset for
# the run).  BENCH_TUNE_ARGS replaces the op and its options (not KFORGE_*:
# kforge refuses KFORGE_ names it does not know).
bench_agent_speed() {
  local args=${BENCH_TUNE_ARGS:-"softmax --shape 4096x8192 --dtype bf16 --target trn2"}
  echo "== agent_speed: kforge tune $args"
  # shellcheck disable=SC2086 # the arguments are words
  env -u OPENBLAS_CORETYPE "$PY" - "$BUILD/bin/kforge" "$TMP/tune" $args <<'PYEOF'
import json, resource, subprocess, sys, time
kforge, out, args = sys.argv[1], sys.argv[2], sys.argv[3:]
t0 = time.monotonic()
p = subprocess.run([kforge, "tune", *args, "--output-dir", out], capture_output=True, text=True)
wall = time.monotonic() - t0
if p.returncode != 0:
    print(f"   kforge tune failed (exit {p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    sys.exit(1)
rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
r = json.load(open(f"{out}/result.json"))
best = r["best"]
print(f"   wall {wall:.1f} s (target <= 30 s), peak RSS {rss_mb:.0f} MB (target <= 600 MB)")
print(f"   {r['iterations']} iterations, {r['evaluations']} evaluations, {r['validations']} validations; "
      f"stopped: {r['stop']['message'] if isinstance(r['stop'], dict) else r['stop']}")
print(f"   best {json.dumps(best['params'], sort_keys=True)}: {best['latency_ns'] / 1e3:.1f} us, "
      f"{best['fraction_of_bound']:.2f} of the bound")
PYEOF
}
