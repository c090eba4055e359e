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
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
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

// run is the whole program but for the process: main passes it the
// arguments, the environment and standard output, and a ctx that ends on
// SIGINT or SIGTERM, so that tests run it as it runs in production.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cmd, rest := "serve", args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, rest = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = runServe(ctx, rest, getenv, stdout)
	case "dev":
		err = runDev(ctx, rest, getenv, stdout)
	case "healthcheck":
		err = runHealthcheck(ctx, rest, getenv, stdout)
	case "help":
		printUsage(stdout)
	default:
		err = fmt.Errorf("ringcached: unknown command %q: want serve, dev or healthcheck", cmd)
	}
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// runServe runs one node until ctx ends.
func runServe(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := loadConfig(args, getenv, stdout)
	if err != nil {
		return err
	}
	log := newLogger(stdout, cfg.LogLevel, cfg.LogFormat)
	log.Info("starting", "listen", cfg.Listen, "peer_listen", cfg.PeerListen, "etcd", strings.Join(cfg.Etcd, ","), "peers", len(cfg.Peers), "config", cfg.ConfigFile, "peer_security", cfg.describeSecurity())
	stopMem, err := boundMemory(ctx, cfg, getenv, log)
	if err != nil {
		return err
	}
	defer stopMem()
	n, err := startNode(ctx, cfg, log)
	if err != nil {
		return err // main prints it: logged too, it would show twice
	}
	stopReload := n.reloadOnHangup()
	defer stopReload()
	return n.wait(ctx)
}

// newLogger returns the daemon's logger; level and format were validated
// with the configuration.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	lvl, _ := parseLevel(level)
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
