#!/usr/bin/env bash
# scale.sh up|down adds node4 to the running cluster or removes it again.
# The other nodes learn about node4 through etcd, so nothing else changes.
# Waits until the nodes that run agree on the ring.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

case "${1:-}" in
up)
	log "starting node4"
	load_write_token # the same token as the others
	compose up -d --no-deps node4
	;;
down)
	# stop first: SIGTERM lets node4 leave the ring before it goes away.
	log "stopping and removing node4"
	compose stop --timeout 15 node4
	compose rm -f node4 >/dev/null
	;;
*)
	echo "usage: $0 up|down" >&2
	exit 2
	;;
esac
# Not `< <(running_nodes)`: a failing Compose must fail the script, not look
# like a cluster with no nodes.
running=$(running_nodes)
mapfile -t nodes <<<"$running"
[ -n "$running" ] || nodes=()
wait_ready "${nodes[@]}"
