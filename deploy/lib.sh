# Shared by up.sh, down.sh and scale.sh; sourced, not run.
#
# COMPOSE_PROJECT_NAME (default "ringcache") names the cluster, so several
# clusters (an e2e run next to a dev cluster) never share containers, networks
# or volumes. RINGCACHE_COMPOSE overrides the Compose command; otherwise
# `docker compose` (v2) is used when present, else `docker-compose` (1.29).

deploy_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(dirname "$deploy_dir")
build_dir="$deploy_dir/.build"

export COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-ringcache}"
export RINGCACHE_IMAGE="${RINGCACHE_IMAGE:-ringcache/ringcached:dev}"
export RINGCACHE_ETCD_IMAGE="${RINGCACHE_ETCD_IMAGE:-ringcache/etcd:v3.7.3}"

if [ -n "${RINGCACHE_COMPOSE:-}" ]; then
	read -r -a compose_cmd <<<"$RINGCACHE_COMPOSE"
elif docker compose version >/dev/null 2>&1; then
	compose_cmd=(docker compose)
else
	compose_cmd=(docker-compose)
fi

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# compose runs Compose on our file with the node4 profile active, so that
# down, ps and rm also see node4 when it runs.
compose() { "${compose_cmd[@]}" -f "$deploy_dir/docker-compose.yml" --profile scale "$@"; }

# build compiles the static binaries on the host and wraps them in scratch
# images: nothing is pulled, so this works without registry access.
build() {
	mkdir -p "$build_dir/data"
	log "building ringcached and etcd (static, on the host)"
	(
		cd "$repo_dir"
		export CGO_ENABLED=0
		go build -trimpath -ldflags='-s -w' -o "$build_dir/ringcached" ./cmd/ringcached
		go build -trimpath -ldflags='-s -w' -o "$build_dir/etcd" go.etcd.io/etcd/server/v3
	)
	log "building images $RINGCACHE_IMAGE and $RINGCACHE_ETCD_IMAGE"
	# The legacy builder warns that it is deprecated; it is all there is here.
	docker build -q -t "$RINGCACHE_IMAGE" -f "$deploy_dir/ringcached.Dockerfile" "$build_dir" 2>/dev/null >/dev/null ||
		docker build -t "$RINGCACHE_IMAGE" -f "$deploy_dir/ringcached.Dockerfile" "$build_dir"
	docker build -q -t "$RINGCACHE_ETCD_IMAGE" -f "$deploy_dir/etcd.Dockerfile" "$build_dir" 2>/dev/null >/dev/null ||
		docker build -t "$RINGCACHE_ETCD_IMAGE" -f "$deploy_dir/etcd.Dockerfile" "$build_dir"
}

# node_port prints the host port of a node service: RINGCACHE_NODE<n>_PORT or 808<n>.
node_port() {
	local n=${1#node} var
	var="RINGCACHE_NODE${n}_PORT"
	printf '%s\n' "${!var:-808$n}"
}

# running_nodes prints the node services that are running, one a line.
running_nodes() {
	compose ps --services --filter status=running 2>/dev/null | grep '^node' | sort
}

# ring_of prints "<self> <members, sorted, comma-separated>" from a node's
# /debug/ring, or fails. Plain sed, so the scripts need no jq.
ring_of() {
	local json self members
	json=$(curl -fsS --max-time 2 "http://127.0.0.1:$(node_port "$1")/debug/ring" | tr -d ' \t\r\n') || return 1
	self=$(sed -n 's/.*"self":"\([^"]*\)".*/\1/p' <<<"$json")
	members=$(sed -n 's/.*"members":\[\([^]]*\)\].*/\1/p' <<<"$json" | tr -d '"' | tr ',' '\n' | sort | paste -sd, -)
	[ -n "$self" ] && [ -n "$members" ] || return 1
	printf '%s %s\n' "$self" "$members"
}

# wait_ready waits until every named node answers /readyz with 200 and all of
# them hold the same ring, made of exactly these nodes. RINGCACHE_WAIT
# (seconds, default 120) bounds the wait.
wait_ready() {
	local deadline=$((SECONDS + ${RINGCACHE_WAIT:-120})) node want=$# ring self members first ok
	log "waiting for $* to be ready and to agree on the ring"
	while :; do
		ok=1 first=""
		for node in "$@"; do
			if ! curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$(node_port "$node")/readyz" 2>/dev/null; then
				ok=0; break
			fi
			if ! ring=$(ring_of "$node" 2>/dev/null); then
				ok=0; break
			fi
			self=${ring%% *} members=${ring#* }
			# The ring must list this node and hold as many members as nodes we wait for.
			if [[ ",$members," != *",$self,"* ]] || [ "$(tr ',' '\n' <<<"$members" | wc -l)" -ne "$want" ]; then
				ok=0; break
			fi
			if [ -z "$first" ]; then first=$members; elif [ "$members" != "$first" ]; then ok=0; break; fi
		done
		if [ "$ok" = 1 ]; then
			log "ready: ring $first"
			return 0
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			log "timed out waiting for $*; last node checked: $node"
			compose ps >&2 || true
			compose logs --tail=30 >&2 || true
			return 1
		fi
		sleep 0.5
	done
}
