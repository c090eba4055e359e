#!/usr/bin/env bash
# down.sh stops and removes the cluster of COMPOSE_PROJECT_NAME (default
# "ringcache"): containers (node4 too), its network and the etcd volume.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

log "removing project $COMPOSE_PROJECT_NAME"
compose down -v --remove-orphans --timeout "${RINGCACHE_STOP_TIMEOUT:-15}"
