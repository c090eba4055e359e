package cache

// Eviction policies (GroupConfig.Policy).
const (
	// PolicySLRU, the default, is a segmented LRU: an entry read again
	// while cached is protected from entries read once. See below.
	PolicySLRU = "slru"
	// PolicyLRU evicts the least recently used entry. On the traces
	// measured it never did better than PolicySLRU; a workload that
	// favours recency alone may still prefer it.
	PolicyLRU = "lru"
)

// With slru set, the lru is a segmented LRU counted in bytes: an entry
// enters the probation list (recent) and moves to the protected list
// (frequent) when it is read again, or written over, while cached. The
// protected list holds at most half of the capacity: past it, its least
// recently used entries go back to the front of the probation list. The
// victim is the probation list's least recently used entry. So a key read
// once, or a scan, is evicted before any key read twice, and a key read
// twice stays for as long as it is read again within about the capacity.
//
// It keeps nothing of evicted keys (no ghost lists, unlike ARC, 2Q or
// S3-FIFO): the budget's bytes hold entries, as the sizing rule says, and
// what it knows of an entry is which list it is in (a flag in its record).
// Measured on real traces (deploy/bench/README.md, hit ratio), it made
// fewer misses than LRU at all but one point, and there at most 1% more;
// a policy with ghosts did better where their memory was not counted, and
// worse than LRU where it was. Without slru the lru is a plain LRU:
// everything in the probation list, a hit moves an entry to its front.

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

// promote moves record id, just read, to the front of its next list: the
// protected one (slru) or its own (LRU). The caller holds mu.
func (l *lru) promote(id int32) {
	li := b2i(l.slru)
	if id == l.lists[li].head {
		return
	}
	l.unlink(id)
	l.pushFront(id, li)
	if li == 1 {
		l.demote()
	}
}

// demote moves the protected list's least recently used entries to the
// front of the probation list while it holds more than its share. The
// caller holds mu.
func (l *lru) demote() {
	if !l.slru {
		return
	}
	limit := max(l.maxBytes-l.lent(), 0) / protectedShare
	for p := &l.lists[1]; p.bytes > limit && p.tail != p.head; {
		id := p.tail
		l.unlink(id)
		l.pushFront(id, 0)
	}
}

// victim returns the entry to evict, never protect (the entry just added):
// the least recently used of the probation list, else of the protected
// one; noRecord if there is none. The caller holds mu.
func (l *lru) victim(protect int32) int32 {
	for i := range l.lists {
		if id := l.lists[i].tail; id != noRecord && id != protect {
			return id
		}
	}
	return noRecord
}

// evict drops id, which victim chose. The caller holds mu.
func (l *lru) evict(id int32) {
	l.drop(id)
	l.evictions.Add(1)
}
