#!/usr/bin/env bash
# Runs every C unit test binary in DIR (cmocka), printing each one's output, and
# ends with one summary line "unit: N passed, N failed". Exit status 1 on failure.
set -u
dir=${1:?usage: run-unit.sh DIR}
passed=0
failed=0
for test in "$dir"/test_*; do
  [ -x "$test" ] || continue
  output=$("$test" 2>&1)
  status=$?
  echo "$output" | grep -E "^\[  FAILED  \]|^\[  ERROR   \]|AddressSanitizer|LeakSanitizer|runtime error" || true
  count_passed=$(echo "$output" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
  count_failed=$(echo "$output" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
  passed=$((passed + ${count_passed:-0}))
  failed=$((failed + ${count_failed:-0}))
  if [ $status -ne 0 ] && [ -z "$count_failed" ]; then
    echo "$(basename "$test"): exited with status $status"
    echo "$output" | tail -20
    failed=$((failed + 1))
  fi
  echo "$(basename "$test"): ${count_passed:-0} passed, ${count_failed:-0} failed"
done
echo "unit: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
