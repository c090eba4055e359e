package cache

import (
	"cmp"
	"slices"
	"time"
)

// HotKey is one entry of a group's hot cache, as HotKeys reports it.
type HotKey struct {
	Key string
	// Estimate is the sketch's count of the key's recent misses on this
	// node: what made it hot. It halves every HotWindow, and hits on the
	// hot copy do not raise it (counting them would put a lock on the hit
	// path), so a copy that keeps being served drifts down to 0.
	Estimate int
	// Bytes is the entry's accounted size: key, value and overhead.
	Bytes int64
}

// HotKeys returns up to n entries of the hot cache, the hottest first: by
// Estimate, then by how recently the entry was used. Fallback copies of keys
// whose owner could not be reached live in the hot cache too and are
// listed. It copies the hot cache's keys under its lock, so it costs time
// in proportion to the hot cache's entries: it is for a status page, not
// for every request.
func (g *Group) HotKeys(n int) []HotKey {
	if n < 1 {
		return nil
	}
	hot := g.hot.recent(time.Now())
	if g.freq != nil {
		est := g.freq.estimates(hot)
		for i := range hot {
			hot[i].Estimate = est[i]
		}
	}
	// Stable: among equal estimates the most recently used stays first.
	slices.SortStableFunc(hot, func(a, b HotKey) int { return cmp.Compare(b.Estimate, a.Estimate) })
	return slices.Clip(hot[:min(n, len(hot))])
}

// recent returns the unexpired entries, most recently used first, without
// marking them used.
func (l *lru) recent(now time.Time) []HotKey {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := l.c.Keys() // oldest first
	out := make([]HotKey, 0, len(keys))
	for _, k := range slices.Backward(keys) {
		if e, ok := l.c.Peek(k); ok && !e.expired(now) {
			out = append(out, HotKey{Key: k, Bytes: e.size})
		}
	}
	return out
}

// estimates returns the estimated count of each of keys, under one lock
// rather than one per key.
func (s *sketch) estimates(keys []HotKey) []int {
	ix := make([][sketchDepth]uint32, len(keys))
	for i, k := range keys {
		ix[i] = s.indexes(k.Key)
	}
	out := make([]int, len(keys))
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.age(now)
	for i, row := range ix {
		low := uint8(255)
		for d, j := range row {
			low = min(low, s.rows[d][j])
		}
		out[i] = int(low)
	}
	return out
}
