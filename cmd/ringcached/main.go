// Command ringcached runs a ringcache node: a distributed read-through cache
// whose nodes find each other in etcd (or from a static list), serve an HTTP
// API, and load each missing key once, on its owner, from the group's origin.
//
//	ringcached [serve] [flags]     run a node (see -help)
//	ringcached dev                 a three-node cluster with an embedded etcd
//	ringcached healthcheck         probe /readyz, for images without a shell
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one kills the process at once.
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
