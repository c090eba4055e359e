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
	// runners, if not nil, is where idle runners take detached loads
	// (startRun); a flight without runs each on a new goroutine. Idle
	// runners end when idleStop is closed.
	runners  chan runTask
	idleStop chan struct{}
}

// call is one load in progress; val and err are written before done is
// closed and only read after.
type call struct {
	done chan struct{}
	val  Value
	err  error
}

// do returns the load in progress for key, or starts fn and reports
// leader == true. fn runs on a goroutine of its own, a runner (startRun),
// so that the leader can leave on ctx while fn goes on for the others; a
// ctx that can never end (context.Background) cannot leave, so then fn
// runs on the caller's goroutine and do returns when it is done.
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
		f.startRun(runTask{f, key, c, fn})
	}
	return c, true
}

// runTask is a load for a runner: flight.run's arguments.
type runTask struct {
	f   *flight
	key string
	c   *call
	fn  func() (Value, error)
}

// runnerIdle is how long a runner waits for another load before it ends.
const runnerIdle = 100 * time.Millisecond

// startRun runs t on an idle runner of the node (Node.runners), or on a
// new one if none is idle. A load's stack is deep (the origin's call below
// the flight, a store with eviction and compaction above it), and a new
// goroutine's stack starts small and grows by copying: on a goroutine of
// its own, a miss spent about a sixth of its time growing it
// (BenchmarkGetMiss/ctx=cancelable), and one more frame on its path could
// add a copy. A runner keeps its grown stack for the next load, and ends
// after runnerIdle without one. The runners are the node's, not the
// process's, so that a node in a testing/synctest bubble keeps its loads
// in it.
func (f *flight) startRun(t runTask) {
	if f.runners == nil {
		go t.f.run(t.key, t.c, t.fn)
		return
	}
	select {
	case f.runners <- t:
	default:
		go runner(f.runners, f.idleStop, t)
	}
}

func runner(runners chan runTask, stop chan struct{}, t runTask) {
	idle := time.NewTimer(runnerIdle)
	defer idle.Stop()
	for {
		t.f.run(t.key, t.c, t.fn)
		t = runTask{} // holds nothing of the load while idle
		idle.Reset(runnerIdle)
		select {
		case t = <-runners:
		case <-idle.C:
			return
		case <-stop:
			return
		}
	}
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
