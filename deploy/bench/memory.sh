#!/usr/bin/env bash
# Measures a node's peak RSS against its cache budget, with the memory limit
# the daemon derives (-memory-limit auto) and without one (off), for 100 B,
# 1 KiB and 64 KiB values: one node on loopback, one demo group of 256 MiB,
# more distinct keys than the budget holds, no GOMEMLIMIT in the daemon's
# environment. Prints a Markdown table (deploy/README.md's "Memory and sizing") and the
# throughput of auto as a ratio to off in the same run. Needs only Go.
#
#   ./deploy/bench/memory.sh                      # every size, one round
#   ./deploy/bench/memory.sh -rounds 3 -sizes 1024 -measure 30s
#
# Arguments go to deploy/bench/memload (-help lists them). It exits non-zero
# when a run with a limit peaks above 1.2x the budget + 64 MiB.
set -euo pipefail

repo_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$repo_dir"
export CGO_ENABLED=0
go build -trimpath -o "$work/ringcached" ./cmd/ringcached
go build -trimpath -o "$work/memload" ./deploy/bench/memload
printf 'machine: %s CPUs, %s MiB of memory; %s\n' "$(nproc)" "$(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo)" "$(go version)"
"$work/memload" -bin "$work/ringcached" "$@"
