#!/usr/bin/env bash
# `make run`: the whole kforge stack on this machine, data under var/.
#
#   Redis       127.0.0.1:${KF_RUN_REDIS_PORT:-6399}  (AOF everysec, noeviction)
#   PostgreSQL  127.0.0.1:${KF_RUN_PG_PORT:-5499}     (database kforge, role kforge;
#               durable: fsync on, unlike the tests' throwaway clusters)
#   kforge-api  127.0.0.1:8080  (KFORGE_API_LISTEN to change)
#   kforge-scheduler, and one kforge-worker per core, each with its own
#   worker token (var/worker-tokens/<worker id>, mode 600)
#
# KF_RUN_VAR puts the data somewhere other than var/ (bench/library.sh runs
# a second stack beside a developer's own this way).
#
# Prints the URL and the admin token, then waits; Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
BIN=$ROOT/$BUILD/bin
VAR=${KF_RUN_VAR:-$ROOT/var}
. tests/lib/services.sh

scripts/deps.sh
[ -x "$BIN/kforge-api" ] || make -j"$(nproc)" all

REDIS_PORT=${KF_RUN_REDIS_PORT:-6399}
PG_PORT=${KF_RUN_PG_PORT:-5499}
mkdir -p "$VAR/log" "$VAR/spool"
chmod 755 "$VAR"

pids=()
stop_all() {
  trap - INT TERM EXIT
  # The terminal or a pipe reading our output may be gone already: a write
  # must not kill the script before Redis and PostgreSQL are stopped.
  trap '' PIPE
  echo >&2 || true
  echo "stopping kforge..." >&2 || true
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  kf_stop_services
  echo "stopped; data kept in $VAR" >&2 || true
}
trap 'stop_all; exit 0' INT TERM
trap stop_all EXIT

kf_start_redis "$VAR/redis" "$REDIS_PORT"
kf_start_pg "$VAR/pg" "$PG_PORT" durable

export KFORGE_PG_DSN="host=127.0.0.1 port=$PG_PORT user=kforge dbname=kforge"
export KFORGE_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
export KFORGE_API_LISTEN=${KFORGE_API_LISTEN:-127.0.0.1:8080}
export KFORGE_API_URL="http://$KFORGE_API_LISTEN"
export KFORGE_SPOOL_DIR=$VAR/spool
export KFORGE_CACHE_DIR=$VAR/cache

# Tokens are made once and kept under var/, each in its own mode-600 file.
# The admin token (var/admin-token) goes to kforge-api only, never to a
# worker: not in a worker's environment, not in a file handed to it.
if [ ! -s "$VAR/admin-token" ]; then
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' | sed 's/^/kf_/' > "$VAR/admin-token")
fi
chmod 600 "$VAR/admin-token"
ADMIN_TOKEN=$(cat "$VAR/admin-token")

"$BIN/kforge-api" migrate
# One worker token per worker, named after its worker id (a worker token
# may report only for that id), in var/worker-tokens/<id> (mode 600).
NWORKERS=$(nproc)
mkdir -p "$VAR/worker-tokens"
chmod 700 "$VAR/worker-tokens"
worker_id() { echo "$(hostname)-w$1"; }
for i in $(seq 1 "$NWORKERS"); do
  f="$VAR/worker-tokens/$(worker_id "$i")"
  if [ ! -s "$f" ]; then
    (umask 077; "$BIN/kforge-api" token create --role worker --name "$(worker_id "$i")" | tail -n 1 > "$f.tmp" && mv "$f.tmp" "$f")
  fi
  chmod 600 "$f"
done
# The shared token of older versions speaks for no worker id any more.
rm -f "$VAR/worker-token"

KFORGE_BOOTSTRAP_TOKEN=$ADMIN_TOKEN "$BIN/kforge-api" serve >>"$VAR/log/api.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  curl -fsS "$KFORGE_API_URL/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "$KFORGE_API_URL/healthz" >/dev/null || { echo "kforge-api did not start; see $VAR/log/api.log" >&2; exit 1; }

"$BIN/kforge-scheduler" >>"$VAR/log/scheduler.log" 2>&1 &
pids+=($!)
worker_pids=()
for i in $(seq 1 "$NWORKERS"); do
  # Workers hold no database credentials and no admin token: only their
  # own token file (env -u drops what this script exported for the API).
  env -u KFORGE_PG_DSN -u KFORGE_BOOTSTRAP_TOKEN -u KFORGE_TOKEN \
    KFORGE_TOKEN_FILE="$VAR/worker-tokens/$(worker_id "$i")" KFORGE_WORKER_ID="$(worker_id "$i")" \
    "$BIN/kforge-worker" >>"$VAR/log/worker-$i.log" 2>&1 &
  pids+=($!)
  worker_pids+=($!)
done
sleep 1
if ! scripts/check-secrets.sh "$VAR/admin-token" "$VAR" "${worker_pids[@]}" >&2; then
  echo "the admin token is within a worker's reach (see above); stopping" >&2
  exit 1
fi

cat <<MSG

kforge is running.
  API:          $KFORGE_API_URL   (OpenAPI description at /v1/openapi.json)
  dashboard:    $KFORGE_API_URL/ui/   (sign in with the admin token below)
  admin token:  $ADMIN_TOKEN
  logs:         $VAR/log/
  try:          curl -s -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \\
                  -d '{"kind":"diag","target":"trn2","backend":"diag","spec":{"sleep_ms":100}}' $KFORGE_API_URL/v1/jobs

Press Ctrl-C to stop.
MSG

# Wait until Ctrl-C or until a process dies.
while true; do
  for p in "${pids[@]}"; do
    if ! kill -0 "$p" 2>/dev/null; then
      echo "a kforge process (pid $p) exited; see $VAR/log/" >&2
      exit 1
    fi
  done
  sleep 1
done
