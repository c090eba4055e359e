package cache

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// entryOverhead is what one cached entry costs beyond its key, value and
// content type bytes: its record (80 bytes), its slot in the index (a
// uint64 and an int32, 16 bytes in a table kept between 7/16 and 7/8
// full), the 8-byte header before its bytes in a page, its slot in the
// ghost table (2 to 4 bytes, slru.go), and the records freed since the
// most entries were held, which wait to be taken again. Measured on amd64
// with runtime.MemStats, once filled and once churned
// (TestEntryOverheadMatchesHeap and ...UnderChurn keep this honest): it
// varies with how full the index's tables are, from about 115 to 140. The
// pages' dead bytes are not in it: the lru counts them against the budget
// as they arise.
const entryOverhead = 140

// entry is one key's entry as the LRU hands it out and takes it in.
type entry struct {
	// v is the value served; v.Expires is the effective expiry (zero: none).
	v Value
	// size is the entry's accounted size in bytes, fixed when it is added.
	size int64
	// src, for a hot copy, is the owner whose contact lease it is served
	// under (nil: no lease, HotTTL alone bounds it).
	src Leaser
	// stamp is the term (main cache) or the contact epoch of src (hot
	// cache) the entry was stored under; it is served only while that
	// still holds.
	stamp uint64
	// loaded is when the entry was loaded or written, in Unix nanoseconds,
	// for a stale answer's Age.
	loaded int64
	// notFound marks a remembered ErrNotFound: v is empty.
	notFound bool
	// fallback marks a hot copy loaded here because src could not be
	// reached: it is served without a lease, until src is in contact again.
	fallback bool
}

// clock is one reading of time.Now, taken when first asked for: a hit reads
// the clock once, however many of its checks need it, and not at all when
// none does (a value that never expires, under no lease).
type clock struct{ t time.Time }

func (c *clock) now() time.Time {
	if c.t.IsZero() {
		c.t = time.Now()
	}
	return c.t
}

// expired reports whether e must no longer be served at now.
func (e *entry) expired(now time.Time) bool {
	return !e.v.Expires.IsZero() && !now.Before(e.v.Expires)
}

// EntryBytes is what an entry costs against GroupConfig.MaxBytes: its key,
// value and content type bytes and a fixed overhead (the sizing rule,
// deploy/README.md). A budget of C entries is C times it; a group holds at
// least 0.97 C of them, the rest going to its pages' dead bytes.
func EntryBytes(key string, v Value) int64 { return entrySize(key, v) }

// entrySize is the accounted size of an entry for key holding v.
func entrySize(key string, v Value) int64 {
	n := int64(len(key)) + int64(len(v.Data)) + int64(len(v.ContentType)) + entryOverhead
	if hasExtras(v) {
		n += extraLen
	}
	return n
}

// hasExtras reports whether v sets a field that an entry keeps in its bytes
// rather than in its record.
func hasExtras(v Value) bool {
	return v.StaleWhileRevalidate != 0 || v.StaleIfError != 0 || v.Age != 0
}

// lru is a byte-bounded LRU whose entries the collector does not visit: a
// map from the key's 64-bit hash (maphash, seeded per lru) to a record
// index, records in chunks, and keys, content types and small values in
// pages of bytes, none of which hold pointers. A budget of small values is
// a million entries; kept as objects with pointers, every collection would
// visit each of them, and under a memory limit collections are frequent.
// Only values larger than packMax and hot copies' leases are referenced
// from maps with pointers, one entry per such value.
//
// bytes is the sum of the live entries' sizes; dead is the bytes of closed
// pages no live entry holds. Both count against maxBytes, so that the heap
// follows the budget however the pages fragment; compaction keeps dead
// under about 1/36 of the budget (settle, clean).
//
// Two keys with the same hash (about one chance in 10^7 among a million
// keys) cannot both be cached: storing one drops the other, as an eviction
// would. An lru is safe for concurrent use.
type lru struct {
	// mu is held shared by a hit, which only sets its record's reference
	// bit (slru.go), and exclusively by everything that changes the lru.
	mu       sync.RWMutex
	maxBytes int64 // guarded by mu
	// staleGrace is how long past their expiry entries are kept to be
	// served stale (the group's longer stale window; zero for hot copies).
	staleGrace time.Duration
	seed       maphash.Seed
	// base is the origin of the records' expiries, on the monotonic clock.
	base     time.Time
	pageSize int

	// The rest is guarded by mu.
	index     map[uint64]int32
	recs      []*recBlock
	free      int32      // first free record, chained by next
	lists     [2]reclist // probation and protected (slru.go); only probation without slru
	n         int64
	pages     []*page
	freePages []int32
	cur       int32   // the page entries are added to; noRecord: none yet
	sparse    []int32 // pages closed sparse, to be compacted
	big       map[int32]*byte
	srcs      map[int32]Leaser
	ghosts    []uint16 // fingerprints of keys evicted from probation (slru.go)
	cleaning  bool     // clean is running: the compactions it makes do not start another
	// cleanFloor is the dead bytes under which clean does not run again
	// after a pass that could not bring them under 1/deadLow of the budget.
	cleanFloor int64
	slru       bool // the policy is PolicySLRU (slru.go), else PolicyLRU
	bytes      int64
	dead       int64
	// used is charged(), published after every change of it (note),
	// for the lru that shares its budget with this one to read without mu.
	used atomic.Int64
	// share, if not nil, is the lru this one shares its budget with (the
	// hot cache, for the main cache): up to sharePart of what share uses
	// counts against this lru's bound. What share holds beyond sharePart
	// it borrowed from the room this lru left free, and gives it back
	// when this lru grows (Group.lend).
	share     *lru
	sharePart int64
	// compactions counts the pages compacted, for tests.
	compactions int64

	evictions atomic.Int64
}

// newLRU returns an lru holding at most maxBytes; maxBytes <= 0 makes an lru
// that stores nothing (a disabled hot cache).
func newLRU(maxBytes int64) *lru {
	// A page of pageMax bytes where it is under the dead bytes' bound,
	// else at most half of it and a sixteenth of the budget (pages.go).
	ps := int64(pageMax)
	for ps > pageMin && (ps > maxBytes/16 || ps == pageMax && ps > maxBytes/deadHigh) {
		ps /= 2
	}
	l := &lru{maxBytes: maxBytes, seed: maphash.MakeSeed(), base: time.Now(), pageSize: int(ps)}
	l.reset()
	return l
}

// reset drops every entry. The caller holds mu (or owns l).
func (l *lru) reset() {
	l.index = make(map[uint64]int32)
	l.recs, l.free, l.n = nil, noRecord, 0
	l.lists = [2]reclist{{noRecord, noRecord, 0}, {noRecord, noRecord, 0}}
	l.pages, l.freePages, l.cur, l.sparse = nil, nil, noRecord, nil
	l.big, l.srcs = make(map[int32]*byte), make(map[int32]Leaser)
	l.bytes, l.dead = 0, 0
	l.note()
}

// note publishes charged() (used). The caller holds mu.
func (l *lru) note() { l.used.Store(l.charged()) }

// charged is what counts against maxBytes of the lru's own: its entries
// and its pages' dead bytes. The ghost table (slru.go) has a slot per
// entry, in entryOverhead. The caller holds mu.
func (l *lru) charged() int64 { return l.bytes + l.dead }

// lent returns the bytes of share that count against this lru's bound.
func (l *lru) lent() int64 {
	if l.share == nil {
		return 0
	}
	return min(l.share.used.Load(), l.sharePart)
}

// over reports whether the entries, the dead bytes and the share's part
// exceed the bound. The caller holds mu.
func (l *lru) over() bool { return l.charged()+l.lent() > l.maxBytes }

func (l *lru) hash(key string) uint64 { return maphash.String(l.seed, key) }

// lookup returns the record of key, whose hash is h, or noRecord. The
// caller holds mu.
func (l *lru) lookup(h uint64, key string) int32 {
	id, ok := l.index[h]
	if !ok || l.key(l.rec(id)) != key {
		return noRecord
	}
	return id
}

// get returns key's entry as getInto finds it.
func (l *lru) get(key string, clk *clock) (e entry, ok bool) {
	ok = l.getInto(key, clk, &e)
	return e, ok
}

// getInto sets *e to key's entry and marks it recently used. An entry past
// its expiry and grace at clk's now is dropped and reported missing (false,
// *e untouched); one within its grace is returned (the caller tells it is
// stale by its expiry). A hit decodes into the caller's entry rather than
// returning one: an entry is 152 bytes, and a hit is short enough for
// its copies to show. The clock is read, and the expiry tested, after the
// lock is released: every hit of the group takes that lock, and a clock
// read is as long as the rest of what it guards.
func (l *lru) getInto(key string, clk *clock, e *entry) bool {
	h := l.hash(key)
	l.mu.RLock()
	id := l.lookup(h, key)
	if id == noRecord {
		l.mu.RUnlock()
		return false
	}
	l.touch(id)
	v := l.view(id)
	l.mu.RUnlock()
	if l.past(&v.rec, v.buf, clk) {
		l.dropExpired(h, key, clk)
		return false
	}
	l.decode(&v, e)
	return true
}

// past reports whether r, whose bytes are in buf, is past its expiry and
// grace at clk's now: no longer to be served, even stale. It reads clk only
// for an entry that expires.
func (l *lru) past(r *rec, buf []byte, clk *clock) bool {
	return r.flags&hasExpiry != 0 && l.clock(r, clk.now()) >= satAdd(r.exp, int64(max(l.staleGrace, graces(buf, r))))
}

// dropExpired drops key's entry, whose hash is h, if it is past its expiry
// and grace at clk's now. It looks the key up again: another caller may
// have replaced the entry since it was read.
func (l *lru) dropExpired(h uint64, key string, clk *clock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id := l.lookup(h, key); id != noRecord {
		if r := l.rec(id); l.past(r, l.pages[r.page].buf, clk) {
			l.drop(id)
		}
	}
}

// add stores e under key, replacing any entry for key, and evicts least
// recently used entries until the bytes fit. e is stored only if g holds at
// the moment of storing (checked under mu): this is how a load that raced
// with a Remove, a Set or a ring change is discarded. An entry larger than
// the whole budget is not stored, but still replaces (removes) the old
// entry. add reports whether e was stored.
//
// The entry's key, content type and a small value are copied into the
// lru's pages, so that a key cut from a request line does not hold the
// whole line alive, uncounted; a large value is kept as it is, unless it
// sits in a buffer much larger than itself.
func (l *lru) add(key string, e entry, g guard) bool {
	// Once per store, outside the lock, rather than once per read.
	e.v.Checksum = Checksum(e.v.Data)
	if d := e.v.Data; len(d) > packMax && cap(d)-len(d) > len(d)/8 {
		// A large value is kept as it is, but not with capacity the
		// budget does not see (a value read into a larger buffer).
		e.v.Data = bytes.Clone(d)
	}
	h := l.hash(key)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !g.holds() {
		return false
	}
	if old, ok := l.index[h]; ok && g.began != 0 && l.rec(old).loaded > g.began {
		return false // stored after the load began: newer than the load's result
	}
	return l.put(h, key, &e)
}

// put is add under mu, for key's hash h (which tests choose, to make two
// keys collide).
func (l *lru) put(h uint64, key string, e *entry) bool {
	// Whatever is stored under h (key's own entry, or a colliding key's)
	// is replaced, not kept beside it.
	old, replaced := l.index[h]
	if replaced {
		l.drop(old)
	}
	v := &e.v
	var data *byte // a large value's own allocation, kept as it is
	if len(v.Data) > packMax {
		data = unsafe.SliceData(v.Data)
	}
	xlen := 0
	if hasExtras(*v) {
		xlen = extraLen
	}
	n := len(key) + len(v.ContentType) + xlen
	if data == nil {
		n += len(v.Data)
	}
	if e.size > l.maxBytes || e.size > math.MaxUint32 || uint64(headLen+n) > math.MaxUint32 || uint64(len(v.Data)) > math.MaxUint32 {
		return false
	}
	id := l.newRec()
	r := l.rec(id)
	*r = rec{hash: h, checksum: v.Checksum, stamp: e.stamp, loaded: e.loaded, size: uint32(e.size),
		dlen: uint32(len(v.Data)), klen: uint32(len(key)), ctlen: uint32(len(v.ContentType))}
	for _, f := range []struct {
		on   bool
		flag uint16
	}{{e.notFound, notFound}, {e.fallback, fallback}, {v.NoStore, noStore}, {v.Stale, stale}, {v.Data == nil, nilData},
		{xlen > 0, hasExtra}, {e.src != nil, leased}} {
		if f.on {
			r.flags |= f.flag
		}
	}
	if !v.Expires.IsZero() {
		r.flags |= hasExpiry
		var wall bool
		if r.exp, wall = l.expiry(v.Expires); wall {
			r.flags |= wallClock
		}
	}
	r.page, r.off = l.reserve(id, n)
	b := l.pages[r.page].buf[r.off : int(r.off)+n]
	b = b[copy(b, key):]
	b = b[copy(b, v.ContentType):]
	if xlen > 0 {
		binary.LittleEndian.PutUint64(b, uint64(v.StaleWhileRevalidate))
		binary.LittleEndian.PutUint64(b[8:], uint64(v.StaleIfError))
		binary.LittleEndian.PutUint64(b[16:], uint64(v.Age))
		b = b[xlen:]
	}
	if data != nil {
		l.big[id] = data
	} else {
		copy(b, v.Data)
	}
	if e.src != nil {
		l.srcs[id] = e.src
	}
	l.settle()
	l.index[h] = id
	l.pushFront(id, l.admit(replaced, h))
	l.n++
	l.bytes += e.size
	l.demote()
	if l.over() {
		l.sizeGhosts()
	}
	for l.over() {
		v := l.victim(id)
		if v == noRecord {
			break
		}
		l.evict(v)
	}
	l.note()
	return true
}

// fits reports whether an entry of size bytes for key would be stored
// without evicting another: it replaces key's own entry, if any.
func (l *lru) fits(key string, size int64) bool {
	h := l.hash(key)
	l.mu.RLock()
	defer l.mu.RUnlock()
	free := l.maxBytes - l.charged() - l.lent()
	// Whatever is stored under key's hash (key's own entry, or a colliding
	// key's) is replaced, not kept beside it.
	if id, ok := l.index[h]; ok {
		free += int64(l.rec(id).size)
	}
	return size <= free
}

// remove drops key.
func (l *lru) remove(key string) {
	h := l.hash(key)
	l.mu.Lock()
	if id := l.lookup(h, key); id != noRecord {
		l.drop(id)
	}
	l.mu.Unlock()
}

// keyed is an entry with its key, as takeIf and walk hand them out.
type keyed struct {
	key string
	e   entry
}

// each calls f with every record, least recently used first (the recent
// list's, then the frequent list's), until f returns false; f may drop the
// record it is given. The caller holds mu.
func (l *lru) each(f func(id int32, r *rec) bool) {
	for i := range l.lists {
		for id := l.lists[i].tail; id != noRecord; {
			r := l.rec(id)
			next := r.next
			if !f(id, r) {
				return
			}
			id = next
		}
	}
}

// takeIf removes every entry for which take returns true and returns them,
// least recently used first. take runs under mu: it must be quick and call
// no user code.
func (l *lru) takeIf(take func(key string) bool) []keyed {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []keyed
	l.each(func(id int32, r *rec) bool {
		if k := l.key(r); take(k) {
			v := l.view(id)
			var e entry
			l.decode(&v, &e)
			out = append(out, keyed{k, e})
			l.drop(id)
		}
		return true
	})
	return out
}

// newest returns up to n entries, the one eviction would reach last first
// (about the most recently used: a read counts when the eviction that
// reaches its entry gives it another lap, slru.go), without marking them
// used.
func (l *lru) newest(n int) []keyed {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]keyed, 0, min(int64(n), l.n))
	for i := len(l.lists) - 1; i >= 0; i-- {
		for id := l.lists[i].head; id != noRecord && len(out) < n; id = l.rec(id).prev {
			v := l.view(id)
			var e entry
			l.decode(&v, &e)
			out = append(out, keyed{keyIn(v.buf, &v.rec), e})
		}
	}
	return out
}

// entries returns every key and its entry, least recently used first,
// without marking them used. The caller holds mu.
func (l *lru) entries() ([]string, []entry) {
	keys, es := make([]string, 0, l.n), make([]entry, 0, l.n)
	l.each(func(id int32, r *rec) bool {
		v := l.view(id)
		var e entry
		l.decode(&v, &e)
		keys, es = append(keys, keyIn(v.buf, r)), append(es, e)
		return true
	})
	return keys, es
}

// addIfAbsent is add for a key that has no entry yet: it stores nothing
// (and reports false) when key has one.
func (l *lru) addIfAbsent(key string, e entry, g guard) bool {
	h := l.hash(key)
	l.mu.RLock()
	id := l.lookup(h, key)
	l.mu.RUnlock()
	if id != noRecord {
		return false
	}
	// Another add may slip in between: it stores a value at least as new
	// (a write or a load), and this one then replaces it only if the guard
	// still holds, which a write would have broken.
	return l.add(key, e, g)
}

// setMax changes the byte bound, evicting least recently used entries
// until the bytes fit.
func (l *lru) setMax(maxBytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maxBytes = maxBytes
	l.trimLocked()
}

// trim evicts the least recently used entries until the bound holds again:
// for the main cache, after the hot cache grew within its part.
func (l *lru) trim() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trimLocked()
}

func (l *lru) trimLocked() {
	for l.over() {
		v := l.victim(noRecord)
		if v == noRecord {
			break
		}
		l.evict(v)
	}
	l.demote()
	l.note()
}

// room returns the bytes the bound leaves unused, the share's part taken.
func (l *lru) room() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return max(0, l.maxBytes-l.charged()-l.lent())
}

// unused returns the bytes neither this lru nor its share uses: what an
// entry of the share may take without evicting anything.
func (l *lru) unused() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var shared int64
	if l.share != nil {
		shared = l.share.used.Load()
	}
	return l.maxBytes - l.charged() - shared
}

// clear drops every entry.
func (l *lru) clear() {
	l.mu.Lock()
	l.reset()
	l.mu.Unlock()
}

// removeIf drops every key for which drop returns true and returns how many
// it dropped. drop runs under mu: it must be quick and call no user code.
func (l *lru) removeIf(drop func(key string) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	l.each(func(id int32, r *rec) bool {
		if drop(l.key(r)) {
			l.drop(id)
			n++
		}
		return true
	})
	return n
}

// deadBytes returns the bytes of closed pages that no entry holds, until a
// compaction drops them: they count against the budget with the entries.
func (l *lru) deadBytes() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.dead
}

// usage returns the accounted bytes and the number of entries.
func (l *lru) usage() (bytes, items int64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bytes, l.n
}
