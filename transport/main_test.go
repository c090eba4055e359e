package transport

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if goroutines, or HTTP connections, outlive the
// tests: every server, pool and client must be closed by its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
