package transport

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Whether a node may keep its cache across a lost etcd lease is decided
// from what its peers did, not from the lease: a node's main cache is valid
// for as long as no other member dropped it from its ring, since only a
// member that dropped it can have owned its keys (loaded or written them)
// meanwhile. Losing a lease and registering again, which every node does
// when etcd stalls or is cut off for longer than the lease, changes nothing
// when the others held the node through it (their hold-down and
// confirmation delay keep a member whose key comes back, or that vanished
// with half of the cluster).
//
// A peer says so with a token beside X-Ringcache-Member: its boot id and
// the number of the ring change at which it last added this node. The token
// changes exactly when the peer dropped this node and took it back (or
// restarted); a restarted peer whose first ring held this node never
// dropped it. So the node keeps the first token each peer gives after its
// cache term began, and a peer that gives another one (but a first-ring
// one) or says it no longer counts the node in has dropped it: the node's
// cache starts a new term, and what it held is served no more.

// hdrMemberSince carries, beside X-Ringcache-Member: 1, the answering
// peer's token for the asking node: "<boot id>-<ring change>". A peer also
// sends it with every request, its token for the node it asks: a node that
// peers dropped and took back between two of its own probes learns it from
// the first request that comes (Pool.noteSender), before it answers from a
// cache a peer may have bypassed meanwhile.
const hdrMemberSince = "X-Ringcache-Member-Since"

// newBootID returns a random id for one run of a Pool.
func newBootID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sinceToken is a member's token in a pool: the pool's boot id and the
// number of its ring change that added the member.
func sinceToken(boot string, change uint64) string {
	return boot + "-" + strconv.FormatUint(change, 10)
}

// firstRing reports whether token was given by a peer that added the node
// in the first ring it ever installed: it never had a ring without it.
func firstRing(token string) bool {
	_, change, ok := strings.Cut(token, "-")
	return ok && change == "1"
}

// drops is what a Pool knows about other members dropping this node,
// since the node's current cache term began (Reset).
type drops struct {
	epoch atomic.Uint64          // bumped by Reset; baselines of older epochs are void
	by    atomic.Pointer[string] // a peer that dropped this node in this epoch; nil: none known
}

// baseline is the first token a peer gave in an epoch, and when the
// request that brought it was sent (Unix nanoseconds).
type baseline struct {
	epoch uint64
	token string
	at    int64
}

// noteMember records a peer's word about this node, in the answer to a
// request sent at sent: whether the peer counts it in, with its token. It
// is called with every answer that carries one.
func (p *Pool) noteMember(pe *peer, member bool, token string, sent time.Time) {
	if p.leaving.Load() != nil {
		// This node told the others it leaves: they drop it, as asked, and
		// its cache must stay whole for the values it hands over.
		return
	}
	d := &p.drops
	epoch := d.epoch.Load()
	b := pe.since.Load()
	known := b != nil && b.epoch == epoch
	switch {
	case !member:
		// Only a peer that counted this node in, in this epoch, has
		// dropped it; one that never did has not seen it join yet.
		if known {
			p.dropped(pe.url, "no longer counts this node in")
		}
		return
	case token == "" || known && b.token == token:
		// The same token, or none from a peer that gives none (an older
		// version, whose word that it counts the node in is all there is).
	case !known:
		pe.since.Store(&baseline{epoch: epoch, token: token, at: sent.UnixNano()})
	case !firstRing(token):
		p.dropped(pe.url, "dropped this node and took it back")
		return
	default:
		// The peer restarted and found this node in its first ring.
		pe.since.Store(&baseline{epoch: epoch, token: token, at: b.at})
	}
	if t := sent.UnixNano(); t > pe.sinceAt.Load() {
		pe.sinceAt.Store(t)
	}
}

// noteSender checks the token a peer sent with a request (hdrMemberSince)
// against the one it gave this node before, in this epoch: another one
// (but a first-ring one, a peer that restarted) means it dropped this node
// and took it back. It only detects drops: when the peer said it is not
// known, and the word a request carries never counts as an answer
// (sinceAt), since what the peer did after sending it is not known.
func (p *Pool) noteSender(st *poolState, sender, token string) {
	if token == "" || p.leaving.Load() != nil {
		return
	}
	pe := st.peers[sender]
	if pe == nil {
		return
	}
	b := pe.since.Load()
	if b == nil || b.epoch != p.drops.epoch.Load() || b.token == token || firstRing(token) {
		return
	}
	p.dropped(pe.url, "dropped this node and took it back (its request said)")
}

// confirmedSince reports whether every peer said, in answer to a request
// sent at t or later, that it counts this node in with the token it gave
// before t: none dropped the node up to its answer. unknown is true when a
// peer's first token in this epoch came after t, so that what it did before
// is not known.
func (p *Pool) confirmedSince(t int64) (ok, unknown bool) {
	epoch := p.drops.epoch.Load()
	ok = true
	for _, pe := range p.state.Load().peers {
		if b := pe.since.Load(); b != nil && b.epoch == epoch && b.at >= t {
			return false, true
		}
		if pe.sinceAt.Load() < t {
			ok = false
		}
	}
	return ok, false
}

func (p *Pool) dropped(peer, how string) {
	if p.drops.by.CompareAndSwap(nil, &peer) {
		p.cfg.Logger.Warn("transport: a peer dropped this node from its ring; the cache it holds is served no more",
			"peer", peer, "how", how)
	}
}

// droppedBy returns a peer that dropped this node from its ring since the
// last resetDrops, and whether there is one.
func (p *Pool) droppedBy() (string, bool) {
	if by := p.drops.by.Load(); by != nil {
		return *by, true
	}
	return "", false
}

// resetDrops starts a new epoch: what peers said before no longer counts,
// and the first token each gives from now on is its baseline. The node
// calls it when its cache starts a term.
func (p *Pool) resetDrops() {
	p.drops.epoch.Add(1)
	p.drops.by.Store(nil)
}

// probeMembers asks every peer, in the background, whether it counts this
// node in (and with which token).
func (p *Pool) probeMembers() {
	for _, pe := range p.state.Load().peers {
		pe.probe()
	}
}

// askMembers asks every peer whether it counts this node in, as
// probeMembers does, and waits for their answers, at most d.
func (p *Pool) askMembers(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for _, pe := range p.state.Load().peers {
		wg.Go(func() {
			pe.do(ctx, peerRequest{op: "lease", method: http.MethodGet, path: p.cfg.BasePath + leaseRoute, probe: true})
		})
	}
	wg.Wait()
}

// cacheTerm is a Node's answer to cache.Config.Tenure: the term its main
// cache's entries are stored under, which changes only when a peer dropped
// this node, and the registration term it was last checked against.
type cacheTerm struct {
	cache uint64 // stamps the main cache's entries; 0: none yet
	reg   uint64 // the membership's term when cache was last confirmed
	// pending is when this node registered again under reg (Unix
	// nanoseconds), until every peer confirmed that it did not drop the
	// node meanwhile; 0: confirmed. Meanwhile the cache is held only while
	// the peers lately said they count the node in (Pool.MemberConfirmed).
	pending int64
}

// terms decides the cache's term (Node.tenure).
type terms struct {
	cur atomic.Pointer[cacheTerm]
	mu  sync.Mutex // serializes changes of cur
}

// settleProbes asks every peer now, and again once the peers' hold-down
// has passed after a new registration: a peer whose watch lagged and that
// dropped the node meanwhile then says so within about that time.
func (n *Node) settleProbes(after time.Duration) {
	n.pool.probeMembers()
	time.AfterFunc(after, n.pool.probeMembers)
}

// followRegistration makes the node check its term as soon as m says its
// registration changed, rather than on the next request: a node that
// registered again then asks its peers at once, and its cache is held
// again, or starts over, before requests need it. While the registration
// may have lapsed it checks every half contact lease, which keeps its
// peers' word fresh (Pool.MemberConfirmed probes them when it is not).
func (n *Node) followRegistration(m Membership) {
	ch, ok := m.(interface{ Changed() <-chan struct{} })
	if !ok {
		return
	}
	// While the registration may have lapsed (etcd out of reach), the
	// node asks its peers every half contact lease, so that their word is
	// fresh when etcd answers again, whether or not requests came meanwhile.
	n.pool.goBackground(func(ctx context.Context) {
		tick := time.NewTicker(n.pool.cfg.LeaseTTL / 2)
		defer tick.Stop()
		for {
			select {
			case <-ch.Changed():
			case <-tick.C:
				if _, held := m.Tenure(); held {
					continue
				}
			case <-ctx.Done():
				return
			}
			if n.membership() != m {
				return
			}
			n.tenure()
		}
	})
}

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
