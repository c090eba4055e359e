#!/usr/bin/env bash
# Measures what membership changes cost the origin on N nodes on this
# machine: one etcd process and N ringcached processes on loopback, 10,000
# keys warmed through the first node, then a join, a graceful drain, one
# crash, two crashes at once and a rolling restart of every node; after each
# the rings' agreement time and the origin loads per moved key, and at the
# end idle CPU and RSS per node. Prints a Markdown table. Needs only Go.
#
#   ./deploy/bench/scale.sh 100                  # 100 nodes, -copies 2
#   ./deploy/bench/scale.sh 20 -copies 1 -scenarios crash,crash2
#
# Arguments after N go to deploy/bench/scale (-help lists them).
set -euo pipefail

n=${1:-100}
shift || true
repo_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$repo_dir"
export CGO_ENABLED=0
go build -trimpath -o "$work/ringcached" ./cmd/ringcached
go build -trimpath -o "$work/etcd" go.etcd.io/etcd/server/v3
go build -trimpath -o "$work/scale" ./deploy/bench/scale
ulimit -n 65536 2>/dev/null || true
printf 'machine: %s CPUs, %s MiB of memory; %s\n' "$(nproc)" "$(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo)" "$(go version)"
"$work/scale" -n "$n" -etcd-bin "$work/etcd" -ringcached-bin "$work/ringcached" "$@"
