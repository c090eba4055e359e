//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// recap holds what the end of the run repeats: a CI log is read from its
// tail, and the lines that say why a scenario of the first cluster failed
// have scrolled far out of it by the time the second cluster is done.
var recap struct {
	mu    sync.Mutex
	lines []string
}

// recapf records a line for the end of the run.
func recapf(format string, args ...any) {
	recap.mu.Lock()
	defer recap.mu.Unlock()
	recap.lines = append(recap.lines, fmt.Sprintf(format, args...))
}

func TestMain(m *testing.M) {
	code := m.Run()
	if len(recap.lines) > 0 {
		fmt.Println("\n== e2e: what failed, repeated from above")
		for _, l := range recap.lines {
			fmt.Println(l)
		}
	}
	os.Exit(code)
}
