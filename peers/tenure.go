package peers

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// tenure says whether this node's place in every other node's ring may have
// been lost, so that the cache serves what it owns only while it has not
// (cache.Config.Tenure): a node that was paused for longer than its TTL and
// dropped by the others meanwhile must not serve values they may have
// overwritten. The others drop a node only when its key is deleted in etcd,
// so the term is the key's create revision, which changes exactly when the
// key was deleted and put again. It is read on every cache hit, so it is a
// few atomics and a clock read.
type tenure struct {
	born  time.Time     // the origin of the times below, for a monotonic clock
	term  atomic.Uint64 // the registration key's create revision; 0 before it
	until atomic.Int64  // nanoseconds since born; 0: not held
	ack   atomic.Int64  // when etcd last extended the lease
	// tick is when watchStalls last ran and stall when it (or Tenure)
	// last found that the process had not run for stallLimit.
	tick, stall atomic.Int64
}

// stallLimit is how long the process may go without running before it
// counts as stalled (paused, stopped): longer than a GC or scheduling
// pause on a busy machine.
const stallLimit = time.Second

// watchStalls notes, until ctx ends, when the process was stalled.
func (t *tenure) watchStalls(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	tk := time.NewTicker(stallLimit / 10)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			t.noteStall(int64(time.Since(t.born)))
		}
	}
}

// noteStall records a stall if the ticker has not run for stallLimit by now.
func (t *tenure) noteStall(now int64) {
	if last := t.tick.Swap(now); last != 0 && now-last > int64(stallLimit) {
		t.stall.Store(now)
	}
}

// tenureMargin is how much earlier than etcd's expiry the tenure ends: etcd
// counts a lease from when it received the grant or keepalive, which is up
// to a round trip earlier than when its answer arrived here. The others drop
// the node only HoldDown after the expiry, which widens the margin further.
func tenureMargin(ttl time.Duration) time.Duration { return ttl / 5 }

// start records a registration under term, by a lease granted by a request
// sent at sent.
func (t *tenure) start(term uint64, sent time.Time, ttl time.Duration) {
	t.term.Store(term)
	t.until.Store(int64(sent.Add(ttl - tenureMargin(ttl)).Sub(t.born)))
	t.ack.Store(int64(time.Since(t.born)))
}

// renew records a keepalive answer received now that extended the lease to
// ttlSeconds from etcd's receipt of the request.
func (t *tenure) renew(now time.Time, ttlSeconds int64, ttl time.Duration) {
	d := time.Duration(ttlSeconds) * time.Second
	if u := int64(now.Add(d - tenureMargin(ttl)).Sub(t.born)); u > t.until.Load() {
		t.until.Store(u)
	}
	t.ack.Store(int64(now.Sub(t.born)))
}

// end records that the lease is lost.
func (t *tenure) end() { t.until.Store(0) }

// Tenure reports the term of this node's registration (the create revision
// of its key in etcd) and whether this node may still act as the owner of
// its keys. It is false when the lease may have run out (no keepalive
// answered for about the TTL, or the lease was lost) after the process
// itself stalled (it was paused or stopped, so its key may have expired and
// the others dropped it), until etcd answers again; a registration that
// finds its key was deleted meanwhile starts a new term. A lease that runs
// out while the process runs means etcd is out of reach, and the tenure
// holds: during an etcd outage nobody can change the ring, and the cache
// stays warm across it. (A node cut off from etcd alone may then serve what
// it owns while the others have dropped it; the new term ends that when it
// is back.) It is meant for cache.Config.Tenure and is cheap enough to call
// on every request.
func (r *Registry) Tenure() (term uint64, ok bool) {
	t := &r.tenure
	term = t.term.Load()
	if term == 0 {
		return 0, false
	}
	now := int64(time.Since(t.born))
	if now < t.until.Load() {
		return term, true
	}
	// A request served right after the process resumes runs before the
	// ticker does: look for the stall here too.
	t.noteStall(now)
	return term, t.stall.Load() <= t.ack.Load()
}
