package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringcache/ringcache/internal/poll"
)

// blockedOrigin is a Getter whose loads wait until released, and that
// reports each load's start.
type blockedOrigin struct {
	started chan string
	release chan struct{}
	mu      sync.Mutex
	loads   map[string]int
}

func newBlockedOrigin() *blockedOrigin {
	return &blockedOrigin{started: make(chan string, 1024), release: make(chan struct{}), loads: map[string]int{}}
}

func (o *blockedOrigin) get(ctx context.Context, key string) (Value, error) {
	o.mu.Lock()
	o.loads[key]++
	o.mu.Unlock()
	o.started <- key
	select {
	case <-o.release:
	case <-ctx.Done():
		return Value{}, ctx.Err()
	}
	return Value{Data: []byte("v:" + key)}, nil
}

func (o *blockedOrigin) load(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.loads[key]
}

// waitStarted waits for n loads to start and returns their keys.
func (o *blockedOrigin) waitStarted(t *testing.T, n int) []string {
	t.Helper()
	var keys []string
	for range n {
		select {
		case k := <-o.started:
			keys = append(keys, k)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d loads started within 10s", len(keys), n)
		}
	}
	return keys
}

// asyncGet runs Get for caller in the background; the result arrives on
// the returned channel.
func asyncGet(g *Group, caller, key string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := g.Get(WithCaller(context.Background(), caller), key)
		ch <- err
	}()
	return ch
}

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 10*time.Second, func() (bool, string) { return cond(), "no " + what })
}

// TestLoadGateShedsTheHeaviestCaller fills a group's load slots and queue
// with one caller's loads; a second caller's load then takes the place of
// the first caller's newest, which fails with ErrOverloaded at once. Hits
// and joins of a load in flight never wait, and a shed load reaches the
// origin neither then nor as a remembered failure.
func TestLoadGateShedsTheHeaviestCaller(t *testing.T) {
	t.Parallel()
	o := newBlockedOrigin()
	g := newTestGroup(t, GroupConfig{MaxLoads: 2, LoadQueue: 2, LoadQueueWait: time.Minute}, o.get)

	// "hit" is cached before the slots fill.
	close(o.release)
	mustGet(t, g, "hit", "v:hit")
	o.waitStarted(t, 1)
	o.release = make(chan struct{})

	running := []<-chan error{asyncGet(g, "walker", "w0"), asyncGet(g, "walker", "w1")}
	o.waitStarted(t, 2)
	w2 := asyncGet(g, "walker", "w2")
	waitFor(t, "w2 queued", func() bool { return g.Stats().LoadsWaiting == 1 })
	w3 := asyncGet(g, "walker", "w3")
	waitFor(t, "w3 queued", func() bool { return g.Stats().LoadsWaiting == 2 })

	// The queue is full of the walker's loads: another of its loads is
	// shed itself, and the origin never sees it.
	if err := <-asyncGet(g, "walker", "w4"); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("walker's fifth load: %v, want ErrOverloaded", err)
	}
	// Another caller's load takes the place of the walker's newest.
	other := asyncGet(g, "reader", "r0")
	select {
	case err := <-w3:
		if !errors.Is(err, ErrOverloaded) {
			t.Fatalf("walker's newest queued load: %v, want ErrOverloaded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the walker's newest load was not shed for the reader's")
	}
	// Hits and joins do not wait behind the full gate.
	mustGet(t, g, "hit", "v:hit")
	join := asyncGet(g, "reader", "w0")

	if st := g.Stats(); st.LoadsRunning != 2 || st.LoadsWaiting != 2 || st.LoadsShed != 2 || st.LoadsQueued != 4 {
		t.Fatalf("stats: running %d, waiting %d, shed %d, queued %d; want 2, 2, 2, 4",
			st.LoadsRunning, st.LoadsWaiting, st.LoadsShed, st.LoadsQueued)
	}

	// The loads end and free their slots, one to each caller in turn
	// (TestLoadGateRoundRobin checks the order).
	close(o.release)
	for _, ch := range append(running, join) {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range []<-chan error{w2, other} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"w3", "w4"} {
		if n := o.load(k); n != 0 {
			t.Errorf("shed key %s: %d origin loads, want 0", k, n)
		}
	}
	// A shed load is not remembered as a failure: the next Get loads it.
	mustGet(t, g, "w3", "v:w3")
	if st := g.Stats(); st.LoadsRunning != 0 || st.LoadsWaiting != 0 {
		t.Errorf("after the loads: %d running, %d waiting; want none", st.LoadsRunning, st.LoadsWaiting)
	}
}

// TestLoadGateRoundRobin checks the order of grants: with loads of two
// callers queued (four of one, then one of the other), the second
// caller's load is the second one granted, not the fifth.
func TestLoadGateRoundRobin(t *testing.T) {
	t.Parallel()
	gate := newLoadGate(GroupConfig{MaxLoads: 1, LoadQueue: 10, LoadQueueWait: time.Minute})
	release, err := gate.acquire(context.Background(), "g", "a")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	enqueue := func(caller string, i int) {
		wg.Go(func() {
			rel, err := gate.acquire(context.Background(), "g", caller)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, fmt.Sprintf("%s%d", caller, i))
			mu.Unlock()
			rel()
		})
		waitFor(t, "a queued load", func() bool { _, w := gate.usage(); return w == i+1 })
	}
	for i := range 4 {
		enqueue("a", i)
	}
	enqueue("b", 4)
	release()
	wg.Wait()
	if len(order) != 5 || order[1] != "b4" {
		t.Fatalf("grants in order %v; want b4 second", order)
	}
}

// TestLoadGateWait checks that a queued load fails with ErrOverloaded once
// LoadQueueWait ran out, and that no queue at all sheds at once.
func TestLoadGateWait(t *testing.T) {
	t.Parallel()
	o := newBlockedOrigin()
	defer close(o.release)
	g := newTestGroup(t, GroupConfig{MaxLoads: 1, LoadQueueWait: 50 * time.Millisecond}, o.get)
	busy := asyncGet(g, "", "a")
	o.waitStarted(t, 1)
	if err := <-asyncGet(g, "", "b"); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("queued past LoadQueueWait: %v, want ErrOverloaded", err)
	}
	none := newTestGroup(t, GroupConfig{MaxLoads: 1, LoadQueue: -1}, o.get)
	busyToo := asyncGet(none, "", "a")
	o.waitStarted(t, 1)
	start := time.Now()
	if err := <-asyncGet(none, "", "b"); !errors.Is(err, ErrOverloaded) || time.Since(start) > 5*time.Second {
		t.Fatalf("no queue: %v after %v, want ErrOverloaded at once", err, time.Since(start))
	}
	o.release <- struct{}{}
	o.release <- struct{}{}
	for _, ch := range []<-chan error{busy, busyToo} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
}

// TestLoadGateUnbounded checks MaxLoads < 0: every load runs at once.
func TestLoadGateUnbounded(t *testing.T) {
	t.Parallel()
	o := newBlockedOrigin()
	g := newTestGroup(t, GroupConfig{MaxLoads: -1}, o.get)
	var chs []<-chan error
	for i := range 100 {
		chs = append(chs, asyncGet(g, "", fmt.Sprint(i)))
	}
	o.waitStarted(t, 100)
	close(o.release)
	for _, ch := range chs {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
}
