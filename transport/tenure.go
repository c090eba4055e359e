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
