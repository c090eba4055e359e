//go:build e2e

// Package e2e proves a ringcache cluster from outside: it starts the docker
// compose cluster of deploy/ through its scripts, drives it with a load
// generator over the nodes' published ports on 127.0.0.1, injects faults with
// docker commands (kill, stop, network disconnect, etcd outage, scaling) and
// checks what clients saw and how often the origin was asked.
//
// It is a black box: it imports none of ringcache's packages and knows only
// the daemon's HTTP surface (/cache, /readyz, /debug/ring, /debug/origin and
// the peer route) and the demo origin's value rule, which it recomputes.
//
// Every file carries the e2e build tag, so `go test ./...` skips the package;
// run it with
//
//	go test -tags e2e -count=1 -timeout 20m -v ./e2e/
//
// or e2e/run.sh. TestCluster skips itself when no Docker daemon answers.
package e2e
