//go:build e2e

// Package e2e proves a ringcache cluster from outside: it starts the docker
// compose cluster of deploy/ through its scripts, drives it with the
// project's load generator (internal/loadgen, in an open loop: a steady
// rate whatever the answers take) over the nodes' published ports on
// 127.0.0.1, injects faults with
// docker commands (kill, stop, pause, network disconnect, etcd outage,
// scaling) and checks what clients saw and how often the origin was asked.
//
// While it reads, the load generator also writes a few keys (PUT of a value
// that names the writer and a sequence number, and DELETE) through every
// node. Every operation goes into a History with its start, end, node,
// status and body, and a Checker judges each read afterwards, the Jepsen
// idea made small: a read may return the value of the last write
// acknowledged before it began, of a write that overlapped it or whose
// outcome is unknown, or the origin's value when that write was a DELETE
// (or there was none). The origin's value in place of an acknowledged PUT
// is a revert (a lost write), within the documented bound only while a
// key's ownership may have moved; anything else, such as a value that a
// later acknowledged write had replaced, is a violation.
//
// Planned membership changes are also measured for what they cost the
// origin: the keys whose owner changed are counted from /debug/ring?key=
// before and after, every key is read through its new owner, and the origin
// loads of the window (from /debug/origin, a stopping node polled until it
// is gone) are divided by the moved keys: at most 0.02 per moved key when a
// node joins, 0.05 when a warm node stops gracefully, and 5% of all warm keys
// for a rolling restart of every node. TestCluster runs every scenario with
// hashed placement and compose's default public server, fasthttp;
// TestClusterRanges runs the membership scenarios with explicit arcs
// (RINGCACHE_PLACEMENT=ranges) and net/http (RINGCACHE_HTTP_SERVER);
// TestClusterCopies runs the crash scenarios with two copies of each key
// (copies=2), where a kill may cost at most 0.05 origin loads per moved key.
//
// It is a black box: it imports none of ringcache's packages and knows only
// the daemon's HTTP surface (/cache, /readyz, /debug/ring, /debug/origin,
// /metrics and the peer route) and the demo origin's value rule, which it recomputes.
//
// Every file carries the e2e build tag, so `go test ./...` skips the package;
// run it with
//
//	go test -tags e2e -count=1 -timeout 20m -v ./e2e/
//
// or e2e/run.sh. TestCluster skips itself when no Docker daemon answers.
package e2e
