#!/usr/bin/env bash
# Runs every fuzz target in build/fuzz/ (make fuzz) for SECONDS (default 10) over its
# seed corpus, after replaying its regression inputs once. New corpus entries go to a
# temporary directory, never into the repository. A crash, leak, timeout or
# out-of-memory in any target fails the run; its input is kept in
# build/fuzz/artifacts/<target>/ and the report's tail is printed.
set -u
cd "$(dirname "$0")/../.."
seconds=${1:-10}
build=${FUZZ_BUILD:-build/fuzz}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

shopt -s nullglob
binaries=("$build"/fuzz_*)
if [ ${#binaries[@]} -eq 0 ]; then
  echo "no fuzz targets in $build: run make fuzz first" >&2
  exit 1
fi

failed=0
for binary in "${binaries[@]}"; do
  name=${binary##*/fuzz_}
  corpus=tests/fuzz/corpus/$name
  regressions=tests/fuzz/regressions/$name
  artifacts=$build/artifacts/$name
  log=$work/$name.log
  mkdir -p "$work/$name" "$artifacts"

  regression_files=("$regressions"/*)
  if [ ${#regression_files[@]} -gt 0 ] &&
     ! "$binary" -artifact_prefix="$artifacts/" "${regression_files[@]}" >"$log" 2>&1; then
    echo "fuzz_$name: a regression input fails again"
    tail -40 "$log"
    failed=$((failed + 1))
    continue
  fi

  corpora=("$work/$name")
  [ -d "$corpus" ] && corpora+=("$corpus")
  if "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$artifacts/" "${corpora[@]}" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    coverage=$(grep -E "^#[0-9]+[[:space:]]+DONE" "$log" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    echo "fuzz_$name: ok, ${seconds}s, ${runs:-?} runs, ${speed:-?} exec/s, cov ${coverage:-?}"
  else
    echo "fuzz_$name: FAILED (input kept in $artifacts/)"
    grep -E "ERROR|invariant|runtime error|SUMMARY" "$log" | head -5
    tail -40 "$log"
    failed=$((failed + 1))
  fi
done
echo "fuzz: ${#binaries[@]} targets, $failed failed"
[ "$failed" -eq 0 ]
