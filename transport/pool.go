package transport

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/consistenthash"
)

// Pool is a node's view of its cluster: the ring of members' base URLs and a
// client for each peer. It implements cache.PeerPicker. Set replaces the
// membership by building a new ring and swapping it in atomically, so
// PickPeer never takes a lock. A Pool is safe for concurrent use.
type Pool struct {
	cfg        Config
	client     *http.Client
	selfHeader []string         // cfg.Self as a header value, shared like versionHeader
	now        func() time.Time // time.Now; tests set it to check the signature window
	auth       *peerAuth        // signs and verifies peer requests

	mu     sync.Mutex // serializes Set, so that two swaps cannot interleave
	state  atomic.Pointer[poolState]
	onRing []func() // guarded by mu: NotifyRing's callbacks

	grants *grants // the contact leases this node granted

	// Background work (lease pings): bg ends at Close, which waits for it.
	bg       context.Context
	stopBg   context.CancelFunc
	bgMu     sync.Mutex // orders goBackground against Close
	bgClosed bool       // guarded by bgMu
	bgWG     sync.WaitGroup

	// seen holds the pairs of ring versions (ours, a peer's) seen, with
	// when each was first seen, so that a disagreement is logged once
	// rather than on every request, and as a warning only once it outlasts
	// a membership change (versionSettle); seenN counts its entries, to
	// bound it.
	seen          sync.Map // versionPair -> *versionSeen
	seenN         atomic.Int64
	versionSettle time.Duration

	versions peerVersions // each member's last reported ring version, for status pages

	leaving atomic.Pointer[leavingRing] // set by leaveRing; nil while a member

	boot    string // this run's id, in the tokens of the members (tenure.go)
	changes uint64 // guarded by mu: rings installed by Set, SetWeighted, SetRanges
	drops   drops  // peers that dropped this node (tenure.go)

	purges *purges // cluster-wide purges (purge.go)
}

// versionPair is a disagreement between this node's ring and a peer's.
type versionPair struct{ ours, theirs uint64 }

// maxSeenPairs bounds Pool.seen: past it the set starts again (and a pair
// may be logged again), so that a flapping membership cannot grow it forever.
const maxSeenPairs = 1024

// ring is what the Pool reads of its ring: a *consistenthash.Map (hashed
// replicas, Set and SetWeighted) or a *consistenthash.Ranges (explicit arcs,
// SetRanges).
type ring interface {
	Get(key string) string
	Heirs(key string, n int) []string
	Nodes() []string
	Arcs() []consistenthash.Arc
	KeyHash(key string) uint32
	Version() uint64
	Shares() map[string]float64
}

// ringWithout returns r without node, for the ring of the others that a
// node that has just joined took its keys from.
func ringWithout(r ring, node string) ring {
	switch r := r.(type) {
	case *consistenthash.Map:
		c := r.Clone()
		c.Remove(node)
		return c
	case *consistenthash.Ranges:
		c := r.Clone()
		c.Leave(node)
		return c
	}
	return nil
}

// sinceOf returns member's token in st, if st is not nil and has it.
func (st *poolState) sinceOf(member string) (string, bool) {
	if st == nil {
		return "", false
	}
	s, ok := st.since[member]
	return s, ok
}

// poolState is one membership: immutable once published.
type poolState struct {
	ring    ring
	members []string
	peers   map[string]*peer // by base URL, self excluded
	others  []cache.Peer     // the values of peers, in member order
	// versionHeader is the ring version as a header value (hex, as logs,
	// metrics and /status show it), built once: requests and responses
	// share it, and net/http only reads it.
	versionHeader []string
	// since holds each peer's token (tenure.go): when this pool added it.
	// sinceHeader holds the same as header values, sent with every request
	// to the peer (built once, as versionHeader).
	since       map[string]string
	sinceHeader map[string][]string
	// prev is the ring before the last change (for a node that has just
	// joined, the ring of the others), nil if none: PreviousOwner reads it.
	// gone holds the peers of prev that left with the change.
	prev ring
	gone map[string]*peer
}

var (
	_ cache.PeerPicker   = (*Pool)(nil)
	_ cache.RingNotifier = (*Pool)(nil)
	_ cache.Handoffer    = (*Pool)(nil)
)

// NewPool validates cfg and returns a Pool whose ring holds only cfg.Self
// until Set adds peers.
func NewPool(cfg Config) (*Pool, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// One transport for every peer, so that keep-alive connections are
	// shared and bounded per host rather than per peer object; with mutual
	// TLS, net/http's over TLS connections.
	dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: peerKeepAlive}
	var tr http.RoundTripper = newPeerTransport(cfg, dialer)
	if cfg.TLS != nil {
		tr = cfg.TLS.transport(newHTTPTransport(cfg, dialer), dialer)
	}
	bg, stop := context.WithCancel(context.Background())
	p := &Pool{
		cfg:    cfg,
		grants: newGrants(),
		boot:   newBootID(),
		bg:     bg,
		stopBg: stop,
		// Redirects are refused: a peer answers or fails. groupcache's
		// client does not follow them either.
		client: &http.Client{
			Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		now:        time.Now,
		selfHeader: []string{cfg.Self},

		versionSettle: defaultVersionSettle,
		auth:          newPeerAuth(cfg),
	}
	p.purges = newPurges(p)
	if err := p.Set(); err != nil {
		return nil, err
	}
	return p, nil
}

// Set replaces the membership with peers plus this node (Config.Self, always
// a member), each of weight 1. Peers are base URLs like Self; duplicates and
// trailing slashes are ignored. On error the membership is unchanged.
func (p *Pool) Set(peers ...string) error {
	weights := make(map[string]int, len(peers))
	for _, u := range peers {
		weights[u] = 1
	}
	return p.SetWeighted(weights)
}

// SetWeighted replaces the membership with the peers that are weights' keys
// plus this node (weight 1 unless weights names it): a member of weight w
// gets w times Config.Replicas points on the ring, for nodes of unequal
// memory. A URL given twice in different spellings keeps the larger weight.
// It returns ErrBadPeer for a bad URL and an error wrapping
// consistenthash.ErrBadWeight or ErrTooManyPoints for a bad weight; on error
// the membership is unchanged. It satisfies peers.WeightedSetter (as
// Set satisfies peers.Setter).
func (p *Pool) SetWeighted(weights map[string]int) error {
	w := map[string]int{p.cfg.Self: 1}
	for s, weight := range weights {
		u, err := normalizePeer(s)
		if err != nil {
			return err
		}
		if u == p.cfg.Self {
			w[u] = weight // this node's own registration says how heavy it is
			continue
		}
		w[u] = max(w[u], weight)
	}
	members := slices.Sorted(maps.Keys(w))

	// Members of weight 1 go in with one Add (one sort of the ring); each
	// heavier one costs a merge of its own.
	ring := consistenthash.New(p.cfg.Replicas, p.cfg.Hash)
	var plain []string
	for _, m := range members {
		if w[m] == 1 {
			plain = append(plain, m)
		}
	}
	if err := ring.Add(plain...); err != nil {
		return fmt.Errorf("transport: build ring: %w", err)
	}
	for _, m := range members {
		if w[m] != 1 {
			if err := ring.AddWeighted(m, w[m]); err != nil {
				return fmt.Errorf("transport: build ring: weight of %s: %w", m, err)
			}
		}
	}
	p.install(ring, members)
	return nil
}

// install publishes a new ring with its sorted members, this node included,
// and tells NotifyRing's callbacks when the ring changed.
func (p *Pool) install(ring ring, members []string) {
	p.mu.Lock()
	old := p.state.Load()
	st := &poolState{
		ring:          ring,
		members:       members,
		peers:         make(map[string]*peer, len(members)),
		since:         make(map[string]string, len(members)),
		sinceHeader:   make(map[string][]string, len(members)),
		versionHeader: []string{strconv.FormatUint(ring.Version(), 16)},
	}
	if old != nil {
		p.changes++ // NewPool's ring of this node alone is not a change
		p.purges.noteMembers(old.members, members)
	}
	var added []*peer
	for _, m := range members {
		if m == p.cfg.Self {
			continue
		}
		if s, ok := old.sinceOf(m); ok {
			st.since[m] = s
		} else {
			st.since[m] = sinceToken(p.boot, p.changes)
		}
		st.sinceHeader[m] = []string{st.since[m]}
		// Keep the peer values of members that stay: the cache may hold
		// them, and they are cheap, but there is no reason to churn them.
		pe, ok := (*peer)(nil), false
		if old != nil {
			pe, ok = old.peers[m]
		}
		if !ok {
			pe = &peer{pool: p, url: m}
			added = append(added, pe)
		}
		st.peers[m] = pe
		st.others = append(st.others, pe)
	}
	switch {
	case old == nil:
	case len(old.members) == 1 && len(members) > 1:
		// This node has just joined: the keys it now owns were owned by
		// the others, by the ring without it.
		st.prev = ringWithout(ring, p.cfg.Self)
	case old.ring.Version() != ring.Version():
		st.prev = old.ring
	default:
		st.prev, st.gone = old.prev, old.gone
	}
	if st.prev != nil && st.gone == nil {
		st.gone = map[string]*peer{}
		for _, m := range st.prev.Nodes() {
			if _, member := st.peers[m]; !member && m != p.cfg.Self {
				if pe, ok := old.peers[m]; ok {
					st.gone[m] = pe
				} else if pe, ok := old.gone[m]; ok {
					st.gone[m] = pe
				} else {
					st.gone[m] = &peer{pool: p, url: m}
				}
			}
		}
	}
	p.state.Store(st)
	if old != nil && old.ring.Version() != ring.Version() {
		// Still under mu, so that two changes' sweeps cannot interleave.
		for _, f := range p.onRing {
			f()
		}
	}
	p.mu.Unlock()
	// A new peer's first word about this node is its baseline (tenure.go):
	// get it now, not when the peer may already have changed its mind.
	// Only for a node whose cache keeps a term (a membership in etcd,
	// whose members are registered and so serving): a static peer may not
	// be up yet, and a failed probe would mark it suspected.
	if p.drops.epoch.Load() > 0 {
		for _, pe := range added {
			pe.probe()
		}
	}
	// Log after unlocking: a slog handler is the caller's code.
	if old != nil && old.ring.Version() != ring.Version() {
		p.cfg.Logger.Info("transport: membership changed",
			"members", len(members), "ring_version", st.versionHeader[0])
	}
}

// versionSeen is one pair of disagreeing ring versions: when it was first
// seen, and whether it was logged as a warning.
type versionSeen struct {
	first  time.Time
	warned atomic.Bool
}

// defaultVersionSettle is how long two nodes may disagree about the ring
// before it is a warning: every membership change (a join, a clean stop)
// makes them disagree for a moment, until each has applied it.
const defaultVersionSettle = 10 * time.Second

// checkVersion compares a peer's ring version (the X-Ringcache-Ring-Version
// header of its request or response) with ours, st's, and logs a
// disagreement once per pair of versions: at Info when first seen, at Warn
// if it is still seen after versionSettle. Nodes disagree for a moment
// during every membership change; a pair that keeps showing up means nodes
// route keys differently (different members, Replicas or Hash), which the
// one-hop rule keeps correct but costs a load per key and node. A missing
// header (a groupcache peer) or one that is not a version is ignored.
func (p *Pool) checkVersion(st *poolState, peer, header string) {
	p.noteVersion(st, peer, header)
	if header == "" || header == st.versionHeader[0] {
		return
	}
	ours := st.ring.Version()
	theirs, err := strconv.ParseUint(header, 16, 64)
	if err != nil || theirs == ours {
		return
	}
	pair := versionPair{ours, theirs}
	if v, seen := p.seen.Load(pair); seen {
		vs := v.(*versionSeen)
		// Once warned, the pair costs a request no clock read.
		if !vs.warned.Load() && time.Since(vs.first) >= p.versionSettle && vs.warned.CompareAndSwap(false, true) {
			p.cfg.Logger.Warn("transport: peer sees another ring", "peer", peer, "ring_version", st.versionHeader[0],
				"peer_ring_version", strconv.FormatUint(theirs, 16), "since", vs.first.Format(time.RFC3339))
		}
		return
	}
	if _, seen := p.seen.LoadOrStore(pair, &versionSeen{first: time.Now()}); seen {
		return
	}
	if p.seenN.Add(1) > maxSeenPairs {
		// Racy against concurrent stores, which at worst logs a pair twice.
		p.seen.Clear()
		p.seenN.Store(0)
	}
	p.cfg.Logger.Info("transport: peer sees another ring (a membership change in progress, or a lasting disagreement if it is warned about later)",
		"peer", peer, "ring_version", st.versionHeader[0], "peer_ring_version", strconv.FormatUint(theirs, 16))
}

// PickPeer returns the peer that owns key, and false when this node owns it.
func (p *Pool) PickPeer(key string) (cache.Peer, bool) {
	st := p.state.Load()
	r := st.ring
	if l := p.leaving.Load(); l != nil {
		r = p.ringAfter(st, l)
	}
	owner := r.Get(key)
	if owner == "" || owner == p.cfg.Self {
		return nil, false
	}
	return st.peers[owner], true
}

// leavingRing is the ring without this node, for the membership st.
type leavingRing struct {
	st    *poolState
	after ring
}

// leaveRing makes this node pick key owners by the ring without itself,
// as the others do once it told them it leaves: its reads then go to the
// keys' new owners, which may have taken writes it does not see, rather
// than to what it still holds (which it hands over, Drain). Call it when
// the others were told.
func (p *Pool) leaveRing() {
	st := p.state.Load()
	if after := ringWithout(st.ring, p.cfg.Self); after != nil {
		p.leaving.Store(&leavingRing{st: st, after: after})
	}
}

// ringAfter returns l's ring without this node, rebuilt if the membership
// changed since.
func (p *Pool) ringAfter(st *poolState, l *leavingRing) ring {
	if l.st == st {
		return l.after
	}
	after := ringWithout(st.ring, p.cfg.Self)
	if after == nil {
		return st.ring
	}
	p.leaving.Store(&leavingRing{st: st, after: after})
	return after
}

// PreviousOwner returns the member that owned key by the ring before the
// last change (for a node that has just joined: by the ring of the others),
// and false when that is this node or key's current owner
// (cache.Handoffer). A member that left with the change is still returned:
// a node that leaves gracefully hands its values over before it stops.
func (p *Pool) PreviousOwner(key string) (cache.Peer, bool) {
	st := p.state.Load()
	if st.prev == nil {
		return nil, false
	}
	prev := st.prev.Get(key)
	if prev == "" || prev == p.cfg.Self || prev == st.ring.Get(key) {
		return nil, false
	}
	if pe, ok := st.peers[prev]; ok {
		return pe, true
	}
	if pe, ok := st.gone[prev]; ok {
		return pe, true
	}
	return nil, false
}

// NotifyRing calls f after every change of the ring, once the new ring is
// in use (cache.RingNotifier: the cache.Node built on this Pool registers
// itself). Calls are serialized with the changes.
func (p *Pool) NotifyRing(f func()) {
	p.mu.Lock()
	p.onRing = append(p.onRing, f)
	p.mu.Unlock()
}

// MemberConfirmed reports whether the other members count this node in
// their rings, as far as they said lately (within twice LeaseTTL): no peer
// said otherwise, and at least one said so; a node without peers is its own
// cluster. A node whose etcd registration may have lapsed (an etcd outage,
// or a pause or cut of its own) asks with it whether it still owns its
// keys: during an etcd outage nobody can drop a node and its peers confirm
// it, while a node the others dropped hears so. When the newest word is
// older than half the window, it pings every peer in the background, so
// that a node that keeps asking keeps an answer.
func (p *Pool) MemberConfirmed() bool {
	st := p.state.Load()
	if len(st.peers) == 0 {
		return true
	}
	window := 2 * p.cfg.LeaseTTL
	now := time.Now()
	var newest time.Time
	denied := false
	for _, pe := range st.peers {
		m := pe.membership.Load()
		if m == nil || now.Sub(m.at) >= window {
			continue
		}
		if !m.member {
			denied = true
		} else if m.at.After(newest) {
			newest = m.at
		}
	}
	if now.Sub(newest) > window/2 {
		for _, pe := range st.peers {
			pe.probe()
		}
	}
	return !denied && now.Sub(newest) < window
}

// DropCopies drops key's copies in group on every other member, and on any
// other node this one granted a contact lease that may still hold, in
// parallel (cache.PeerPicker). For a node that does not answer it revokes
// the node's lease and waits until the last lease it granted has run out,
// then names the node in the result. The wait is at most about
// PeerTimeout + LeaseTTL, and ends early if ctx does.
func (p *Pool) DropCopies(ctx context.Context, group, key string) []string {
	return p.dropCopies(ctx, group, key, false)
}

// DropCopiesReplaced is DropCopies for a PUT: the key's heirs keep their
// copies, for the write's own to replace (cache.Replacer).
func (p *Pool) DropCopiesReplaced(ctx context.Context, group, key string) []string {
	return p.dropCopies(ctx, group, key, true)
}

func (p *Pool) dropCopies(ctx context.Context, group, key string, replaced bool) []string {
	st := p.state.Load()
	targets := slices.Clone(st.others)
	// A node that is not (yet) in this node's ring may hold a copy it
	// fetched while the rings disagreed. Only a signed request proves who
	// sent it, so without a secret only members are trusted as holders.
	if p.auth.signed() {
		for _, u := range p.grants.holders(time.Now(), p.cfg.LeaseTTL) {
			if _, member := st.peers[u]; !member && u != p.cfg.Self {
				targets = append(targets, &peer{pool: p, url: u})
			}
		}
	}
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			if pe, ok := t.(*peer); ok {
				errs[i] = pe.drop(ctx, group, key, replaced)
			} else {
				errs[i] = t.Drop(ctx, group, key)
			}
		})
	}
	wg.Wait()
	var unreached []string
	var until time.Time
	for i, err := range errs {
		if err == nil {
			continue
		}
		u := targets[i].String()
		unreached = append(unreached, u)
		if t := p.grants.revoke(u, p.cfg.LeaseTTL); t.After(until) {
			until = t
		}
	}
	if wait := time.Until(until); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	slices.Sort(unreached)
	return unreached
}

// grantTo grants a contact lease to the sender of a peer request that asked
// for one, and returns the header value, or "" when the sender is not to be
// trusted with one (see DropCopies).
func (p *Pool) grantTo(sender string, signed bool) string {
	if sender == "" || sender == p.cfg.Self {
		return ""
	}
	if !signed {
		if _, member := p.state.Load().peers[sender]; !member {
			return ""
		}
	}
	return p.grants.give(sender, time.Now())
}

// goBackground runs f on a goroutine the Pool owns, with a context that
// ends at Close, unless the Pool is closed; it reports whether f runs.
func (p *Pool) goBackground(f func(ctx context.Context)) bool {
	p.bgMu.Lock()
	defer p.bgMu.Unlock()
	if p.bgClosed {
		return false
	}
	p.bgWG.Go(func() { f(p.bg) })
	return true
}

// Close stops the Pool's background lease pings, waits for them, and closes
// the idle keep-alive connections to peers. Requests in flight finish; the
// Pool remains usable for requests and opens connections again on demand,
// but renews no lease in the background any more. Close is idempotent.
func (p *Pool) Close() {
	p.bgMu.Lock()
	p.bgClosed = true
	p.bgMu.Unlock()
	p.stopBg()
	p.bgWG.Wait()
	p.client.CloseIdleConnections()
}
