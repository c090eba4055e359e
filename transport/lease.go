package transport

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Contact leases: how a node that holds a hot copy of a value knows that it
// would have been told of a write at the value's owner.
//
// Every response of an owner to a peer that asks for it (hdrLease on a GET
// or a lease ping) grants that peer a lease: the peer may serve its copies of
// the owner's values until the moment it sent the request plus
// Config.LeaseTTL. The owner records when it granted each lease. After a
// write, the owner drops the key's copy on every node; for a node it cannot
// reach, it revokes the node's lease (a counter, sent with every later
// grant) and waits until the lease it last granted has run out, plus a
// margin for clock rates, before it answers the write. A holder whose lease
// lapsed, or that sees a new revocation count, starts a new epoch and no
// longer serves the copies of the old one (cache.Leaser). So once a write is
// acknowledged, no node serves the value it replaced: those that were told
// dropped it, and the others could not serve it past their lease.

// leaseMargin is how much longer than LeaseTTL an owner waits for a lease it
// granted: the holder measured the lease from an earlier moment (when it
// sent its request) on a clock that may run a little fast.
func leaseMargin(ttl time.Duration) time.Duration { return ttl/4 + 10*time.Millisecond }

// lease is a holder's view of its lease from one peer; immutable once
// published, so that epoch and until are read together.
type lease struct {
	epoch  uint64
	until  time.Time
	revoke string // the grantor's revocation count, as it sent it
}

// contact is the holder side of one peer's lease.
type contact struct {
	mu  sync.Mutex // serializes renew
	cur atomic.Pointer[lease]
	// legacy is set for a peer that answers without our headers (a
	// groupcache node): it grants no leases, and copies of its values keep
	// the older rule (HotTTL).
	legacy atomic.Bool
}

// renew records a grant carried by a response to a request sent at sent.
func (c *contact) renew(sent time.Time, grant string, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.cur.Load()
	n := &lease{epoch: 1, until: sent.Add(ttl), revoke: grant}
	if old != nil {
		n.epoch = old.epoch
		// A new epoch when the grantor revoked the lease, or when it had
		// lapsed by the time this request was sent: the grantor may have
		// applied writes it could not tell us about meanwhile.
		if grant != old.revoke || !sent.Before(old.until) {
			n.epoch++
		} else if old.until.After(n.until) {
			n.until = old.until // an older response arriving late
		}
	}
	c.cur.Store(n)
}

// state returns the lease's epoch and whether it holds at now, and whether
// it is close enough to its end (or missing) that it should be renewed.
func (c *contact) state(now time.Time, ttl time.Duration) (epoch uint64, ok, renew bool) {
	if c.legacy.Load() {
		return 0, true, false
	}
	l := c.cur.Load()
	if l == nil {
		return 0, false, true
	}
	left := l.until.Sub(now)
	return l.epoch, left > 0, left < ttl/2
}

// grants is the grantor side: when this node last granted each peer a
// lease, and how often it revoked it. It is safe for concurrent use.
type grants struct {
	incarnation string   // tells this process's counts from an earlier one's
	m           sync.Map // peer URL -> *grant
}

type grant struct {
	mu     sync.Mutex
	last   time.Time
	revoke uint64
}

func newGrants() *grants {
	b := make([]byte, 6)
	rand.Read(b)
	return &grants{incarnation: hex.EncodeToString(b)}
}

// give records a lease granted to peer now and returns the header value
// that carries it.
func (g *grants) give(peer string, now time.Time) string {
	v, ok := g.m.Load(peer)
	if !ok {
		v, _ = g.m.LoadOrStore(peer, &grant{})
	}
	gr := v.(*grant)
	gr.mu.Lock()
	gr.last = now
	r := gr.revoke
	gr.mu.Unlock()
	return g.incarnation + "." + strconv.FormatUint(r, 10)
}

// revoke revokes peer's lease and returns when the last lease it was granted
// has surely run out (the zero time if it was never granted one).
func (g *grants) revoke(peer string, ttl time.Duration) time.Time {
	v, ok := g.m.Load(peer)
	if !ok {
		return time.Time{}
	}
	gr := v.(*grant)
	gr.mu.Lock()
	defer gr.mu.Unlock()
	gr.revoke++
	return gr.last.Add(ttl + leaseMargin(ttl))
}

// holders returns the peers granted a lease that may still hold at now.
func (g *grants) holders(now time.Time, ttl time.Duration) []string {
	var out []string
	g.m.Range(func(k, v any) bool {
		gr := v.(*grant)
		gr.mu.Lock()
		live := now.Before(gr.last.Add(ttl + leaseMargin(ttl)))
		gr.mu.Unlock()
		if live {
			out = append(out, k.(string))
		}
		return true
	})
	return out
}

// validGrant reports whether s looks like a grant header value.
func validGrant(s string) bool {
	inc, n, ok := strings.Cut(s, ".")
	if !ok || inc == "" {
		return false
	}
	_, err := strconv.ParseUint(n, 10, 64)
	return err == nil
}
