package peers

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/consistenthash"
	"github.com/ringcache/ringcache/internal/embedetcd"
	"github.com/ringcache/ringcache/internal/faultnet"
	"github.com/ringcache/ringcache/internal/freeport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// testEtcd is a real single-member etcd on loopback that a test can stop and start again on
// the same data directory and ports.
type testEtcd struct {
	t         *testing.T
	dir       string
	clientURL url.URL
	peerURL   url.URL

	mu sync.Mutex
	e  *embedetcd.Etcd
}

func startEtcd(t *testing.T) *testEtcd {
	t.Helper()
	te := &testEtcd{
		t:         t,
		dir:       t.TempDir(),
		clientURL: url.URL{Scheme: "http", Host: freeAddr(t)},
		peerURL:   url.URL{Scheme: "http", Host: freeAddr(t)},
	}
	te.start()
	t.Cleanup(te.stop)
	return te
}

// freeAddr returns a loopback address etcd can bind, and bind again when
// the test restarts it where its clients look for it (freeport: a port
// from the ephemeral range could meanwhile be some connection's).
func freeAddr(t *testing.T) string { return freeport.Addr(t) }

func (te *testEtcd) start() {
	te.t.Helper()
	e, err := embedetcd.Start(te.t.Context(), embedetcd.Config{Name: "peers-test", Dir: te.dir, ClientAddr: te.clientURL.Host, PeerAddr: te.peerURL.Host})
	if err != nil {
		te.t.Fatalf("start etcd: %v", err)
	}
	te.mu.Lock()
	te.e = e
	te.mu.Unlock()
}

func (te *testEtcd) stop() {
	te.mu.Lock()
	e := te.e
	te.mu.Unlock()
	e.Close()
}

func (te *testEtcd) endpoints() []string { return []string{te.clientURL.String()} }

// client returns a plain etcd client for the test's own reads and writes.
func (te *testEtcd) client(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: te.endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// proxy is a faultnet.Proxy to target for the test: cut closes every
// connection and refuses new ones, as a network partition would; restore
// forwards again.
type proxy struct{ *faultnet.Proxy }

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	p, err := faultnet.Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &proxy{p}
}

func (p *proxy) endpoints() []string { return []string{"http://" + p.Addr()} }
func (p *proxy) cut()                { p.Cut() }
func (p *proxy) restore()            { p.Restore() }

// setCall is one call of recorder.Set.
type setCall struct {
	at    time.Time
	peers []string
}

// recorder is a Setter that does what transport.Pool does with a member set (build a
// consistent-hash ring and swap it in atomically) and records every call.
type recorder struct {
	ring atomic.Pointer[consistenthash.Map]

	mu      sync.Mutex
	err     error // first ring that could not be built
	calls   []setCall
	changed chan struct{} // closed and replaced at every Set
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (rec *recorder) Set(peers ...string) error {
	m := consistenthash.New(0, nil)
	err := m.Add(peers...)
	rec.ring.Store(m)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if err != nil && rec.err == nil {
		rec.err = fmt.Errorf("ring from %q: %w", peers, err)
	}
	rec.calls = append(rec.calls, setCall{at: time.Now(), peers: peers})
	close(rec.changed)
	rec.changed = make(chan struct{})
	return nil // a bad ring is recorded in rec.err, for the test to report
}

func (rec *recorder) snapshot() ([]setCall, <-chan struct{}) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.calls), rec.changed
}

func (rec *recorder) count() int {
	calls, _ := rec.snapshot()
	return len(calls)
}

// waitFor waits until the last Set received want and returns when that Set happened.
func (rec *recorder) waitFor(t *testing.T, name string, want []string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		calls, changed := rec.snapshot()
		if n := len(calls); n > 0 && slices.Equal(calls[n-1].peers, want) {
			return calls[n-1].at
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%s: ring is not %q after %v; Set calls: %v", name, want, timeout, calls)
		}
	}
}

// node is one Registry under test with the Setter it feeds.
type node struct {
	id  string
	url string
	r   *Registry
	rec *recorder
}

func peerURL(id string) string { return "http://" + id + ".peers.test:7070" }

func urls(ids ...string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = peerURL(id)
	}
	slices.Sort(out)
	return out
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// startNode registers node id against endpoints; tweak adjusts the Config first.
func startNode(t *testing.T, endpoints []string, id string, tweak func(*Config)) *node {
	t.Helper()
	n := &node{id: id, url: peerURL(id), rec: newRecorder()}
	cfg := Config{
		Endpoints: endpoints,
		NodeID:    id,
		PeerURL:   n.url,
		Version:   "test",
		Logger:    testLogger(t).With("test", t.Name()),
		Setter:    n.rec,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", id, err)
	}
	n.r = r
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close(%s): %v", id, err)
		}
	})
	return n
}

// crash stops r the way a killed process would: keepalives stop and nothing is revoked or
// marked. A later Close does nothing.
func (r *Registry) crash() {
	r.closeOnce.Do(func() {
		r.stop()
		if r.ownsClient {
			r.client.Close()
		}
	})
}

// waitState waits until cond holds for r's State and returns that State.
func waitState(t *testing.T, r *Registry, what string, timeout time.Duration, cond func(State) bool) State {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		changed := r.Changed()
		st := r.State()
		if cond(st) {
			return st
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%s: %s not reached after %v; state %+v", st.NodeID, what, timeout, st)
		}
	}
}

// converge waits until every node's last Set is want, then checks that their rings have one
// version, and returns the time of the latest of those Set calls.
func converge(t *testing.T, want []string, timeout time.Duration, nodes ...*node) time.Time {
	t.Helper()
	var latest time.Time
	for _, n := range nodes {
		if at := n.rec.waitFor(t, n.id, want, timeout); at.After(latest) {
			latest = at
		}
	}
	version := nodes[0].rec.ring.Load().Version()
	for _, n := range nodes {
		n.rec.mu.Lock()
		if n.rec.err != nil {
			t.Errorf("%s: %v", n.id, n.rec.err)
		}
		n.rec.mu.Unlock()
		if v := n.rec.ring.Load().Version(); v != version {
			t.Errorf("%s: ring version %x, %s has %x", n.id, v, nodes[0].id, version)
		}
		if got := n.r.State().Peers; !slices.Equal(got, want) {
			t.Errorf("%s: State().Peers = %q, want %q", n.id, got, want)
		}
	}
	return latest
}

// weightRecorder is a Setter that also implements WeightedSetter, as transport.Pool is to:
// SetWeighted builds the weighted ring and records the call; Set only counts, since a
// Registry must not call it on a WeightedSetter.
type weightRecorder struct {
	recorder
	plainSets atomic.Int64
	weighted  []map[string]int // guarded by recorder.mu
}

func newWeightRecorder() *weightRecorder {
	return &weightRecorder{recorder: recorder{changed: make(chan struct{})}}
}

func (w *weightRecorder) Set(...string) error { w.plainSets.Add(1); return nil }

func (w *weightRecorder) SetWeighted(weights map[string]int) error {
	m := consistenthash.New(0, nil)
	var err error
	peers := slices.Sorted(maps.Keys(weights))
	for _, p := range peers {
		if err == nil {
			err = m.AddWeighted(p, weights[p])
		}
	}
	w.ring.Store(m)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("ring from %v: %w", weights, err)
	}
	w.weighted = append(w.weighted, weights)
	w.calls = append(w.calls, setCall{at: time.Now(), peers: peers})
	close(w.changed)
	w.changed = make(chan struct{})
	return nil // a bad ring is recorded in w.err, for the test to report
}

// waitWeights waits until the last SetWeighted received want.
func (w *weightRecorder) waitWeights(t *testing.T, name string, want map[string]int, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		got := slices.Clone(w.weighted)
		changed := w.changed
		w.mu.Unlock()
		if n := len(got); n > 0 && maps.Equal(got[n-1], want) {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%s: weights are not %v after %v; SetWeighted calls: %v", name, want, timeout, got)
		}
	}
}
