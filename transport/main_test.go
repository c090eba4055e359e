package transport

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if goroutines, or HTTP connections, outlive the
// tests: every server, pool and client must be closed by its test. Two of
// fasthttp's outlive a FastServer by design: the clock that formats the
// Date header, one per process, and each server's worker cleaner, which
// sees the stop when it next wakes, within 10 s.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}
