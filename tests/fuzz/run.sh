#!/usr/bin/env bash
# Run kforge's libFuzzer harnesses (what `make fuzz` does after building
# them with FUZZ=1).
#
#   tests/fuzz/run.sh [NAME...]      every harness, or the ones named
#
# Environment:
#   BUILD          the FUZZ=1 build folder (default build-fuzz)
#   FUZZ_SECONDS   how long each harness runs (default 60)
#   FUZZ_TIMEOUT   seconds one input may take before it counts as a hang
#                  (default 20; libFuzzer measures wall time, so a long
#                  campaign at low priority on a busy machine needs more)
#   FUZZ_REPORT    where the table goes (default $BUILD/fuzz-report.txt;
#                  give each of several runs side by side its own)
#
# Each harness NAME starts from its committed corpus tests/fuzz/corpus/NAME
# (read only) and its dictionary tests/fuzz/NAME.dict when there is one; the
# inputs it finds that reach new code go to $BUILD/fuzz-corpus/NAME, which
# later runs start from too.  A crash, a sanitizer report, a leak, a timeout
# or a broken promise (FUZZ_CHECK) stops that harness; this script then
# prints the reproducer (path, base64, the command that replays it) and
# exits 1 after the other harnesses have run.  The last lines are a table
# of executions per second and edges covered per harness, for the closing
# note of a campaign; the same table is kept in $FUZZ_REPORT.
set -uo pipefail
cd "$(dirname "$0")/../.."

BUILD=${BUILD:-build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-60}
case $SECONDS_EACH in ''|*[!0-9]*) echo "FUZZ_SECONDS must be a whole number of seconds, not '$SECONDS_EACH'" >&2; exit 2;; esac
UNIT_TIMEOUT=${FUZZ_TIMEOUT:-20}
case $UNIT_TIMEOUT in ''|0|*[!0-9]*) echo "FUZZ_TIMEOUT must be a whole number of seconds above 0, not '$UNIT_TIMEOUT'" >&2; exit 2;; esac

if [ $# -gt 0 ]; then
  names=("$@")
else
  names=()
  for f in tests/fuzz/fuzz_*.c; do n=${f#tests/fuzz/fuzz_}; names+=("${n%.c}"); done
fi

# The embedded CPython (fuzz_nki_index) keeps its start-up allocations for
# the life of the process: the test suite's suppressions cover them.
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="abort_on_error=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

report=${FUZZ_REPORT:-$BUILD/fuzz-report.txt}
mkdir -p "$BUILD/fuzz-corpus" "$BUILD/fuzz-crash" "$BUILD/fuzz-log"
printf '%-14s %8s %12s %10s %8s %8s %8s  %s\n' harness seconds executions exec/s edges features corpus result >"$report"
failed=()

for name in "${names[@]}"; do
  bin="$BUILD/fuzz/fuzz_$name"
  seeds="tests/fuzz/corpus/$name"
  if [ ! -x "$bin" ] || [ ! -d "$seeds" ]; then
    echo "no harness '$name' (want $bin and $seeds; run make fuzz, which builds them)" >&2
    failed+=("$name")
    continue
  fi
  work="$BUILD/fuzz-corpus/$name"
  log="$BUILD/fuzz-log/$name.log"
  mkdir -p "$work"
  rm -f "$BUILD/fuzz-crash/$name-"*
  opts=(-max_total_time="$SECONDS_EACH" -timeout="$UNIT_TIMEOUT" -rss_limit_mb=3072 -print_final_stats=1
        -artifact_prefix="$BUILD/fuzz-crash/$name-")
  [ -f "tests/fuzz/$name.dict" ] && opts+=(-dict="tests/fuzz/$name.dict")
  echo "== fuzz_$name for ${SECONDS_EACH}s"
  # The harness prints its own progress; keep it in the log, show the end.
  "$bin" "${opts[@]}" "$work" "$seeds" >"$log" 2>&1
  rc=$?

  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  # "#12345  DONE   cov: 812 ft: 2301 corp: 143/9876b ..." (or the last pulse)
  last=$(grep -a -E '^#[0-9]+' "$log" | tail -n 1)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  corp=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$last")
  result=ok
  if [ $rc -ne 0 ]; then
    result="FAILED (exit $rc)"
    failed+=("$name")
    grep -a -E 'ERROR|SUMMARY|runtime error|broken promise|Timeout|leak' "$log" | head -n 20
    for crash in "$BUILD/fuzz-crash/$name-"*; do
      [ -f "$crash" ] || continue
      echo "-- reproducer: $crash ($(wc -c <"$crash") bytes), base64:"
      base64 -w 76 "$crash" | head -n 40
      echo "-- replay it:      $bin $crash"
      echo "-- keep it forever: cp $crash tests/fuzz/corpus/$name/regress-WHAT  (make test replays it)"
    done
    echo "-- full log: $log"
  fi
  printf '%-14s %8s %12s %10s %8s %8s %8s  %s\n' "$name" "$SECONDS_EACH" "${execs:-?}" "${speed:-?}" \
    "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result" | tee -a "$report"
done

echo
cat "$report"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found problems in: ${failed[*]}"
  exit 1
fi
echo "every harness ran ${SECONDS_EACH}s without a finding"
