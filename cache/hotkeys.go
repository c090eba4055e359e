package cache

import (
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
// Estimate, then by how recently the entry was used. Only copies the group
// would serve are listed: unexpired values under a contact lease that holds
// (fallback copies of keys whose owner could not be reached included);
// remembered not-founds are left out. It copies the hot cache's keys under its lock, so it costs time
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
	// The top n by estimate, in one pass rather than a sort of every
	// entry: hot is most recent first, and a later entry displaces an
	// earlier one only with a strictly larger estimate, so among equal
	// estimates the most recently used stays first.
	top := make([]HotKey, 0, min(n, len(hot)))
	for _, h := range hot {
		if len(top) == n && h.Estimate <= top[n-1].Estimate {
			continue
		}
		i := slices.IndexFunc(top, func(t HotKey) bool { return t.Estimate < h.Estimate })
		if i < 0 {
			i = len(top)
		}
		if len(top) == n {
			top = top[:n-1]
		}
		top = slices.Insert(top, i, h)
	}
	return top
}

// recent returns the entries a hot lookup would serve, most recently used
// first, without marking them used. It holds the lock only to copy the
// list (two walks of it, no lookups): hot hits wait on that lock. The
// leases are asked after unlocking.
func (l *lru) recent(now time.Time) []HotKey {
	l.mu.Lock()
	keys, vals := l.entries() // oldest first
	l.mu.Unlock()
	out := make([]HotKey, 0, len(keys))
	clk := clock{now}
	for i := len(keys) - 1; i >= 0; i-- {
		if e := &vals[i]; !e.notFound && !e.expired(now) && leaseHolds(e, &clk) {
			out = append(out, HotKey{Key: keys[i], Bytes: e.size})
		}
	}
	return out
}

// leaseHolds is Group.look's rule for a hot copy: stored without a lease,
// or under the owner's contact epoch that still holds at clk's now (a
// fallback copy also once the lease lapsed).
func leaseHolds(e *entry, clk *clock) bool {
	if e.src == nil {
		return true
	}
	epoch, leased := e.src.Contact(clk.now())
	return epoch == e.stamp && (leased || e.fallback)
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
