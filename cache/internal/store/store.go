// Package store is ringcache's byte-bounded store: entries without
// pointers (records in chunks, keys and values of up to 2 KiB in pages of
// bytes), so that the collector does not visit a million small entries on
// every cycle, evicted by a segmented LRU or a CLOCK (slru.go) when their
// bytes and the pages' dead bytes pass the budget (pages.go).
//
// It keeps no policy of its own beyond the bytes: what an entry's Tag, Mark
// and Ref mean (a term, a lease, a fallback), and when an entry may be
// stored (Add's condition), belong to the cache above it.
package store

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

// Store is a byte-bounded LRU whose entries the collector does not visit: a
// map from the key's 64-bit hash (maphash, seeded per Store) to a record
// index, records in chunks, and keys, content types and small values in
// pages of bytes, none of which hold pointers. A budget of small values is
// a million entries; kept as objects with pointers, every collection would
// visit each of them, and under a memory limit collections are frequent.
// Only large values (over 2 KiB, less in a small store: pages.go) and the
// entries' Refs are referenced
// from maps with pointers, one entry per such value.
//
// bytes is the sum of the live entries' sizes; dead is the bytes of closed
// pages no live entry holds. Both count against maxBytes, so that the heap
// follows the budget however the pages fragment; compaction keeps dead
// under about 1/36 of the budget (settle, clean).
//
// Two keys with the same hash (about one chance in 10^7 among a million
// keys) cannot both be cached: storing one drops the other, as an eviction
// would. A Store is safe for concurrent use.
type Store struct {
	// mu is held shared by a hit, which only sets its record's reference
	// bit (slru.go), and exclusively by everything that changes the store.
	mu       *sync.RWMutex // shared with pool, if any (Pair)
	maxBytes int64         // guarded by mu
	// staleGrace is how long past their expiry entries are kept to be
	// served stale (the group's longer stale window; zero for hot copies).
	staleGrace time.Duration
	seed       maphash.Seed
	// base is the origin of the records' expiries, on the monotonic clock.
	base time.Time
	// pageSize is the size of a shared page; 0: none, every entry in a
	// page of its own (pages.go).
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
	entryRefs map[int32]any
	ghosts    []uint16 // fingerprints of keys evicted from probation (slru.go)
	cleaning  bool     // clean is running: the compactions it makes do not start another
	// cleanFloor is the dead bytes under which clean does not run again
	// after a pass that could not bring them under 1/deadLow of the budget.
	cleanFloor int64
	slru       bool // a segmented LRU (slru.go), else a CLOCK
	bytes      int64
	dead       int64
	// used is charged(), published after every change of it (note),
	// for the store that shares its budget with this one to read without mu.
	used atomic.Int64
	// share, if not nil, is the store this one shares its budget with (the
	// cache's hot copies, for its main cache): up to sharePart of what share uses
	// counts against this store's bound. What share holds beyond sharePart
	// it borrowed from the room this store left free, and gives it back
	// when this store grows (the cache lends: cache.Group.lend).
	share     *Store
	sharePart int64
	// pool, if not nil, is the other store of a pair (Pair): they share mu
	// and the primaries' bound, and evict the older of their candidates.
	// backup marks the store of the pair that holds the backups.
	pool   *Store
	backup bool
	// compactions counts the pages compacted, for tests.
	compactions int64

	evictions atomic.Int64
}

// New returns a store holding at most maxBytes; maxBytes <= 0 makes a store
// that stores nothing (a disabled hot cache).
func New(maxBytes int64) *Store {
	// Pages within the dead bytes' bound, or none (pages.go).
	ps := int64(pageMax)
	for ps >= pageMin && ps > maxBytes/deadHigh {
		ps /= 2
	}
	if ps < pageMin {
		ps = 0 // every entry in a page of its own
	}
	l := &Store{mu: new(sync.RWMutex), maxBytes: maxBytes, seed: maphash.MakeSeed(), base: time.Now(), pageSize: int(ps)}
	l.reset()
	return l
}

// reset drops every entry. The caller holds mu (or owns l).
func (l *Store) reset() {
	l.index = make(map[uint64]int32)
	l.recs, l.free, l.n = nil, noRecord, 0
	l.lists = [2]reclist{{noRecord, noRecord, 0}, {noRecord, noRecord, 0}}
	l.pages, l.freePages, l.cur, l.sparse = nil, nil, noRecord, nil
	l.big, l.entryRefs = make(map[int32]*byte), make(map[int32]any)
	l.bytes, l.dead = 0, 0
	l.note()
}

// note publishes charged() (used). The caller holds mu.
func (l *Store) note() { l.used.Store(l.charged()) }

// charged is what counts against maxBytes of the store's own: its entries
// and its pages' dead bytes. The ghost table (slru.go) has a slot per
// entry, in Overhead. The caller holds mu.
func (l *Store) charged() int64 { return l.bytes + l.dead }

func (l *Store) hash(key string) uint64 { return maphash.String(l.seed, key) }

// lookup returns the record of key, whose hash is h, or noRecord. The
// caller holds mu.
func (l *Store) lookup(h uint64, key string) int32 {
	id, ok := l.index[h]
	if !ok || l.key(l.rec(id)) != key {
		return noRecord
	}
	return id
}

// Get returns key's entry as GetInto finds it.
func (l *Store) Get(key string, clk *Clock) (e Entry, ok bool) {
	ok = l.GetInto(key, clk, &e)
	return e, ok
}

// GetInto sets *e to key's entry and marks it recently used. An entry past
// its expiry and grace at clk's now is dropped and reported missing (false,
// *e untouched); one within its grace is returned (the caller tells it is
// stale by its expiry). A hit decodes into the caller's entry rather than
// returning one: an entry is 152 bytes, and a hit is short enough for
// its copies to show. The clock is read, and the expiry tested, after the
// lock is released: every hit of the group takes that lock, and a clock
// read is as long as the rest of what it guards.
func (l *Store) GetInto(key string, clk *Clock, e *Entry) bool {
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
func (l *Store) past(r *rec, buf []byte, clk *Clock) bool {
	return r.flags&hasExpiry != 0 && l.clock(r, clk.Now()) >= satAdd(r.exp, int64(max(l.staleGrace, graces(buf, r))))
}

// dropExpired drops key's entry, whose hash is h, if it is past its expiry
// and grace at clk's now. It looks the key up again: another caller may
// have replaced the entry since it was read.
func (l *Store) dropExpired(h uint64, key string, clk *Clock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id := l.lookup(h, key); id != noRecord {
		if r := l.rec(id); l.past(r, l.pages[r.page].buf, clk) {
			l.drop(id)
		}
	}
}

// Add stores e under key, replacing any entry for key, and evicts entries
// by the policy until the bytes fit. If ok is not nil, e is stored only if
// ok, called under the lock with the Loaded of the entry e would replace
// (0: none), returns true: the cache discards this way a load that raced
// with a write or a ring change. An entry larger than the whole budget is
// not stored, but still replaces (removes) the old entry. Add reports
// whether e was stored. ok must be quick and call no user code.
//
// The entry's key, content type and a small value are copied into the
// store's pages, so that a key cut from a request line does not hold the
// whole line alive, uncounted; a large value is kept as it is, unless it
// sits in a buffer much larger than itself.
func (l *Store) Add(key string, e Entry, ok func(replaced int64) bool) bool {
	// Once per store, outside the lock, rather than once per read.
	e.V.Checksum = Checksum(e.V.Data)
	if d := e.V.Data; l.large(len(d)) && (len(d) <= packMax || cap(d)-len(d) > len(d)/8) {
		// A large value is kept as it is, but not with capacity the
		// budget does not see (a value read into a larger buffer); one a
		// large store would have packed is copied too, so that its
		// allocation is its own (not a slice of a batch's answer).
		e.V.Data = bytes.Clone(d)
	}
	h := l.hash(key)
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok != nil {
		var replaced int64
		if id, found := l.index[h]; found {
			replaced = l.rec(id).loaded
		}
		if !ok(replaced) {
			return false
		}
	}
	return l.put(h, key, &e)
}

// put is add under mu, for key's hash h (which tests choose, to make two
// keys collide).
func (l *Store) put(h uint64, key string, e *Entry) bool {
	// Whatever is stored under h (key's own entry, or a colliding key's)
	// is replaced, not kept beside it.
	old, replaced := l.index[h]
	if replaced {
		l.drop(old)
	}
	v := &e.V
	var data *byte // a large value's own allocation, kept as it is
	if l.large(len(v.Data)) {
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
	if e.Size > l.maxBytes || e.Size > math.MaxUint32 || uint64(headLen+n) > math.MaxUint32 || uint64(len(v.Data)) > math.MaxUint32 {
		return false
	}
	id := l.newRec()
	r := l.rec(id)
	*r = rec{hash: h, checksum: v.Checksum, tag: e.Tag, loaded: e.Loaded, size: uint32(e.Size),
		dlen: uint32(len(v.Data)), klen: uint32(len(key)), ctlen: uint32(len(v.ContentType))}
	for _, f := range []struct {
		on   bool
		flag uint16
	}{{e.NotFound, notFound}, {e.Mark, fallback}, {v.NoStore, noStore}, {v.Stale, stale}, {v.Data == nil, nilData},
		{xlen > 0, hasExtra}, {e.Ref != nil, hasRef}} {
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
	if e.Ref != nil {
		l.entryRefs[id] = e.Ref
	}
	l.settle()
	l.index[h] = id
	l.pushFront(id, l.admit(replaced, h))
	l.n++
	l.bytes += e.Size
	l.demote()
	if l.over() {
		l.sizeGhosts()
	}
	for l.over() && l.evictOne(id) {
	}
	l.note()
	if l.pool != nil {
		l.pool.note()
	}
	return true
}

// Fits reports whether an entry of size bytes for key would be stored
// without evicting another: it replaces key's own entry, if any.
func (l *Store) Fits(key string, size int64) bool {
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

// Remove drops key.
func (l *Store) Remove(key string) {
	h := l.hash(key)
	l.mu.Lock()
	if id := l.lookup(h, key); id != noRecord {
		l.drop(id)
	}
	l.mu.Unlock()
}

// Keyed is an entry with its key, as takeIf and walk hand them out.
type Keyed struct {
	Key string
	E   Entry
}

// each calls f with every record, least recently used first (the recent
// list's, then the frequent list's), until f returns false; f may drop the
// record it is given. The caller holds mu.
func (l *Store) each(f func(id int32, r *rec) bool) {
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

// TakeIf removes every entry for which take returns true and returns them,
// least recently used first. take runs under mu: it must be quick and call
// no user code.
func (l *Store) TakeIf(take func(key string) bool) []Keyed {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Keyed
	l.each(func(id int32, r *rec) bool {
		if k := l.key(r); take(k) {
			v := l.view(id)
			var e Entry
			l.decode(&v, &e)
			out = append(out, Keyed{k, e})
			l.drop(id)
		}
		return true
	})
	return out
}

// Newest returns up to n entries, the one eviction would reach last first
// (about the most recently used: a read counts when the eviction that
// reaches its entry gives it another lap, slru.go), without marking them
// used.
func (l *Store) Newest(n int) []Keyed {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]Keyed, 0, min(int64(n), l.n))
	for i := len(l.lists) - 1; i >= 0; i-- {
		for id := l.lists[i].head; id != noRecord && len(out) < n; id = l.rec(id).prev {
			v := l.view(id)
			var e Entry
			l.decode(&v, &e)
			out = append(out, Keyed{keyIn(v.buf, &v.rec), e})
		}
	}
	return out
}

// Entries returns every key and its entry, least recently used first,
// without marking them used. It holds the lock only to copy the list (two
// walks of it, no lookups).
func (l *Store) Entries() ([]string, []Entry) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	keys, es := make([]string, 0, l.n), make([]Entry, 0, l.n)
	l.each(func(id int32, r *rec) bool {
		v := l.view(id)
		var e Entry
		l.decode(&v, &e)
		keys, es = append(keys, keyIn(v.buf, r)), append(es, e)
		return true
	})
	return keys, es
}

// AddIfAbsent is Add for a key that has no entry yet: it stores nothing
// (and reports false) when key has one.
func (l *Store) AddIfAbsent(key string, e Entry, ok func(replaced int64) bool) bool {
	h := l.hash(key)
	l.mu.RLock()
	id := l.lookup(h, key)
	l.mu.RUnlock()
	if id != noRecord {
		return false
	}
	// Another Add may slip in between: the caller's ok decides whether
	// this one replaces it (the cache's guard: a write in between broke it).
	return l.Add(key, e, ok)
}

// SetMax changes the byte bound, evicting least recently used entries
// until the bytes fit.
func (l *Store) SetMax(maxBytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maxBytes = maxBytes
	l.trimLocked()
}

// Trim evicts the least recently used entries until the bound holds again:
// for a store that shares its budget, after the other store grew within
// its part.
func (l *Store) Trim() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trimLocked()
}

func (l *Store) trimLocked() {
	for l.over() && l.evictOne(noRecord) {
	}
	l.demote()
	l.note()
	if l.pool != nil {
		l.pool.note()
	}
}

// Room returns the bytes the bound leaves unused, the share's part taken.
func (l *Store) Room() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return max(0, l.maxBytes-l.charged()-l.lent())
}

// Unused returns the bytes neither this store, nor its share, nor its
// pool's backups use: what an entry of the share may take without
// evicting anything.
func (l *Store) Unused() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var shared int64
	if l.share != nil {
		shared = l.share.used.Load()
	}
	if l.pool != nil && !l.backup {
		shared += l.pool.charged()
	}
	return l.maxBytes - l.charged() - shared
}

// Clear drops every entry.
func (l *Store) Clear() {
	l.mu.Lock()
	l.reset()
	l.mu.Unlock()
}

// RemoveIf drops every key for which drop returns true and returns how many
// it dropped. drop runs under mu: it must be quick and call no user code.
func (l *Store) RemoveIf(drop func(key string) bool) int {
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

// DeadBytes returns the bytes of closed pages that no entry holds, until a
// compaction drops them: they count against the budget with the entries.
func (l *Store) DeadBytes() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.dead
}

// Usage returns the accounted bytes and the number of entries.
func (l *Store) Usage() (bytes, items int64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bytes, l.n
}

// SetSLRU picks the eviction policy: a segmented LRU if on, else a CLOCK
// (slru.go). Call it before the store is used.
func (l *Store) SetSLRU(on bool) { l.slru = on }

// SetStaleGrace keeps entries up to d past their expiry, to be served
// stale, when their own stale windows are shorter. Call it before the
// store is used.
func (l *Store) SetStaleGrace(d time.Duration) { l.staleGrace = d }

// MaxBytes returns the byte bound.
func (l *Store) MaxBytes() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.maxBytes
}

// Evictions returns how many entries were evicted to make room.
func (l *Store) Evictions() int64 { return l.evictions.Load() }

// Compactions returns how many pages were compacted.
func (l *Store) Compactions() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.compactions
}

// PageSize returns the size of the store's pages.
func (l *Store) PageSize() int { return l.pageSize }
