# Shared by tests/run.sh, scripts/run.sh and bench/run.sh (source it).
#
# kf_start_redis DIR PORT   — Redis with AOF (appendfsync everysec) and
#                             noeviction, data in DIR, on 127.0.0.1:PORT.
# kf_start_pg DIR PORT [durable]
#                           — a PostgreSQL cluster in DIR on 127.0.0.1:PORT
#                             with a database "kforge", a role "kforge" and
#                             the NOLOGIN role "kforge_reader" (migration 0008).
#                             As root the server runs as the "postgres" user
#                             (initdb refuses root).  Without "durable" (the
#                             tests, the benchmarks) it runs with fsync,
#                             synchronous_commit and full_page_writes off:
#                             fast, and a crash of the machine may lose or
#                             corrupt the cluster.  `make run` passes
#                             "durable": the data a user keeps under var/
#                             survives a power cut.
# kf_stop_services          — stop what this shell started.
# kf_free_port              — print a free TCP port on 127.0.0.1.

KF_PG_BIN=${KF_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
KF_STARTED_REDIS=()
KF_STARTED_PG=()

kf_free_port() {
  /usr/bin/python3 - <<'PY'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

kf_as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

kf_redis_conf() { # DIR PORT
  cat <<CONF
bind 127.0.0.1
port $2
dir $1
appendonly yes
appendfsync everysec
maxmemory-policy noeviction
save ""
daemonize yes
pidfile $1/redis.pid
logfile $1/redis.log
CONF
}

kf_start_redis() { # DIR PORT
  local dir=$1 port=$2
  mkdir -p "$dir"
  kf_redis_conf "$dir" "$port" > "$dir/redis.conf"
  redis-server "$dir/redis.conf"
  for _ in $(seq 1 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && { KF_STARTED_REDIS+=("$dir"); return 0; }
    sleep 0.05
  done
  echo "redis did not start on port $port; see $dir/redis.log" >&2
  return 1
}

kf_stop_redis_dir() { # DIR
  local pid
  pid=$(cat "$1/redis.pid" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
  kill -9 "$pid" 2>/dev/null || true
}

kf_start_pg() { # DIR PORT [durable]
  local dir=$1 port=$2 mode=${3:-fast} nosync=--no-sync
  local opts="-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200"
  case $mode in
    durable) nosync= ;;
    fast) opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off" ;;
    *) echo "kf_start_pg: mode must be durable or empty, not '$mode'" >&2; return 2 ;;
  esac
  mkdir -p "$dir"
  if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; chmod 700 "$dir"; fi
  if [ ! -f "$dir/PG_VERSION" ]; then
    kf_as_pg "$KF_PG_BIN/initdb" -D "$dir" -U postgres -A trust $nosync -E UTF8 >"$dir.initdb.log" 2>&1 \
      || { echo "initdb failed; see $dir.initdb.log" >&2; return 1; }
  fi
  kf_as_pg "$KF_PG_BIN/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 30 -o "$opts" \
    start >/dev/null || { echo "postgres did not start; see $dir/server.log" >&2; return 1; }
  KF_STARTED_PG+=("$dir")
  "$KF_PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1 <<SQL >/dev/null
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kforge') THEN CREATE ROLE kforge LOGIN; END IF;
  -- migration 0008's read-only role for analysts: made here because the
  -- role kforge, which migrates, may not create roles.
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kforge_reader') THEN CREATE ROLE kforge_reader NOLOGIN; END IF;
END \$\$;
SELECT 'CREATE DATABASE kforge OWNER kforge' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'kforge')\gexec
SQL
}

kf_stop_pg_dir() { # DIR
  kf_as_pg "$KF_PG_BIN/pg_ctl" -D "$1" -m fast -w -t 30 stop >/dev/null 2>&1 || true
}

kf_stop_services() {
  local d
  for d in "${KF_STARTED_REDIS[@]}"; do kf_stop_redis_dir "$d"; done
  for d in "${KF_STARTED_PG[@]}"; do kf_stop_pg_dir "$d"; done
  KF_STARTED_REDIS=()
  KF_STARTED_PG=()
}
