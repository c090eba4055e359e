#!/usr/bin/env bash
# up.sh builds the binaries and images, starts etcd and node1..node3 from a
# clean slate and waits until every node is ready and all rings agree.
#
#   ./deploy/up.sh                                   # project "ringcache", ports 8081-8083
#   COMPOSE_PROJECT_NAME=mine RINGCACHE_NODE1_PORT=9081 ... ./deploy/up.sh
#   RINGCACHE_ETCD=http://10.0.0.5:2379 ./deploy/up.sh   # use an existing etcd
#
# RINGCACHE_SKIP_BUILD=1 reuses the images already built. The cluster secret
# is RINGCACHE_SECRET, else deploy/.secret, generated on first use (lib.sh).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

load_write_token

if [ "${RINGCACHE_SKIP_BUILD:-}" != 1 ]; then
	build
fi

# Whatever an earlier run of this project left (containers, the network, the
# etcd volume with its old members) must not leak into this one.
log "removing leftovers of project $COMPOSE_PROJECT_NAME"
compose down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true

# Every service but node4 (which scale.sh starts), so that services added by
# RINGCACHE_COMPOSE_FILES (an origin, say) start too; etcd only when no
# existing one is given.
listed=$(compose config --services)
services=()
while IFS= read -r service; do
	case "$service" in
	node4 | "") ;;
	etcd) [ -n "${RINGCACHE_ETCD:-}" ] || services+=("$service") ;;
	*) services+=("$service") ;;
	esac
done <<<"$listed"
if [ -n "${RINGCACHE_ETCD:-}" ]; then
	log "starting ${services[*]} against the existing etcd at $RINGCACHE_ETCD"
	compose up -d --no-deps "${services[@]}"
else
	log "starting ${services[*]}"
	compose up -d "${services[@]}"
fi
wait_ready node1 node2 node3
port1=$(node_port node1)
log "public writes need the write token${token_from:+ (in $token_from)}:"
printf '  curl -i -X PUT -H "Authorization: Bearer %s" --data "my value" http://127.0.0.1:%s/cache/demo/mine\n' "$RINGCACHE_WRITE_TOKEN" "$port1" >&2
printf '  curl -i -X DELETE -H "Authorization: Bearer %s" http://127.0.0.1:%s/cache/demo/mine\n' "$RINGCACHE_WRITE_TOKEN" "$port1" >&2
