// Package poll waits, in tests, for a condition that another goroutine or
// process makes true: a ring that converges, a lease that expires, a
// counter that reaches a value. It is the one polling loop the tests share.
package poll

import (
	"testing"
	"time"
)

// Until calls cond until it reports true, and fails t with cond's last
// description of what it saw if timeout passes first. It waits 1 ms after
// the first call, then twice as long each time up to 50 ms: a condition
// that holds soon is seen soon, and one that takes seconds (an etcd lease)
// is not asked hundreds of times a second.
func Until(t testing.TB, timeout time.Duration, cond func() (ok bool, saw string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, saw)
			return
		}
		time.Sleep(wait)
	}
}
