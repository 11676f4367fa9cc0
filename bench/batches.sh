# Batches (issue 16), sourced by bench/run.sh (part batches): one batch of
# KFB_BATCH_JOBS (default 10,000) generate jobs through POST /v1/batches on
# a fresh database of the queue parts' PostgreSQL, and interactive
# POST /v1/jobs -> lease latency while it is submitted and queued, against
# an idle queue (bench/batches_bench.c).
#   bench/run.sh batches     KFB_BATCH_INTERACTIVE=K (default 300) interactive jobs per phase

bench_batches() {
  echo "== batches: a ${KFB_BATCH_JOBS:-10000}-job batch (target <= 2 s) and interactive dispatch p99 beside it (target <= +100 ms)"
  queue_prepare || return 1
  "$BUILD/bench/batches_bench" "${KFB_BATCH_JOBS:-10000}" "${KFB_BATCH_INTERACTIVE:-300}"
}
