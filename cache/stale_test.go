package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestStaleWhileRevalidate: past its expiry, within the window, a value is
// served at once, marked stale with its age, while one background load (for
// any number of callers) brings a fresh one.
func TestStaleWhileRevalidate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var loads atomic.Int64
		g := newTestGroup(t, GroupConfig{TTL: time.Second, StaleWhileRevalidate: 10 * time.Second}, func(_ context.Context, key string) (Value, error) {
			n := loads.Add(1)
			if n > 1 {
				time.Sleep(time.Second) // a slow origin: callers must not wait for it
			}
			return Value{Data: fmt.Appendf(nil, "v%d", n)}, nil
		})
		mustGet(t, g, "k", "v1")
		time.Sleep(1500 * time.Millisecond)
		start := time.Now()
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				v, err := g.Get(context.Background(), "k")
				if err != nil || string(v.Data) != "v1" || !v.Stale || v.Age != 1500*time.Millisecond {
					t.Errorf("Get = %q stale %v age %v, %v; want v1, stale, 1.5s", v.Data, v.Stale, v.Age, err)
				}
			})
		}
		wg.Wait()
		if time.Since(start) != 0 {
			t.Fatalf("callers waited %v for the refresh", time.Since(start))
		}
		synctest.Wait()
		time.Sleep(time.Second) // the refresh's load
		synctest.Wait()
		v, err := g.Get(context.Background(), "k")
		if err != nil || string(v.Data) != "v2" || v.Stale {
			t.Fatalf("after the refresh: %q stale %v, %v; want v2, fresh", v.Data, v.Stale, err)
		}
		if loads.Load() != 2 {
			t.Fatalf("loads = %d, want 2 (one refresh for 20 stale reads)", loads.Load())
		}
		if s := g.Stats(); s.StaleServed != 20 {
			t.Fatalf("StaleServed = %d, want 20", s.StaleServed)
		}
		// Past the window the value is gone.
		time.Sleep(12 * time.Second)
		mustGet(t, g, "k", "v3")
	})
}

// TestStaleIfError: when the origin fails, a value past its expiry is
// served for the grace, then the error is; the error is never a value.
func TestStaleIfError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var failing atomic.Bool
		var loads atomic.Int64
		g := newTestGroup(t, GroupConfig{TTL: time.Second, StaleIfError: 5 * time.Second}, func(_ context.Context, key string) (Value, error) {
			loads.Add(1)
			if failing.Load() {
				return Value{}, errors.New("database down")
			}
			return Value{Data: []byte("good")}, nil
		})
		mustGet(t, g, "k", "good")
		failing.Store(true)
		time.Sleep(2 * time.Second)
		v, err := g.Get(context.Background(), "k")
		if err != nil || string(v.Data) != "good" || !v.Stale {
			t.Fatalf("origin down, within the grace: %q stale %v, %v; want the stale value", v.Data, v.Stale, err)
		}
		time.Sleep(4 * time.Second) // 6s past the expiry: past the grace
		if _, err := g.Get(context.Background(), "k"); !errors.Is(err, ErrLoad) {
			t.Fatalf("past the grace: err = %v, want ErrLoad", err)
		}
		failing.Store(false)
		time.Sleep(time.Second) // ErrorTTL
		v, err = g.Get(context.Background(), "k")
		if err != nil || string(v.Data) != "good" || v.Stale {
			t.Fatalf("origin back: %q stale %v, %v; want a fresh value", v.Data, v.Stale, err)
		}
	})
}

// TestStaleRefreshOncePerCluster: stale reads on every node of a cluster
// cause one refresh, at the owner; non-owners do not keep the stale value.
func TestStaleRefreshOncePerCluster(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		o := newOrigin()
		c := newCluster(t, 3, hashOwner(3), GroupConfig{MaxBytes: 1 << 20, TTL: time.Second, StaleWhileRevalidate: time.Minute}, o.getter)
		key := keyOwnedBy(t, c.owner, 1)
		mustGet(t, c.groups[0], key, "v:"+key)
		time.Sleep(2 * time.Second)
		for range 5 {
			for i := range 3 {
				v, err := c.groups[i].Get(context.Background(), key)
				if err != nil || string(v.Data) != "v:"+key {
					t.Fatalf("node %d: %q, %v", i, v.Data, err)
				}
			}
		}
		synctest.Wait()
		if got := o.loadsOf(key); len(got) != 2 || got[0] != 1 || got[1] != 1 {
			t.Fatalf("loads by node %v, want [1 1]: one load, one refresh, both at the owner", got)
		}
	})
}
