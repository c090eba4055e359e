package cache

// Eviction policies (GroupConfig.Policy).
const (
	// PolicySLRU, the default, is a segmented LRU: an entry read again
	// while cached is protected from entries read once. See below.
	PolicySLRU = "slru"
	// PolicyLRU evicts the least recently used entry, as a CLOCK does:
	// to within one lap of the cache. On the traces measured it did
	// better than PolicySLRU only at the smallest cache of one (1%
	// fewer misses); a workload that favours recency alone may prefer it.
	PolicyLRU = "lru"
)

// With slru set, the lru is a segmented LRU counted in bytes: an entry
// enters the probation list (recent) and moves to the protected list
// (frequent) when it was read again, or written over, while cached. The
// protected list holds at most half of the capacity: past it, its least
// recently used entries go back to the front of the probation list. The
// victim is the probation list's least recently used entry. So a key read
// once, or a scan, is evicted before any key read twice, and a key read
// twice stays for as long as it is read again within about the capacity.
// Without slru the lru is a CLOCK, LRU's usual approximation: everything
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
// It keeps nothing of evicted keys (no ghost lists, unlike ARC, 2Q or
// S3-FIFO): the budget's bytes hold entries, as the sizing rule says, and
// what it knows of an entry is which list it is in (a flag in its record)
// and its reference bit. Measured on real traces (deploy/bench/README.md,
// hit ratio), it made fewer misses than LRU at all but one point, and
// there at most 1% more; a policy with ghosts did better where their
// memory was not counted, and worse than LRU where it was.

// protectedShare is the protected list's part of the capacity, 1/n.
const protectedShare = 2

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

// admit returns the list a new entry goes to: the protected one (1) for a
// key written over while cached, else probation (0).
func (l *lru) admit(replaced bool) int {
	return b2i(l.slru && replaced)
}

// touch marks record id read: the next writer looking for a victim gives
// it another lap. The caller holds mu, shared or not.
func (l *lru) touch(id int32) {
	if r := l.ref(id); r.Load() == 0 {
		r.Store(1)
	}
}

// referenced clears record id's reference bit and reports whether it was
// set. The caller holds mu exclusively.
func (l *lru) referenced(id int32) bool {
	return l.ref(id).Swap(0) != 0
}

// demote moves the protected list's least recently used entries to the
// front of the probation list while it holds more than its share; one
// read since it came there goes to the protected front instead. The
// caller holds mu exclusively.
func (l *lru) demote() {
	if !l.slru {
		return
	}
	limit := max(l.maxBytes-l.lent(), 0) / protectedShare
	for p := &l.lists[1]; p.bytes > limit && p.tail != p.head; {
		id := p.tail
		l.unlink(id)
		l.pushFront(id, b2i(l.referenced(id)))
	}
}

// victim returns the entry to evict, never protect (the entry just added):
// the least recently used of the probation list that was not read since
// it came there, else the protected list's least recently used; noRecord
// if there is none. Entries read on the way are moved as the policy says
// (touch). The caller holds mu exclusively.
func (l *lru) victim(protect int32) int32 {
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
	if id := l.lists[1].tail; id != noRecord && id != protect {
		return id
	}
	return noRecord
}

// evict drops id, which victim chose. The caller holds mu.
func (l *lru) evict(id int32) {
	l.drop(id)
	l.evictions.Add(1)
}
