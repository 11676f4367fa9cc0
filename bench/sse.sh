# Live progress benchmark (issue 15), sourced by bench/run.sh after
# bench/queue.sh (whose services and fresh database it uses):
#   bench/run.sh sse      KFB_SSE_STREAMS (500) streams, KFB_SSE_EVENTS (100) events,
#                         one every KFB_SSE_INTERVAL_MS (100)
# kforge-api runs with KFORGE_MAX_STREAMS above the stream count and no
# per-address limit (every client is 127.0.0.1).

bench_sse() {
  local streams=${KFB_SSE_STREAMS:-500} events=${KFB_SSE_EVENTS:-100} port tok pid rc
  echo "== sse: $streams streams on one kforge-api, $events iterations, delivery latency (target p99 <= 50 ms) and RSS per stream"
  queue_prepare || return 1
  ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  port=$(kf_free_port)
  tok=$(KFORGE_PG_DSN=$KFB_PG_DSN "$BUILD/bin/kforge-api" token create --role user --name bench | grep '^kf_' | tail -n 1)
  KFORGE_PG_DSN=$KFB_PG_DSN KFORGE_REDIS_URL=redis://127.0.0.1:$QB_REDIS_PORT/0 \
    KFORGE_API_LISTEN=127.0.0.1:$port KFORGE_API_CONNS_PER_IP=0 KFORGE_MAX_STREAMS=$((streams + 100)) \
    KFORGE_LOG_LEVEL=warn "$BUILD/bin/kforge-api" serve >"$KFB_DIR/api.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  KFB_API_PORT=$port KFB_TOKEN=$tok KFB_API_PID=$pid "$BUILD/bench/sse_bench" "$streams" "$events"
  rc=$?
  kill "$pid"; wait "$pid" 2>/dev/null
  return $rc
}
