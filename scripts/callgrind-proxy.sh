#!/usr/bin/env bash
# Instructions the proxy executes per request, counted by callgrind (repeatable
# whatever else the machine does, unlike CPU time): point reads by _id through a
# proxy with no policy in front of one store, as scripts/bench-proxy.sh, with
# collection switched on only for the measured window.
#
#   scripts/callgrind-proxy.sh [--proxy-binary PATH] [--threads N] [--seconds S] [--records N] [--save FILE]
#
# --save keeps the profile (callgrind_annotate --tree=caller FILE shows who calls what).
#
# Prints instructions per request, the requests counted (router_handle's calls), and
# the functions with the most inclusive instructions.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=build/thermocline
proxy_binary=$binary
threads=16
seconds=20
records=20000
save=""
while [ $# -gt 0 ]; do
  case $1 in
    --proxy-binary) proxy_binary=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --records) records=$2; shift 2 ;;
    --save) save=$2; shift 2 ;;
    *) echo "callgrind-proxy.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$binary" ] || make >/dev/null
command -v valgrind >/dev/null || { echo "callgrind-proxy.sh: valgrind is not installed" >&2; exit 1; }
work=$(mktemp -d /tmp/callgrind-proxy.XXXXXX)
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
archive_port=$(free_port); fast_port=$(free_port); proxy_port=$(free_port)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT INT TERM

"$binary" store --port "$archive_port" --dbpath "$work/archive" 2> "$work/archive.log" & pids+=($!)
"$binary" store --port "$fast_port" --dbpath "$work/fast" 2> "$work/fast.log" & pids+=($!)
cat > "$work/proxy.yaml" <<YAML
listen: 127.0.0.1:$proxy_port
archive: mongodb://127.0.0.1:$archive_port/
fast: mongodb://127.0.0.1:$fast_port/
namespaces: []
YAML
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/callgrind.out" \
  "$proxy_binary" proxy --config "$work/proxy.yaml" 2> "$work/proxy.log" & proxy_pid=$!; pids+=($proxy_pid)
sleep 1
"$binary" bench --uri "mongodb://127.0.0.1:$archive_port/" --workload load --records "$records" --threads 8 \
  > /dev/null 2> "$work/load.log"
"$binary" bench --uri "mongodb://127.0.0.1:$proxy_port/" --workload pointread --threads "$threads" \
  --duration "$((seconds + 10))s" --warmup 5s > /dev/null 2>&1 & bench_pid=$!
sleep 5
callgrind_control -i on "$proxy_pid" > /dev/null
sleep "$seconds"
callgrind_control -i off "$proxy_pid" > /dev/null
wait "$bench_pid" || true
callgrind_control -d "$proxy_pid" > /dev/null
sleep 1
kill -TERM "$proxy_pid"; wait "$proxy_pid" 2>/dev/null || true
out="$work/callgrind.out.1" # the dump of the measured window; callgrind.out is the empty rest
total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}')
[ -z "$save" ] || cp "$out" "$save"
# The requests are the calls of router_handle inside the measured window, read
# from the profile itself: a count from the proxy's own counters would include
# the requests served while callgrind_control was still switching collection on
# and off (a fifth more, which understated the instructions per request).
count=$(/usr/bin/python3 - "$out" <<'PYTHON'
import re, sys
calls, ids, pending = 0, {}, False
for line in open(sys.argv[1]):
    called = re.match(r"cfn=\((\d+)\)(?: (.*))?", line)
    if called:
        if called.group(2):
            ids[called.group(1)] = called.group(2).strip()
        pending = ids.get(called.group(1)) == "router_handle"
    elif pending and line.startswith("calls="):
        calls += int(line.split("=")[1].split()[0])
        pending = False
    else:
        defined = re.match(r"fn=\((\d+)\) (.*)", line)
        if defined:
            ids[defined.group(1)] = defined.group(2).strip()
print(calls)
PYTHON
)
[ "$count" -gt 0 ] || { echo "callgrind-proxy.sh: no request in the measured window" >&2; exit 1; }
echo "requests: $count, instructions: $total, per request: $((total / count))"
callgrind_annotate --inclusive=yes "$out" 2>/dev/null | sed -n "/^Ir/,\$p" | sed -n 1,30p
