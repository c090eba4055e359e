package cache

import (
	"context"
	"testing"
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
