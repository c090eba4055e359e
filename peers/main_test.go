package peers

import (
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when goroutines outlive the tests: every
// Registry, embedded etcd, client and proxy the tests start must be stopped
// by the test that started it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// goroutinesCreatedBy returns the stacks of the running goroutines whose
// stack contains created (such as "created by <package>.<func>").
func goroutinesCreatedBy(created string) []string {
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
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, created) {
			out = append(out, g)
		}
	}
	return out
}
