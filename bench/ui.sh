# The dashboard's first render (issue 17), sourced by bench/run.sh (part ui):
# 10,000 jobs in a fresh database of the queue parts' PostgreSQL, kforge-api
# on it, headless Chromium loading /ui/#/jobs (bench/ui_bench.c).
#   bench/run.sh ui     KFB_UI_LOADS=N (default 10) page loads

bench_ui() {
  echo "== ui: the Jobs view's first page rendered with 10,000 jobs (target <= 1000 ms after navigation start)"
  queue_prepare || return 1
  "$BUILD/bench/ui_bench" "${KFB_UI_LOADS:-10}"
}
