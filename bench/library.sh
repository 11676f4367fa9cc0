# The kernel library re-tune (issue 16), sourced by bench/run.sh (part
# library): `make run`'s whole stack (scripts/run.sh, its own data folder
# and ports under the benchmark's temporary folder) runs a batch of every
# library op at its declared reference shapes on each target, then the same
# batch again with nothing changed.  Printed: each batch's wall time (batch
# created -> last job finished), evaluations, cache hits and validations
# summed over its jobs, the second batch's wall time over the first's
# (target <= 0.10) and the report's verdicts (target: every entry unchanged).
#   KFB_LIBRARY_OPS      "all" (default) or a comma-separated list of ops
#   KFB_LIBRARY_TARGETS  targets (default "trn1 trn2 trn3")
#   KFB_LIBRARY_TIMEOUT  seconds each batch may take (default 10800)
#   KFB_LIBRARY_PORT     base port: Redis at it, PostgreSQL +1, API +2 (default 6390)

bench_library() {
  local ops=${KFB_LIBRARY_OPS:-all} targets=${KFB_LIBRARY_TARGETS:-"trn1 trn2 trn3"}
  local timeout=${KFB_LIBRARY_TIMEOUT:-10800} port=${KFB_LIBRARY_PORT:-6390}
  local var=$TMP/library-run log=$TMP/library-run.log
  echo "== library: batch of library op(s) '$ops' at reference shapes on $targets through make run's stack, then again"
  mkdir -p "$var"
  chmod 755 "$TMP"     # PostgreSQL runs as postgres when we are root: it must reach $var
  KF_RUN_VAR=$var KF_RUN_REDIS_PORT=$port KF_RUN_PG_PORT=$((port + 1)) \
    KFORGE_API_LISTEN=127.0.0.1:$((port + 2)) BUILD=$BUILD scripts/run.sh >"$log" 2>&1 &
  local stack=$!
  local i
  for i in $(seq 1 600); do
    grep -q '^kforge is running' "$log" && break
    kill -0 "$stack" 2>/dev/null || break
    sleep 0.2
  done
  if ! grep -q '^kforge is running' "$log"; then
    echo "   the stack did not start:"; tail -n 30 "$log"
    kill -TERM "$stack" 2>/dev/null; wait "$stack" 2>/dev/null
    return 1
  fi
  local rc=0 t ids=()
  local targs=()
  for t in $targets; do targs+=(--target "$t"); done
  for i in 1 2; do
    local out=$TMP/library-batch-$i.txt
    if ! KFORGE_API_URL=http://127.0.0.1:$((port + 2)) KFORGE_TOKEN="$(cat "$var/admin-token")" \
        "$BUILD/bin/kforge" batch submit --library "$ops" "${targs[@]}" --name "library-bench-$i" \
        --wait --timeout "$timeout" >"$out" 2>&1; then
      echo "   batch $i did not finish with every job succeeded:"; tail -n 20 "$out"
      rc=1
    fi
    ids+=("$(grep -o -m1 '[0-9a-f]\{8\}-[0-9a-f]\{4\}-[0-9a-f]\{4\}-[0-9a-f]\{4\}-[0-9a-f]\{12\}' "$out")")
    if [ -z "${ids[-1]}" ]; then
      echo "   batch $i was not created:"; cat "$out"; rc=1; break
    fi
  done
  if [ "${#ids[@]}" -eq 2 ]; then
    "$PY" bench/library_tables.py "http://127.0.0.1:$((port + 2))" "$var/admin-token" "${ids[@]}" || rc=1
  fi
  kill -TERM "$stack" 2>/dev/null; wait "$stack" 2>/dev/null
  return $rc
}
