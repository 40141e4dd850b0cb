#!/usr/bin/env bash
# `make demo`: starts an embedded thermocline store on a free loopback port, runs
# a short client session against it with pymongo, and stops it. (The full lab,
# with an archive, a fast tier and the proxy, replaces this as it lands.)
set -euo pipefail
binary=${1:-build/thermocline}
dbpath=$(mktemp -d /tmp/thermocline-demo.XXXXXX)
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$binary" store --port "$port" --dbpath "$dbpath" 2> "$dbpath/store.log" &
pid=$!
cleanup() { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dbpath"; }
trap cleanup EXIT INT TERM
/usr/bin/python3 "$(dirname "$0")/demo_session.py" "mongodb://127.0.0.1:$port"
