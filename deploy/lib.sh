# shellcheck shell=bash
# Shared by up.sh, down.sh, scale.sh and compose.sh; sourced, not run.
#
# COMPOSE_PROJECT_NAME (default "ringcache") names the cluster, so several
# clusters (an e2e run next to a dev cluster) never share containers, networks
# or volumes. RINGCACHE_COMPOSE overrides the Compose command; otherwise
# `docker compose` (v2) is used when present, else `docker-compose` (1.29).
# RINGCACHE_COMPOSE_FILES adds Compose files (':' between them) after
# docker-compose.yml, e.g. an override that adds an origin service or mounts a
# config file. RINGCACHE_BUILD_DIR is where the binaries are built (default
# deploy/.build): two builds at once need two directories.

deploy_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(dirname "$deploy_dir")
build_dir="${RINGCACHE_BUILD_DIR:-$deploy_dir/.build}"

export COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-ringcache}"
# Images are named after the project (the default project's are
# ringcache/ringcached:dev and ringcache/etcd:v3.7.3, as the Kubernetes
# manifests name them), so that one cluster's build never replaces the image
# another cluster runs.
export RINGCACHE_IMAGE="${RINGCACHE_IMAGE:-$COMPOSE_PROJECT_NAME/ringcached:dev}"
export RINGCACHE_ETCD_IMAGE="${RINGCACHE_ETCD_IMAGE:-$COMPOSE_PROJECT_NAME/etcd:v3.7.3}"

if [ -n "${RINGCACHE_COMPOSE:-}" ]; then
	read -r -a compose_cmd <<<"$RINGCACHE_COMPOSE"
elif docker compose version >/dev/null 2>&1; then
	compose_cmd=(docker compose)
else
	compose_cmd=(docker-compose)
fi

compose_files=(-f "$deploy_dir/docker-compose.yml")
if [ -n "${RINGCACHE_COMPOSE_FILES:-}" ]; then
	IFS=: read -r -a extra_files <<<"$RINGCACHE_COMPOSE_FILES"
	for f in "${extra_files[@]}"; do
		[ -n "$f" ] && compose_files+=(-f "$f")
	done
fi

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The cluster secret, which peers sign their requests with, comes from
# RINGCACHE_SECRET, else from deploy/.secret (RINGCACHE_SECRET_PATH), which
# the first script run generates: 32 random bytes in hex, mode 0600, ignored by
# git. There is no default: a secret anyone can read in the repository
# protects nothing. It is never printed.
secret_path="${RINGCACHE_SECRET_PATH:-$deploy_dir/.secret}"
if [ -z "${RINGCACHE_SECRET:-}" ]; then
	if [ ! -s "$secret_path" ]; then
		(
			umask 077
			od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$secret_path.tmp"
			mv "$secret_path.tmp" "$secret_path"
		)
		log "generated a cluster secret in $secret_path (git ignores it; keep it private)"
	fi
	RINGCACHE_SECRET=$(head -n 1 "$secret_path")
fi
export RINGCACHE_SECRET

# compose runs Compose on our file(s) with the node4 profile active, so that
# down, ps and rm also see node4 when it runs.
compose() { "${compose_cmd[@]}" "${compose_files[@]}" --profile scale "$@"; }

# image_id prints the id of an image, or nothing when there is none.
image_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

# build_image builds one scratch image and removes the image it replaces under
# that name, so repeated builds leave no dangling images behind. An image a
# container still uses stays (docker refuses to remove it without -f).
build_image() {
	local tag=$1 dockerfile=$2 old
	old=$(image_id "$tag")
	# The legacy builder warns that it is deprecated; it is all there is here.
	docker build -q -t "$tag" -f "$dockerfile" "$build_dir" >/dev/null 2>&1 ||
		docker build -t "$tag" -f "$dockerfile" "$build_dir"
	if [ -n "$old" ] && [ "$old" != "$(image_id "$tag")" ]; then
		docker image rm "$old" >/dev/null 2>&1 || true
	fi
}

# build compiles the static binaries on the host and wraps them in scratch
# images: nothing is pulled, so this works without registry access.
build() {
	mkdir -p "$build_dir/data"
	log "building ringcached and etcd (static, on the host)"
	(
		cd "$repo_dir" || exit 1
		export CGO_ENABLED=0
		go build -trimpath -ldflags='-s -w' -o "$build_dir/ringcached" ./cmd/ringcached
		go build -trimpath -ldflags='-s -w' -o "$build_dir/etcd" go.etcd.io/etcd/server/v3
	)
	log "building images $RINGCACHE_IMAGE and $RINGCACHE_ETCD_IMAGE"
	build_image "$RINGCACHE_IMAGE" "$deploy_dir/ringcached.Dockerfile"
	build_image "$RINGCACHE_ETCD_IMAGE" "$deploy_dir/etcd.Dockerfile"
}

# node_port prints the host port of a node service: RINGCACHE_NODE<n>_PORT or 808<n>.
node_port() {
	local n=${1#node} var
	var="RINGCACHE_NODE${n}_PORT"
	printf '%s\n' "${!var:-808$n}"
}

# load_write_token exports RINGCACHE_WRITE_TOKEN, the bearer token public
# writes need: the caller's, else the one generated on first use and kept in
# deploy/.write-token (git ignores it), whose path goes to token_from.
load_write_token() {
	local file="$deploy_dir/.write-token"
	if [ -z "${RINGCACHE_WRITE_TOKEN:-}" ]; then
		if [ ! -s "$file" ]; then
			(umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$file")
		fi
		RINGCACHE_WRITE_TOKEN=$(cat "$file")
		token_from=$file
	fi
	export RINGCACHE_WRITE_TOKEN
}

# admin_port prints the host port of a node's /debug routes:
# RINGCACHE_NODE<n>_ADMIN_PORT when they have their own listener, else node_port.
admin_port() {
	local n=${1#node} var
	var="RINGCACHE_NODE${n}_ADMIN_PORT"
	if [ -n "${!var:-}" ]; then printf '%s\n' "${!var}"; else node_port "$1"; fi
}

# running_nodes prints the node services that are running, one a line.
running_nodes() {
	local services
	services=$(compose ps --services --filter status=running) || return 1
	grep '^node' <<<"$services" | sort || true
}

# ring_of prints "<self> <members, sorted, comma-separated>" from a node's
# /debug/ring, or fails. Plain sed, so the scripts need no jq.
ring_of() {
	local json self members
	json=$(curl -fsS --max-time 2 "http://127.0.0.1:$(admin_port "$1")/debug/ring" | tr -d ' \t\r\n') || return 1
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
	if [ "$want" -eq 0 ]; then
		log "no node runs in project $COMPOSE_PROJECT_NAME"
		return 1
	fi
	if ! command -v curl >/dev/null 2>&1; then
		log "curl is needed to check the nodes (apt-get install curl)"
		return 1
	fi
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
