#!/usr/bin/env bash
# The slow-disk benchmark (not a test): random _id reads (`thermocline bench
# --workload pointread`) on a collection 10x the WiredTiger cache, uncapped and
# with --read-iops 3000; prints reads/s, their latency, and pages read into
# cache per second (serverStatus deltas) for both. Takes about two minutes.
#   scripts/bench-slow-disk.sh [BINARY] [--read-iops N] [--cache-size 16MB] [--threads 16] ...
set -euo pipefail
cd "$(dirname "$0")/.."
binary=build/thermocline
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  binary=$1
  shift
fi
exec /usr/bin/python3 scripts/bench_slow_disk.py --binary "$binary" "$@"
