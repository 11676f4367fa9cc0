# The runs read side at scale (issue 15), sourced by bench/run.sh (part
# runs): 100,000 jobs and 2,000,360 iterations in a fresh database of the
# queue parts' PostgreSQL, then filtered job pages, iteration pages and
# compares through kforge-api over HTTP (bench/runs_bench.c).
#   bench/run.sh runs     KFB_RUNS_REQUESTS=N (default 300) per measurement

bench_runs() {
  echo "== runs: p50/p99 over HTTP with 100,000 jobs and 2,000,000 iterations (targets p99 <= 20, 20, 50 ms)"
  queue_prepare || return 1
  "$BUILD/bench/runs_bench" "${KFB_RUNS_REQUESTS:-300}"
}
