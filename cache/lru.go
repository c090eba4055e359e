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

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// entryOverhead is what one cached entry costs beyond its key, value and
// content type bytes: golang-lru's list element (three pointers, the key's
// hash, our 96-byte slot, its unused ExpiresAt) in a 160-byte size class,
// the map slot that indexes it, and the rounding of the entry's allocation
// to its size class. Measured on amd64 with runtime.MemStats
// (TestEntryOverheadMatchesHeap keeps this honest): it varies with how
// full the map's tables are and with the size classes a value falls in.
const entryOverhead = 192

// packMax is the largest value whose bytes share the entry's one
// allocation with its key and content type. A million small entries cost
// the collector one object each instead of three; a larger value keeps an
// allocation of its own, which costs the collector as little (it holds no
// pointers) and is not copied, unless it sits in a buffer much larger than
// itself.
const packMax = 512

// extraLen is the room an entry's allocation gives to the fields few
// values set (their stale windows, an Age): they are not in the slot,
// which every entry has.
const extraLen = 24

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

	// from, in an entry the LRU handed out, is where its bytes are: add
	// stores such an entry again (a hand-off moves it from the main cache)
	// without copying them while its key and value are still those bytes.
	from slotMem
}

// slotMem is the allocation of an entry's slot: mem and data as in slot, n
// the length of mem.
type slotMem struct {
	mem, data *byte
	n         int
}

// slot is what simplelru holds for one key, under the key's hash: an entry
// with as few pointers and bytes as it goes, since a budget of small values
// is a million of them and the collector visits each on every cycle.
//
// mem holds the key, the content type, the extra fields (with hasExtra)
// and a value of at most packMax bytes, in that order, in one allocation
// without pointers. Nothing writes to it after add fills it: the key and
// the content type are strings over it, and the value's Data (which
// callers must not modify) comes after them, with no capacity beyond its
// end.
type slot struct {
	mem *byte
	// data is the value's bytes when they are not in mem: a value larger
	// than packMax; nil otherwise.
	data *byte
	dlen int
	// klen and ctlen are the lengths of the key and the content type.
	klen, ctlen uint32
	// exp is the value's expiry (with hasExpiry): an offset from the
	// lru's base on the monotonic clock, or with wallClock Unix
	// nanoseconds, as Value.Expires had a monotonic reading or not.
	exp             int64
	checksum, stamp uint64
	loaded, size    int64
	src             Leaser
	flags           uint8
}

// slot flags.
const (
	notFound  = 1 << iota
	fallback  // entry.fallback
	hasExpiry // exp is set
	wallClock // exp is on the wall clock
	hasExtra  // mem holds StaleWhileRevalidate, StaleIfError and Age
	noStore   // Value.NoStore
	stale     // Value.Stale
	nilData   // Value.Data is nil (not merely empty)
)

// expired reports whether e must no longer be served at now.
func (e *entry) expired(now time.Time) bool {
	return !e.v.Expires.IsZero() && !now.Before(e.v.Expires)
}

// entrySize is the accounted size of an entry for key holding v.
func entrySize(key string, v Value) int64 {
	n := int64(len(key)) + int64(len(v.Data)) + int64(len(v.ContentType)) + entryOverhead
	if hasExtras(v) {
		n += extraLen
	}
	return n
}

// hasExtras reports whether v sets a field that an entry keeps in its
// allocation rather than in its slot.
func hasExtras(v Value) bool {
	return v.StaleWhileRevalidate != 0 || v.StaleIfError != 0 || v.Age != 0
}

// lru is a byte-bounded LRU over golang-lru's simplelru, which bounds
// entries only: it is given an entry limit it never reaches and lru evicts
// the least recently used entries itself until the bytes fit. Every removal
// goes through simplelru's eviction callback, which is the only place bytes
// decrease, so that bytes always equals the sum of the sizes of the entries
// simplelru holds. The callback runs under mu but calls no user code.
//
// simplelru is keyed by the key's 64-bit hash (maphash, seeded per lru),
// so that its map and list hold no pointer to the key; the key itself is in
// the slot's allocation, and a lookup compares it. Two keys with the same
// hash (about one chance in 10^7 among a million keys) cannot both be
// cached: storing one drops the other, as an eviction would.
// An lru is safe for concurrent use.
type lru struct {
	mu       sync.Mutex
	maxBytes int64 // guarded by mu
	// staleGrace is how long past their expiry entries are kept to be
	// served stale (the group's longer stale window; zero for hot copies).
	staleGrace time.Duration
	c          *simplelru.LRU[uint64, slot]
	bytes      int64 // guarded by mu
	seed       maphash.Seed
	// base is the origin of the slots' expiries, on the monotonic clock.
	base time.Time

	evictions atomic.Int64
}

// newLRU returns an lru holding at most maxBytes; maxBytes <= 0 makes an lru
// that stores nothing (a disabled hot cache).
func newLRU(maxBytes int64) *lru {
	l := &lru{maxBytes: maxBytes, seed: maphash.MakeSeed(), base: time.Now()}
	// simplelru rejects only a size <= 0, so this cannot fail.
	c, err := simplelru.NewLRU(math.MaxInt, func(_ uint64, s slot) {
		l.bytes -= s.size
	})
	if err != nil {
		panic("cache: simplelru.NewLRU: " + err.Error())
	}
	l.c = c
	return l
}

func (l *lru) hash(key string) uint64 { return maphash.String(l.seed, key) }

// clock returns now on s.exp's clock.
func (l *lru) clock(s *slot, now time.Time) int64 {
	if s.flags&wallClock != 0 {
		return now.UnixNano()
	}
	return int64(now.Sub(l.base))
}

// expiry returns t on the clock it was read from: an offset from l.base on
// the monotonic clock if t has a monotonic reading (a time.Now plus a TTL),
// as time.Time's own comparisons use it; else Unix nanoseconds (an expiry
// from another node), compared with the wall clock.
func (l *lru) expiry(t time.Time) (exp int64, wall bool) {
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

// get returns key's entry and marks it recently used. An entry past its
// expiry and grace is dropped and reported missing; one within its grace is
// returned (the caller tells it is stale by its expiry).
func (l *lru) get(key string) (entry, bool) {
	h := l.hash(key)
	l.mu.Lock()
	s, ok := l.c.Get(h)
	ok = ok && s.key() == key
	if ok && s.flags&hasExpiry != 0 && l.clock(&s, time.Now()) >= satAdd(s.exp, int64(max(l.staleGrace, s.graces()))) {
		l.c.Remove(h)
		ok = false
	}
	l.mu.Unlock()
	if !ok {
		return entry{}, false
	}
	return l.decode(&s), true
}

// satAdd returns a+b for b >= 0, or math.MaxInt64 where that overflows.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// key returns the slot's key.
func (s *slot) key() string {
	if s.klen == 0 {
		return ""
	}
	return unsafe.String(s.mem, s.klen)
}

// at returns the byte at offset off of mem.
func (s *slot) at(off uintptr) *byte { return (*byte)(unsafe.Add(unsafe.Pointer(s.mem), off)) }

// extras returns the fields kept in mem (zero without hasExtra).
func (s *slot) extras() (swr, sie, age time.Duration) {
	if s.flags&hasExtra == 0 {
		return 0, 0, 0
	}
	b := unsafe.Slice(s.at(uintptr(s.klen)+uintptr(s.ctlen)), extraLen)
	return time.Duration(binary.LittleEndian.Uint64(b)), time.Duration(binary.LittleEndian.Uint64(b[8:])),
		time.Duration(binary.LittleEndian.Uint64(b[16:]))
}

// graces returns the longer of the slot's own stale windows: an entry is
// kept that long past its expiry, or the LRU's staleGrace if longer, to be
// served stale.
func (s *slot) graces() time.Duration {
	swr, sie, _ := s.extras()
	return max(swr, sie)
}

// decode returns the entry s holds. Its key, content type and Data are
// over s's allocation, shared with every other reader.
func (l *lru) decode(s *slot) entry {
	e := entry{size: s.size, src: s.src, stamp: s.stamp, loaded: s.loaded, from: slotMem{mem: s.mem, data: s.data},
		notFound: s.flags&notFound != 0, fallback: s.flags&fallback != 0}
	v := &e.v
	off := uintptr(s.klen)
	if s.ctlen > 0 {
		v.ContentType = unsafe.String(s.at(off), s.ctlen)
	}
	off += uintptr(s.ctlen)
	if s.flags&hasExtra != 0 {
		v.StaleWhileRevalidate, v.StaleIfError, v.Age = s.extras()
		off += extraLen
	}
	e.from.n = int(off)
	switch {
	case s.data != nil:
		v.Data = unsafe.Slice(s.data, s.dlen)
	case s.dlen > 0:
		v.Data = unsafe.Slice(s.at(off), s.dlen)
		e.from.n += s.dlen
	case s.flags&nilData == 0:
		v.Data = []byte{}
	}
	switch {
	case s.flags&hasExpiry == 0:
	case s.flags&wallClock != 0:
		v.Expires = time.Unix(0, s.exp)
	default:
		v.Expires = l.base.Add(time.Duration(s.exp))
	}
	v.NoStore, v.Stale, v.Checksum = s.flags&noStore != 0, s.flags&stale != 0, s.checksum
	return e
}

// encode returns the slot that holds e for key, its bytes copied into one
// new allocation (unless e came from a slot and still matches it). ok is
// false if key or the content type is too long for a slot (4 GiB).
func (l *lru) encode(key string, e *entry) (s slot, ok bool) {
	v := &e.v
	if uint64(len(key)) > math.MaxUint32 || uint64(len(v.ContentType)) > math.MaxUint32 {
		return slot{}, false
	}
	s = slot{dlen: len(v.Data), klen: uint32(len(key)), ctlen: uint32(len(v.ContentType)),
		checksum: v.Checksum, stamp: e.stamp, loaded: e.loaded, size: e.size, src: e.src}
	for _, f := range []struct {
		on   bool
		flag uint8
	}{{e.notFound, notFound}, {e.fallback, fallback}, {v.NoStore, noStore}, {v.Stale, stale}, {v.Data == nil, nilData}} {
		if f.on {
			s.flags |= f.flag
		}
	}
	if !v.Expires.IsZero() {
		s.flags |= hasExpiry
		var wall bool
		if s.exp, wall = l.expiry(v.Expires); wall {
			s.flags |= wallClock
		}
	}
	var extra [extraLen]byte
	xlen := 0
	if hasExtras(*v) {
		s.flags |= hasExtra
		binary.LittleEndian.PutUint64(extra[:], uint64(v.StaleWhileRevalidate))
		binary.LittleEndian.PutUint64(extra[8:], uint64(v.StaleIfError))
		binary.LittleEndian.PutUint64(extra[16:], uint64(v.Age))
		xlen = extraLen
	}
	head := len(key) + len(v.ContentType) + xlen
	if matches(e, key, extra[:xlen]) {
		s.mem, s.data = e.from.mem, e.from.data
		return s, true
	}
	n := head
	switch {
	case len(v.Data) <= packMax:
		n += len(v.Data)
	case cap(v.Data)-len(v.Data) > len(v.Data)/8:
		// Capacity the budget does not see (a value read into a larger
		// buffer): keep only the bytes.
		s.data = unsafe.SliceData(bytes.Clone(v.Data))
	default:
		s.data = unsafe.SliceData(v.Data)
	}
	if n > 0 {
		b := make([]byte, n)
		copy(b, key)
		copy(b[len(key):], v.ContentType)
		copy(b[len(key)+len(v.ContentType):], extra[:xlen])
		if s.data == nil {
			copy(b[head:], v.Data)
		}
		s.mem = &b[0]
	}
	return s, true
}

// matches reports whether e, which came from a slot, still holds that
// slot's key, content type, extra fields and value, laid out as encode
// would lay them out, so that its allocation can be stored again as it is.
func matches(e *entry, key string, extra []byte) bool {
	o, v := e.from, &e.v
	if o.mem == nil || len(key) == 0 {
		return false
	}
	addr := func(p *byte) uintptr { return uintptr(unsafe.Pointer(p)) }
	base := addr(o.mem)
	head := len(key) + len(v.ContentType) + len(extra)
	switch {
	case addr(unsafe.StringData(key)) != base:
		return false
	case len(v.ContentType) > 0 && addr(unsafe.StringData(v.ContentType)) != base+uintptr(len(key)):
		return false
	case o.data != nil:
		if head != o.n || len(v.Data) == 0 || unsafe.SliceData(v.Data) != o.data {
			return false
		}
	case head+len(v.Data) != o.n || len(v.Data) > 0 && addr(unsafe.SliceData(v.Data)) != base+uintptr(head):
		return false
	}
	mem := unsafe.Slice(o.mem, o.n)
	return string(mem[head-len(extra):head]) == string(extra)
}

// guard is what a load read before it began: the key's write epoch and the
// group's ring generation. A load whose guard no longer holds when it
// completes raced with a write of its key or a ring change, and its result
// is not stored. The zero guard always holds.
type guard struct {
	epoch, ring         *atomic.Uint64
	wantEpoch, wantRing uint64
}

func (g guard) holds() bool {
	return (g.epoch == nil || g.epoch.Load() == g.wantEpoch) && (g.ring == nil || g.ring.Load() == g.wantRing)
}

// add stores e under key, replacing any entry for key, and evicts least
// recently used entries until the bytes fit. e is stored only if g holds at
// the moment of storing (checked under mu): this is how a load that raced
// with a Remove, a Set or a ring change is discarded. An entry larger than
// the whole budget is not stored, but still replaces (removes) the old
// entry. add reports whether e was stored.
//
// The entry's key and bytes are copied (outside the lock), so that a key
// cut from a request line does not hold the whole line alive, uncounted,
// and a small value shares one allocation with its key.
func (l *lru) add(key string, e entry, g guard) bool {
	// Once per store, outside the lock, rather than once per read.
	e.v.Checksum = Checksum(e.v.Data)
	h := l.hash(key)
	s, encoded := l.encode(key, &e)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !g.holds() {
		return false
	}
	// Remove first, so the callback subtracts the old entry's size: simplelru's
	// Add on an existing key replaces the value without a callback. (It
	// may be another key's, with the same hash: that one is dropped.)
	l.c.Remove(h)
	if !encoded || e.size > l.maxBytes {
		return false
	}
	l.c.Add(h, s)
	l.bytes += e.size
	for l.bytes > l.maxBytes {
		if _, _, ok := l.c.RemoveOldest(); !ok {
			break
		}
		l.evictions.Add(1)
	}
	return true
}

// fits reports whether an entry of size bytes for key would be stored
// without evicting another: it replaces key's own entry, if any.
func (l *lru) fits(key string, size int64) bool {
	h := l.hash(key)
	l.mu.Lock()
	defer l.mu.Unlock()
	free := l.maxBytes - l.bytes
	// Whatever is stored under key's hash (key's own entry, or a colliding
	// key's) is replaced, not kept beside it.
	if old, ok := l.c.Peek(h); ok {
		free += old.size
	}
	return size <= free
}

// remove drops key.
func (l *lru) remove(key string) {
	h := l.hash(key)
	l.mu.Lock()
	if s, ok := l.c.Peek(h); ok && s.key() == key {
		l.c.Remove(h)
	}
	l.mu.Unlock()
}

// keyed is an entry with its key, as takeIf and walk hand them out.
type keyed struct {
	key string
	e   entry
}

// takeIf removes every entry for which take returns true and returns them,
// least recently used first. take runs under mu: it must be quick and call
// no user code.
func (l *lru) takeIf(take func(key string) bool) []keyed {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []keyed
	for _, h := range l.c.Keys() {
		s, _ := l.c.Peek(h)
		if k := s.key(); take(k) {
			l.c.Remove(h)
			out = append(out, keyed{k, l.decode(&s)})
		}
	}
	return out
}

// newest returns up to n entries, most recently used first, without
// marking them used.
func (l *lru) newest(n int) []keyed {
	l.mu.Lock()
	defer l.mu.Unlock()
	hs := l.c.Keys()
	out := make([]keyed, 0, min(n, len(hs)))
	for i := len(hs) - 1; i >= 0 && len(out) < n; i-- {
		s, _ := l.c.Peek(hs[i])
		out = append(out, keyed{s.key(), l.decode(&s)})
	}
	return out
}

// entries returns every key and its entry, least recently used first,
// without marking them used. The caller holds mu.
func (l *lru) entries() ([]string, []entry) {
	ss := l.c.Values()
	keys, es := make([]string, len(ss)), make([]entry, len(ss))
	for i := range ss {
		keys[i], es[i] = ss[i].key(), l.decode(&ss[i])
	}
	return keys, es
}

// addIfAbsent is add for a key that has no entry yet: it stores nothing
// (and reports false) when key has one.
func (l *lru) addIfAbsent(key string, e entry, g guard) bool {
	h := l.hash(key)
	l.mu.Lock()
	if s, ok := l.c.Peek(h); ok && s.key() == key {
		l.mu.Unlock()
		return false
	}
	l.mu.Unlock()
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
	for l.bytes > l.maxBytes {
		if _, _, ok := l.c.RemoveOldest(); !ok {
			break
		}
		l.evictions.Add(1)
	}
}

// budget returns the byte bound.
func (l *lru) budget() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxBytes
}

// clear drops every entry.
func (l *lru) clear() {
	l.mu.Lock()
	l.c.Purge()
	l.mu.Unlock()
}

// removeIf drops every key for which drop returns true and returns how many
// it dropped. drop runs under mu: it must be quick and call no user code.
func (l *lru) removeIf(drop func(key string) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, h := range l.c.Keys() {
		if s, _ := l.c.Peek(h); drop(s.key()) {
			l.c.Remove(h)
			n++
		}
	}
	return n
}

// usage returns the accounted bytes and the number of entries.
func (l *lru) usage() (bytes, items int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes, int64(l.c.Len())
}

// check recomputes bytes and items by walking the live entries; tests
// compare it with usage to prove the accounting invariant.
func (l *lru) check() (bytes, items int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.c.Values() {
		bytes += s.size
		items++
	}
	return bytes, items
}
