// Command ringcache is ringcache's command-line tool: it reads and writes a
// running cluster over its public HTTP API, reports what the cluster holds
// and does, drives load at it, and models consistent-hash rings offline.
//
//	ringcache get [flags] KEY          print a value (exit 3: not found)
//	ringcache put [flags] KEY [VALUE]  store a value (from VALUE, -file or stdin)
//	ringcache del [flags] KEY          drop a key cluster-wide
//	ringcache owner [flags] KEY        which node owns a key, and its share
//	ringcache members [flags]          each node's ring and the members
//	ringcache stats [flags]            counters per node and group
//	ringcache watch [flags]            a live table of req/s, hit ratio, loads
//	ringcache bench [flags]            a load generator with latency percentiles
//	ringcache ring [flags]             key balance and movement of a ring, offline
//
// The cluster commands talk to the nodes named by -url or RINGCACHE_URL
// (comma-separated public URLs; default http://127.0.0.1:8081, the first
// node of "ringcached dev"), send -token or RINGCACHE_TOKEN as a bearer
// token when set, and print JSON with -o json. Exit status: 0 success,
// 1 failure (a node unreachable or answering an error, a wrong value in
// bench), 2 bad usage, 3 the key was not found (get).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit statuses, as the package doc lists them.
const (
	exitOK       = 0
	exitFailure  = 1
	exitUsage    = 2
	exitNotFound = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], environ{
		Getenv: os.Getenv,
		Stdin:  os.Stdin,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
	})
	stop()
	code := exitCode(err)
	if code != exitOK {
		fmt.Fprintln(os.Stderr, "ringcache:", err)
	}
	os.Exit(code)
}

// exitCode maps run's error to the process's exit status.
func exitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.Is(err, errNotFound):
		return exitNotFound
	}
	return exitFailure
}

// environ is the process as run sees it, so that tests run the tool as a
// user does: arguments, environment, the three streams, and whether an
// output is a terminal (which watch and bench's progress line redraw in
// place).
type environ struct {
	Getenv func(string) string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// IsTerminal reports whether a stream is a terminal. If nil, one is
	// when it is an *os.File on a character device.
	IsTerminal func(stream any) bool
}

func (e environ) terminal(stream any) bool {
	if e.IsTerminal != nil {
		return e.IsTerminal(stream)
	}
	f, ok := stream.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (e environ) getenv(name string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(name)
}

// run dispatches to a subcommand. Usage problems wrap errUsage; -h returns
// flag.ErrHelp after printing the usage to stdout.
func run(ctx context.Context, args []string, env environ) error {
	if len(args) == 0 {
		usage(env.Stdout)
		return fmt.Errorf("%w: missing subcommand", errUsage)
	}
	cmds := map[string]func(context.Context, []string, environ) error{
		"get":     runGet,
		"put":     runPut,
		"del":     runDel,
		"purge":   runPurge,
		"owner":   runOwner,
		"members": runMembers,
		"stats":   runStats,
		"watch":   runWatch,
		"bench":   runBench,
		"ring": func(ctx context.Context, args []string, env environ) error {
			return runRing(ctx, args, env.Stdout)
		},
	}
	if cmd, ok := cmds[args[0]]; ok {
		return cmd(ctx, args[1:], env)
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(env.Stdout)
		return nil
	}
	return fmt.Errorf("%w: unknown subcommand %q (try ringcache help)", errUsage, args[0])
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: ringcache <subcommand> [flags] [arguments]

cluster commands (nodes from -url or RINGCACHE_URL, default http://127.0.0.1:8081):
  get KEY [KEY...]   print KEY's value in -group (default demo), or several keys' in one request; exit 3 if not found
  put KEY [VALUE]    store VALUE, or -file's contents, or stdin (an empty one needs -empty); -ttl sets an expiry
  del KEY            drop KEY on its owner and every copy on every node
  purge GROUP        drop every value of GROUP (or, with -prefix, of its keys under a prefix) on every node
  owner KEY          the node that owns KEY and its share of the ring
  members            each node's view of the ring, and the members' shares
  stats              gets, hit ratios, loads, bytes and evictions per node and group
  watch              a live table of req/s, hit ratio and loads per node
  bench              load: uniform or Zipf keys, -c, -d or -n; latency percentiles

offline:
  ring               key balance and key movement of a consistent-hash ring

Every cluster command takes -url, -token (or RINGCACHE_TOKEN), -timeout and, when
it reads, -o json. Run "ringcache <subcommand> -h" for its flags.
Exit status: 0 ok, 1 failure, 2 usage, 3 not found.
`)
}
