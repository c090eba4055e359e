package peers

import (
	"sync/atomic"
	"time"
)

// tenure says whether this node's registration in etcd surely still holds,
// so that the cache serves what it owns only while it does or while the
// others still count this node as a member (cache.Config.Tenure; the daemon
// asks its peers when the lease may have run out): a node that was paused
// for longer than its TTL and dropped by the others meanwhile must not
// serve values they may have overwritten. The others drop a node only when
// its key is deleted in etcd, so the term is the key's create revision,
// which changes exactly when the key was deleted and put again. It is read
// on every cache hit, so it is a few atomics and a clock read.
type tenure struct {
	born  time.Time     // the origin of until, for a monotonic clock
	term  atomic.Uint64 // the registration key's create revision; 0 before it
	until atomic.Int64  // nanoseconds since born; 0: not held
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

// Tenure reports the term of this node's registration (the create revision
// of its key in etcd) and whether the registration surely holds now: false
// once no keepalive has been answered for about the TTL, and when the lease
// is known lost. A registration that finds its key was deleted meanwhile
// (the others may have dropped this node) starts a new term; one that finds
// it still there (etcd was out of reach, and nobody could change the ring)
// keeps the term. It is cheap enough to call on every request.
func (r *Registry) Tenure() (term uint64, held bool) {
	t := &r.tenure
	term = t.term.Load()
	return term, term != 0 && int64(time.Since(t.born)) < t.until.Load()
}

// HoldDown returns how long members wait before they drop one that
// vanished (Config.HoldDown): a node that registered again checks, after
// about that long, that nobody dropped it meanwhile.
func (r *Registry) HoldDown() time.Duration { return r.cfg.HoldDown }
