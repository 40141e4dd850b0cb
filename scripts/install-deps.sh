#!/usr/bin/env bash
# Installs every system package thermocline needs to build, test and run the lab
# on Debian 12, then the Node.js test clients. Idempotent; run as root (or via sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential pkg-config clang libclang-rt-14-dev
  libbson-dev libmongoc-dev libwiredtiger-dev wiredtiger
  libuv1-dev libyaml-dev libpcre2-dev libssl-dev libsnappy-dev zlib1g-dev libicu-dev
  openssl
  libcmocka-dev
  python3 python3-pymongo python3-pytest python3-prometheus-client
  default-jdk-headless libmongodb-java
)

missing=()
# The machine image ships Node.js with npm; only a machine without it takes Debian's.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done

if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Real clients for the integration tests: the Node.js driver and mongosh.
if [ ! -d tests/node/node_modules/mongodb ] || [ ! -x tests/node/node_modules/.bin/mongosh ]; then
  (cd tests/node && npm install --no-audit --no-fund --loglevel=error)
fi
