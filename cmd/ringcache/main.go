// Command ringcache holds ringcache's command-line tools. Today it has one:
//
//	ringcache ring [flags]
//
// prints how a consistent-hash ring spreads keys over nodes and how many
// keys move when a node joins or leaves; run "ringcache ring -h" for flags.
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

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "ringcache:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "ringcache:", err)
		os.Exit(1)
	}
}

// run dispatches to a subcommand. Usage problems wrap errUsage; -h returns
// flag.ErrHelp after printing the usage to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		usage(stdout)
		return fmt.Errorf("%w: missing subcommand", errUsage)
	}
	switch args[0] {
	case "ring":
		return runRing(ctx, args[1:], stdout)
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return nil
	default:
		return fmt.Errorf("%w: unknown subcommand %q", errUsage, args[0])
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: ringcache <subcommand> [flags]

subcommands:
  ring   report key balance and key movement of a consistent-hash ring
`)
}
