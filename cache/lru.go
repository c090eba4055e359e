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
// entry, its unused ExpiresAt) in a 160-byte size class, plus the map slot
// that indexes it. Measured on amd64 with runtime.MemStats: 178 to 197 bytes
// per entry for 20,000 to 130,000 entries, depending on how full the map's
// tables are (TestEntryOverheadMatchesHeap keeps this honest).
const entryOverhead = 192

// entry is what the LRU stores for one key.
type entry struct {
	// v is the value served; v.Expires is the effective expiry (zero: none).
	v Value
	// size is the entry's accounted size in bytes, fixed when it is added.
	size int64
	// notFound marks a remembered ErrNotFound: v is empty.
	notFound bool
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
	maxBytes int64

	mu    sync.Mutex
	c     *simplelru.LRU[string, entry]
	bytes int64 // guarded by mu

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

// get returns key's entry and marks it recently used. An expired entry is
// dropped and reported missing.
func (l *lru) get(key string) (entry, bool) {
	l.mu.Lock()
	e, ok := l.c.Get(key)
	if ok && !e.v.Expires.IsZero() && e.expired(time.Now()) {
		l.c.Remove(key)
		ok = false
	}
	l.mu.Unlock()
	if !ok {
		return entry{}, false
	}
	return e, true
}

// add stores e under key, replacing any entry for key, and evicts least
// recently used entries until the bytes fit. If guard is not nil, e is stored
// only if guard.Load() == want at the moment of storing (checked under mu):
// this is how a load that raced with a Remove or Set is discarded. An entry
// larger than the whole budget is not stored, but still replaces (removes)
// the old entry. add reports whether e was stored.
func (l *lru) add(key string, e entry, guard *atomic.Uint64, want uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if guard != nil && guard.Load() != want {
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

// remove drops key.
func (l *lru) remove(key string) {
	l.mu.Lock()
	l.c.Remove(key)
	l.mu.Unlock()
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
