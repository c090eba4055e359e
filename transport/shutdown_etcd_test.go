package transport_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/embedetcd"
	"github.com/ringcache/ringcache/internal/poll"
	"github.com/ringcache/ringcache/peers"
	"github.com/ringcache/ringcache/transport"
)

// These tests run a Node with its registration in a real etcd (peers), so
// they live outside the package: peers imports transport (peers.Join).

// The Node is what a membership feeds, and a Registry is what it leaves.
var (
	_ peers.Setter         = (*transport.Node)(nil)
	_ peers.WeightedSetter = (*transport.Node)(nil)
	_ peers.RangesSetter   = (*transport.Node)(nil)
	_ transport.Membership = (*peers.Registry)(nil)
)

const etcdGroup = "g"

func valueOf(key string) []byte { return []byte("v:" + key) }

// etcdNode is a Node registered through etcd and serving on loopback.
type etcdNode struct {
	*transport.Node
	group  *cache.Group
	served chan error // Serve's result
}

// startEtcdNode starts a node named id whose group's origin is get, joins
// it to the cluster in etcd (peers.Join) and serves it. The test stops it.
func startEtcdNode(t *testing.T, endpoint, id string, onRing func([]string), get cache.GetterFunc) *etcdNode {
	t.Helper()
	ln := mustListen(t)
	n, err := transport.NewNode(transport.NodeConfig{Pool: transport.Config{Self: "http://" + ln.Addr().String(), PeerTimeout: 5 * time.Second}, OnRingChange: onRing})
	if err != nil {
		t.Fatal(err)
	}
	g, err := n.NewGroup(cache.GroupConfig{Name: etcdGroup, MaxBytes: 1 << 20, Getter: get})
	if err != nil {
		t.Fatal(err)
	}
	pc := peers.DefaultConfig()
	pc.Endpoints, pc.Cluster, pc.NodeID = []string{endpoint}, "shutdown", id
	pc.TTL = 2 * time.Second
	if _, err := peers.Join(t.Context(), n, pc); err != nil {
		t.Fatal(err)
	}
	en := &etcdNode{Node: n, group: g, served: make(chan error, 1)}
	go func() { en.served <- n.Serve(ln, nil) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return en
}

// waitMembers waits until n's ring has want members.
func waitMembers(t *testing.T, n *transport.Node, want int) {
	t.Helper()
	poll.Until(t, 20*time.Second, func() (bool, string) {
		got := len(n.Pool().Members())
		return got == want, fmt.Sprintf("%s: %d members, want %d", n.Self(), got, want)
	})
}

// get2 reads key through the public route at base and checks the value.
func get2(c *http.Client, base, key string) error {
	res, err := c.Get(base + "/cache/" + etcdGroup + "/" + key)
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

// TestJoinRefusesAnotherSetter: Join connects the node it is given; a
// Config naming another Setter is refused before anything is registered.
func TestJoinRefusesAnotherSetter(t *testing.T) {
	t.Parallel()
	n, err := transport.NewNode(transport.NodeConfig{Pool: transport.Config{Self: "http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := transport.NewNode(transport.NodeConfig{Pool: transport.Config{Self: "http://127.0.0.1:2"}})
	if err != nil {
		t.Fatal(err)
	}
	pc := peers.DefaultConfig()
	pc.Endpoints, pc.NodeID, pc.Setter = []string{"http://127.0.0.1:1"}, "a", other
	if _, err := peers.Join(t.Context(), n, pc); !errors.Is(err, peers.ErrConfig) {
		t.Fatalf("Join with another Setter: %v, want peers.ErrConfig", err)
	}
}

// TestShutdownLeavesThenDrains: a node with requests and loads in flight
// leaves the ring first (the other node drops it while its requests still
// run), hands the values it owns to their next owner, then finishes every
// request in flight, waits for the load a caller gave up on, and returns
// with nothing left running (goleak in TestMain).
func TestShutdownLeavesThenDrains(t *testing.T) {
	endpoint := embedetcd.ForTest(t)
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
	c := &http.Client{Timeout: 30 * time.Second}
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
	if err := a.Serve(mustListen(t), nil); !errors.Is(err, transport.ErrNodeStopped) {
		t.Fatalf("Serve after Shutdown: %v, want ErrNodeStopped", err)
	}
	if err := a.Shutdown(t.Context()); err != nil {
		t.Fatalf("a second Shutdown: %v", err)
	}
}
