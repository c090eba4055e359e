package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/peers"
)

// The Node is what a membership feeds, and a Registry is what it leaves.
var (
	_ peers.Setter         = (*Node)(nil)
	_ peers.WeightedSetter = (*Node)(nil)
	_ peers.RangesSetter   = (*Node)(nil)
	_ Membership           = (*peers.Registry)(nil)
)

// EmbeddedEtcd starts a real single-member etcd on loopback with its data
// in dir, for the tests and examples of this package (the examples live in
// transport_test), and returns its client URL and a function that stops it.
func EmbeddedEtcd(dir string) (clientURL string, stop func(), err error) {
	local := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{local}, []url.URL{local}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{local}, []url.URL{local}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", nil, err
	}
	var once sync.Once // embed.Etcd.Close panics when called twice
	stop = func() { once.Do(e.Close) }
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, errors.New("etcd not ready after 30s")
	}
	return "http://" + e.Clients[0].Addr().String(), stop, nil
}

// startEtcd runs an EmbeddedEtcd for the test.
func startEtcd(t *testing.T) string {
	t.Helper()
	u, stop, err := EmbeddedEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return u
}

// etcdNode is a Node registered through etcd and serving on loopback.
type etcdNode struct {
	*Node
	group  *cache.Group
	served chan error // Serve's result
}

// startEtcdNode starts a node named id whose group's origin is get, joins
// it to the cluster in etcd and serves it. The test stops it.
func startEtcdNode(t *testing.T, endpoint, id string, onRing func([]string), get cache.GetterFunc) *etcdNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := NewNode(NodeConfig{Pool: Config{Self: "http://" + ln.Addr().String(), PeerTimeout: 5 * time.Second}, OnRingChange: onRing})
	if err != nil {
		t.Fatal(err)
	}
	g, err := n.NewGroup(cache.GroupConfig{Name: testGroup, MaxBytes: 1 << 20, Getter: get})
	if err != nil {
		t.Fatal(err)
	}
	pc := peers.DefaultConfig()
	pc.Endpoints, pc.Cluster, pc.NodeID, pc.PeerURL, pc.Setter = []string{endpoint}, "shutdown", id, n.Self(), n
	pc.TTL = 2 * time.Second
	reg, err := peers.New(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	n.SetMembership(reg)
	en := &etcdNode{Node: n, group: g, served: make(chan error, 1)}
	go func() { en.served <- n.Serve(ln, nil) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return en
}

// TestShutdownLeavesThenDrains: a node with requests and loads in flight
// leaves the ring first (the other node drops it while its requests still
// run), hands the values it owns to their next owner, then finishes every
// request in flight, waits for the load a caller gave up on, and returns
// with nothing left running (goleak in TestMain).
func TestShutdownLeavesThenDrains(t *testing.T) {
	endpoint := startEtcd(t)
	release := make(chan struct{})
	var started sync.WaitGroup
	var finished atomic.Int64
	var loads atomic.Int64
	blocking := map[string]bool{}
	var blockingMu sync.Mutex
	get := func(ctx context.Context, key string) (cache.Value, error) {
		loads.Add(1)
		blockingMu.Lock()
		block := blocking[key]
		blockingMu.Unlock()
		if block {
			started.Done()
			<-release
			finished.Add(1)
		}
		return cache.Value{Data: valueOf(key)}, nil
	}
	dropped := make(chan []string, 16)
	a := startEtcdNode(t, endpoint, "a", nil, get)
	b := startEtcdNode(t, endpoint, "b", func(m []string) { dropped <- m }, get)
	waitMembers(t, a.Node, 2)
	waitMembers(t, b.Node, 2)

	// Keys that a owns: one cached before the stop (to hand over), two
	// whose loads are blocked while a stops.
	var owned []string
	for i := 0; len(owned) < 3; i++ {
		k := fmt.Sprintf("key-%d", i)
		if a.Pool().Owner(k) == a.Self() && b.Pool().Owner(k) == a.Self() {
			owned = append(owned, k)
		}
	}
	cached, viaPeer, detached := owned[0], owned[1], owned[2]
	blockingMu.Lock()
	blocking[viaPeer], blocking[detached] = true, true
	blockingMu.Unlock()
	c := testClient(t)
	if err := get2(c, b.Self(), cached); err != nil {
		t.Fatal(err)
	}

	started.Add(2)
	// A request in flight through b's public route to a's peer route.
	inFlight := make(chan error, 1)
	go func() { inFlight <- get2(c, b.Self(), viaPeer) }()
	// A caller that gives up: its load goes on, detached.
	gaveUp, cancel := context.WithCancel(t.Context())
	gone := make(chan error, 1)
	go func() { _, err := a.group.Get(gaveUp, detached); gone <- err }()
	started.Wait()
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up: %v", err)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- a.Shutdown(t.Context()) }()
	// b drops a from its ring while a's request is still in flight.
	for m := range dropped {
		if !slices.Contains(m, a.Self()) {
			break
		}
	}
	select {
	case err := <-inFlight:
		t.Fatalf("the request in flight ended (%v) before the node left the ring", err)
	case err := <-stopped:
		t.Fatalf("Shutdown returned (%v) with a request and a load in flight", err)
	default:
	}
	if a.Ready() {
		t.Fatal("a is ready while it shuts down")
	}
	close(release)
	if err := <-inFlight; err != nil {
		t.Fatalf("the request in flight: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := finished.Load(); n != 2 {
		t.Fatalf("%d of 2 loads had finished when Shutdown returned", n)
	}
	if err := <-a.served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
	if _, err := http.Get(a.Self() + "/healthz"); err == nil {
		t.Fatal("a still serves after Shutdown")
	}
	// The value a owned was handed to b: reading it costs the origin nothing.
	before := loads.Load()
	if err := get2(c, b.Self(), cached); err != nil {
		t.Fatal(err)
	}
	if n := loads.Load() - before; n != 0 {
		t.Fatalf("%d origin loads for a value a handed over, want 0", n)
	}
	if err := a.Serve(mustListen(t), nil); !errors.Is(err, ErrNodeStopped) {
		t.Fatalf("Serve after Shutdown: %v, want ErrNodeStopped", err)
	}
	if err := a.Shutdown(t.Context()); err != nil {
		t.Fatalf("a second Shutdown: %v", err)
	}
}

// TestShutdownWaitsForForeignServer: a Node mounted in a server it does not
// own still waits, in Shutdown, for the requests in flight through it.
func TestShutdownWaitsForForeignServer(t *testing.T) {
	nodes, _ := newCluster(t, 1, clusterOpts{})
	n := nodes[0]
	release := make(chan struct{})
	entered := make(chan struct{})
	var done atomic.Bool
	_, err := n.n.NewGroup(cache.GroupConfig{Name: "slow", MaxBytes: 1 << 20, Getter: cache.GetterFunc(func(ctx context.Context, key string) (cache.Value, error) {
		close(entered)
		<-release
		done.Store(true)
		return cache.Value{Data: []byte("slow")}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	c := testClient(t)
	res := make(chan response, 1)
	go func() { res <- mustDo(t, c, http.MethodGet, publicURL(n.url, "slow", "k"), nil) }()
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- n.n.Shutdown(t.Context()) }()
	for n.n.Ready() {
		runtime.Gosched() // Shutdown turns not ready first
	}
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	if r := <-res; r.status != http.StatusOK || r.body != "slow" {
		t.Fatalf("the request in flight: %d %q", r.status, r.body)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if !done.Load() {
		t.Fatal("Shutdown returned before the load finished")
	}
}

// TestNodeOneKeyLimit: the public and the peer route share MaxKeyBytes, so
// a key the public route accepts reaches its owner.
func TestNodeOneKeyLimit(t *testing.T) {
	t.Parallel()
	nodes, _ := newCluster(t, 3, clusterOpts{pool: func(_ int, c *Config) { c.MaxKeyBytes = 400 }})
	c := testClient(t)
	for i := 0; ; i++ {
		key := fmt.Sprintf("%d-%s", i, strings.Repeat("k", 300))
		if owner(t, nodes, key) == nodes[0] {
			continue
		}
		r := mustDo(t, c, http.MethodGet, publicURL(nodes[0].url, testGroup, key), nil)
		if r.status != http.StatusOK {
			t.Fatalf("a 300-byte key through a non-owner: %d %q", r.status, r.body)
		}
		if st := nodes[0].group.Stats(); st.PeerLoads != 1 || st.LocalLoads != 0 {
			t.Fatalf("stats %+v: want the key fetched from its owner", st)
		}
		r = mustDo(t, c, http.MethodGet, publicURL(nodes[0].url, testGroup, strings.Repeat("k", 401)), nil)
		if r.status != http.StatusBadRequest {
			t.Fatalf("a 401-byte key: %d, want 400", r.status)
		}
		return
	}
}

// waitMembers waits until n's ring has want members.
func waitMembers(t *testing.T, n *Node, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(n.Pool().Members()) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d members, want %d", n.Self(), len(n.Pool().Members()), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// get2 reads key through the public route at base and checks the value.
func get2(c *http.Client, base, key string) error {
	res, err := c.Get(publicURL(base, testGroup, key))
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK || string(b) != string(valueOf(key)) {
		return fmt.Errorf("GET %q at %s: %d %q", key, base, res.StatusCode, b)
	}
	return nil
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestNewNodeRefuses: a config that the Pool or the handler refuses, or one
// whose public key limit differs from the peer route's, is an error.
func TestNewNodeRefuses(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]NodeConfig{
		"no Self":          {},
		"bad Self":         {Pool: Config{Self: "tcp://x"}},
		"two key limits":   {Pool: Config{Self: "http://127.0.0.1:1", MaxKeyBytes: 300}, Public: HandlerConfig{MaxKeyBytes: 250}},
		"negative replica": {Pool: Config{Self: "http://127.0.0.1:1", Replicas: -1}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n, err := NewNode(cfg)
			if err == nil {
				n.Shutdown(t.Context())
				t.Fatal("NewNode accepted it")
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not match ErrConfig", err)
			}
		})
	}
	n, err := NewNode(NodeConfig{Pool: Config{Self: "http://127.0.0.1:1", MaxKeyBytes: 300}, Public: HandlerConfig{MaxKeyBytes: 300}})
	if err != nil {
		t.Fatalf("equal key limits: %v", err)
	}
	n.Shutdown(t.Context())
}

// TestAddServer: Shutdown stops a server the caller configured and added,
// and refuses servers added after it began.
func TestAddServer(t *testing.T) {
	t.Parallel()
	ln := mustListen(t)
	n, err := NewNode(NodeConfig{Pool: Config{Self: "http://" + ln.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: n.PublicHandler(), ReadHeaderTimeout: time.Second}
	if err := n.AddServer(srv); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	c := testClient(t)
	if r := mustDo(t, c, http.MethodGet, "http://"+ln.Addr().String()+"/readyz", nil); r.status != http.StatusOK {
		t.Fatalf("/readyz: %d", r.status)
	}
	c.CloseIdleConnections()
	if err := n.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve: %v, want http.ErrServerClosed", err)
	}
	if err := n.AddServer(&http.Server{}); !errors.Is(err, ErrNodeStopped) {
		t.Fatalf("AddServer after Shutdown: %v, want ErrNodeStopped", err)
	}
}
