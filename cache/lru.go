package cache

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// entryOverhead is what one cached entry costs beyond its key and value
// bytes: golang-lru's list element (three pointers, the key header, our
// 144-byte entry, its unused ExpiresAt) in a 208-byte size class, plus the
// map slot that indexes it. Measured on amd64 with runtime.MemStats: 242
// bytes per entry for 50,000 entries; it varies with how full the map's
// tables are (TestEntryOverheadMatchesHeap keeps this honest).
const entryOverhead = 240

// entry is what the LRU stores for one key.
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

// grace returns how long past its expiry e is kept, to be served stale:
// the longer of its value's stale windows, or of the LRU's.
func (l *lru) grace(e *entry) time.Duration {
	return max(l.staleGrace, e.v.StaleWhileRevalidate, e.v.StaleIfError)
}

// expired reports whether e must no longer be served at now.
func (e *entry) expired(now time.Time) bool {
	return !e.v.Expires.IsZero() && !now.Before(e.v.Expires)
}

// entrySize is the accounted size of an entry for key holding v.
func entrySize(key string, v Value) int64 {
	return int64(len(key)) + int64(len(v.Data)) + int64(len(v.ContentType)) + entryOverhead
}

// lru is a byte-bounded LRU over golang-lru's simplelru, which bounds
// entries only: it is given an entry limit it never reaches and lru evicts
// the least recently used entries itself until the bytes fit. Every removal
// goes through simplelru's eviction callback, which is the only place bytes
// decrease, so that bytes always equals the sum of the sizes of the entries
// simplelru holds. The callback runs under mu but calls no user code.
// An lru is safe for concurrent use.
type lru struct {
	mu       sync.Mutex
	maxBytes int64 // guarded by mu
	// staleGrace is how long past their expiry entries are kept to be
	// served stale (the group's longer stale window; zero for hot copies).
	staleGrace time.Duration
	c          *simplelru.LRU[string, entry]
	bytes      int64 // guarded by mu

	evictions atomic.Int64
}

// newLRU returns an lru holding at most maxBytes; maxBytes <= 0 makes an lru
// that stores nothing (a disabled hot cache).
func newLRU(maxBytes int64) *lru {
	l := &lru{maxBytes: maxBytes}
	// simplelru rejects only a size <= 0, so this cannot fail.
	c, err := simplelru.NewLRU(math.MaxInt, func(_ string, e entry) {
		l.bytes -= e.size
	})
	if err != nil {
		panic("cache: simplelru.NewLRU: " + err.Error())
	}
	l.c = c
	return l
}

// get returns key's entry and marks it recently used. An entry past its
// expiry and grace is dropped and reported missing; one within its grace is
// returned (the caller tells it is stale by its expiry).
func (l *lru) get(key string) (entry, bool) {
	l.mu.Lock()
	e, ok := l.c.Get(key)
	if ok && !e.v.Expires.IsZero() && !time.Now().Before(e.v.Expires.Add(l.grace(&e))) {
		l.c.Remove(key)
		ok = false
	}
	l.mu.Unlock()
	if !ok {
		return entry{}, false
	}
	return e, true
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
func (l *lru) add(key string, e entry, g guard) bool {
	// Once per store, outside the lock, rather than once per read.
	e.v.Checksum = Checksum(e.v.Data)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !g.holds() {
		return false
	}
	// Remove first, so the callback subtracts the old entry's size: simplelru's
	// Add on an existing key replaces the value without a callback.
	l.c.Remove(key)
	if e.size > l.maxBytes {
		return false
	}
	// A key from a request is a substring of its request line: kept as
	// is, it would hold the whole line alive, uncounted.
	key = strings.Clone(key)
	l.c.Add(key, e)
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
	l.mu.Lock()
	defer l.mu.Unlock()
	free := l.maxBytes - l.bytes
	if old, ok := l.c.Peek(key); ok {
		free += old.size
	}
	return size <= free
}

// remove drops key.
func (l *lru) remove(key string) {
	l.mu.Lock()
	l.c.Remove(key)
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
	for _, k := range l.c.Keys() {
		if take(k) {
			e, _ := l.c.Peek(k)
			l.c.Remove(k)
			out = append(out, keyed{k, e})
		}
	}
	return out
}

// newest returns up to n entries, most recently used first, without
// marking them used.
func (l *lru) newest(n int) []keyed {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := l.c.Keys()
	out := make([]keyed, 0, min(n, len(keys)))
	for i := len(keys) - 1; i >= 0 && len(out) < n; i-- {
		e, _ := l.c.Peek(keys[i])
		out = append(out, keyed{keys[i], e})
	}
	return out
}

// addIfAbsent is add for a key that has no entry yet: it stores nothing
// (and reports false) when key has one.
func (l *lru) addIfAbsent(key string, e entry, g guard) bool {
	l.mu.Lock()
	if l.c.Contains(key) {
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
	for _, k := range l.c.Keys() {
		if drop(k) {
			l.c.Remove(k)
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
	for _, k := range l.c.Keys() {
		e, _ := l.c.Peek(k)
		bytes += e.size
		items++
	}
	return bytes, items
}
