package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// testGroup is the group every test node serves.
const testGroup = "g"

// loadLog records origin loads: which node loaded which key.
type loadLog struct {
	mu    sync.Mutex
	loads map[string][]string // key -> base URLs of the nodes that loaded it
	total int
}

func (l *loadLog) add(node, key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loads == nil {
		l.loads = map[string][]string{}
	}
	l.loads[key] = append(l.loads[key], node)
	l.total++
}

// of returns the nodes that loaded key.
func (l *loadLog) of(key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.loads[key]...)
}

func (l *loadLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// origin is the behaviour of a test origin; the default serves "v:"+key.
type origin func(ctx context.Context, node, key string) (cache.Value, error)

func valueOf(key string) []byte { return []byte("v:" + key) }

func defaultOrigin(_ context.Context, _, key string) (cache.Value, error) {
	return cache.Value{Data: valueOf(key)}, nil
}

// testNode is one ringcache node, a Node with one group, and an httptest
// server on loopback that serves its public and peer routes.
type testNode struct {
	url   string
	n     *Node
	pool  *Pool       // n.Pool()
	node  *cache.Node // n.Cache()
	group *cache.Group
	srv   *httptest.Server
	gate  *gate // pause and resume the whole node, as SIGSTOP would
}

// gate holds every request to a node while it is paused: the kernel still
// accepts the connection, nothing answers (a paused process, docker pause).
type gate struct {
	mu     sync.Mutex
	closed chan struct{} // nil while open
}

func (g *gate) pause() {
	g.mu.Lock()
	if g.closed == nil {
		g.closed = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gate) resume() {
	g.mu.Lock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
	g.mu.Unlock()
}

func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		c := g.closed
		g.mu.Unlock()
		if c != nil {
			select {
			case <-c:
			case <-r.Context().Done():
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// clusterOpts tunes newCluster; every field may be left zero.
type clusterOpts struct {
	pool   func(i int, c *Config)
	group  func(c *cache.GroupConfig)
	origin origin
	// wrap, if set, wraps each node's public handler; wrapPeer its peer
	// handler.
	wrap     func(http.Handler) http.Handler
	wrapPeer func(i int, h http.Handler) http.Handler
	// handler, if set, tunes each node's public handler.
	handler func(i int, c *api.HandlerConfig)
	// offer makes the nodes push kept values after a ring change, as a
	// Node does by default; without it the tests see the pulls alone.
	offer bool
	// tenure, if set, gives node i's cache.Config.Tenure.
	tenure func(i int) func() (uint64, bool)
}

// newCluster starts n nodes on loopback that know each other, and a log of
// their origin loads. Everything is closed when the test ends.
func newCluster(t testing.TB, n int, o clusterOpts) ([]*testNode, *loadLog) {
	t.Helper()
	if o.origin == nil {
		o.origin = defaultOrigin
	}
	log := &loadLog{}
	nodes := make([]*testNode, n)
	urls := make([]string, n)
	for i := range nodes {
		// Listen before building the node: the node needs its own URL, and
		// the server needs the node's handlers before it starts.
		srv := httptest.NewUnstartedServer(nil)
		tn := &testNode{url: "http://" + srv.Listener.Addr().String(), srv: srv, gate: &gate{}}
		// A generous silence bound: on a loaded machine under the race
		// detector a node can miss a 1s deadline, and the tests that are
		// about silence set their own.
		cfg := NodeConfig{Pool: Config{Self: tn.url, PeerTimeout: 5 * time.Second}, NoOffer: !o.offer}
		if o.pool != nil {
			o.pool(i, &cfg.Pool)
		}
		if o.handler != nil {
			o.handler(i, &cfg.Public)
		}
		node, err := NewNode(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if o.tenure != nil {
			node.SetMembership(tenureOnly(o.tenure(i)))
		}
		tn.n, tn.pool, tn.node = node, node.Pool(), node.Cache()
		gcfg := cache.GroupConfig{
			Name:     testGroup,
			MaxBytes: 64 << 20,
			Getter: cache.GetterFunc(func(ctx context.Context, key string) (cache.Value, error) {
				log.add(tn.url, key)
				return o.origin(ctx, tn.url, key)
			}),
		}
		if o.group != nil {
			o.group(&gcfg)
		}
		if tn.group, err = node.NewGroup(gcfg); err != nil {
			t.Fatal(err)
		}
		var h http.Handler = node
		if o.wrap != nil || o.wrapPeer != nil {
			peerH, public := node.PeerHandler(), node.PublicHandler()
			if o.wrapPeer != nil {
				peerH = o.wrapPeer(i, peerH)
			}
			if o.wrap != nil {
				public = o.wrap(public)
			}
			mux := http.NewServeMux()
			mux.Handle(tn.pool.Config().BasePath, peerH)
			mux.Handle("/", public)
			h = mux
		}
		srv.Config.Handler = tn.gate.wrap(h)
		srv.Start()
		// Cleanups run last first: the server closes, then the node stops.
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := node.Shutdown(ctx); err != nil {
				t.Errorf("shutdown %s: %v", tn.url, err)
			}
		})
		t.Cleanup(srv.Close)
		nodes[i], urls[i] = tn, tn.url
	}
	for _, tn := range nodes {
		if err := tn.n.Set(urls...); err != nil {
			t.Fatal(err)
		}
	}
	return nodes, log
}

// tenureOnly is a Membership with a given tenure, always ready, that has
// nothing to leave: a test's stand-in for a registration whose lease it
// controls.
type tenureOnly func() (uint64, bool)

func (f tenureOnly) Tenure() (uint64, bool)    { return f() }
func (tenureOnly) Ready() bool                 { return true }
func (tenureOnly) Leave(context.Context) error { return nil }
func (tenureOnly) Close() error                { return nil }

// owner returns the node that owns key by the first node's ring.
func owner(t testing.TB, nodes []*testNode, key string) *testNode {
	t.Helper()
	return nodeAt(t, nodes, nodes[0].pool.Owner(key))
}

// nodeAt returns the node of nodes whose URL is u.
func nodeAt(t testing.TB, nodes []*testNode, u string) *testNode {
	t.Helper()
	for _, n := range nodes {
		if n.url == u {
			return n
		}
	}
	t.Fatalf("%s is not a node", u)
	return nil
}

// notOwner returns a node that does not own key.
func notOwner(t testing.TB, nodes []*testNode, key string) *testNode {
	t.Helper()
	o := owner(t, nodes, key)
	for _, n := range nodes {
		if n != o {
			return n
		}
	}
	t.Fatal("every node owns the key")
	return nil
}

// publicURL returns the public URL of key, escaped so that it arrives exactly.
func publicURL(base, group, key string) string {
	return base + api.PublicPrefix + escapeSegment(group) + "/" + escapeSegment(key)
}

// testClient returns an HTTP client whose idle connections close with the test.
func testClient(t testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport: tr,
		// Show redirects (from path cleaning) to the test instead of
		// following them.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

type response struct {
	status int
	header http.Header
	body   string
}

// do sends one request and reads the whole response.
func do(t testing.TB, c *http.Client, method, url string, body io.Reader, hdr ...string) (response, error) {
	t.Helper()
	// Send the path exactly as written, even an invalid escape: the URL
	// goes on the wire as Opaque, which the client does not re-encode.
	scheme, rest, _ := strings.Cut(url, "://")
	host, path, _ := strings.Cut(rest, "/")
	req, err := http.NewRequestWithContext(context.Background(), method, scheme+"://"+host+"/", body)
	if err != nil {
		return response{}, err
	}
	req.URL.Opaque = "/" + path
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: res.StatusCode, header: res.Header, body: string(b)}, nil
}

// mustDo is do that fails the test on a transport error.
func mustDo(t testing.TB, c *http.Client, method, url string, body io.Reader, hdr ...string) response {
	t.Helper()
	r, err := do(t, c, method, url, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// get fetches key through a node's public API and checks for a 200 with the
// default origin's value.
func get(t testing.TB, c *http.Client, n *testNode, key string) error {
	r, err := do(t, c, http.MethodGet, publicURL(n.url, testGroup, key), nil)
	if err != nil {
		return err
	}
	if r.status != http.StatusOK || r.body != string(valueOf(key)) {
		return fmt.Errorf("GET %q at %s: %d %q, want 200 %q", key, n.url, r.status, r.body, valueOf(key))
	}
	return nil
}

// sumStats adds a group's counters over nodes.
func sumStats(nodes []*testNode) cache.Stats {
	var s cache.Stats
	for _, n := range nodes {
		st := n.group.Stats()
		s.Gets += st.Gets
		s.LocalLoads += st.LocalLoads
		s.PeerLoads += st.PeerLoads
		s.PeerErrors += st.PeerErrors
		s.MainItems += st.MainItems
		s.HotItems += st.HotItems
	}
	return s
}

func errorsJoin(errs <-chan error) error {
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}
