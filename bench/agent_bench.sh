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
# template's default setting; target >= 0.85 for matmul, softmax, rmsnorm,
# layernorm and swiglu.  Also the loop's overhead per iteration.
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
