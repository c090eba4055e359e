package cache

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestCached: Cached reports what a Get would find in the caches (values
// and remembered not-founds), and neither counts nor changes anything.
func TestCached(t *testing.T) {
	t.Parallel()
	g := newTestGroup(t, GroupConfig{NotFoundTTL: 1 << 40}, func(_ context.Context, key string) (Value, error) {
		if key == "missing" {
			return Value{}, ErrNotFound
		}
		return Value{Data: []byte(key)}, nil
	})
	for _, key := range []string{"k", "missing"} {
		if g.Cached(key) {
			t.Fatalf("Cached(%q) before any Get = true", key)
		}
		before := g.Stats()
		if g.Cached(key) || g.Stats() != before {
			t.Fatalf("Cached(%q) changed the stats: %+v, then %+v", key, before, g.Stats())
		}
		g.Get(t.Context(), key)
		before = g.Stats()
		if !g.Cached(key) {
			t.Fatalf("Cached(%q) after a Get = false", key)
		}
		if g.Stats() != before {
			t.Fatalf("Cached(%q) counted: %+v, then %+v", key, before, g.Stats())
		}
	}
	g.Remove(t.Context(), "k")
	if g.Cached("k") {
		t.Fatal("Cached after Remove = true")
	}
}

// TestCachedExpiry: an expired value is not cached, unless it is within
// its stale-while-revalidate window, where Get serves it at once.
func TestCachedExpiry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			name string
			swr  time.Duration
			want bool // after expiry
		}{
			{"no stale window", 0, false},
			{"within stale-while-revalidate", time.Minute, true},
		} {
			g := newTestGroup(t, GroupConfig{Name: "g" + tc.name, TTL: time.Second, StaleWhileRevalidate: tc.swr},
				func(_ context.Context, key string) (Value, error) { return Value{Data: []byte(key)}, nil })
			g.Get(t.Context(), "k")
			if !g.Cached("k") {
				t.Fatalf("%s: Cached before expiry = false", tc.name)
			}
			time.Sleep(2 * time.Second)
			if got := g.Cached("k"); got != tc.want {
				t.Fatalf("%s: Cached after expiry = %v, want %v", tc.name, got, tc.want)
			}
		}
	})
}

// TestGetCached: GetCached answers what the caches hold exactly as Get
// would, value or remembered not-found and counts alike, and for anything
// else (a miss, a value past its stale window) returns false without
// counting, so that the Get that follows counts it once.
func TestGetCached(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		loads := 0
		g := newTestGroup(t, GroupConfig{NotFoundTTL: time.Hour, StaleWhileRevalidate: time.Minute}, func(_ context.Context, key string) (Value, error) {
			loads++
			switch key {
			case "missing":
				return Value{}, ErrNotFound
			case "brief":
				return Value{Data: []byte("b"), Expires: time.Now().Add(time.Second)}, nil
			}
			return Value{Data: []byte(key)}, nil
		})
		for _, key := range []string{"k", "missing", "brief"} {
			before := g.Stats()
			if _, ok, _ := g.GetCached(key); ok || g.Stats() != before {
				t.Fatalf("GetCached(%q) before any Get: ok %v, stats %+v then %+v", key, ok, before, g.Stats())
			}
			g.Get(t.Context(), key)
		}
		// A hit: the same value and the same counts as a Get.
		before := g.Stats()
		v, ok, err := g.GetCached("k")
		after := g.Stats()
		if !ok || err != nil || string(v.Data) != "k" || after.Gets != before.Gets+1 || after.MainHits != before.MainHits+1 {
			t.Fatalf("GetCached(k) = %q %v %v; gets %d -> %d, main hits %d -> %d", v.Data, ok, err, before.Gets, after.Gets, before.MainHits, after.MainHits)
		}
		// A remembered not-found: Get's error and Get's counts.
		_, ok, err = g.GetCached("missing")
		if s := g.Stats(); !ok || !errors.Is(err, ErrNotFound) || s.Gets != after.Gets+1 || s.NotFounds != after.NotFounds+1 || s.MainHits != after.MainHits {
			t.Fatalf("GetCached of a remembered not-found: ok %v, %v; stats %+v then %+v", ok, err, after, s)
		}
		// Past its expiry, within its stale window: served stale, and a
		// revalidation loads it again.
		time.Sleep(2 * time.Second)
		l := loads
		v, ok, err = g.GetCached("brief")
		if !ok || err != nil || !v.Stale || string(v.Data) != "b" {
			t.Fatalf("GetCached(brief) past its expiry = %+v %v, want the stale value", v, ok)
		}
		synctest.Wait()
		if loads != l+1 {
			t.Errorf("%d loads after a stale answer, want 1 (the revalidation)", loads-l)
		}
		// Past its stale window too: not an answer.
		time.Sleep(2 * time.Minute)
		if _, ok, _ := g.GetCached("brief"); ok {
			t.Error("GetCached answered past the stale window")
		}
	})
}

// TestPeerViewGetCached: a peer's cached read counts as a peer Get, and a
// miss or a value over the bound counts nothing (the Get that follows
// counts it).
func TestPeerViewGetCached(t *testing.T) {
	t.Parallel()
	g := newTestGroup(t, GroupConfig{}, func(_ context.Context, key string) (Value, error) {
		return Value{Data: []byte(key)}, nil
	})
	pv := g.PeerView()
	before := g.Stats()
	if _, ok, _ := pv.GetCached("k", 1<<20); ok || g.Stats() != before {
		t.Fatalf("PeerView.GetCached of a miss: ok %v, stats %+v then %+v", ok, before, g.Stats())
	}
	if _, err := pv.Get(t.Context(), "k", "", 0, nil); err != nil {
		t.Fatal(err)
	}
	before = g.Stats()
	v, ok, err := pv.GetCached("k", 1<<20)
	s := g.Stats()
	if !ok || err != nil || string(v.Data) != "k" || s.Gets != before.Gets+1 || s.PeerGets != before.PeerGets+1 || s.MainHits != before.MainHits+1 {
		t.Fatalf("PeerView.GetCached(k) = %q %v %v; stats %+v then %+v", v.Data, ok, err, before, s)
	}
	// A value over the bound is left to Get, and not counted.
	if _, ok, _ := pv.GetCached("k", 0); ok || g.Stats() != s {
		t.Fatalf("PeerView.GetCached(k) with a 0-byte bound: ok %v, stats %+v then %+v", ok, s, g.Stats())
	}
}
