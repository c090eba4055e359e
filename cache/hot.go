package cache

import (
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/ringcache/ringcache/cache/internal/store"
)

// Sketch dimensions: 4 rows of 8,192 one-byte counters (32 KiB per group).
// A wider sketch over-counts less when many distinct keys miss within one
// window; over-counting only ever promotes a cold key early, which costs a
// hot-cache slot that LRU eviction takes back.
const (
	sketchDepth = 4
	sketchWidth = 1 << 13
)

// sketch measures how often keys owned by peers miss this node's caches: a
// count-min sketch with conservative update (only the smallest counters of a
// key are raised, which keeps the over-estimate of other keys low) whose
// counters are all halved once per window, so that a count is an
// exponentially decaying request rate rather than a total since start.
// A sketch is safe for concurrent use.
type sketch struct {
	seed   maphash.Seed
	window time.Duration

	mu    sync.Mutex
	rows  [sketchDepth][sketchWidth]uint8 // guarded by mu
	decay time.Time                       // next halving; guarded by mu
}

// newSketch returns a sketch that halves its counters every window.
func newSketch(window time.Duration) *sketch {
	return &sketch{seed: maphash.MakeSeed(), window: window, decay: time.Now().Add(window)}
}

// indexes derives one counter index per row from a single 64-bit hash
// (Kirsch and Mitzenmacher: h1 + i*h2 is as good as independent hashes).
func (s *sketch) indexes(key string) [sketchDepth]uint32 {
	h := maphash.String(s.seed, key)
	h1, h2 := uint32(h), uint32(h>>32)|1
	var ix [sketchDepth]uint32
	for i := range ix {
		ix[i] = (h1 + uint32(i)*h2) % sketchWidth
	}
	return ix
}

// add counts one request for key and returns key's estimated count,
// including this request.
func (s *sketch) add(key string) int { return s.count(key, true) }

// estimate returns key's estimated count without counting a request.
func (s *sketch) estimate(key string) int { return s.count(key, false) }

// count returns key's estimated count (the smallest of its counters), first
// counting one request if add: a conservative update, which raises only the
// counters below the new estimate, so that keys sharing a counter inflate
// each other less.
func (s *sketch) count(key string, add bool) int {
	ix := s.indexes(key)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.age(now)
	low := uint8(255)
	for i, j := range ix {
		low = min(low, s.rows[i][j])
	}
	if !add {
		return int(low)
	}
	if low < 255 {
		low++
	}
	for i, j := range ix {
		if s.rows[i][j] < low {
			s.rows[i][j] = low
		}
	}
	return int(low)
}

// age halves every counter once for each window that has ended by now (at
// most 8 times: an 8-bit counter is zero after that).
func (s *sketch) age(now time.Time) {
	shift := 0
	for !now.Before(s.decay) && shift < 8 {
		shift++
		s.decay = s.decay.Add(s.window)
	}
	if shift == 0 {
		return
	}
	if !now.Before(s.decay) {
		// Idle for more than 8 windows: restart the schedule from now.
		s.decay = now.Add(s.window)
	}
	for i := range s.rows {
		for j := range s.rows[i] {
			s.rows[i][j] >>= shift
		}
	}
}

// keepHot keeps v, just fetched from peer, in the hot cache if the rule in
// the package doc admits it: while the hot cache has room for it without evicting
// another copy, always; once it is full, only if key is popular (at least
// HotAfter recent misses), since the copy then displaces the least recently
// used one.
func (g *Group) keepHot(key string, v Value, peer Peer, gd guard) {
	if g.freq == nil {
		return // no hot cache
	}
	now := time.Now()
	hv := v
	// The epoch is read after the fetch, which renewed the lease: a write
	// at the owner after it answered either reaches this node (and fails
	// gd) or revokes the lease (and moves the epoch). The copy keeps the
	// value's own expiry, which clients are told; it is served for HotTTL
	// from loaded at most (look).
	e := store.Entry{V: store.Value(hv), Size: entrySize(key, hv), Loaded: now.UnixNano()}
	g.lendMu.Lock()
	defer g.lendMu.Unlock()
	g.lend()
	// A copy that displaces nothing (no other copy, no owned key) is kept;
	// one that would is kept only if its key is popular.
	if (!g.hot.Fits(key, e.Size) || g.main.Unused() < e.Size) && g.freq.estimate(key) < g.cfg.HotAfter {
		return
	}
	if l, ok := peer.(Leaser); ok {
		e.Ref = l
		e.Tag, _ = l.Contact(now)
	}
	if g.storable(hv, now) && g.hot.Add(key, e, gd.admits) {
		g.st.hotPromotions.Add(1)
		g.main.Trim() // a copy within the hot cache's part takes the room of owned keys
	}
}

// lend bounds the hot cache by its own part (HotBytes) plus the room the
// main cache leaves free. Main and hot share one budget, MaxBytes: the
// main cache may use all that copies do not (its bound counts the hot
// cache's bytes up to HotBytes, lru.lent), a popular copy may take room
// from owned keys up to HotBytes, and copies may use more while owned
// keys leave it free, until those need it. So a node with no peers, or
// with few copies, spends its whole budget on its own keys, and main and
// hot together stay within MaxBytes. It evicts the least recently used
// copies when the bound shrinks. With lendMu held.
func (g *Group) lend() {
	g.hot.SetMax(max(g.cfg.HotBytes, 0) + g.main.Room())
}

// reclaim takes back, after the main cache grew or its bound shrank, the
// room lent to the hot cache that the main cache now holds, evicting
// copies. Between the two, main and hot may exceed MaxBytes by the entries
// just added. It always takes lendMu: a copy whose bound was set from the
// room before this growth is then stored before reclaim recomputes it, or
// after, under the new bound; a flag that skipped the lock while nothing
// was lent would miss the copy that was lending at that moment. It runs
// where the main cache grows (a load, a write, an adoption), never on a
// hit.
func (g *Group) reclaim() {
	if g.freq == nil {
		return // no hot cache
	}
	g.lendMu.Lock()
	g.lend()
	g.lendMu.Unlock()
}

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
// Estimate, then in the order the eviction policy would keep them (the
// entry stored, or given another lap for being read, last first). Only copies the group
// would serve are listed: unexpired values under a contact lease that holds
// (fallback copies of keys whose owner could not be reached included);
// remembered not-founds are left out. It copies the hot cache's keys under its lock, so it costs time
// in proportion to the hot cache's entries: it is for a status page, not
// for every request.
func (g *Group) HotKeys(n int) []HotKey {
	if n < 1 {
		return nil
	}
	hot := recentHot(g.hot, time.Now())
	if g.freq != nil {
		est := g.freq.estimates(hot)
		for i := range hot {
			hot[i].Estimate = est[i]
		}
	}
	// The top n by estimate, in one pass rather than a sort of every
	// entry: hot is most recent first, and a later entry displaces an
	// earlier one only with a strictly larger estimate, so among equal
	// estimates the one the policy keeps longest stays first.
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

// recentHot returns the entries a hot lookup would serve, the one eviction
// would reach last first, without marking them used. The store's lock is
// held only to copy the list: hot hits wait on it. The leases are asked
// after unlocking.
func recentHot(l *store.Store, now time.Time) []HotKey {
	keys, vals := l.Entries() // oldest first
	out := make([]HotKey, 0, len(keys))
	clk := store.NewClock(now)
	for i := len(keys) - 1; i >= 0; i-- {
		if e := &vals[i]; !e.NotFound && !e.Expired(now) && leaseHolds(e, &clk) {
			out = append(out, HotKey{Key: keys[i], Bytes: e.Size})
		}
	}
	return out
}

// leaseHolds is Group.look's rule for a hot copy: stored without a lease,
// or under the owner's contact epoch that still holds at clk's now (a
// fallback copy also once the lease lapsed).
func leaseHolds(e *store.Entry, clk *store.Clock) bool {
	src, ok := e.Ref.(Leaser)
	if !ok {
		return true
	}
	epoch, leased := src.Contact(clk.Now())
	return epoch == e.Tag && (leased || e.Mark)
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
