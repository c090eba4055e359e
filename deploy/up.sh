#!/usr/bin/env bash
# up.sh builds the binaries and images, starts etcd and node1..node3 from a
# clean slate and waits until every node is ready and all rings agree.
#
#   ./deploy/up.sh                                   # project "ringcache", ports 8081-8083
#   COMPOSE_PROJECT_NAME=mine RINGCACHE_NODE1_PORT=9081 ... ./deploy/up.sh
#   RINGCACHE_ETCD=http://10.0.0.5:2379 ./deploy/up.sh   # use an existing etcd
#
# RINGCACHE_SKIP_BUILD=1 reuses the images already built.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

if [ "${RINGCACHE_SKIP_BUILD:-}" != 1 ]; then
	build
fi

# Whatever an earlier run of this project left (containers, the network, the
# etcd volume with its old members) must not leak into this one.
log "removing leftovers of project $COMPOSE_PROJECT_NAME"
compose down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true

if [ -n "${RINGCACHE_ETCD:-}" ]; then
	log "starting node1..node3 against the existing etcd at $RINGCACHE_ETCD"
	compose up -d --no-deps node1 node2 node3
else
	log "starting etcd and node1..node3"
	compose up -d etcd node1 node2 node3
fi
wait_ready node1 node2 node3
