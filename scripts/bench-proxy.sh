#!/usr/bin/env bash
# Point reads by _id through `thermocline proxy` versus straight to the same
# in-memory store, at 1 and 64 clients: added p50/p99 latency, the throughput
# ratio, and the proxy's own CPU per operation (utime+stime from /proc, over the
# measured window), and with --syscalls its system calls per operation (perf stat
# on raw_syscalls:sys_enter; needs perf and the rights to trace the proxy).
# A benchmark, not a test: run by hand, report the figures.
#   scripts/bench-proxy.sh [--records N] [--duration D] [--threads "1 64"] [--proxy-binary PATH] [--syscalls]
# --proxy-binary runs the proxy from another build (a saved baseline, for A/B);
# the stores and the bench client stay build/thermocline.
set -euo pipefail
cd "$(dirname "$0")/.."
records=100000
duration=15s
thread_counts="1 64"
binary=build/thermocline
proxy_binary=$binary
count_syscalls=false
while [ $# -gt 0 ]; do
  case "$1" in
    --records) records=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --threads) thread_counts=$2; shift 2 ;;
    --proxy-binary) proxy_binary=$2; shift 2 ;;
    --syscalls) count_syscalls=true; shift ;;
    *) echo "bench-proxy.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$binary" ] || make >/dev/null
work=$(mktemp -d /tmp/bench-proxy.XXXXXX)
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
archive_port=$(free_port); fast_port=$(free_port); proxy_port=$(free_port)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT INT TERM

"$binary" store --port "$archive_port" --dbpath "$work/archive" --cache-size 2GB 2> "$work/archive.log" & pids+=($!)
"$binary" store --port "$fast_port" --dbpath "$work/fast" 2> "$work/fast.log" & pids+=($!)
cat > "$work/proxy.yaml" <<YAML
listen: 127.0.0.1:$proxy_port
archive: mongodb://127.0.0.1:$archive_port/
fast: mongodb://127.0.0.1:$fast_port/
namespaces: []
YAML
"$proxy_binary" proxy --config "$work/proxy.yaml" 2> "$work/proxy.log" & proxy_pid=$!; pids+=($proxy_pid)
sleep 1

direct="mongodb://127.0.0.1:$archive_port/"
through="mongodb://127.0.0.1:$proxy_port/"
"$binary" bench --uri "$direct" --workload load --records "$records" --threads 8 > /dev/null 2> "$work/load.log"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks_per_second=$(getconf CLK_TCK)

run() { # uri threads json
  "$binary" bench --uri "$1" --workload pointread --threads "$2" --duration "$duration" --warmup 2s \
    --json "$3" > /dev/null 2>&1
}
printf '%-8s %-7s %12s %10s %10s %14s %12s\n' clients path ops/s p50_us p99_us proxy_cpu_us/op syscalls/op
for threads in $thread_counts; do
  run "$direct" "$threads" "$work/direct-$threads.json"
  before=$(cpu_ticks "$proxy_pid")
  if $count_syscalls; then
    perf stat -e raw_syscalls:sys_enter -x, -o "$work/syscalls-$threads.txt" -p "$proxy_pid" & perf_pid=$!
  fi
  run "$through" "$threads" "$work/proxy-$threads.json"
  after=$(cpu_ticks "$proxy_pid")
  syscalls=0
  if $count_syscalls; then
    kill -INT "$perf_pid"; wait "$perf_pid" || true
    syscalls=$(awk -F, '/raw_syscalls:sys_enter/ {print $1}' "$work/syscalls-$threads.txt")
  fi
  /usr/bin/python3 - "$work/direct-$threads.json" "$work/proxy-$threads.json" "$threads" \
      "$((after - before))" "$ticks_per_second" "$duration" "${syscalls:-0}" <<'PY'
import json, sys
direct, proxied = (json.load(open(path)) for path in sys.argv[1:3])
threads, ticks, hz = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
syscalls = int(sys.argv[7]) if sys.argv[7].isdigit() else 0
def figures(report):
    read = report["operations"]["read"]
    return read["ops_per_second"], read["latency_us"]["p50"], read["latency_us"]["p99"], read["count"]
d_ops, d_p50, d_p99, _ = figures(direct)
p_ops, p_p50, p_p99, p_count = figures(proxied)
# The proxy's CPU over warm-up plus measured window, per operation of both.
total_ops = p_count * (1 + 2.0 / float(proxied["measured_seconds"]))
cpu_per_op = ticks / hz / total_ops * 1e6
syscalls_per_op = "%.2f" % (syscalls / total_ops) if syscalls else "-"
print("%-8d %-7s %12.0f %10.0f %10.0f %14s %12s" % (threads, "direct", d_ops, d_p50, d_p99, "-", "-"))
print("%-8d %-7s %12.0f %10.0f %10.0f %14.1f %12s" % (threads, "proxy", p_ops, p_p50, p_p99, cpu_per_op,
                                                     syscalls_per_op))
print("%-8d ratio   %11.2fx  +%7.0fus  +%7.0fus" % (threads, p_ops / d_ops, p_p50 - d_p50, p_p99 - d_p99))
PY
done
