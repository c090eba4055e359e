#!/usr/bin/env bash
# down.sh stops and removes the cluster of COMPOSE_PROJECT_NAME (default
# "ringcache"): containers (node4 too), its network and the etcd volume.
# RINGCACHE_REMOVE_IMAGES=1 also removes the images RINGCACHE_IMAGE and
# RINGCACHE_ETCD_IMAGE (the e2e suite builds its own per run).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

log "removing project $COMPOSE_PROJECT_NAME"
compose down -v --remove-orphans --timeout "${RINGCACHE_STOP_TIMEOUT:-15}"
if [ "${RINGCACHE_REMOVE_IMAGES:-}" = 1 ]; then
	for image in "$RINGCACHE_IMAGE" "$RINGCACHE_ETCD_IMAGE"; do
		if [ -n "$(image_id "$image")" ]; then
			log "removing image $image"
			docker image rm "$image" >/dev/null
		fi
	done
fi
