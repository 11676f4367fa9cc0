#!/usr/bin/env bash
# check-secrets.sh ADMIN_TOKEN_FILE VAR_DIR PID...
#
# Checks that kforge workers cannot get at the admin token: for each worker
# PID (and every process below it) the environment holds neither the admin
# token nor a KFORGE_TOKEN; no file under VAR_DIR but ADMIN_TOKEN_FILE
# holds the admin token (logs, spools, worker token files, caches); the
# admin token file and every worker token file are mode 0600 or 0400.
# `make run` (scripts/run.sh) runs it once its workers are up.  Exit 0
# when all hold, 1 with one line per finding otherwise.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 ADMIN_TOKEN_FILE VAR_DIR PID..." >&2; exit 2; }
admin_file=$1 var=$2
shift 2
admin=$(cat "$admin_file") || exit 2
[ -n "$admin" ] || { echo "empty admin token file $admin_file" >&2; exit 2; }
bad=0
say() { echo "check-secrets: $*"; bad=1; }

mode_ok() { case $(stat -c %a "$1") in 600|400) return 0 ;; *) return 1 ;; esac; }
mode_ok "$admin_file" || say "$admin_file is mode $(stat -c %a "$admin_file"); chmod 600 it"

descendants() { # PID: itself and every process below it
  echo "$1"
  for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do descendants "$c"; done
}
for p in "$@"; do
  for d in $(descendants "$p"); do
    [ -r /proc/"$d"/environ ] || continue
    if tr '\0' '\n' </proc/"$d"/environ | grep -qF -- "$admin"; then
      say "process $d (under worker $p) has the admin token in its environment"
    fi
    if tr '\0' '\n' </proc/"$d"/environ | grep -qE '^KFORGE_(TOKEN|BOOTSTRAP_TOKEN)=.'; then
      say "process $d (under worker $p) has a token in its environment (KFORGE_TOKEN/KFORGE_BOOTSTRAP_TOKEN)"
    fi
  done
done

# Every file under VAR_DIR but the admin token file itself (the database
# cluster keeps only SHA-256 hashes of tokens; scanned too).  One grep over
# the tree: a process per file is slow on a database cluster.
admin_real=$(realpath "$admin_file")
while IFS= read -r f; do
  [ "$(realpath "$f")" = "$admin_real" ] && continue
  say "$f holds the admin token"
done < <(grep -rlsF -- "$admin" "$var" 2>/dev/null)

for f in "$var"/worker-tokens/*; do
  [ -f "$f" ] || continue
  mode_ok "$f" || say "$f is mode $(stat -c %a "$f"); chmod 600 it"
done
exit $bad
