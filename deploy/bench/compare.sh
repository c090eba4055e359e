#!/usr/bin/env bash
# compare.sh: ringcache next to groupcache and a bare net/http server, under
# the same load, on this machine's loopback, in one run.
#
# It builds and starts, all on 127.0.0.1:
#   - bare:  one net/http server answering every request with a fixed body
#            (deploy/bench/bare): the ceiling every figure is a ratio to;
#   - barefast: the same on fasthttp's server (-server fasthttp): the
#            ceiling of a node whose public API runs on fasthttp;
#   - gc:    three groupcache nodes as shipped (deploy/bench/gcnode, one per
#            process: groupcache's HTTPPool is process-global);
#   - gc64:  three groupcache nodes whose client keeps 64 idle connections
#            per peer instead of 2;
#   - ring:  three ringcached nodes with static peers (no etcd);
#   - ring-nohot: the same with the hot cache off (hot-bytes=off), so that
#            every request for a key another node owns costs a peer hop:
#            the hop itself, compared with groupcache's;
#   - ring-single: ring-nohot with every peer fetch alone
#            (-coalesce-fetches=false): what coalescing saves;
#   - ring-fast: three ringcached nodes whose public listener is fasthttp's
#            (-http-server fasthttp), their peer routes on a listener of
#            their own (-peer-listen), as that setting needs;
# every cache with the same origin (ringcached's demo values), value size and
# key set. After one sequential pass over the keys that fills the caches, it
# runs `wrk -t$THREADS -c$CONNS` into the first node of each (every other run
# in the opposite order), for each workload:
#   - uniform: every key equally likely (2/3 of a node's requests need
#              another node);
#   - skewed:  90% of requests on 1% of the keys, the rest uniform;
#   - cold:    every request a key never asked before (a cold fill: every
#              request is an origin load at the key's owner), when
#              WORKLOADS names it;
# then fetches a sample of keys from each and checks the bodies byte for
# byte, and prints one table: req/s, p99, errors and the ratio to bare. Two
# columns explain the ratios: the CPU time the system's processes spent per
# request (wrk's own not counted), which moves far less than req/s when other
# work shares the machine; and, for ringcache, the share of the first node's
# gets that needed another node (the rest were served from its main or hot
# cache).
#
# Environment: WORKLOADS ("uniform skewed"; "cold" may be added); RUNS (1)
# repeats the whole set of loads; DURATION (10s) per
# load; KEYS (10000); SIZE (1024); THREADS (2); CONNS (64); BASE_PORT (19000:
# ports BASE_PORT to BASE_PORT+22 must be free); SAMPLE (20) keys checked per
# system; PERF (unset) names a directory where a CPU profile of the process
# each load goes into is written (perf record, then perf report as text;
# DURATION in seconds then). It installs wrk from Debian's packages when it is missing (as root).
# Every process it starts is stopped on exit.
set -euo pipefail

WORKLOADS=${WORKLOADS:-uniform skewed}
RUNS=${RUNS:-1}
DURATION=${DURATION:-10s}
KEYS=${KEYS:-10000}
SIZE=${SIZE:-1024}
THREADS=${THREADS:-2}
CONNS=${CONNS:-64}
BASE_PORT=${BASE_PORT:-19000}
SAMPLE=${SAMPLE:-20}

bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(cd "$bench_dir/../.." && pwd)
tmp=$(mktemp -d)
pids=()
declare -A pid_of

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

cleanup() {
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

if ! command -v wrk >/dev/null; then
	log "installing wrk from Debian"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi

for port in $(seq "$BASE_PORT" $((BASE_PORT + 18))); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "compare.sh: port $port is in use; set BASE_PORT" >&2
		exit 1
	fi
done

log "building"
(
	cd "$repo_dir"
	export CGO_ENABLED=0
	go build -trimpath -o "$tmp/ringcached" ./cmd/ringcached
	go build -trimpath -o "$tmp/bare" ./deploy/bench/bare
	go build -trimpath -o "$tmp/gcnode" ./deploy/bench/gcnode
)

# start NAME CMD...: runs CMD in the background, its output in $tmp/NAME.log.
start() {
	local name=$1
	shift
	"$@" >"$tmp/$name.log" 2>&1 &
	pids+=($!)
	pid_of[$name]=$!
}

url() { echo "http://127.0.0.1:$1"; }

# others PORT PORTS...: the base URLs of PORTS but PORT, comma-separated.
others() {
	local self=$1 out="" p
	shift
	for p in "$@"; do
		[ "$p" = "$self" ] && continue
		out+="${out:+,}$(url "$p")"
	done
	echo "$out"
}

bare_port=$BASE_PORT
gc_ports=($((BASE_PORT + 1)) $((BASE_PORT + 2)) $((BASE_PORT + 3)))
gc64_ports=($((BASE_PORT + 4)) $((BASE_PORT + 5)) $((BASE_PORT + 6)))
ring_ports=($((BASE_PORT + 7)) $((BASE_PORT + 8)) $((BASE_PORT + 9)))
nohot_ports=($((BASE_PORT + 10)) $((BASE_PORT + 11)) $((BASE_PORT + 12)))
fast_ports=($((BASE_PORT + 13)) $((BASE_PORT + 14)) $((BASE_PORT + 15)))
fast_peer_ports=($((BASE_PORT + 16)) $((BASE_PORT + 17)) $((BASE_PORT + 18)))
single_ports=($((BASE_PORT + 19)) $((BASE_PORT + 20)) $((BASE_PORT + 21)))
barefast_port=$((BASE_PORT + 22))

# The nodes run at the daemon's defaults, which never refuse one client
# address for being busy (wrk is one); more flags can be given in RING_FLAGS.
ring_flags="${RING_FLAGS:-}"

start bare "$tmp/bare" -addr "127.0.0.1:$bare_port" -size "$SIZE"
start barefast "$tmp/bare" -addr "127.0.0.1:$barefast_port" -size "$SIZE" -server fasthttp
for p in "${gc_ports[@]}"; do
	start "gc-$p" "$tmp/gcnode" -addr "127.0.0.1:$p" -peers "$(others "$p" "${gc_ports[@]}")" -size "$SIZE"
done
for p in "${gc64_ports[@]}"; do
	start "gc64-$p" "$tmp/gcnode" -addr "127.0.0.1:$p" -peers "$(others "$p" "${gc64_ports[@]}")" -size "$SIZE" -idle-conns 64
done
for p in "${ring_ports[@]}"; do
	start "ring-$p" "$tmp/ringcached" -listen "127.0.0.1:$p" -peer-url "$(url "$p")" \
		-peers "$(others "$p" "${ring_ports[@]}")" -node-id "bench-$p" -log-level warn $ring_flags \
		-group "name=demo,origin=demo,demo-size=$SIZE"
done
for p in "${nohot_ports[@]}"; do
	start "nohot-$p" "$tmp/ringcached" -listen "127.0.0.1:$p" -peer-url "$(url "$p")" \
		-peers "$(others "$p" "${nohot_ports[@]}")" -node-id "bench-$p" -log-level warn $ring_flags \
		-group "name=demo,origin=demo,demo-size=$SIZE,hot-bytes=off"
done
for p in "${single_ports[@]}"; do
	start "single-$p" "$tmp/ringcached" -listen "127.0.0.1:$p" -peer-url "$(url "$p")" \
		-peers "$(others "$p" "${single_ports[@]}")" -node-id "bench-$p" -log-level warn $ring_flags \
		-coalesce-fetches=false -group "name=demo,origin=demo,demo-size=$SIZE,hot-bytes=off"
done
for i in 0 1 2; do
	p=${fast_ports[$i]} pp=${fast_peer_ports[$i]}
	start "fast-$p" "$tmp/ringcached" -listen "127.0.0.1:$p" -peer-listen "127.0.0.1:$pp" -peer-url "$(url "$pp")" \
		-peers "$(others "$pp" "${fast_peer_ports[@]}")" -node-id "bench-$p" -log-level warn $ring_flags \
		-http-server fasthttp -group "name=demo,origin=demo,demo-size=$SIZE"
done

# wait_up URL: until URL answers 200, for at most 10 s.
wait_up() {
	for _ in $(seq 100); do
		if [ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" = 200 ]; then
			return 0
		fi
		sleep 0.1
	done
	echo "compare.sh: $1 did not come up; logs in $tmp" >&2
	tail -n 5 "$tmp"/*.log >&2
	exit 1
}
wait_up "$(url "$bare_port")/"
wait_up "$(url "$barefast_port")/"
for p in "${gc_ports[@]}" "${gc64_ports[@]}"; do wait_up "$(url "$p")/cache/demo/up"; done
for p in "${ring_ports[@]}" "${nohot_ports[@]}" "${single_ports[@]}" "${fast_ports[@]}"; do wait_up "$(url "$p")/readyz"; done

# The request scripts: every request string is built once per wrk thread.
lua_keys="
local threads = 0
function setup(thread) threads = threads + 1; thread:set('id', threads) end
local reqs = {}
function init(args)
  for i = 0, $KEYS - 1 do reqs[i] = wrk.format('GET', '/cache/demo/key-' .. i) end
  math.randomseed(os.time() * 7919 + (id or 0))
end"
cat >"$tmp/warm.lua" <<EOF
$lua_keys
local n = -1
function request() n = (n + 1) % $KEYS; return reqs[n] end
EOF
cat >"$tmp/uniform.lua" <<EOF
$lua_keys
function request() return reqs[math.random(0, $KEYS - 1)] end
EOF
cat >"$tmp/cold.lua" <<EOF
$lua_keys
local prefix, n = nil, 0
function request()
  if not prefix then prefix = '/cache/demo/cold-' .. os.time() .. '-' .. (id or 0) .. '-' end
  n = n + 1
  return wrk.format('GET', prefix .. n)
end
EOF
hot=$((KEYS / 100))
cat >"$tmp/skewed.lua" <<EOF
$lua_keys
function request()
  if math.random() < 0.9 then return reqs[math.random(0, $hot - 1)] end
  return reqs[math.random($hot, $KEYS - 1)]
end
EOF

# first_proc SYSTEM: the name (for pid_of) of the process the load goes into.
first_proc() { if [ "${1#bare}" != "$1" ]; then echo "$1"; else echo "$1-${first[$1]}"; fi; }
declare -A first=([bare]=$bare_port [barefast]=$barefast_port [gc]=${gc_ports[0]} [gc64]=${gc64_ports[0]} [ring]=${ring_ports[0]} [nohot]=${nohot_ports[0]} [single]=${single_ports[0]} [fast]=${fast_ports[0]})
systems=(bare barefast gc gc64 ring nohot single fast)

log "filling the caches: one pass over $KEYS keys per cache"
for s in gc gc64 ring nohot single fast; do
	wrk -t1 -c4 -d"$(( KEYS / 2000 + 3 ))s" -s "$tmp/warm.lua" "$(url "${first[$s]}")" >/dev/null
done

# expected KEY: the demo origin's value of KEY in group demo.
expected() {
	local h
	h=$(printf 'ringcache-demo/demo/%s' "$1" | sha256sum | cut -c1-64)
	yes "$h" | tr -d '\n' | head -c "$SIZE" || true
}

# check SYSTEM: fetches SAMPLE random keys from the system's first node and
# compares each body with the origin's value; prints the number of wrong ones.
check() {
	local s=$1 bad=0 i key
	for i in $(seq "$SAMPLE"); do
		key="key-$(( (RANDOM * 32768 + RANDOM) % KEYS ))"
		curl -s "$(url "${first[$s]}")/cache/demo/$key" >"$tmp/got"
		if [ "${s#bare}" != "$s" ]; then
			[ "$(wc -c <"$tmp/got")" -eq "$SIZE" ] || bad=$((bad + 1))
		elif ! expected "$key" | cmp -s - "$tmp/got"; then
			bad=$((bad + 1))
		fi
	done
	echo "$bad"
}

# cpu_ticks SYSTEM: the CPU time (user and system, in clock ticks) used so
# far by the system's processes.
declare -A procs_of=([bare]=bare [barefast]=barefast)
for p in "${gc_ports[@]}"; do procs_of[gc]+=" gc-$p"; done
for p in "${gc64_ports[@]}"; do procs_of[gc64]+=" gc64-$p"; done
for p in "${ring_ports[@]}"; do procs_of[ring]+=" ring-$p"; done
for p in "${nohot_ports[@]}"; do procs_of[nohot]+=" nohot-$p"; done
for p in "${single_ports[@]}"; do procs_of[single]+=" single-$p"; done
for p in "${fast_ports[@]}"; do procs_of[fast]+=" fast-$p"; done
cpu_ticks() {
	local n t=0
	for n in ${procs_of[$1]}; do
		# Fields 14 and 15 of /proc/PID/stat, counted after the command
		# name, which is in parentheses.
		t=$((t + $(sed 's/.*) //' "/proc/${pid_of[$n]}/stat" | awk '{print $12 + $13}')))
	done
	echo "$t"
}
clk_tck=$(getconf CLK_TCK)

# ring_metric SYSTEM NAME_AND_LABELS: the value of a series of the system's
# first node (a ringcache one), as an integer.
ring_metric() {
	curl -s "$(url "${first[$1]}")/metrics" | awk -v m="$2" 'index($0, m) == 1 {v = $2} END {printf "%d", v + 0}'
}

# to_ms VALUE: wrk's latency (850.00us, 3.21ms, 1.02s) in milliseconds.
to_ms() {
	awk -v v="$1" 'BEGIN {
		n = v + 0
		if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n *= 1; else if (v ~ /m$/) n *= 60000; else if (v ~ /s$/) n *= 1000
		printf "%.2f", n }'
}

results="$tmp/results"
: >"$results"
for run in $(seq "$RUNS"); do
	for w in $WORKLOADS; do
		# Every other run goes through the systems in the opposite order, so
		# that no system is always measured right after the same one (the
		# machine's load drifts, and groupcache as shipped leaves thousands
		# of sockets in TIME_WAIT behind).
		order=("${systems[@]}")
		if [ $((run % 2)) -eq 0 ]; then
			order=()
			for ((i = ${#systems[@]} - 1; i >= 0; i--)); do order+=("${systems[$i]}"); done
		fi
		for s in "${order[@]}"; do
			log "run $run: $w into $s for $DURATION"
			out="$tmp/wrk-$run-$w-$s"
			perf_pid=""
			if [ -n "${PERF:-}" ]; then
				mkdir -p "$PERF"
				perf record -q -F 499 -g -p "${pid_of[$(first_proc "$s")]}" -o "$tmp/perf.data" -- sleep "${DURATION%s}" 2>/dev/null &
				perf_pid=$!
			fi
			cpu0=$(cpu_ticks "$s")
			if [ "${s#bare}" = "$s" ] && [ "${s#gc}" = "$s" ]; then
				gets0=$(($(ring_metric "$s" 'ringcache_gets_total{group="demo"}') - $(ring_metric "$s" 'ringcache_peer_gets_total{group="demo"}')))
				peer0=$(ring_metric "$s" 'ringcache_loads_total{group="demo",source="peer"}')
			fi
			wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$tmp/$w.lua" "$(url "${first[$s]}")" >"$out"
			cpu=$(($(cpu_ticks "$s") - cpu0))
			remote=-
			if [ "${s#bare}" = "$s" ] && [ "${s#gc}" = "$s" ]; then
				gets=$(($(ring_metric "$s" 'ringcache_gets_total{group="demo"}') - $(ring_metric "$s" 'ringcache_peer_gets_total{group="demo"}')))
				peer=$(ring_metric "$s" 'ringcache_loads_total{group="demo",source="peer"}')
				remote=$(awk -v g=$((gets - gets0)) -v p=$((peer - peer0)) 'BEGIN {printf "%.3f", g ? p / g : 0}')
			fi
			if [ -n "$perf_pid" ]; then
				wait "$perf_pid" || true
				perf report -i "$tmp/perf.data" --stdio --no-children --sort symbol --percent-limit 0.5 -g none \
					>"$PERF/$s-$w-run$run.txt" 2>/dev/null || true
				perf report -i "$tmp/perf.data" --stdio --children --sort symbol --percent-limit 2 -g none \
					>"$PERF/$s-$w-run$run-children.txt" 2>/dev/null || true
			fi
			rps=$(awk '/^Requests\/sec:/ {print $2}' "$out")
			reqs=$(awk '/requests in/ {print $1}' "$out")
			cpu_us=$(awk -v c="$cpu" -v t="$clk_tck" -v n="$reqs" 'BEGIN {printf "%.1f", c * 1e6 / t / n}')
			p99=$(to_ms "$(awk '$1 == "99%" {print $2}' "$out")")
			errs=$(awk '/Non-2xx/ {n += $NF} /Socket errors/ {gsub(/,/, ""); n += $4 + $6 + $8 + $10} END {print n + 0}' "$out")
			bad=$(check "$s")
			echo "$run $w $s $rps $p99 $errs $bad $cpu_us $remote" >>"$results"
		done
	done
done

log "ringcache origin loads (one per key at most is the rule):"
for p in "${ring_ports[@]}" "${nohot_ports[@]}" "${single_ports[@]}" "${fast_ports[@]}"; do
	curl -s "$(url "$p")/debug/origin" | awk -v p="$p" '/"loads"/ {gsub(/,/, ""); print "  node " p ": " $2 " loads"}' >&2
done

echo
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "wrk -t$THREADS -c$CONNS -d$DURATION, $KEYS keys of $SIZE bytes, into one of three nodes; ratio = req/s / bare req/s of the same run"
echo
awk -v workloads="$WORKLOADS" '
	{ run = $1; w = $2; s = $3; rps[run, w, s] = $4; p99[run, w, s] = $5; errs[run, w, s] = $6; bad[run, w, s] = $7
	  cpu[run, w, s] = $8; remote[run, w, s] = $9
	  if (!(run in seen)) { seen[run] = 1; runs[++nr] = run } }
	END {
		name["bare"] = "bare net/http"; name["barefast"] = "bare fasthttp"; name["gc"] = "groupcache as shipped"
		name["gc64"] = "groupcache, 64 idle conns"; name["ring"] = "ringcache"
		name["nohot"] = "ringcache, no hot cache"; name["single"] = "ringcache, no hot cache, no coalescing"; name["fast"] = "ringcache, fasthttp"
		printf "| run | workload | server | req/s | p99 ms | errors | wrong bodies | ratio to bare | ringcache / this | ringcache fasthttp / this | CPU µs/req | gets needing a peer |\n"
		printf "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
		nw = split(workloads, ws, " "); split("bare barefast gc gc64 ring nohot single fast", ss, " ")
		for (i = 1; i <= nr; i++) for (j = 1; j <= nw; j++) for (k = 1; k <= 8; k++) {
			r = runs[i]; w = ws[j]; s = ss[k]
			ratio = rps[r, w, s] / rps[r, w, "bare"]
			ours = (s == "ring" || s == "nohot" || s == "single" || s == "fast")
			vs = ours ? "" : sprintf("%.2f", rps[r, w, "ring"] / rps[r, w, s])
			vsf = ours ? "" : sprintf("%.2f", rps[r, w, "fast"] / rps[r, w, s])
			printf "| %s | %s | %s | %.0f | %.2f | %d | %d | %.2f | %s | %s | %s | %s |\n", r, w, name[s], rps[r, w, s], p99[r, w, s], errs[r, w, s], bad[r, w, s], ratio, vs, vsf, cpu[r, w, s], remote[r, w, s]
		}
	}' "$results"
# A row with errors counts refusals as requests served: say so, and fail.
if awk '$6 > 0 || $7 > 0 { bad = 1 } END { exit !bad }' "$results"; then
	echo
	echo "compare.sh: some loads had errors or wrong bodies: their req/s and ratios do not measure served requests" >&2
	exit 1
fi
