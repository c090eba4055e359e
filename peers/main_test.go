package peers

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package when goroutines outlive the tests: every Registry, embedded etcd,
// client and proxy the tests start must be stopped by the test that started it.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(5 * time.Second); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "%d goroutines still running after the tests:\n\n%s\n",
				len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines waits up to wait for the goroutines that the tests started to end, and
// returns the stacks of those that did not. Some end just after the Close that stops them
// returns (gRPC transports, closed listeners' accept loops), and nothing signals their end,
// hence the polling.
func leakedGoroutines(wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	for {
		gs := interestingGoroutines("")
		if len(gs) == 0 || time.Now().After(deadline) {
			return gs
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// interestingGoroutines returns the stacks of all goroutines except the testing framework's,
// the runtime's and the caller's; with a non-empty match, only stacks containing it.
func interestingGoroutines(match string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 { // the caller's own goroutine comes first
			continue
		}
		if match != "" && !strings.Contains(g, match) {
			continue
		}
		if boring(g) {
			continue
		}
		out = append(out, g)
	}
	return out
}

func boring(stack string) bool {
	for _, s := range []string{
		"testing.(*M).",
		"testing.(*T).Run(",
		"testing.runTests",
		"testing.tRunner(",
		"created by testing.(*T).Run",
		"os/signal.signal_recv",
		"runtime.ensureSigM",
		"created by runtime.gc",
		"runtime.goexit0",
	} {
		if strings.Contains(stack, s) {
			return true
		}
	}
	return false
}
