package transport

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run if goroutines of ours, or HTTP connections, outlive
// the tests: every server, pool and client must be closed by its test.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitForLeaks(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// waitForLeaks returns the stacks of leaked goroutines, or "" once there are
// none. Closing is asynchronous (a connection's goroutines end after Close
// returns), so it waits up to d for them to go.
func waitForLeaks(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		var leaked []string
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for g := range strings.SplitSeq(string(buf), "\n\n") {
			if strings.Contains(g, "ringcache/") && !strings.Contains(g, "TestMain") ||
				strings.Contains(g, "net/http.(*persistConn)") ||
				strings.Contains(g, "net/http.(*conn).serve") ||
				strings.Contains(g, "net/http/httptest.(*Server)") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
