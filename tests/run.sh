#!/usr/bin/env bash
# Runs kforge's tests: tests/run.sh UNIT_BIN... -- INTEGRATION_BIN...
#
# Unit binaries run as they are.  Before the integration binaries, a Redis
# and a PostgreSQL are started on free loopback ports with data under a
# temporary folder; their addresses reach the tests as KFORGE_TEST_REDIS_PORT,
# KFORGE_TEST_PG_PORT, KFORGE_TEST_PG_DIR and KFORGE_TEST_REDIS_DIR (the
# fault-injection tests stop and restart them).  Each binary has a time
# limit.  The last line is "N passed, N failed" over every test case.
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/lib/services.sh

BUILD=${BUILD:-build}
unit=() integ=() seen_sep=0
for a in "$@"; do
  if [ "$a" = "--" ]; then seen_sep=1; continue; fi
  if [ $seen_sep -eq 0 ]; then unit+=("$a"); else integ+=("$a"); fi
done

passed=0 failed=0 skipped=0 bad_bins=()
export KFORGE_TEST_ROOT=$PWD
# The simulator embeds CPython for the process's lifetime: its allocations are
# not leaks of ours (tests/lsan.supp), under SANITIZE=1.
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export KFORGE_TEST_BUILD=$BUILD
TMP=$(mktemp -d /tmp/kforge-test.XXXXXX)
chmod 755 "$TMP"
export KFORGE_TEST_TMP=$TMP
# KFORGE_TEST_KEEP=1 keeps the folder (logs of every stack) for a post-mortem.
cleanup() {
  kf_stop_services
  if [ "${KFORGE_TEST_KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

run_bin() { # BIN TIMEOUT JOBS
  local bin=$1 limit=$2 jobs=$3 out rc p f
  out="$TMP/$(basename "$bin").out"
  echo "== $bin"
  # --verbose: Criterion then prints each test's [SKIP] line with its reason
  # (a test skipped for a missing tool, e.g. test_ui without Chromium), shown below.
  timeout -k 10 "$limit" "$bin" --jobs "$jobs" --short-filename --verbose >"$out" 2>&1
  rc=$?
  local skips
  skips=$(grep -a -c '^\[SKIP\]' "$out")
  if [ "$skips" -gt 0 ]; then
    grep -a '^\[SKIP\]' "$out" | head -n 20
    skipped=$((skipped + skips))
  fi
  # Criterion's synthesis line: "[====] Synthesis: Tested: 5 | Passing: 5 | Failing: 0 | Crashing: 0"
  local line
  line=$(grep -a 'Synthesis:' "$out" | tail -n 1)
  if [ -n "$line" ]; then
    p=$(sed -E 's/.*Passing: ([0-9]+).*/\1/' <<<"$line")
    f=$(( $(sed -E 's/.*Tested: ([0-9]+).*/\1/' <<<"$line") - p ))
  else
    p=0 f=1
  fi
  passed=$((passed + p)); failed=$((failed + f))
  if [ $rc -ne 0 ] || [ "$f" -ne 0 ]; then
    bad_bins+=("$bin")
    # failures with their messages (Criterion prints them as "[----]   ..." lines)
    grep -a -v '^\[----\] *$' "$out" | grep -a -E '^\[----\]|FAIL|fail|Assert|assert|crash|Crash|Timeout|signal|error|Error|==[0-9]+==' | head -n 60
    [ $rc -eq 124 ] && echo "   timed out after $limit"
    # Kept for the summary at the end: a CI log is often read from its tail.
    { echo "== $bin (exit $rc)"
      grep -a -v -E '^\[----\] *$|^\[----\] Criterion v' "$out" | grep -a -E '^\[FAIL\]|^\[----\]|==[0-9]+==' | head -n 20
      [ $rc -eq 124 ] && echo "   timed out after $limit"
    } >>"$TMP/failures"
  fi
  tail -n 1 "$out"
}

for b in "${unit[@]}"; do run_bin "$b" 600 2; done

if [ ${#integ[@]} -gt 0 ]; then
  export KFORGE_TEST_REDIS_PORT=$(kf_free_port)
  export KFORGE_TEST_PG_PORT=$(kf_free_port)
  export KFORGE_TEST_REDIS_DIR=$TMP/redis
  export KFORGE_TEST_PG_DIR=$TMP/pg
  export KFORGE_TEST_PG_BIN=$KF_PG_BIN
  if ! kf_start_redis "$KFORGE_TEST_REDIS_DIR" "$KFORGE_TEST_REDIS_PORT" || \
     ! kf_start_pg "$KFORGE_TEST_PG_DIR" "$KFORGE_TEST_PG_PORT"; then
    echo "could not start Redis/PostgreSQL for the integration tests"
    echo "$passed passed, $((failed + ${#integ[@]})) failed"
    exit 1
  fi
  for b in "${integ[@]}"; do run_bin "$b" 900 1; done
fi

echo
if [ ${#bad_bins[@]} -gt 0 ]; then
  echo "failing tests (their messages are above, with the binary's output):"
  cat "$TMP/failures"
  echo "failing binaries: ${bad_bins[*]}"
fi
if [ $skipped -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"; else echo "$passed passed, $failed failed"; fi
[ $failed -eq 0 ] && [ ${#bad_bins[@]} -eq 0 ]
