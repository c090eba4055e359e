package peers

import (
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// tenure is how long this node can be sure that its etcd lease, and so its
// place in every other node's ring, still holds: the cache serves what it
// owns only while it is (cache.Config.Tenure), so that a node that was
// paused or cut off for longer than its TTL, and was dropped by the others
// meanwhile, does not serve values they may have overwritten. It is read on
// every cache hit, so it is two atomics and a clock read.
type tenure struct {
	born  time.Time     // the origin of until, for a monotonic clock
	term  atomic.Uint64 // the lease ID; 0 before the first grant
	until atomic.Int64  // nanoseconds since born; 0: not held
}

// tenureMargin is how much earlier than etcd's expiry the tenure ends: etcd
// counts a lease from when it received the grant or keepalive, which is up
// to a round trip earlier than when its answer arrived here. The others drop
// the node only HoldDown after the expiry, which widens the margin further.
func tenureMargin(ttl time.Duration) time.Duration { return ttl / 5 }

// start records a lease granted by a request sent at sent.
func (t *tenure) start(id clientv3.LeaseID, sent time.Time, ttl time.Duration) {
	t.term.Store(uint64(id))
	t.until.Store(int64(sent.Add(ttl - tenureMargin(ttl)).Sub(t.born)))
}

// renew records a keepalive answer received now that extended the lease to
// ttlSeconds from etcd's receipt of the request.
func (t *tenure) renew(now time.Time, ttlSeconds int64, ttl time.Duration) {
	d := time.Duration(ttlSeconds) * time.Second
	if u := int64(now.Add(d - tenureMargin(ttl)).Sub(t.born)); u > t.until.Load() {
		t.until.Store(u)
	}
}

// end records that the lease is lost.
func (t *tenure) end() { t.until.Store(0) }

// Tenure reports the term of this node's registration (its etcd lease ID)
// and whether the lease surely still holds now. It turns false when a
// keepalive has gone unanswered for about the TTL (a paused process sees it
// at once when it resumes) and when the lease is lost; a new registration
// starts a new term. It is meant for cache.Config.Tenure and is cheap enough
// to call on every request.
func (r *Registry) Tenure() (term uint64, ok bool) {
	until := r.tenure.until.Load()
	return r.tenure.term.Load(), until != 0 && int64(time.Since(r.tenure.born)) < until
}
