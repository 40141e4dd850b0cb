#!/usr/bin/env bash
# `make demo` (after `make deps all`): runs `thermocline lab --quick`, the whole
# system on this machine in under 5 minutes: a memory-starved, read-capped
# archive, an empty fast tier and the proxy with its tier workers, each workload
# direct and tiered. The table goes to stdout, the plots and logs to
# lab-results/ (or $LAB_OUTPUT). The lab stops every process it starts, Ctrl-C
# included, so this script needs no clean-up of its own.
set -euo pipefail
binary=${1:-build/thermocline}
exec "$binary" lab --quick --output "${LAB_OUTPUT:-lab-results}"
