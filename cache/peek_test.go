package cache

import (
	"context"
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
