package transport

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ringcache/ringcache/cache"
)

func TestNewServer(t *testing.T) {
	t.Parallel()
	h := http.NotFoundHandler()
	s := NewServer("127.0.0.1:0", h)
	if s.Addr != "127.0.0.1:0" || s.Handler == nil || s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 ||
		s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Fatalf("NewServer left a limit unset: %+v", s)
	}
	if s.WriteTimeout <= 30e9 {
		t.Errorf("WriteTimeout %v does not outlast a group's default 30s LoadTimeout", s.WriteTimeout)
	}
	if s.IdleTimeout <= 90e9 {
		t.Errorf("IdleTimeout %v does not outlast the peer client's 90s idle timeout", s.IdleTimeout)
	}
}

// TestSeparateListeners serves the peer routes and the public API on two
// listeners per node, the peer handler mounted without a mux: the public
// listener does not serve peers, the peer listener does not serve clients,
// and keys still cross between nodes (dot keys too: nothing cleans paths).
func TestSeparateListeners(t *testing.T) {
	t.Parallel()
	type node struct {
		public, peer *httptest.Server
		pool         *Pool
	}
	var loads loadLog
	var nodes []node
	var peerURLs []string
	for range 2 {
		peerSrv := httptest.NewUnstartedServer(nil)
		self := "http://" + peerSrv.Listener.Addr().String()
		tn, err := NewNode(NodeConfig{Pool: Config{Self: self}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tn.Shutdown(context.Background()) })
		pool := tn.Pool()
		if _, err := tn.NewGroup(cache.GroupConfig{Name: testGroup, MaxBytes: 1 << 20,
			Getter: cache.GetterFunc(func(_ context.Context, key string) (cache.Value, error) {
				loads.add(self, key)
				return cache.Value{Data: valueOf(key)}, nil
			})}); err != nil {
			t.Fatal(err)
		}
		peerSrv.Config.Handler = tn.PeerHandler()
		peerSrv.Start()
		t.Cleanup(peerSrv.Close)
		pub := httptest.NewServer(tn.PublicHandler())
		t.Cleanup(pub.Close)
		nodes = append(nodes, node{public: pub, peer: peerSrv, pool: pool})
		peerURLs = append(peerURLs, self)
	}
	for _, n := range nodes {
		if err := n.pool.Set(peerURLs...); err != nil {
			t.Fatal(err)
		}
	}
	c := testClient(t)
	for _, key := range []string{".", "..", "a/../b", "k"} {
		for _, n := range nodes {
			r := mustDo(t, c, http.MethodGet, publicURL(n.public.URL, testGroup, key), nil)
			if r.status != http.StatusOK || r.body != string(valueOf(key)) {
				t.Errorf("GET %q at %s: %d %q", key, n.public.URL, r.status, r.body)
			}
		}
		if got := loads.of(key); len(got) != 1 || got[0] != nodes[0].pool.Owner(key) {
			t.Errorf("loads of %q = %v, want one by its owner", key, got)
		}
		// groupcache's client would send dots unescaped; without a mux in
		// front, they arrive as they are.
		r := mustDo(t, c, http.MethodGet, nodes[0].peer.URL+DefaultBasePath+testGroup+"/"+key, nil)
		if r.status != http.StatusOK {
			t.Errorf("raw peer GET %q: %d %q", key, r.status, r.body)
		}
	}
	if r := mustDo(t, c, http.MethodGet, nodes[0].public.URL+peerPath(DefaultBasePath, testGroup, "k"), nil); r.status != http.StatusNotFound {
		t.Errorf("peer route on the public listener: %d, want 404", r.status)
	}
	if r := mustDo(t, c, http.MethodGet, nodes[0].peer.URL+"/cache/g/k", nil); r.status != http.StatusNotFound {
		t.Errorf("public route on the peer listener: %d, want 404", r.status)
	}
}
