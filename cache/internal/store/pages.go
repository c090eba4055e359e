package store

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"
)

// extraLen is the room an entry's bytes give to the fields few values set
// (their stale windows, an Age): they are not in the record, which every
// entry has.
const extraLen = 24

// Page and record sizes. A page is the largest power of two up to pageMax
// that is at most 1/deadHigh of the budget (New), so that one page is
// within the dead bytes' bound below. A value of up to 1/packOf of a page
// (packMax in pages of pageMax) goes into the pages
// with its key and content type; a larger one keeps an allocation of its
// own, which costs the collector one object per value, few: one per
// packMax bytes of the budget at most, and about packOf*deadHigh*2 (4,600)
// in a store of smaller pages. So a closed page's unused tail, less than
// the next entry, is about 1/packOf of it at most, whatever the budget:
// 1.6%, under the dead bytes' bound, which compaction could not otherwise
// reach (it only moves a tail to another page). An entry that needs more
// than 1/compactOf of a page (a long key in a small store) gets a page of
// its own, of its exact size. A budget too small for pages of pageMin
// bytes (under 144 KiB: a few hundred entries) keeps every entry in a page
// of its own, and so has no dead bytes: the allocator's rounding and the
// page's 48 bytes are not charged (up to 1.12 times an entry's charge in
// heap, TestEntryOverheadMatchesHeap), a few KiB in all.
const (
	pageMax  = 128 << 10
	pageMin  = 4 << 10
	packOf   = 64
	packMax  = pageMax / packOf // the largest value any store packs: 2 KiB
	headLen  = 8                // a record id and a length, before each entry's bytes
	recChunk = 256
	noRecord = -1
	// An entry that needs more than 1/compactOf of a page gets a page of
	// its own. A closed page is compacted at once when less than
	// compactLive/compactOf of it is live: copying up to a third of what it
	// reclaims.
	compactLive, compactOf = 1, 4
	// Dead bytes are bounded for the whole store, however the pages
	// fragment: once they exceed 1/deadHigh of the budget (or one page),
	// the pages with the fewest live bytes are compacted until they are
	// under 1/deadLow of it (clean). Pages die piecemeal under random
	// reads and mostly whole under a scan; either way the budget holds
	// entries, not holes: a full store holds 0.97 of the entries its budget
	// pays for or more, at any budget (TestGroupHoldsWhatTheSizingRuleSays
	// in the cache). Dead bytes kept between 1.8% and 2.8% of the budget
	// copy fewer live bytes per byte reclaimed than between 1.6% and 3.1%
	// (BenchmarkLRUChurn).
	deadHigh, deadLow = 36, 56
)

// rec is what the store holds for one entry besides its bytes. It has no
// pointers, so that the records of a million entries are a few objects the
// collector marks and never scans.
type rec struct {
	hash uint64
	// exp is the value's expiry (with hasExpiry): an offset from the
	// store's base on the monotonic clock, or with wallClock Unix
	// nanoseconds, as Value.Expires had a monotonic reading or not.
	exp           int64
	checksum, tag uint64
	loaded        int64
	// size is the entry's accounted size and dlen its value's length:
	// 32 bits each, which keeps a record at 80 bytes (the store stores no
	// entry of 4 GiB or more).
	size, dlen uint32
	// prev and next link the records of a list from the least recently
	// used (tail) to the most (head); next also chains the free records.
	prev, next int32
	// page and off are where the entry's bytes start (after their
	// header); page is noRecord for a free record.
	page int32
	off  uint32
	// klen and ctlen are the lengths of the key and the content type; the
	// extras (with hasExtra) and a value that is not large (Store.large)
	// follow them.
	klen, ctlen uint32
	flags       uint16
}

// rec flags.
const (
	notFound  = 1 << iota
	fallback  // entry.fallback
	hasExpiry // exp is set
	wallClock // exp is on the wall clock
	hasExtra  // the bytes hold StaleWhileRevalidate, StaleIfError and Age
	noStore   // Value.NoStore
	stale     // Value.Stale
	nilData   // Value.Data is nil (not merely empty)
	hasRef    // Entry.Ref is in Store.entryRefs
	frequent  // in the protected list (slru.go)
)

// page is a run of entries' bytes. Bytes once written to a page are never
// written again, so the keys and values handed out over them stay valid
// for as long as a reader holds them (the collector keeps the page alive):
// a removed entry's bytes become dead, and a closed page with much dead is
// compacted, its live entries copied to the current page, and dropped.
type page struct {
	buf []byte
	// live is how many bytes of buf live entries hold, headers included.
	live int
	// closed marks a page nothing more goes into: all of cap(buf) that
	// is not live is dead. The one page that is not closed, the current
	// one, is a fixed cost of the store, as its unused tail is.
	closed bool
	// own marks a page of one entry too large to share one: it is never
	// sparse, as compacting it would only copy it to another of its own.
	own bool
}

// rec returns record id.
func (l *Store) rec(id int32) *rec { return &l.recs[id/recChunk].recs[id%recChunk] }

// recBlock is recChunk records and their reference bits. A hit sets its
// record's bit under the read lock, with an atomic store (slru.go); the
// rest of a record changes only under the write lock. The bits are beside
// the records, not in them, so that a view copies a record while other
// hits set its bit.
type recBlock struct {
	recs [recChunk]rec
	refs [recChunk]atomic.Uint32
}

// ref returns record id's reference bit: 1 if the entry was read since it
// was stored or last given another lap (slru.go).
func (l *Store) ref(id int32) *atomic.Uint32 { return &l.recs[id/recChunk].refs[id%recChunk] }

// view is what decode needs of an entry, copied under mu: its record, its
// page and, as the record says, its large value and its Ref. The bytes
// it refers to are never written again, so it is read without the lock.
type view struct {
	rec
	buf  []byte
	data *byte
	ref  any
}

// view returns record id's view. The caller holds mu.
func (l *Store) view(id int32) view {
	v := view{rec: *l.rec(id)}
	v.buf = l.pages[v.page].buf
	if l.large(int(v.dlen)) {
		v.data = l.big[id]
	}
	if v.flags&hasRef != 0 {
		v.ref = l.entryRefs[id]
	}
	return v
}

// bytesAt returns n bytes of r's in buf, from off on, with no capacity
// beyond them.
func bytesAt(buf []byte, r *rec, off, n int) []byte {
	o := int(r.off) + off
	return buf[o : o+n : o+n]
}

// key returns r's key. The caller holds mu.
func (l *Store) key(r *rec) string { return keyIn(l.pages[r.page].buf, r) }

// keyIn returns r's key, whose bytes are in buf.
func keyIn(buf []byte, r *rec) string {
	if r.klen == 0 {
		return ""
	}
	return unsafe.String(&bytesAt(buf, r, 0, 1)[0], r.klen)
}

// large reports whether a value of n bytes keeps an allocation of its own
// rather than going into the pages: over 1/packOf of a page, where there
// are pages.
func (l *Store) large(n int) bool { return l.pageSize > 0 && n > l.pageSize/packOf }

// packed returns the page bytes of r's entry: its header, key, content
// type, extras and a value that is not large.
func (l *Store) packed(r *rec) int {
	n := headLen + int(r.klen) + int(r.ctlen)
	if r.flags&hasExtra != 0 {
		n += extraLen
	}
	if !l.large(int(r.dlen)) {
		n += int(r.dlen)
	}
	return n
}

// clock returns now on r.exp's clock.
func (l *Store) clock(r *rec, now time.Time) int64 {
	if r.flags&wallClock != 0 {
		return now.UnixNano()
	}
	return int64(now.Sub(l.base))
}

// expiry returns t on the clock it was read from: an offset from l.base on
// the monotonic clock if t has a monotonic reading (a time.Now plus a TTL),
// as time.Time's own comparisons use it; else Unix nanoseconds (an expiry
// from another node), compared with the wall clock.
func (l *Store) expiry(t time.Time) (exp int64, wall bool) {
	if t == t.Round(0) { // no monotonic reading to strip
		switch sec := t.Unix(); {
		case sec >= math.MaxInt64/int64(time.Second):
			return math.MaxInt64, true
		case sec <= math.MinInt64/int64(time.Second):
			return math.MinInt64, true
		}
		return t.UnixNano(), true
	}
	return int64(t.Sub(l.base)), false
}

// satAdd returns a+b for b >= 0, or math.MaxInt64 where that overflows.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// extras returns the fields kept in r's bytes, which are in buf (zero
// without hasExtra).
func extras(buf []byte, r *rec) (swr, sie, age time.Duration) {
	if r.flags&hasExtra == 0 {
		return 0, 0, 0
	}
	b := bytesAt(buf, r, int(r.klen)+int(r.ctlen), extraLen)
	return time.Duration(binary.LittleEndian.Uint64(b)), time.Duration(binary.LittleEndian.Uint64(b[8:])),
		time.Duration(binary.LittleEndian.Uint64(b[16:]))
}

// graces returns the longer of r's own stale windows: an entry is kept that
// long past its expiry, or the store's staleGrace if longer, to be served
// stale.
func graces(buf []byte, r *rec) time.Duration {
	swr, sie, _ := extras(buf, r)
	return max(swr, sie)
}

// decode sets *e to the entry v shows. Its key, content type and Data are over
// the store's pages (or a large value's own allocation), shared with every
// other reader.
func (l *Store) decode(v *view, e *Entry) {
	r := &v.rec
	*e = Entry{Size: int64(r.size), Tag: r.tag, Loaded: r.loaded, Ref: v.ref,
		NotFound: r.flags&notFound != 0, Mark: r.flags&fallback != 0}
	val := &e.V
	off := int(r.klen)
	if r.ctlen > 0 {
		val.ContentType = unsafe.String(&bytesAt(v.buf, r, off, 1)[0], r.ctlen)
	}
	off += int(r.ctlen)
	if r.flags&hasExtra != 0 {
		val.StaleWhileRevalidate, val.StaleIfError, val.Age = extras(v.buf, r)
		off += extraLen
	}
	switch {
	case l.large(int(r.dlen)):
		val.Data = unsafe.Slice(v.data, r.dlen)
	case r.dlen > 0:
		val.Data = bytesAt(v.buf, r, off, int(r.dlen))
	case r.flags&nilData == 0:
		val.Data = []byte{}
	}
	switch {
	case r.flags&hasExpiry == 0:
	case r.flags&wallClock != 0:
		val.Expires = time.Unix(0, r.exp)
	default:
		val.Expires = l.base.Add(time.Duration(r.exp))
	}
	val.NoStore, val.Stale, val.Checksum = r.flags&noStore != 0, r.flags&stale != 0, r.checksum
}

// newRec returns a free record, growing the records by a chunk if none is.
func (l *Store) newRec() int32 {
	if l.free == noRecord {
		base := int32(len(l.recs) * recChunk)
		c := new(recBlock)
		for i := range c.recs {
			c.recs[i] = rec{page: noRecord, next: base + int32(i) + 1}
		}
		c.recs[recChunk-1].next = noRecord
		l.recs = append(l.recs, c)
		l.free = base
	}
	id := l.free
	l.free = l.rec(id).next
	return id
}

// reserve returns room for n bytes of record id's entry, after their
// header: in the current page, or in a new one if they do not fit there,
// or in a page of their own if they need more than 1/compactOf of one. That
// bound is what keeps compaction finite: a page closes when the next entry
// does not fit, so one that took only live entries (as a compaction's
// destination does) closes more than (compactOf-1)/compactOf live, which is
// not sparse.
func (l *Store) reserve(id int32, n int) (pi int32, off uint32) {
	need := headLen + n
	switch {
	case need*compactOf > l.pageSize:
		pi = l.addPage(need, true)
		defer l.closePage(pi)
	case l.cur == noRecord || len(l.pages[l.cur].buf)+need > cap(l.pages[l.cur].buf):
		if l.cur != noRecord {
			l.closePage(l.cur)
		}
		l.cur = l.addPage(l.pageSize, false)
		fallthrough
	default:
		pi = l.cur
	}
	p := l.pages[pi]
	o := len(p.buf)
	p.buf = p.buf[:o+need]
	binary.LittleEndian.PutUint32(p.buf[o:], uint32(id))
	binary.LittleEndian.PutUint32(p.buf[o+4:], uint32(n))
	p.live += need
	return pi, uint32(o + headLen)
}

// addPage adds a page of size bytes (for a shared page, all of its
// allocation's size class), of one entry if own, and returns its index.
func (l *Store) addPage(size int, own bool) int32 {
	// A page of its own has its exact size: the allocator's rounding
	// would be dead bytes, which in a small store are most of its slack.
	var buf []byte
	if own {
		buf = make([]byte, 0, size)
	} else {
		buf = slices.Grow(buf, size)
	}
	p := &page{buf: buf, own: own}
	if k := len(l.freePages); k > 0 {
		pi := l.freePages[k-1]
		l.freePages = l.freePages[:k-1]
		l.pages[pi] = p
		return pi
	}
	l.pages = append(l.pages, p)
	return int32(len(l.pages) - 1)
}

// closePage ends additions to page pi: all of it that is not live, its
// unused tail included, becomes dead.
func (l *Store) closePage(pi int32) {
	p := l.pages[pi]
	l.dead += int64(cap(p.buf) - p.live)
	l.note()
	p.closed = true
	if pi == l.cur {
		l.cur = noRecord
	}
	if l.isSparse(p) {
		l.sparse = append(l.sparse, pi)
	}
}

// sparse_ reports whether closed page p is to be compacted.
func (l *Store) isSparse(p *page) bool {
	return p.closed && !p.own && p.live*compactOf < cap(p.buf)*compactLive
}

// settle compacts the pages closed sparse, which pages closed by
// compacting them may add to. It runs after each change of the pages that
// may close one (an entry stored, an entry dropped), so that between
// them no closed page is sparse.
func (l *Store) settle() {
	for k := len(l.sparse); k > 0; k = len(l.sparse) {
		pi := l.sparse[k-1]
		l.sparse = l.sparse[:k-1]
		// It may have been dropped since, its index given to another.
		if p := l.pages[pi]; p != nil && l.isSparse(p) {
			l.compact(pi)
		}
	}
	if l.dead > max(l.maxBytes/deadHigh, l.cleanFloor, int64(l.pageSize)) && !l.cleaning {
		l.clean()
	}
}

// clean compacts closed pages, those with the fewest live bytes first,
// until the dead bytes are under 1/deadLow of the budget. A page whose
// dead entries (its unused tail aside) are under 1/(2 deadHigh) of it is
// left: a copy would reclaim little more than its tail, and leave another
// on the page it fills. A pass that cannot get under the bound (the tails
// alone are over it) sets cleanFloor, so that the next waits for more
// entries to die. The caller holds mu.
func (l *Store) clean() {
	l.cleaning = true
	defer func() { l.cleaning = false }()
	type candidate struct {
		pi   int32
		p    *page
		live int
	}
	var cs []candidate
	for pi, p := range l.pages {
		if p != nil && p.closed && !p.own && (len(p.buf)-p.live)*2*deadHigh >= cap(p.buf) {
			cs = append(cs, candidate{int32(pi), p, p.live})
		}
	}
	slices.SortFunc(cs, func(a, b candidate) int { return cmp.Compare(a.live, b.live) })
	for _, c := range cs {
		if l.dead <= l.maxBytes/deadLow {
			l.cleanFloor = 0
			return
		}
		// A page compacted before may have been freed since, and its index
		// given to a page this pass added.
		if l.pages[c.pi] == c.p {
			l.compact(c.pi)
		}
	}
	// What is left is mostly pages' unused tails, which compaction only
	// moves: the next pass waits for more dead bytes, which entries dying
	// since then will have left in pages it can compact.
	l.cleanFloor = l.dead + l.maxBytes/(2*deadHigh)
}

// drop removes record id: from the index and the list, its bytes dead. The
// caller holds mu.
func (l *Store) drop(id int32) {
	r := l.rec(id)
	l.unlink(id)
	delete(l.index, r.hash)
	if r.flags&hasRef != 0 {
		delete(l.entryRefs, id)
	}
	if l.large(int(r.dlen)) {
		delete(l.big, id)
	}
	l.n--
	l.bytes -= int64(r.size)
	pi, need := r.page, l.packed(r)
	*r = rec{page: noRecord, next: l.free}
	l.ref(id).Store(0)
	l.free = id
	p := l.pages[pi]
	p.live -= need
	if p.closed {
		l.dead += int64(need)
	}
	switch {
	case p.live == 0:
		l.freePage(pi)
	case l.isSparse(p):
		l.compact(pi)
	}
	l.settle()
	l.note()
}

// compact copies the live entries of closed page pi to the current page
// and drops pi. The copies' records point at them; a reader still holding
// the old bytes keeps them, unchanged.
func (l *Store) compact(pi int32) {
	l.compactions++
	p := l.pages[pi]
	for o := 0; o+headLen <= len(p.buf); {
		id := int32(binary.LittleEndian.Uint32(p.buf[o:]))
		n := int(binary.LittleEndian.Uint32(p.buf[o+4:]))
		at := o + headLen
		o = at + n
		r := l.rec(id)
		if r.page != pi || int(r.off) != at {
			continue // dead bytes
		}
		npi, noff := l.reserve(id, n)
		copy(l.pages[npi].buf[noff:int(noff)+n], p.buf[at:at+n])
		r.page, r.off = npi, noff
		p.live -= headLen + n
		l.dead += int64(headLen + n)
	}
	l.freePage(pi)
}

// freePage drops page pi, which no live entry holds.
func (l *Store) freePage(pi int32) {
	if p := l.pages[pi]; p.closed {
		l.dead -= int64(cap(p.buf))
		l.note()
	}
	l.pages[pi] = nil
	l.freePages = append(l.freePages, pi)
	if pi == l.cur {
		l.cur = noRecord
	}
}

// unlink takes record id out of its list.
func (l *Store) unlink(id int32) {
	r := l.rec(id)
	li := &l.lists[b2i(r.flags&frequent != 0)]
	if r.prev != noRecord {
		l.rec(r.prev).next = r.next
	} else {
		li.tail = r.next
	}
	if r.next != noRecord {
		l.rec(r.next).prev = r.prev
	} else {
		li.head = r.prev
	}
	li.bytes -= int64(r.size)
	r.prev, r.next = noRecord, noRecord
}

// pushFront makes record id the most recently used of list i.
func (l *Store) pushFront(id int32, i int) {
	r := l.rec(id)
	li := &l.lists[i]
	if i == 1 {
		r.flags |= frequent
	} else {
		r.flags &^= frequent
	}
	r.prev, r.next = li.head, noRecord
	if li.head != noRecord {
		l.rec(li.head).next = id
	} else {
		li.tail = id
	}
	li.head = id
	li.bytes += int64(r.size)
}
