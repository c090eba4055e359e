package store

import "math/bits"

// With slru set, the store is a segmented LRU counted in bytes: an entry
// enters the probation list (recent) and moves to the protected list
// (frequent) when it was read again, or written over, while cached. The
// protected list holds at most a third of the capacity (3/4 with ghosts,
// below): past it, its least recently used entries go back to the front
// of the probation list. The victim is the probation list's least
// recently used entry. So a key read once, or a scan, is evicted before
// any key read twice, and a key read twice stays for as long as it is read
// again within about the capacity.
// Without slru the store is a CLOCK, LRU's usual approximation: everything
// in the probation list, an entry read since it came to the tail goes
// round again.
//
// A hit moves nothing. It sets its record's reference bit (an atomic
// store, skipped when the bit is set, so a hot key's hits do not even
// write), under the read lock, which hits share with each other; the
// lists are reordered only by the writer that needs a victim, under the
// write lock: a probation entry whose bit is set goes to the protected
// list (to the probation front without slru) instead of out, a protected
// one to the protected front instead of back to probation, its bit
// cleared. Each such move clears a bit a hit set, so a store moves at most
// as many entries as there were hits since, and as many as are cached.
// A list reordered on every hit would need the exclusive lock on every
// hit; hits on any number of cores share its read side instead
// (sync.RWMutex: one atomic add per hit on a shared counter).
//
// A key evicted from probation leaves a ghost: a 16-bit fingerprint of its
// hash in a table of one slot per entry the full cache holds (2 bytes an
// entry, up to 4 while the count falls; part of Overhead, which the
// record's 80 bytes leave room for). A key that comes back while its ghost
// is there was read again within about one cache's worth of evictions,
// and is admitted to the protected list at once, as ARC and 2Q admit a key
// found in their ghost lists; with a ghost table the
// protected list holds up to 3/4 of the capacity. A slot holds the last
// ghost hashed to it, and a fingerprint matches another key's once in
// 32,768 tries, so a scan (every key new) is still evicted before the keys
// read twice. The table is one pointer-free slice, which the collector
// does not scan. A cache of fewer than minGhostSlots entries has no table,
// and its protected list keeps a third of the capacity, which tracked LRU
// closest at such sizes. Measured on real traces (deploy/bench/README.md,
// hit ratio), the ghosts cut the misses most at the sizes where a trace's
// frequent keys do not all fit.

// minGhostSlots is the fewest entries a cache holds for a ghost table.
const minGhostSlots = 32

// sizeGhosts gives the ghost table one slot per entry held, when the cache
// is full (it evicts) and holds at least minGhostSlots entries. A count
// that changes by less than half or twice keeps its table, and its
// ghosts: the hot cache's room moves with what the main cache leaves
// free. The caller holds mu exclusively.
func (l *Store) sizeGhosts() {
	n := l.n
	if !l.slru || n < minGhostSlots {
		n = 0
	}
	if c := int64(len(l.ghosts)); c != n && (n == 0 || c == 0 || c > 2*n || 2*c < n) {
		l.ghosts = make([]uint16, n)
	}
}

// ghostSlot returns the slot of hash h and the fingerprint h leaves there:
// the slot from h's high bits, the fingerprint from its low ones, so that
// the keys of one slot differ in theirs.
func (l *Store) ghostSlot(h uint64) (*uint16, uint16) {
	i, _ := bits.Mul64(h, uint64(len(l.ghosts)))
	return &l.ghosts[i], uint16(h) | 1
}

// haunt leaves the ghost of record id, about to be evicted from
// probation.
func (l *Store) haunt(id int32) {
	if len(l.ghosts) > 0 {
		s, fp := l.ghostSlot(l.rec(id).hash)
		*s = fp
	}
}

// ghost reports whether hash h left a ghost that is still there, and
// clears it.
func (l *Store) ghost(h uint64) bool {
	if len(l.ghosts) == 0 {
		return false
	}
	s, fp := l.ghostSlot(h)
	if *s != fp {
		return false
	}
	*s = 0
	return true
}

// protectedLimit is the protected list's part of the capacity: 3/4 with a
// ghost table, which admits keys to it on their second read, else 1/3.
func (l *Store) protectedLimit() int64 {
	c := max(l.maxBytes-l.lent(), 0)
	if len(l.ghosts) > 0 {
		return c / 4 * 3
	}
	return c / 3
}

// reclist is one recency list of records: from tail (least recently used)
// to head, and the bytes of its entries.
type reclist struct {
	head, tail int32
	bytes      int64
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// admit returns the list a new entry of hash h goes to: the protected one
// (1) for a key written over while cached or whose ghost is found, else
// probation (0).
func (l *Store) admit(replaced bool, h uint64) int {
	return b2i(l.slru && (replaced || l.ghost(h)))
}

// touch marks record id read: the next writer looking for a victim gives
// it another lap. The caller holds mu, shared or not.
func (l *Store) touch(id int32) {
	if r := l.ref(id); r.Load() == 0 {
		r.Store(1)
	}
}

// referenced clears record id's reference bit and reports whether it was
// set. The caller holds mu exclusively.
func (l *Store) referenced(id int32) bool {
	return l.ref(id).Swap(0) != 0
}

// demote moves the protected list's least recently used entries to the
// front of the probation list while it holds more than its share; one
// read since it came there goes to the protected front instead. The
// caller holds mu exclusively.
func (l *Store) demote() {
	if !l.slru {
		return
	}
	limit := l.protectedLimit()
	for p := &l.lists[1]; p.bytes > limit && p.tail != p.head; {
		id := p.tail
		l.unlink(id)
		l.pushFront(id, b2i(l.referenced(id)))
	}
}

// victim returns the entry to evict, never protect (the entry just added):
// the least recently used of the probation list that was not read since
// it came there (settleTail), else the protected list's least recently
// used; noRecord if there is none. A probation victim leaves its ghost.
// The caller holds mu exclusively.
func (l *Store) victim(protect int32) int32 {
	if id := l.settleTail(protect); id != noRecord {
		l.haunt(id)
		return id
	}
	if id := l.lists[1].tail; id != noRecord && id != protect {
		return id
	}
	return noRecord
}

// settleTail returns the least recently used entry of the probation list
// that was not read since it came there, never protect; noRecord if there
// is none. Entries read on the way are moved as the policy says (touch).
// The caller holds mu exclusively.
func (l *Store) settleTail(protect int32) int32 {
	p := &l.lists[0]
	for id := p.tail; id != noRecord && !(id == protect && p.head == id); id = p.tail {
		switch {
		case id == protect:
			l.unlink(id)
			l.pushFront(id, 0)
		case !l.referenced(id):
			return id
		default:
			l.unlink(id)
			l.pushFront(id, b2i(l.slru))
			l.demote()
		}
	}
	return noRecord
}

// evict drops id, which victim chose. The caller holds mu.
func (l *Store) evict(id int32) {
	l.drop(id)
	l.evictions.Add(1)
}
