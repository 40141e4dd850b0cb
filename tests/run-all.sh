#!/usr/bin/env bash
# The whole suite: C unit tests, then the integration tests (real processes on
# loopback ports, driven by pymongo, the Node.js driver and mongosh). Ends with
# one line "N passed, N failed" over both.
set -u
cd "$(dirname "$0")/.."
build=${1:-build/asan}
export THERMOCLINE_BIN="$PWD/$build/thermocline"
# Killed test processes would leave libmongoc's /dev/shm counters behind.
export MONGOC_DISABLE_SHM=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}

unit_log=$(mktemp)
bash tests/run-unit.sh "$build/tests" | tee "$unit_log"
unit_line=$(tail -1 "$unit_log")
unit_passed=$(echo "$unit_line" | sed -n 's/^unit: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
unit_failed=$(echo "$unit_line" | sed -n 's/^unit: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
rm -f "$unit_log"

integration_log=$(mktemp)
/usr/bin/python3 -m pytest -q -p no:cacheprovider --durations=12 tests/integration 2>&1 | tee "$integration_log"
pytest_status=${PIPESTATUS[0]}
summary=$(grep -E "[0-9]+ (passed|failed)" "$integration_log" | tail -1)
count_of() { echo "$summary" | grep -o "[0-9][0-9]* $1" | head -1 | cut -d' ' -f1; }
int_passed=$(count_of passed)
int_failed=$(count_of failed)
int_errors=$(count_of error)
rm -f "$integration_log"

passed=$(( ${unit_passed:-0} + ${int_passed:-0} ))
failed=$(( ${unit_failed:-0} + ${int_failed:-0} + ${int_errors:-0} ))
if [ "$pytest_status" -ne 0 ] && [ "$pytest_status" -ne 5 ] && [ "${int_failed:-0}" -eq 0 ] && [ "${int_errors:-0}" -eq 0 ]; then
  failed=$((failed + 1))   # pytest failed without counting a test (collection error, crash)
fi
if [ -z "$unit_passed" ]; then
  failed=$((failed + 1))   # the unit runner itself did not finish
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
