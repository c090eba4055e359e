package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/consistenthash"
	"github.com/ringcache/ringcache/internal/listen"
	"github.com/ringcache/ringcache/peers"
	"github.com/ringcache/ringcache/transport"
	"github.com/ringcache/ringcache/transport/api"
	"github.com/ringcache/ringcache/transport/origin"
	"github.com/ringcache/ringcache/transport/ui"
)

// node is one running daemon: a transport.Node (the cache, its Pool and
// their routes), its membership, its HTTP servers and what only the daemon
// serves (metrics, debug reports, the operator's page). startNode returns it
// serving and ready; stop takes it down.
type node struct {
	cfg     Config
	log     *slog.Logger // with this node's ID
	baseLog *slog.Logger // without: the registry adds the ID itself
	self    string       // this node's peer URL
	nodeID  string
	tn      *transport.Node
	cache   *cache.Node     // tn.Cache()
	pool    *transport.Pool // tn.Pool()
	metrics *metrics
	demos   map[string]*origin.Demo // by group: the demo origins, for /debug/origin
	reg     *peers.Registry         // nil with static membership; set by join, before serving
	ui      *uiState                // the operator's page: membership timeline, rate samples
	sec     *peerSecurity           // secrets and mutual TLS of the peer routes

	auth      *api.Auth           // who may use the public API
	cert      *listen.Certificate // the public listener's, or nil without TLS
	clients   *api.ClientLimiter
	limited   []capped // every listener, capped
	adminAddr net.Addr // of the admin listener, or nil

	isReady atomic.Bool
	addrs   []net.Addr    // of the public listener, then the peer one if any
	errc    chan error    // a server that failed
	changed chan struct{} // a token after each membership change
	served  sync.WaitGroup
	stop1   sync.Once
}

// startNode builds a node from cfg, binds its listeners, joins the cluster,
// then serves. It returns once the node is ready, or with an error and
// nothing left running.
func startNode(ctx context.Context, cfg Config, log *slog.Logger) (_ *node, err error) {
	n := &node{cfg: cfg, baseLog: log, demos: map[string]*origin.Demo{}, errc: make(chan error, 2), changed: make(chan struct{}, 1)}
	n.metrics = newMetrics(n)
	n.ui = newUIState(n)
	if n.sec, err = loadPeerSecurity(cfg, log); err != nil {
		return nil, err // before binding anything: protected mode refuses to start
	}

	// Listen before anything else: the peer URL needs the peer port, and a
	// port in use should fail the start before we register in etcd.
	var lns []net.Listener
	defer func() {
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
		}
	}()
	for _, addr := range []string{cfg.Listen, cfg.PeerListen} {
		if addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		n.addrs = append(n.addrs, ln.Addr())
	}
	var adminLn net.Listener
	if cfg.Public.AdminListen != "" {
		if adminLn, err = net.Listen("tcp", cfg.Public.AdminListen); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				adminLn.Close()
			}
		}()
		n.adminAddr = adminLn.Addr()
	}
	host, err := os.Hostname()
	if err != nil && (cfg.PeerURL == "" || cfg.NodeID == "") {
		return nil, fmt.Errorf("ringcached: no -peer-url or -node-id given and no host name: %w", err)
	}
	n.self = cfg.PeerURL
	if n.self == "" {
		n.self = derivePeerURL(n.sec.scheme(), host, n.addrs[len(n.addrs)-1].(*net.TCPAddr))
	}
	n.nodeID = cfg.NodeID
	if n.nodeID == "" {
		n.nodeID = host
	}
	log = log.With("node", n.nodeID)
	n.log = log

	if err := n.setupPublic(); err != nil {
		return nil, err
	}
	pool := cfg.poolConfig(n.self)
	pool.Secrets, pool.TLS, pool.OnPeerRequest = n.sec.secrets, n.sec.tls, n.metrics.observePeer
	n.tn, err = transport.NewNode(transport.NodeConfig{
		Pool:         pool,
		Public:       api.HandlerConfig{Auth: n.auth, Clients: n.clients},
		OnRingChange: n.ringChanged,
		Logger:       log,
	})
	if err != nil {
		return nil, libError(err)
	}
	n.cache, n.pool = n.tn.Cache(), n.tn.Pool()
	defer func() {
		if err != nil {
			// Bounded like any stop.
			ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			n.stop(ctx)
		}
	}()
	for _, g := range cfg.Groups {
		if err := n.addGroup(g); err != nil {
			return nil, fmt.Errorf("%w: group %q: %v", errConfig, g.Name, err)
		}
	}
	// Join before serving. Until its ring is built this node would own
	// every key: it would load keys it does not own and keep copies that
	// the real owner's PUT or DELETE never reaches. The listeners are bound
	// already, so requests that arrive meanwhile (peers route to the node as
	// soon as it registers) wait in the accept queue for the few
	// milliseconds of the join rather than being refused or answered 503,
	// which clients would see as errors.
	if err := n.join(ctx); err != nil {
		return nil, err
	}
	if err := n.serve(lns, adminLn); err != nil {
		return nil, err
	}
	n.sec.watch(n.pool.SetSecrets)
	lns, adminLn = nil, nil // the servers own them now
	n.isReady.Store(true)
	log.Info("node ready", "peer", n.self, "addr", n.addrs[0].String(), "http_server", cfg.publicServer(), "members", len(n.pool.Members()), "groups", len(cfg.Groups))
	return n, nil
}

// derivePeerURL returns the peer URL of a node whose peer listener is addr:
// the listener's own host when it is bound to one address, else the host
// name (a container's name, which its peers resolve), with the port actually
// bound.
func derivePeerURL(scheme, hostname string, addr *net.TCPAddr) string {
	host := hostname
	if !addr.IP.IsUnspecified() {
		host = addr.IP.String()
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(addr.Port))
}

// addGroup builds a group's origin and adds the group to the cache node.
func (n *node) addGroup(g GroupSpec) error {
	var getter cache.Getter
	var err error
	switch g.Origin {
	case originDemo:
		var d *origin.Demo
		d, err = origin.NewDemo(origin.DemoConfig{Group: g.Name, Size: g.DemoSize, Latency: g.DemoLatency})
		n.demos[g.Name], getter = d, d
	case originHTTP:
		getter, err = origin.NewHTTP(origin.HTTPConfig{URL: g.URL, Group: g.Name, Timeout: g.Timeout, MaxBytes: g.MaxValueBytes})
	case originDir:
		getter, err = origin.NewDir(origin.DirConfig{Root: g.Dir, MaxBytes: g.MaxValueBytes})
	default:
		err = fmt.Errorf("origin %q: want demo, http or dir", g.Origin)
	}
	if err != nil {
		return err
	}
	_, err = n.cache.NewGroup(g.groupConfig(n.metrics.timedGetter(g.Name, getter), n.cfg.Copies))
	return groupError(err)
}

// serve starts an HTTP server on each listener: the public API, and the peer
// routes on the public listener or on their own, and the admin routes
// (metrics, debug) on the public listener or on adminLn when it is not nil.
func (n *node) serve(lns []net.Listener, adminLn net.Listener) error {
	public := n.tn.PublicHandler() // the public API, /healthz, /readyz
	basePath := n.pool.Config().BasePath
	peerHandler := n.tn.PeerHandler()

	mux := http.NewServeMux()
	mux.Handle("/", public)
	admin, guard := mux, n.auth.Guard
	if adminLn != nil {
		// A listener of their own is the operator's to close (an internal
		// address); on the public one the admin routes, which name members
		// and keys, are as closed as the values: with -read-token they need
		// a token.
		admin, guard = http.NewServeMux(), func(h http.Handler) http.Handler { return h }
	}
	if err := n.adminRoutes(admin, guard); err != nil {
		return err
	}
	// The public API is most of the traffic: it goes straight to its
	// handler, which routes it, rather than through a second mux that
	// matches and cleans the path again. The mux keeps the /cache/ pattern
	// for the one path it redirects (/cache to /cache/).
	root := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, api.PublicPrefix) {
			public.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
	// Each listener is capped on its raw connections, under any TLS, so
	// that a refusal costs no handshake.
	ls := []served{{name: "public", ln: lns[0], h: root, plainHTTP: n.cert == nil, publicTLS: n.cert != nil}}
	if len(lns) == 1 {
		mux.Handle(basePath, peerHandler)
	} else {
		ls = append(ls, served{name: "peer", ln: lns[1], h: n.sec.peerHandler(peerHandler), plainHTTP: n.sec.scheme() == "http"})
	}
	if adminLn != nil {
		ls = append(ls, served{name: "admin", ln: adminLn, h: admin, plainHTTP: true})
	}
	if err := n.capListeners(ls); err != nil {
		return err
	}
	if len(lns) > 1 {
		ls[1].ln = n.sec.peerListener(ls[1].ln) // mutual TLS, if configured
	}
	return n.startServers(ls)
}

// adminRoutes registers what operators and their tools read: metrics, the
// debug reports (ring, origin, memory) and the operator's page. They name members and keys, so
// -admin-listen moves them off the public listener.
func (n *node) adminRoutes(mux *http.ServeMux, guard func(http.Handler) http.Handler) error {
	mux.Handle("GET /metrics", guard(n.metrics.handler()))
	mux.Handle("GET /debug/ring", guard(http.HandlerFunc(n.serveRing)))
	mux.Handle("GET /debug/origin", guard(http.HandlerFunc(n.serveOrigin)))
	mux.Handle("GET /debug/memory", guard(http.HandlerFunc(n.serveMemory)))
	page, err := ui.NewHandler(n.ui, ui.Config{MaxKeyBytes: n.cfg.MaxKeyBytes})
	if err != nil {
		return err
	}
	mux.Handle("GET /ui/", guard(page))
	return nil
}

// ringChanged is the transport.Node's OnRingChange: after each accepted
// membership change it drops the metrics of peers that left, notes the
// change in the operator's timeline and signals changed (dev mode waits on
// it for the nodes to see each other).
func (n *node) ringChanged(members []string) {
	n.metrics.forgetPeers(members)
	n.ui.record(members)
	select {
	case n.changed <- struct{}{}:
	default: // a token is already waiting: the waiter rereads the members
	}
}

// join registers the node in etcd, or sets the static member list, and
// returns once the ring is built.
func (n *node) join(ctx context.Context) error {
	if len(n.cfg.Etcd) == 0 {
		if _, err := peers.Static(n.tn, n.self, n.cfg.Peers...); err != nil {
			return fmt.Errorf("%w: peers: %v", errConfig, err)
		}
		return nil
	}
	pc := n.cfg.peersConfig(n.nodeID, n.self)
	pc.Logger = n.baseLog
	reg, err := peers.Join(ctx, n.tn, pc)
	if errors.Is(err, peers.ErrConfig) {
		return libError(err) // the derived node ID or peer URL
	}
	if err != nil {
		return fmt.Errorf("ringcached: joining the cluster through etcd %v: %w", n.cfg.Etcd, err)
	}
	n.reg = reg
	n.served.Go(func() { n.ui.follow(reg) }) // ends when stop closes reg
	return nil
}

// awaitMembers waits until the number of members in the ring satisfies ok.
func (n *node) awaitMembers(ctx context.Context, ok func(members int) bool, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for !ok(len(n.pool.Members())) {
		select {
		case <-n.changed:
		case <-t.C:
			return fmt.Errorf("ringcached: %s: ring still has %d members after %v", n.nodeID, len(n.pool.Members()), timeout)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// wait blocks until ctx is done, a server fails or the registry stops (its
// etcd client was closed under it), then stops the node gracefully.
func (n *node) wait(ctx context.Context) error {
	var regDone <-chan struct{}
	if n.reg != nil {
		regDone = n.reg.Done()
	}
	// A failure is returned, not logged: main prints it after the stop.
	var err error
	select {
	case <-ctx.Done():
		n.log.Info("shutdown requested", "cause", context.Cause(ctx))
	case err = <-n.errc:
	case <-regDone:
		err = errors.New("ringcached: the etcd registry stopped")
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.ShutdownTimeout)
	defer cancel()
	n.stop(stopCtx)
	return err
}

// stop takes the node down gracefully, within ctx: /readyz turns 503, the
// node leaves the ring (its lease is revoked, so the others drop it at once
// rather than after the TTL), then the servers finish the requests in flight
// and close. Requests still running when ctx ends are cut off, with a
// warning: the stop itself was asked for, so it is not an error. stop is
// idempotent.
func (n *node) stop(ctx context.Context) {
	n.stop1.Do(func() {
		n.isReady.Store(false)
		if n.tn != nil {
			// The transport.Node stops in the order that loses nothing:
			// not ready, leave the ring and hand values over, finish the
			// requests in flight on every server, wait for detached loads.
			if err := n.tn.Shutdown(ctx); err != nil {
				n.log.Warn("requests cut off at the shutdown timeout", "err", err)
			}
		}
		n.served.Wait()
		n.sec.close()
		for _, ln := range n.limited {
			if r, rc := ln.Refused(), ln.ClientRefused(); r > 0 || rc > 0 {
				n.log.Info("connections refused at the caps", "listener", ln.name, "addr", ln.Addr().String(),
					"refused", r, "max", ln.Max(), "refused_per_client", rc, "max_per_client", ln.MaxPerClient())
			}
		}
	})
}

// ringInfo is the JSON of /debug/ring.
type ringInfo struct {
	Self    string             `json:"self"`
	NodeID  string             `json:"node_id"`
	Version string             `json:"version"`
	Members []string           `json:"members"`
	Shares  map[string]float64 `json:"shares"`
	// Placement is hashed or ranges; Arcs, with ranges, lists each member's
	// arcs [start, end) of the 2^32 hash space.
	Placement string                          `json:"placement"`
	Arcs      map[string][]consistenthash.Arc `json:"arcs,omitempty"`
	Owner     string                          `json:"owner,omitempty"`
	// Suspected lists the members this node cannot reach lately: their
	// circuit is open, and it loads their keys itself until they answer.
	Suspected []string  `json:"suspected"`
	Ready     bool      `json:"ready"`
	Static    bool      `json:"static,omitempty"`
	Etcd      *etcdInfo `json:"etcd,omitempty"`
	// Purges lists the purges this node applied, oldest first (the last
	// 1,024); PurgesCurrent is false while it serves nothing from its
	// caches because it may have missed one (see -purge-lease).
	Purges        []cache.Purge `json:"purges"`
	PurgesCurrent bool          `json:"purges_current"`
}

// etcdInfo is the registry's view of etcd in /debug/ring.
type etcdInfo struct {
	Connected   bool      `json:"connected"`
	Registered  bool      `json:"registered"`
	Term        uint64    `json:"term"` // the key's create revision: changes when it was deleted and put again
	LastContact time.Time `json:"last_contact"`
	LastChange  time.Time `json:"last_change"`
	Pending     []string  `json:"pending"` // members waiting out the hold-down
}

func (n *node) serveRing(w http.ResponseWriter, r *http.Request) {
	info := ringInfo{
		Self:      n.self,
		NodeID:    n.nodeID,
		Version:   fmt.Sprintf("%x", n.pool.Version()),
		Members:   n.pool.Members(),
		Shares:    n.pool.Shares(),
		Ready:     n.ready(),
		Placement: n.cfg.placement(),
		Arcs:      n.pool.Arcs(),
		Suspected: n.pool.Suspected(),
		Purges:    n.pool.Purges(),
	}
	info.PurgesCurrent = n.pool.PurgesCurrent()
	if info.Purges == nil {
		info.Purges = []cache.Purge{}
	}
	if info.Suspected == nil {
		info.Suspected = []string{}
	}
	info.Static = n.reg == nil
	if r.URL.Query().Has("key") {
		info.Owner = n.pool.Owner(r.URL.Query().Get("key"))
	}
	if n.reg != nil {
		st := n.reg.State()
		info.Etcd = &etcdInfo{Connected: st.Connected, Registered: st.Registered, Term: st.Term, LastContact: st.LastContact, LastChange: st.LastChange, Pending: []string{}}
		for _, m := range st.Pending {
			info.Etcd.Pending = append(info.Etcd.Pending, m.PeerURL)
		}
	}
	writeJSON(w, info)
}

// serveOrigin reports the load counts of the demo origins.
func (n *node) serveOrigin(w http.ResponseWriter, r *http.Request) {
	out := make(map[string]origin.DemoLoads, len(n.demos))
	for name, d := range n.demos {
		out[name] = d.Loads()
	}
	writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // an error here is the client gone
}

// capped is one of the node's listeners under its connection caps.
type capped struct {
	name string // public, peer or admin
	*listen.LimitListener
}

// The node is the clusterState the metrics read.
var _ clusterState = (*node)(nil)

func (n *node) groups() []*cache.Group { return n.cache.Groups() }
func (n *node) members() int           { return len(n.pool.Members()) }
func (n *node) ringVersion() uint64    { return n.pool.Version() }

func (n *node) purges() (map[[2]string]int64, bool) {
	return n.pool.PurgeCounts(), n.pool.PurgesCurrent()
}

// listeners is set by serve before any server runs, so a scrape, which a
// server serves, sees it whole.
func (n *node) listeners() []capped { return n.limited }

// ready: started, not stopping, and (with etcd) registered with a member
// set. During an etcd outage the registry stays ready on its last member set.
func (n *node) ready() bool {
	return n.isReady.Load() && n.tn.Ready()
}

func (n *node) etcdConnected() (bool, bool) {
	if n.reg == nil {
		return false, false
	}
	return n.reg.State().Connected, true
}
