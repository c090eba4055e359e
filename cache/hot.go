package cache

import (
	"hash/maphash"
	"sync"
	"time"
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
