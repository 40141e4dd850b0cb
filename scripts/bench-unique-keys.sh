#!/usr/bin/env bash
# What the proxy's write-time unique-key check costs (issue 13, src/proxy/README.md
# "Unique keys across tiers"): for every insert that sets a unique key, the proxy
# first finds the archive documents holding that value and copies them into the
# fast tier. Three runs of inserts whose documents carry an email distinct per
# _id, same threads and duration, on a release build:
#   direct  insertunique straight at the archive (database `direct`: the tiered
#           namespace stays empty, so the proxy declares its coverage complete and
#           its warmer copies nothing while the proxy runs are measured);
#   unique  insertunique through the proxy, which tiers ycsb.usertable with a
#           maxAge of 30 days (every document stays in the window: nothing is
#           evicted), unique index {email: 1} on both tiers;
#   plain   insertemail through the proxy on the same collection once the unique
#           index is dropped (through the proxy: both tiers) and {email: 1} is
#           created again not unique: the same documents, the same index upkeep
#           and the same _id check, so unique vs plain isolates the check itself.
# For each: ops/s, p50, p99; the archive's opcounters (query, insert, update) per
# insert (every proxied insert costs one archive find, the _id check; the unique
# key joins it as a second $or clause, not a second find); the proxy's and the
# archive's CPU per insert (utime+stime from /proc). Per-insert figures cover the
# warm-up, the run and the feeder's replay of those inserts to the archive (the
# script waits for it): the inserts counted are the fast tier's new documents.
# A benchmark, not a test: run by hand, report the figures.
#   scripts/bench-unique-keys.sh [--threads N] [--duration D] [--warmup D]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=16
duration=10s
warmup=2s
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    *) echo "bench-unique-keys.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
binary=build/thermocline
make -j2 all >/dev/null # the release build (no SANITIZE), up to date
python=/usr/bin/python3
work=$(mktemp -d /tmp/bench-unique.XXXXXX)
free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
archive_port=$(free_port); fast_port=$(free_port); proxy_port=$(free_port)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT INT TERM

"$binary" store --port "$archive_port" --dbpath "$work/archive" --replSet rs0 --cache-size 2GB \
  2> "$work/archive.log" & archive_pid=$!; pids+=($archive_pid)
"$binary" store --port "$fast_port" --dbpath "$work/fast" --replSet rs1 2> "$work/fast.log" & pids+=($!)
cat > "$work/proxy.yaml" <<YAML
listen: 127.0.0.1:$proxy_port
archive: mongodb://127.0.0.1:$archive_port/
fast: mongodb://127.0.0.1:$fast_port/
namespaces:
  - ns: ycsb.usertable
    timeField: createdAt
    maxAge: 30d
    coverage: complete
YAML
sleep 1
"$binary" proxy --config "$work/proxy.yaml" 2> "$work/proxy.log" & proxy_pid=$!; pids+=($proxy_pid)
sleep 1

archive="mongodb://127.0.0.1:$archive_port/"
fast="mongodb://127.0.0.1:$fast_port/"
through="mongodb://127.0.0.1:$proxy_port/"

# helper.py snapshot|wait-feeder|drop-unique: the archive's opcounters and the
# fast tier's document count as JSON; a wait until the proxy's feeder applied
# every acknowledged write; the unique index dropped through the proxy.
cat > "$work/helper.py" <<'PY'
import json, sys, time
from pymongo import MongoClient
action, archive, fast, proxy = sys.argv[1:5]
def client(uri):
    return MongoClient(uri, serverSelectionTimeoutMS=10000, socketTimeoutMS=120000)
if action == "snapshot":
    with client(archive) as a, client(fast) as f:
        counters = a.admin.command("serverStatus")["opcounters"]
        print(json.dumps({"query": counters["query"], "insert": counters["insert"], "update": counters["update"],
                          "fast_documents": f.ycsb.usertable.estimated_document_count()}))
elif action == "wait-feeder":
    with client(proxy) as p:
        deadline = time.time() + 300
        while time.time() < deadline:
            item = p.admin.command("thermoclineStatus")["namespaces"]["ycsb.usertable"]
            if item["feeder"]["appliedTime"] >= item["lastFastWriteTime"]:
                break
            time.sleep(0.1)
        else:
            sys.exit("the feeder did not catch up in 300 s: %r" % (item,))
elif action == "drop-unique":
    with client(proxy) as p:
        p.ycsb.usertable.drop_index("email_1")
PY
helper() { "$python" "$work/helper.py" "$1" "$archive" "$fast" "$through"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # name uri workload database
  local name=$1
  helper snapshot > "$work/$name-before.json"
  echo "$(cpu_ticks "$proxy_pid") $(cpu_ticks "$archive_pid")" > "$work/$name-cpu-before"
  "$binary" bench --uri "$2" --workload "$3" --database "$4" --threads "$threads" --duration "$duration" \
    --warmup "$warmup" --json "$work/$name.json" > /dev/null 2> "$work/$name.log" \
    || { cat "$work/$name.log" >&2; exit 1; }
  if [ "$name" != direct ]; then helper wait-feeder; fi
  echo "$(cpu_ticks "$proxy_pid") $(cpu_ticks "$archive_pid")" > "$work/$name-cpu-after"
  helper snapshot > "$work/$name-after.json"
}

run direct "$archive" insertunique direct
helper wait-feeder
run unique "$through" insertunique ycsb
helper drop-unique # waits for the feeder, then drops on both tiers
run plain "$through" insertemail ycsb

"$python" - "$work" "$(getconf CLK_TCK)" <<'PY'
import json, sys
work, hz = sys.argv[1], int(sys.argv[2])
def load(path):
    return json.load(open(path))
def ticks(path):
    return [int(value) for value in open(path).read().split()]
rows = {}
for name in ("direct", "unique", "plain"):
    insert = load("%s/%s.json" % (work, name))["operations"]["insert"]
    assert insert["errors"] == 0, (name, insert.get("first_error"))
    before, after = load("%s/%s-before.json" % (work, name)), load("%s/%s-after.json" % (work, name))
    row = {"ops": insert["ops_per_second"], "p50": insert["latency_us"]["p50"], "p99": insert["latency_us"]["p99"]}
    if name != "direct":
        inserted = after["fast_documents"] - before["fast_documents"]
        cpu_before, cpu_after = ticks("%s/%s-cpu-before" % (work, name)), ticks("%s/%s-cpu-after" % (work, name))
        row.update({key: (after[key] - before[key]) / inserted for key in ("query", "insert", "update")})
        row["proxy_cpu"] = (cpu_after[0] - cpu_before[0]) / hz / inserted * 1e6
        row["archive_cpu"] = (cpu_after[1] - cpu_before[1]) / hz / inserted * 1e6
        row["inserted"] = inserted
    rows[name] = row
print("%-8s %10s %8s %8s %13s %14s %14s %15s %17s" % ("path", "ops/s", "p50_us", "p99_us", "archive_query",
      "archive_insert", "archive_update", "proxy_cpu_us", "archive_cpu_us"))
print("%-8s %10s %8s %8s %13s %14s %14s %15s %17s" % ("", "", "", "", "per insert", "per insert", "per insert",
      "per insert", "per insert"))
for name, row in rows.items():
    if name == "direct":
        print("%-8s %10.0f %8.0f %8.0f %13s %14s %14s %15s %17s" % (name, row["ops"], row["p50"], row["p99"],
              "-", "-", "-", "-", "-"))
    else:
        print("%-8s %10.0f %8.0f %8.0f %13.3f %14.3f %14.3f %15.1f %17.1f" % (
            name, row["ops"], row["p50"], row["p99"], row["query"], row["insert"], row["update"],
            row["proxy_cpu"], row["archive_cpu"]))
direct, unique, plain = rows["direct"], rows["unique"], rows["plain"]
for label, left, right in (("unique/direct", unique, direct), ("plain/direct", plain, direct),
                           ("unique/plain", unique, plain)):
    print("%-14s %6.2fx ops/s   p50 %+6.0f us   p99 %+6.0f us" % (label, left["ops"] / right["ops"],
          left["p50"] - right["p50"], left["p99"] - right["p99"]))
PY
