package cache

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestCloseWaitsForDetachedLoads: a caller that gives up leaves its load
// running; Close does not return nil before that load has finished, and
// returns ctx's error when ctx ends first.
func TestCloseWaitsForDetachedLoads(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	var finished atomic.Bool
	n := newNode(t, Config{})
	g, err := n.NewGroup(GroupConfig{Name: "g", MaxBytes: 1 << 20, Getter: GetterFunc(func(ctx context.Context, key string) (Value, error) {
		close(started)
		<-release
		finished.Store(true)
		return Value{Data: []byte("v")}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { _, err := g.Get(ctx, "k"); errc <- err }()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Get after cancel: %v, want context.Canceled", err)
	}

	short, stop := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer stop()
	if err := n.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a load blocked: %v, want DeadlineExceeded", err)
	}
	if finished.Load() {
		t.Fatal("the load finished before it was released")
	}
	close(release)
	if err := n.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !finished.Load() {
		t.Fatal("Close returned before the detached load finished")
	}
	// The load completed for the cache: the value is there.
	if v, err := g.Get(t.Context(), "k"); err != nil || string(v.Data) != "v" {
		t.Fatalf("Get after Close: %q, %v", v.Data, err)
	}
}

// TestCloseStopsHandoff: Close ends an open hand-off window and stops its
// timer, and a ring change after Close opens none.
func TestCloseStopsHandoff(t *testing.T) {
	n := newNode(t, Config{HandoffWindow: time.Hour})
	g, err := n.NewGroup(GroupConfig{Name: "g", MaxBytes: 1 << 20, Getter: GetterFunc(func(ctx context.Context, key string) (Value, error) {
		return Value{Data: []byte("v")}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	n.RingChanged()
	if !g.inHandoff() {
		t.Fatal("no hand-off window after a ring change")
	}
	if err := n.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	g.handoffMu.Lock()
	timer := g.handoffTimer
	g.handoffMu.Unlock()
	if g.inHandoff() || timer != nil {
		t.Fatalf("after Close: window open %v, timer %v", g.inHandoff(), timer)
	}
	n.RingChanged()
	g.handoffMu.Lock()
	timer = g.handoffTimer
	g.handoffMu.Unlock()
	if g.inHandoff() || timer != nil {
		t.Fatal("a ring change after Close opened a hand-off window")
	}
}
