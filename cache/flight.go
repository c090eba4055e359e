package cache

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/ringcache/ringcache/internal/inflight"
)

// errGoexit is the result of a load whose function called runtime.Goexit
// (t.FailNow in a test's Getter, for example): its waiters still get an answer.
var errGoexit = errors.New("getter called runtime.Goexit")

// flight runs at most one load per key at a time and lets any number of
// callers wait for it, each on its own context. It is a small variant of
// golang.org/x/sync/singleflight, written here because a cache needs three
// things that package does not give together: to know which caller started a
// load (for Stats.LoadsDeduped), that a panic becomes an error for every
// waiter instead of crashing the process (DoChan re-panics in a new
// goroutine), and a waiter for a Goexit'ed load that is not left blocked.
// The zero flight is ready to use and safe for concurrent use.
type flight struct {
	mu    sync.Mutex
	calls map[string]*call // guarded by mu

	// onPanic, if not nil, is told about a panic in a load function. It runs
	// on the load's goroutine, holding no lock.
	onPanic func(key string, r any, stack []byte)

	// running, if not nil, counts the loads in progress, so that their
	// owner can wait for the detached ones (Node.Close).
	running *inflight.Counter
}

// call is one load in progress; val and err are written before done is
// closed and only read after.
type call struct {
	done chan struct{}
	val  Value
	err  error
}

// do returns the load in progress for key, or starts fn and reports
// leader == true. fn runs on a new goroutine (owned by the flight until fn
// returns) so that the leader can leave on ctx while fn goes on for the
// others; a ctx that can never end (context.Background) cannot leave, so
// then fn runs on the caller's goroutine and do returns when it is done,
// which saves a goroutine per miss.
func (f *flight) do(ctx context.Context, key string, fn func() (Value, error)) (c *call, leader bool) {
	f.mu.Lock()
	if c, ok := f.calls[key]; ok {
		f.mu.Unlock()
		return c, false
	}
	if f.calls == nil {
		f.calls = make(map[string]*call)
	}
	c = &call{done: make(chan struct{})}
	f.calls[key] = c
	f.mu.Unlock()
	// Counted before the goroutine starts, so that a Close that begins
	// after do returns waits for it.
	f.running.Add()
	if ctx.Done() == nil {
		f.run(key, c, fn)
	} else {
		go f.run(key, c, fn)
	}
	return c, true
}

func (f *flight) run(key string, c *call, fn func() (Value, error)) {
	normal := false
	defer func() {
		if !normal {
			// recover returns nil for runtime.Goexit, which cannot be stopped
			// but can still be reported to the waiters.
			if r := recover(); r != nil {
				if f.onPanic != nil {
					f.onPanic(key, r, debug.Stack())
				}
				c.err = fmt.Errorf("%w: key %q: panic: %v", ErrLoad, key, r)
			} else {
				c.err = fmt.Errorf("%w: key %q: %w", ErrLoad, key, errGoexit)
			}
			c.val = Value{}
		}
		// Forget the call before waking the waiters, so that a caller that
		// wakes and calls again starts a new load rather than joining this one.
		f.forget(key, c)
		close(c.done)
		f.running.Done()
	}()
	c.val, c.err = fn()
	normal = true
}

// forget drops c as key's load in progress (if it still is), so that the next
// caller starts a new load: Remove and Set call it so that no caller arriving
// after them joins a load that began before them.
func (f *flight) forget(key string, c *call) {
	f.mu.Lock()
	if c == nil || f.calls[key] == c {
		delete(f.calls, key)
	}
	f.mu.Unlock()
}

// forgetIf forgets the loads in progress of the keys for which match
// returns true (a purge).
func (f *flight) forgetIf(match func(key string) bool) {
	f.mu.Lock()
	for key := range f.calls {
		if match(key) {
			delete(f.calls, key)
		}
	}
	f.mu.Unlock()
}

// maxFailures bounds how many failed keys a group remembers. Past it, the
// expired ones go first, then arbitrary ones: forgetting a failure early
// only lets one more load through to the origin.
const maxFailures = 4096

// failures remembers the keys whose origin load just failed, with the error,
// so that a failing origin is asked once per key and ErrorTTL rather than on
// every request. A failures is safe for concurrent use.
type failures struct {
	mu   sync.Mutex
	keys map[string]failure // guarded by mu
}

type failure struct {
	err   error
	until time.Time
}

// get returns key's remembered error, if it has not expired by now.
func (f *failures) get(key string, now time.Time) (error, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.keys[key]
	if !ok {
		return nil, false
	}
	if !now.Before(e.until) {
		delete(f.keys, key)
		return nil, false
	}
	return e.err, true
}

// put remembers err for key until until.
func (f *failures) put(key string, err error, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil {
		f.keys = make(map[string]failure)
	}
	if len(f.keys) >= maxFailures {
		now := time.Now()
		for k, e := range f.keys {
			if !now.Before(e.until) {
				delete(f.keys, k)
			}
		}
		for k := range f.keys {
			if len(f.keys) < maxFailures {
				break
			}
			delete(f.keys, k)
		}
	}
	f.keys[key] = failure{err: err, until: until}
}

// forget drops key's remembered error: a write of the key makes the next
// read load again.
func (f *failures) forget(key string) {
	f.mu.Lock()
	delete(f.keys, key)
	f.mu.Unlock()
}

// forgetIf drops the remembered errors of the keys for which match returns
// true (a purge).
func (f *failures) forgetIf(match func(key string) bool) {
	f.mu.Lock()
	for key := range f.keys {
		if match(key) {
			delete(f.keys, key)
		}
	}
	f.mu.Unlock()
}
