# Queue and pipeline benchmarks, sourced by bench/run.sh (parts queue_*).
# Each part starts its own Redis (AOF everysec, noeviction) and PostgreSQL
# (the test settings of tests/lib/services.sh) under $TMP, once per run,
# and drives kforge-api / kforge-scheduler / kforge-worker through
# $BUILD/bench/queue_bench.
#   bench/run.sh queue_recovery queue_throughput queue_memory queue_dispatch queue_enqueue

. tests/lib/services.sh

QB_UP=0
queue_services_up() {
  [ $QB_UP -eq 1 ] && return 0
  QB_REDIS_PORT=$(kf_free_port)
  QB_PG_PORT=$(kf_free_port)
  chmod 755 "$TMP"
  kf_start_redis "$TMP/redis" "$QB_REDIS_PORT" || return 1
  kf_start_pg "$TMP/pg" "$QB_PG_PORT" || return 1
  trap 'kf_stop_services; rm -rf "$TMP"' EXIT
  QB_UP=1
}

# A fresh migrated database and an empty Redis per part (per client count for
# queue_enqueue: jobs nobody leases would otherwise pile up in Redis from round
# to round, and its AOF rewrites of them take CPU from the later rounds); exports
# what queue_bench reads.
queue_fresh_db() {
  local name=qb_$(date +%s%N)
  redis-cli -p "$QB_REDIS_PORT" FLUSHALL >/dev/null || return 1
  "$KF_PG_BIN/psql" -h 127.0.0.1 -p "$QB_PG_PORT" -U postgres -d postgres -qAt \
      -c "CREATE DATABASE $name OWNER kforge" >/dev/null || return 1
  export KFB_PG_DSN="host=127.0.0.1 port=$QB_PG_PORT user=kforge dbname=$name"
  export KFB_REDIS_PORT=$QB_REDIS_PORT KFB_BUILD=$BUILD
  export KFB_DIR=$TMP/qb-$name
  mkdir -p "$KFB_DIR"
  KFORGE_PG_DSN=$KFB_PG_DSN "$BUILD/bin/kforge-api" migrate >/dev/null || return 1
  # KFB_SCHEMA_SQL: statements run after the migration, for breakdowns (what
  # an index or trigger costs the enqueue: drop it here and compare).
  if [ -n "${KFB_SCHEMA_SQL:-}" ]; then
    "$KF_PG_BIN/psql" "$KFB_PG_DSN" -qAt -v ON_ERROR_STOP=1 -c "$KFB_SCHEMA_SQL" >/dev/null || return 1
  fi
}

queue_prepare() {
  queue_services_up && queue_fresh_db
}

# Recovery time after a worker SIGKILL, against the lease (issue 5).
bench_queue_recovery() {
  echo "== queue_recovery: worker SIGKILL -> job running again (target <= 2x lease)"
  queue_prepare || return 1
  "$BUILD/bench/queue_bench" recovery 5 2000
}

# Jobs/s end to end with 4 workers vs redis-benchmark LPUSH+RPOP (issue 5).
bench_queue_throughput() {
  local n=${KFB_QUEUE_JOBS:-2000} out rate lp rp
  echo "== queue_throughput: $n diag jobs of 0 ms, 4 workers, vs raw Redis LPUSH+RPOP"
  queue_prepare || return 1
  out=$("$BUILD/bench/queue_bench" throughput "$n" 4) || { echo "$out"; return 1; }
  echo "$out" | grep -v '^KFB_'
  rate=$(echo "$out" | sed -n 's/^KFB_E2E_RATE=//p')
  lp=$(redis-benchmark -h 127.0.0.1 -p "$QB_REDIS_PORT" -t lpush -n 100000 -q 2>/dev/null | sed -n 's/.*LPUSH: \([0-9.]*\) requests.*/\1/p' | tail -n 1)
  rp=$(redis-benchmark -h 127.0.0.1 -p "$QB_REDIS_PORT" -t rpop -n 100000 -q 2>/dev/null | sed -n 's/.*RPOP: \([0-9.]*\) requests.*/\1/p' | tail -n 1)
  /usr/bin/python3 - "$rate" "$lp" "$rp" <<'PY'
import sys
rate, lp, rp = (float(x) for x in sys.argv[1:4])
pair = 1 / (1 / lp + 1 / rp)
print(f"   redis-benchmark: LPUSH {lp:,.0f}/s, RPOP {rp:,.0f}/s -> {pair:,.0f} push+pop pairs/s")
print(f"   ratio end-to-end jobs/s / raw push+pop pairs/s: {rate / pair:.4f}")
PY
}

# Redis memory while 100,000 jobs finish (issue 5): must stay flat.
bench_queue_memory() {
  local n=${KFB_QUEUE_MEMORY_JOBS:-100000}
  echo "== queue_memory: Redis used_memory over $n finished jobs (bounded)"
  queue_prepare || return 1
  "$BUILD/bench/queue_bench" memory "$n"
}

# POST accepted -> worker holds the lease, p50/p99 over 1,000 diag jobs (issue 2).
bench_queue_dispatch() {
  echo "== queue_dispatch: POST -> lease latency over 1000 diag jobs at light load (target p99 <= 10 ms)"
  queue_prepare || return 1
  "$BUILD/bench/queue_bench" dispatch 1000
}

# CPU ticks (user + system) used so far by this part's PostgreSQL cluster:
# the postmaster with its reaped children (cutime/cstime: backends that have
# exited), and its live children (backends, walwriter, checkpointer...).
queue_pg_cpu() {
  local pm p t f
  pm=$(head -n 1 "$TMP/pg/postmaster.pid")
  t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
  for p in $(pgrep -P "$pm"); do
    f=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) && t=$((t + ${f:-0}))
  done
  echo "$t $(getconf CLK_TCK)"
}

# CPU ticks (user + system) used so far by this part's Redis.
queue_redis_cpu() {
  awk '{print $14 + $15}' "/proc/$(cat "$TMP/redis/redis.pid")/stat"
}

# Sustained POST /v1/jobs rate vs pgbench single-row INSERT on the same PostgreSQL (issue 2),
# side by side: for each server setting (the tests' fsync=off, then durable fsync=on +
# synchronous_commit=on + full_page_writes=on, switched with ALTER SYSTEM + reload on the
# same server) and each client count, on a fresh database, KFB_ENQUEUE_ROUNDS (default 3)
# alternating rounds of the API run and the pgbench run, KFB_ENQUEUE_SECS (default 4) each;
# the machine is shared, so the ratio is of the medians of the rounds.  Also printed:
# PostgreSQL's CPU per POST and per raw INSERT (what each costs the database, less noisy
# than rates on a busy machine), and kforge-api's and Redis's CPU per POST.
# KFB_ENQUEUE_CLIENTS (default "4 16 32 64").  The API is driven by wrk over C keep-alive
# connections (KFB_ENQUEUE_DRIVER=curl: queue_bench's C libcurl threads), and the accepted
# count is the API's own 202 counter.
bench_queue_enqueue() {
  local secs=${KFB_ENQUEUE_SECS:-4} clients=${KFB_ENQUEUE_CLIENTS:-"4 16 32 64"} rounds=${KFB_ENQUEUE_ROUNDS:-3}
  local mode c k out rate tps c0 c1 r0 r1 api rows=""
  echo "== queue_enqueue: POST /v1/jobs vs pgbench one-INSERT script, same clients, $rounds alternating rounds of ${secs} s (target >= 0.5)"
  queue_services_up || return 1
  for mode in test durable; do
    if [ $mode = durable ]; then
      "$KF_PG_BIN/psql" -h 127.0.0.1 -p "$QB_PG_PORT" -U postgres -d postgres -qAt \
        -c "ALTER SYSTEM SET fsync = on" -c "ALTER SYSTEM SET synchronous_commit = on" \
        -c "ALTER SYSTEM SET full_page_writes = on" -c "SELECT pg_reload_conf()" >/dev/null || return 1
      sleep 1
    fi
    for c in $clients; do
      queue_fresh_db || return 1
      "$KF_PG_BIN/psql" "$KFB_PG_DSN" -qAt -c \
        "CREATE TABLE bench_insert (id bigserial PRIMARY KEY, body jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())" || return 1
      echo "INSERT INTO bench_insert (body) VALUES ('{\"kind\":\"diag\",\"spec\":{\"sleep_ms\":0}}');" > "$KFB_DIR/insert.sql"
      for k in $(seq "$rounds"); do
        c0=$(queue_pg_cpu); r0=$(queue_redis_cpu)
        out=$("$BUILD/bench/queue_bench" enqueue "$secs" "$c") || { echo "$out"; return 1; }
        c1=$(queue_pg_cpu); r1=$(queue_redis_cpu)
        echo "$out" | grep -v '^KFB_'
        rate=$(echo "$out" | sed -n 's/^KFB_ENQUEUE_RATE=//p')
        api=$(echo "$out" | sed -n 's/^KFB_API_TICKS=//p')
        rows="$rows api:$mode:$c:$rate:${c0% *}:${c1% *}:$secs:${api:-0}:$((r1 - r0))"
        c0=$(queue_pg_cpu)
        tps=$("$KF_PG_BIN/pgbench" -n -c "$c" -j "$c" -T "$secs" -f "$KFB_DIR/insert.sql" "$KFB_PG_DSN" 2>/dev/null \
              | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -n 1)
        c1=$(queue_pg_cpu)
        echo "   pgbench one-row INSERT, $c clients: $tps tps"
        rows="$rows pg:$mode:$c:$tps:${c0% *}:${c1% *}:$secs:0:0"
      done
    done
  done
  "$KF_PG_BIN/psql" -h 127.0.0.1 -p "$QB_PG_PORT" -U postgres -d postgres -qAt \
    -c "ALTER SYSTEM RESET ALL" -c "SELECT pg_reload_conf()" >/dev/null
  /usr/bin/python3 - "$(getconf CLK_TCK)" $rows <<'PY'
import statistics, sys
hz = float(sys.argv[1])
names = {"test": "fsync=off, sync_commit=off (tests)",
         "durable": "fsync=on, sync_commit=on (deployment)"}
runs = {}
for row in sys.argv[2:]:
    who, mode, c, rate, c0, c1, secs, api_t, redis_t = row.split(":")
    r = runs.setdefault((mode, int(c)), {"api": [], "pg": []})
    # CPU ms per operation: PostgreSQL's over the run's whole window (startup included: an
    # upper bound), kforge-api's over wrk's run, Redis's over the run
    ops = float(rate) * float(secs)
    per = (lambda t: float(t) / hz * 1e3 / ops) if ops else (lambda t: float("nan"))
    r[who].append((float(rate), per(float(c1) - float(c0)), per(api_t), per(redis_t)))
print(f"   {'PostgreSQL settings':<38} {'clients':>7} {'POST/s':>7} {'INSERT/s':>8} {'ratio':>6}"
      f" {'PG ms/POST':>10} {'PG ms/INSERT':>12} {'PG-bound':>8} {'API ms/POST':>11} {'Redis ms/POST':>13}")
for (mode, c), r in runs.items():
    med = lambda who, i: statistics.median(x[i] for x in r[who])
    api, pg, apc, pgc = med("api", 0), med("pg", 0), med("api", 1), med("pg", 1)
    print(f"   {names[mode]:<38} {c:>7} {api:>7,.0f} {pg:>8,.0f} {api / pg:>6.3f} {apc:>10.3f} {pgc:>12.3f}"
          f" {pgc / apc:>8.3f} {med('api', 2):>11.3f} {med('api', 3):>13.3f}")
print("   (medians of the rounds; target: ratio >= 0.5.  PG-bound = PG ms/INSERT / PG ms/POST: the ratio\n"
      "    to expect when PostgreSQL's CPU is the limit, i.e. the API, Redis and the clients run on other\n"
      "    cores; here all of them share this machine's cores with PostgreSQL)")
PY
}
