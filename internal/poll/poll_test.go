package poll

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilReturnsOnceTrue(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	go func() {
		time.Sleep(20 * time.Millisecond)
		n.Store(3)
	}()
	calls := 0
	Until(t, 5*time.Second, func() (bool, string) {
		calls++
		return n.Load() == 3, fmt.Sprintf("n = %d", n.Load())
	})
	if calls < 2 {
		t.Errorf("cond was called %d times; it could not have held at the first", calls)
	}
}

// recorder is a testing.TB that records Fatalf instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestUntilFailsWithWhatItSaw(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	start := time.Now()
	Until(r, 30*time.Millisecond, func() (bool, string) { return false, "still 2 members" })
	if r.failed != "not within 30ms: still 2 members" {
		t.Errorf("failed with %q", r.failed)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("gave up after %v, before the timeout", d)
	}
}
