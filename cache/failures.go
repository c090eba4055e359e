package cache

import (
	"sync"
	"time"
)

// maxFailures bounds how many failed keys a group remembers. Past it, the
// expired ones go first, then arbitrary ones: forgetting a failure early
// only lets one more load through to the origin.
const maxFailures = 4096

// failures remembers the keys whose origin load just failed, with the error,
// so that a failing origin is asked once per key and ErrorTTL rather than on
// every request. A failures is safe for concurrent use.
type failures struct {
	mu   sync.Mutex
	keys map[string]failure // guarded by mu
}

type failure struct {
	err   error
	until time.Time
}

// get returns key's remembered error, if it has not expired by now.
func (f *failures) get(key string, now time.Time) (error, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.keys[key]
	if !ok {
		return nil, false
	}
	if !now.Before(e.until) {
		delete(f.keys, key)
		return nil, false
	}
	return e.err, true
}

// put remembers err for key until until.
func (f *failures) put(key string, err error, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil {
		f.keys = make(map[string]failure)
	}
	if len(f.keys) >= maxFailures {
		now := time.Now()
		for k, e := range f.keys {
			if !now.Before(e.until) {
				delete(f.keys, k)
			}
		}
		for k := range f.keys {
			if len(f.keys) < maxFailures {
				break
			}
			delete(f.keys, k)
		}
	}
	f.keys[key] = failure{err: err, until: until}
}

// forget drops key's remembered error: a write of the key makes the next
// read load again.
func (f *failures) forget(key string) {
	f.mu.Lock()
	delete(f.keys, key)
	f.mu.Unlock()
}

// forgetIf drops the remembered errors of the keys for which match returns
// true (a purge).
func (f *failures) forgetIf(match func(key string) bool) {
	f.mu.Lock()
	for key := range f.keys {
		if match(key) {
			delete(f.keys, key)
		}
	}
	f.mu.Unlock()
}
