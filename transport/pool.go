package transport

import (
	"fmt"
	"maps"
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

	mu    sync.Mutex // serializes Set, so that two swaps cannot interleave
	state atomic.Pointer[poolState]

	// seen holds the pairs of ring versions (ours, a peer's) already
	// logged, so that a disagreement is logged once rather than on every
	// request; seenN counts its entries, to bound it.
	seen  sync.Map // versionPair -> struct{}
	seenN atomic.Int64
}

// versionPair is a disagreement between this node's ring and a peer's.
type versionPair struct{ ours, theirs uint64 }

// maxSeenPairs bounds Pool.seen: past it the set starts again (and a pair
// may be logged again), so that a flapping membership cannot grow it forever.
const maxSeenPairs = 1024

// poolState is one membership: immutable once published.
type poolState struct {
	ring    *consistenthash.Map
	members []string
	peers   map[string]*peer // by base URL, self excluded
	others  []cache.Peer     // the values of peers, in member order
	// versionHeader is the ring version as a header value (hex, as logs,
	// metrics and /status show it), built once: requests and responses
	// share it, and net/http only reads it.
	versionHeader []string
}

var _ cache.PeerPicker = (*Pool)(nil)

// NewPool validates cfg and returns a Pool whose ring holds only cfg.Self
// until Set adds peers.
func NewPool(cfg Config) (*Pool, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	tr := newPeerTransport(cfg)
	p := &Pool{
		cfg: cfg,
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
	}
	if err := p.Set(); err != nil {
		return nil, err
	}
	return p, nil
}

// Config returns the pool's configuration with defaults applied.
func (p *Pool) Config() Config { return p.cfg }

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

	p.mu.Lock()
	old := p.state.Load()
	st := &poolState{
		ring:          ring,
		members:       members,
		peers:         make(map[string]*peer, len(members)),
		versionHeader: []string{strconv.FormatUint(ring.Version(), 16)},
	}
	for _, m := range members {
		if m == p.cfg.Self {
			continue
		}
		// Keep the peer values of members that stay: the cache may hold
		// them, and they are cheap, but there is no reason to churn them.
		pe, ok := (*peer)(nil), false
		if old != nil {
			pe, ok = old.peers[m]
		}
		if !ok {
			pe = &peer{pool: p, url: m}
		}
		st.peers[m] = pe
		st.others = append(st.others, pe)
	}
	p.state.Store(st)
	p.mu.Unlock()
	// Log after unlocking: a slog handler is the caller's code.
	if old != nil && old.ring.Version() != ring.Version() {
		p.cfg.Logger.Info("transport: membership changed",
			"members", len(members), "ring_version", st.versionHeader[0])
	}
	return nil
}

// checkVersion compares a peer's ring version (the X-Ringcache-Ring-Version
// header of its request or response) with ours, st's, and logs a
// disagreement at Warn once per pair of versions. Nodes disagree for a
// moment during every membership change; a pair that keeps showing up means
// nodes route keys differently (different members, Replicas or Hash), which
// the one-hop rule keeps correct but costs a load per key and node. A
// missing header (a groupcache peer) or one that is not a version is
// ignored.
func (p *Pool) checkVersion(st *poolState, peer, header string) {
	if header == "" || header == st.versionHeader[0] {
		return
	}
	ours := st.ring.Version()
	theirs, err := strconv.ParseUint(header, 16, 64)
	if err != nil || theirs == ours {
		return
	}
	pair := versionPair{ours, theirs}
	if _, seen := p.seen.Load(pair); seen {
		return
	}
	if _, seen := p.seen.LoadOrStore(pair, struct{}{}); seen {
		return
	}
	if p.seenN.Add(1) > maxSeenPairs {
		// Racy against concurrent stores, which at worst logs a pair twice.
		p.seen.Clear()
		p.seenN.Store(0)
	}
	p.cfg.Logger.Warn("transport: peer sees another ring",
		"peer", peer, "ring_version", st.versionHeader[0], "peer_ring_version", strconv.FormatUint(theirs, 16))
}

// PickPeer returns the peer that owns key, and false when this node owns it.
func (p *Pool) PickPeer(key string) (cache.Peer, bool) {
	st := p.state.Load()
	owner := st.ring.Get(key)
	if owner == "" || owner == p.cfg.Self {
		return nil, false
	}
	return st.peers[owner], true
}

// Peers returns every member but this node, for cluster-wide invalidation.
// The slice is the caller's.
func (p *Pool) Peers() []cache.Peer {
	return slices.Clone(p.state.Load().others)
}

// Members returns the base URLs of the ring's members, this node included,
// sorted.
func (p *Pool) Members() []string {
	return slices.Clone(p.state.Load().members)
}

// Owner returns the base URL of the member that owns key.
func (p *Pool) Owner(key string) string {
	return p.state.Load().ring.Get(key)
}

// Version returns the ring's version (consistenthash.Map.Version), sent to
// peers in the X-Ringcache-Ring-Version header.
func (p *Pool) Version() uint64 {
	return p.state.Load().ring.Version()
}

// Shares returns each member's share of the hash space, summing to 1.
func (p *Pool) Shares() map[string]float64 {
	return p.state.Load().ring.Shares()
}

// Close closes the idle keep-alive connections to peers. Requests in flight
// finish; the Pool remains usable and opens connections again on demand.
func (p *Pool) Close() {
	p.client.CloseIdleConnections()
}
