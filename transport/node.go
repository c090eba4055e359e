package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/inflight"
	"github.com/ringcache/ringcache/internal/listen"
	"github.com/ringcache/ringcache/transport/api"
)

// NodeConfig configures a Node.
type NodeConfig struct {
	// Pool configures the peer side: Self (required), the ring, the peer
	// client and the peer route. Its MaxKeyBytes bounds keys on the public
	// route too, so the peer route never refuses a key that the public route
	// accepted. If Pool.Logger is nil, the Pool logs to Logger.
	Pool Config

	// Public configures the public API (api.Handler) beyond what the node sets
	// itself: its MaxKeyBytes must be zero or Pool's (the node passes Pool's
	// MaxKeyBytes), and if its Logger is nil it logs to Logger.
	Public api.HandlerConfig

	// HandoffWindow is the cache's (cache.Config.HandoffWindow): how long
	// after a ring change the node keeps the values of keys it no longer
	// owns for their new owners, which it also pushes to them at once
	// (Pool.OfferOnChange), so that a joiner is warm before it is asked. If
	// zero, one minute; negative, none: nothing is kept or pushed.
	HandoffWindow time.Duration

	// NoOffer, if set, keeps the values of keys that moved for their new
	// owners to ask for, on their first miss, instead of pushing them.
	NoOffer bool

	// OnRingChange, if not nil, is called after each membership change
	// that Set, SetWeighted or SetRanges applied, with the new members. It
	// runs on the caller's goroutine (the membership's) and must be quick.
	OnRingChange func(members []string)

	// Logger receives the node's boundary events: membership changes,
	// peer errors, panics in a Getter, refused requests, the stop. If nil,
	// logs are discarded.
	Logger *slog.Logger
}

// Membership is a node's registration in a cluster, which *peers.Registry
// implements. A Node with none (static membership, a single node) always
// holds its keys and is ready until it shuts down.
type Membership interface {
	// Leave tells the other members that this node leaves, so that they
	// drop it from their rings at once, while it stays registered.
	Leave(ctx context.Context) error
	// Close ends the registration; it is bounded by the membership itself.
	Close() error
	// Tenure says whether this node's claim to its keys holds, and under
	// which term (cache.Config.Tenure).
	Tenure() (term uint64, ok bool)
	// Ready reports whether the node is registered with a member set.
	Ready() bool
}

// Node is one ringcache node assembled for embedding: a cache.Node, the
// Pool it asks for key owners, the public API and the peer routes, and a
// Shutdown that stops them in the order that loses nothing. It is a
// peers.Setter (and WeightedSetter, RangesSetter), so a membership feeds its
// ring directly, and an http.Handler that serves:
//
//	/cache/{group}/{key...}   the public API (api.Handler)
//	<Pool.BasePath>...        the peer routes (Pool.PeerHandler)
//	GET /healthz              200 while the process serves
//	GET /readyz               200 while ready (see Ready), else 503
//
// PublicHandler and PeerHandler give the two route sets apart, for two
// listeners. A Node is safe for concurrent use.
type Node struct {
	cfg    NodeConfig
	log    *slog.Logger
	pool   *Pool
	cache  *cache.Node
	api    *api.Handler // the public API alone, for CachedHit
	public http.Handler // the public API with /healthz and /readyz
	peer   http.Handler
	all    http.Handler

	member   atomic.Pointer[memberBox]
	stopping atomic.Bool
	requests inflight.Counter // requests through the node's handlers; see track

	mu      sync.Mutex
	servers []Server // guarded by mu
	stopped bool     // guarded by mu: Serve refuses once set

	shutdown    sync.Once
	shutdownErr error

	terms terms // the main cache's term (tenure)
}

// memberBox holds a Membership in an atomic.Pointer.
type memberBox struct{ m Membership }

var _ http.Handler = (*Node)(nil)

// NewNode validates cfg and returns a Node with no groups, whose ring holds
// only cfg.Pool.Self until a membership (or Set) adds its peers. It returns
// an error matching ErrConfig for an invalid cfg (a *ConfigError for a
// field of cfg.Pool).
func NewNode(cfg NodeConfig) (*Node, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Pool.Logger == nil {
		cfg.Pool.Logger = log
	}
	pool, err := NewPool(cfg.Pool)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: log, pool: pool}
	n.cache = cache.New(cache.Config{Peers: pool, Logger: log, Tenure: n.tenure, Current: pool.PurgesCurrent, HandoffWindow: cfg.HandoffWindow})
	if cfg.HandoffWindow >= 0 && !cfg.NoOffer {
		pool.OfferOnChange(n.cache) // values follow their keys after a ring change
	}
	pool.RepairOnChange(n.cache) // and their copies follow their heirs
	hc := cfg.Public
	if mk := pool.Config().MaxKeyBytes; hc.MaxKeyBytes != 0 && hc.MaxKeyBytes != mk {
		pool.Close()
		return nil, fmt.Errorf("%w: Public.MaxKeyBytes %d differs from Pool.MaxKeyBytes %d: the peer route would refuse keys the public route accepts", ErrConfig, hc.MaxKeyBytes, mk)
	}
	hc.MaxKeyBytes = pool.Config().MaxKeyBytes
	if hc.Logger == nil {
		hc.Logger = log
	}
	pub, err := api.NewHandler(n.cache, hc)
	if err != nil {
		pool.Close()
		return nil, err
	}
	n.api = pub
	misc := http.NewServeMux()
	misc.Handle(api.PublicPrefix, pub) // only for the one path it redirects: /cache to /cache/
	misc.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "ok")
	})
	misc.HandleFunc("GET /readyz", n.serveReady)
	// The public API and the peer routes are most of the traffic: they go
	// straight to their handlers, which route them, rather than through a
	// mux that matches and cleans the path again.
	peer := pool.PeerHandler(n.cache)
	public := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, api.PublicPrefix) {
			pub.ServeHTTP(w, r)
			return
		}
		misc.ServeHTTP(w, r)
	})
	basePath := pool.Config().BasePath
	n.peer = n.track(peer)
	n.public = n.track(public)
	n.all = n.track(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, basePath) {
			peer.ServeHTTP(w, r)
			return
		}
		public(w, r)
	}))
	return n, nil
}

// track counts the requests in flight through h, for Shutdown to wait for
// when a server it does not own serves them.
func (n *Node) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.requests.Add()
		defer n.requests.Done()
		h.ServeHTTP(w, r)
	})
}

// NewGroup adds a group to the node (cache.Node.NewGroup).
func (n *Node) NewGroup(cfg cache.GroupConfig) (*cache.Group, error) {
	return n.cache.NewGroup(cfg)
}

// Group returns the named group.
func (n *Node) Group(name string) (*cache.Group, bool) { return n.cache.Group(name) }

// Cache returns the node's cache.Node.
func (n *Node) Cache() *cache.Node { return n.cache }

// Pool returns the node's Pool: its ring and peer client.
func (n *Node) Pool() *Pool { return n.pool }

// Self returns the node's base URL as its peers reach it.
func (n *Node) Self() string { return n.pool.Config().Self }

// Set replaces the ring's members, each of weight 1 (peers.Setter).
func (n *Node) Set(urls ...string) error { return n.applied(n.pool.Set(urls...)) }

// SetWeighted replaces the ring's members and their weights
// (peers.WeightedSetter).
func (n *Node) SetWeighted(weights map[string]int) error {
	return n.applied(n.pool.SetWeighted(weights))
}

// SetRanges replaces the ring's members and their explicit positions
// (peers.RangesSetter).
func (n *Node) SetRanges(positions map[string][]uint32) error {
	return n.applied(n.pool.SetRanges(positions))
}

func (n *Node) applied(err error) error {
	if err != nil {
		return err // the Pool keeps its ring; the membership logs it
	}
	if n.cfg.OnRingChange != nil {
		n.cfg.OnRingChange(n.pool.Members())
	}
	return nil
}

// SetMembership makes m the node's registration: its Tenure guards the
// main cache, its Ready is part of the node's, and Shutdown leaves it. If
// m is a PurgeLog (a *peers.Registry is), purges are recorded in it, and
// the node reads it every 5 s at most (see Config.PurgeLease). Call
// it once m is built (peers.New with this node as its Setter), before the
// node serves.
func (n *Node) SetMembership(m Membership) {
	if m == nil {
		n.member.Store(nil)
		return
	}
	n.member.Store(&memberBox{m})
	n.followRegistration(m)
	if log, ok := m.(PurgeLog); ok {
		// Current from now: the caches are still empty (SetMembership comes
		// before the node serves), and every purge recorded from now on
		// names this node, registered already, as one to wait for. So a
		// write or load right after the start is served at once, without
		// waiting for the first read of the log.
		n.pool.purges.markFresh(n.pool.purges.since())
		n.pool.purges.log.Store(&purgeLogBox{log})
		n.pool.goBackground(func(ctx context.Context) { n.pool.purges.follow(ctx, log) })
	}
}

func (n *Node) membership() Membership {
	if b := n.member.Load(); b != nil {
		return b.m
	}
	return nil
}

// tenure is the cache's Config.Tenure: without a membership, always held;
// with one, the cache's own term, held while the registration surely holds
// or, past that, while the other members still count this node in. Past
// its lease etcd may be out of reach (an outage, when nobody can change
// the ring) or this node was paused or cut off and the others may have
// dropped it: they say which (Pool.MemberConfirmed). The term changes only
// when a peer dropped this node (tenure.go): a registration that was lost
// and made again, as every node's is when etcd stalls, keeps the cache.
func (n *Node) tenure() (uint64, bool) {
	m := n.membership()
	if m == nil {
		return 0, true
	}
	reg, held := m.Tenure()
	if reg == 0 {
		return 0, false // not registered yet
	}
	if t := n.terms.cur.Load(); t != nil && t.reg == reg && t.pending == 0 {
		if _, dropped := n.pool.droppedBy(); !dropped {
			if held {
				return t.cache, true
			}
			return t.cache, n.pool.MemberConfirmed()
		}
	}
	return n.changeTerm(reg, held)
}

// changeTerm is tenure's slow path: the first registration, a new
// registration (the old key was deleted: a lost lease), or a peer that
// dropped this node.
func (n *Node) changeTerm(reg uint64, held bool) (uint64, bool) {
	n.terms.mu.Lock()
	t := n.terms.cur.Load()
	peer, dropped := n.pool.droppedBy()
	if t != nil && t.reg != reg && !dropped {
		// Registered again. The peers are asked first, and this waits for
		// their answers (a round trip; PeerTimeout for a silent one), as
		// does every lookup meanwhile (terms.mu): one that dropped this
		// node and took it back while it was away says so with its token,
		// and the cache starts a new term before it serves a value that
		// peer may have bypassed. Its word from before, all that
		// MemberConfirmed would go on, says nothing of that.
		n.pool.askMembers(n.pool.cfg.PeerTimeout)
		peer, dropped = n.pool.droppedBy()
	}
	switch {
	case t == nil:
		t = &cacheTerm{cache: 1, reg: reg}
		n.pool.resetDrops()
		n.pool.probeMembers() // each peer's first token is its baseline
	case dropped:
		t = &cacheTerm{cache: t.cache + 1, reg: reg}
		n.pool.resetDrops()
		n.pool.probeMembers()
		n.log.Warn("transport: the cache starts a new term: a peer dropped this node, and may have owned its keys meanwhile",
			"peer", peer, "term", t.cache)
	case t.reg != reg:
		// Registered again: the old key was deleted (a lost lease). The
		// cache is held again once every peer confirmed it kept this
		// node throughout.
		t = &cacheTerm{cache: t.cache, reg: reg, pending: time.Now().UnixNano()}
		n.settleProbes(n.holdDown() + n.pool.cfg.PeerTimeout)
		n.log.Info("transport: registered again; asking the peers whether the cache still holds", "term", t.cache)
	case t.pending != 0:
		switch ok, unknown := n.pool.confirmedSince(t.pending); {
		case unknown:
			t = &cacheTerm{cache: t.cache + 1, reg: reg}
			n.pool.resetDrops()
			n.pool.probeMembers()
			n.log.Warn("transport: the cache starts a new term: a peer's history with this node is not known", "term", t.cache)
		case ok:
			t = &cacheTerm{cache: t.cache, reg: reg}
			n.log.Info("transport: every peer kept this node while its registration lapsed; the cache is kept", "term", t.cache)
		default:
			n.pool.probeMembers() // one probe a peer at a time
		}
	}
	n.terms.cur.Store(t)
	n.terms.mu.Unlock()
	if held && t.pending == 0 {
		return t.cache, true
	}
	// Past its lease, or registered again and not yet confirmed by every
	// peer: held while the peers lately said they count this node in (a
	// peer that dropped it says so, and its token starts a new term).
	// Holding nothing until every peer answered would serve the origin's
	// values in place of acknowledged writes meanwhile.
	return t.cache, n.pool.MemberConfirmed()
}

// holdDown is how long the membership's members wait before they drop one
// that vanished (peers.Config.HoldDown), or 2s for a membership that does
// not say.
func (n *Node) holdDown() time.Duration {
	if h, ok := n.membership().(interface{ HoldDown() time.Duration }); ok {
		return h.HoldDown()
	}
	return 2 * time.Second
}

// Ready reports whether the node should be sent traffic: it is not shutting
// down and, with a membership, is registered with a member set.
func (n *Node) Ready() bool {
	if n.stopping.Load() {
		return false
	}
	m := n.membership()
	return m == nil || m.Ready()
}

func (n *Node) serveReady(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !n.Ready() {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// ServeHTTP serves the public API, /healthz, /readyz and the peer routes.
func (n *Node) ServeHTTP(w http.ResponseWriter, r *http.Request) { n.all.ServeHTTP(w, r) }

// PublicHandler returns the public API with /healthz and /readyz, without
// the peer routes: for a public listener apart from the peers' one.
func (n *Node) PublicHandler() http.Handler { return n.public }

// PeerHandler returns the peer routes alone, for a listener of their own.
func (n *Node) PeerHandler() http.Handler { return n.peer }

// ErrNodeStopped is returned by Serve once Shutdown has begun.
var ErrNodeStopped = errors.New("transport: node shut down")

// Serve serves h on ln, in an http.Server from NewServer, until Shutdown:
// it returns http.ErrServerClosed then, like http.Server.Serve, or another
// error if serving failed. A nil h serves the node itself (both route sets).
func (n *Node) Serve(ln net.Listener, h http.Handler) error {
	if h == nil {
		h = n
	}
	srv := listen.NewServer(ln.Addr().String(), h)
	srv.ErrorLog = slog.NewLogLogger(n.log.Handler(), slog.LevelWarn)
	if err := n.AddServer(srv); err != nil {
		ln.Close()
		return err
	}
	return srv.Serve(ln)
}

// Server is what Node.Shutdown stops: an *http.Server or a *fast.Server.
type Server interface {
	Shutdown(context.Context) error
	Close() error
}

// AddServer makes Shutdown stop srv (http.Server.Shutdown, then Close if
// ctx ends first) once the node has left the ring, before it waits for the
// loads: for a server configured by the caller (TLS, its own timeouts or
// listeners) that serves the node's handlers. Serve adds the servers it
// runs. It returns ErrNodeStopped once Shutdown has begun.
func (n *Node) AddServer(srv Server) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return ErrNodeStopped
	}
	n.servers = append(n.servers, srv)
	return nil
}

// Shutdown stops the node within ctx, in the order that loses nothing:
//
//  1. it turns not ready (/readyz answers 503);
//  2. with a membership, it tells the others that it leaves (they drop it
//     from their rings at once), asks their next owners for every key
//     from then on (Pool.leaveRing: they may take writes it would not
//     see), stops applying writes (cache.Node.Retire) and hands the values
//     it owns to their next owners (Pool.Drain), within half of ctx's
//     remaining time, then closes the membership. It keeps serving reads,
//     through the next owners, and hand-offs meanwhile;
//  3. its servers (those that Serve runs and AddServer adds) finish the
//     requests in flight and close, and it waits for requests in flight
//     through its handlers in any other server;
//  4. it waits for the loads still running, detached from their callers
//     (cache.Node.Close), and closes the Pool.
//
// A step that ctx cuts short is logged and the next runs: requests still
// running when ctx ends are cut off, and Shutdown returns ctx's error. It
// returns nil after a complete stop. Shutdown is idempotent: later calls
// return the first call's result, once it is known.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutdown.Do(func() { n.shutdownErr = n.stop(ctx) })
	return n.shutdownErr
}

func (n *Node) stop(ctx context.Context) error {
	start := time.Now()
	n.stopping.Store(true)
	n.log.Info("stopping: not ready, leaving the ring, finishing requests")
	var errs []error
	if m := n.membership(); m != nil {
		n.leave(ctx, m)
	}

	n.mu.Lock()
	n.stopped = true
	servers := n.servers
	n.mu.Unlock()
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				n.log.Warn("requests cut off at the shutdown deadline", "err", err)
				srv.Close()
			}
		})
	}
	wg.Wait()
	if err := n.requests.Wait(ctx); err != nil {
		n.log.Warn("requests in other servers still running at the shutdown deadline")
	}

	if err := n.cache.Close(ctx); err != nil {
		n.log.Warn("loads still running at the shutdown deadline; they end by their load timeout", "err", err)
	}
	n.pool.Close()
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	n.log.Info("stopped", "dur", time.Since(start))
	return errors.Join(errs...)
}

// leave is Shutdown's second step: leave the ring, hand values over, close
// the membership.
func (n *Node) leave(ctx context.Context, m Membership) {
	if err := m.Leave(ctx); err != nil {
		// The others will drop the node when its registration ends; a
		// hand-off now would race their rings.
		n.log.Warn("marking this node as leaving", "err", err)
	} else {
		n.pool.leaveRing()
		n.cache.Retire()
		dctx, cancel := ctx, context.CancelFunc(func() {})
		if d, ok := ctx.Deadline(); ok {
			dctx, cancel = context.WithTimeout(ctx, time.Until(d)/2)
		}
		began := time.Now()
		st := n.pool.Drain(dctx, n.cache, 0)
		cancel()
		n.log.Info("handed values over to their next owners",
			"offered", st.Offered, "adopted", st.Adopted, "bytes", st.Bytes, "failed_batches", st.Failed, "dur", time.Since(began))
	}
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			n.log.Warn("leaving the ring", "err", err)
		}
	case <-ctx.Done():
		// Close is bounded by the membership (an etcd lease's TTL), after
		// which the registration is gone anyway; the requests need the time.
		n.log.Warn("leaving the ring: timed out; the registration expires by itself")
	}
}

// CachedHit answers a GET or HEAD of uri from the node's caches, as its
// public API would: see api.Handler.CachedHit. transport/fast calls it.
func (n *Node) CachedHit(uri []byte, authorization func() string, b []byte) (_ api.Hit, body []byte, ok bool) {
	return n.api.CachedHit(uri, authorization, b)
}

// BeginRequest and EndRequest count a request another server serves for
// the node outside its handlers (a Hit), so that Shutdown waits for it as
// for the requests through them.
func (n *Node) BeginRequest() { n.requests.Add() }

// EndRequest ends what BeginRequest began.
func (n *Node) EndRequest() { n.requests.Done() }
