package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/poll"
	"github.com/ringcache/ringcache/transport/api"
)

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
	poll.Until(t, 20*time.Second, func() (bool, string) {
		got := len(n.Pool().Members())
		return got == want, fmt.Sprintf("%s: %d members, want %d", n.Self(), got, want)
	})
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
		"two key limits":   {Pool: Config{Self: "http://127.0.0.1:1", MaxKeyBytes: 300}, Public: api.HandlerConfig{MaxKeyBytes: 250}},
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
	n, err := NewNode(NodeConfig{Pool: Config{Self: "http://127.0.0.1:1", MaxKeyBytes: 300}, Public: api.HandlerConfig{MaxKeyBytes: 300}})
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
