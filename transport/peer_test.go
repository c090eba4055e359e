package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/consistenthash"
	"github.com/ringcache/ringcache/internal/poll"
)

// TestColdKeyOneLoad sends 200 concurrent GETs of one cold key, spread over
// three nodes, and holds the origin until all of them have arrived: exactly
// one load, by the key's owner.
func TestColdKeyOneLoad(t *testing.T) {
	t.Parallel()
	const callers = 200
	arrived := make(chan struct{}, callers)
	release := make(chan struct{})
	nodes, loads := newCluster(t, 3, clusterOpts{
		wrap: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				h.ServeHTTP(w, r)
			})
		},
		origin: func(ctx context.Context, node, key string) (cache.Value, error) {
			<-release
			return defaultOrigin(ctx, node, key)
		},
	})
	c := testClient(t)
	const key = "cold"
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { errs <- get(t, c, nodes[i%len(nodes)], key) })
	}
	for range callers {
		<-arrived
	}
	close(release)
	wg.Wait()
	close(errs)
	if err := errorsJoin(errs); err != nil {
		t.Fatal(err)
	}
	if got, want := loads.of(key), []string{owner(t, nodes, key).url}; !slices.Equal(got, want) {
		t.Fatalf("loads of %q = %v, want exactly one by the owner %v", key, got, want)
	}
}

// TestKeysLoadedByOwner reads 1,000 keys five times each from random nodes:
// every key is loaded exactly once, always by its owner.
func TestKeysLoadedByOwner(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 3, clusterOpts{})
	c := testClient(t)
	const keys, reads, workers = 1000, 5, 8
	type job struct {
		key  string
		node *testNode
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var jobs []job
	for r := range reads {
		for k := range keys {
			jobs = append(jobs, job{fmt.Sprintf("key-%d-%x", k, r*0), nodes[rng.IntN(len(nodes))]})
		}
	}
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	ch := make(chan job)
	errs := make(chan error, len(jobs))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range ch {
				if err := get(t, c, j.node, j.key); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	close(errs)
	if err := errorsJoin(errs); err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	for k := range keys {
		key := fmt.Sprintf("key-%d-0", k)
		got := loads.of(key)
		if want := owner(t, nodes, key).url; len(got) != 1 || got[0] != want {
			t.Fatalf("loads of %q = %v, want exactly one by the owner %s", key, got, want)
		}
		perNode[got[0]]++
	}
	if loads.count() != keys {
		t.Fatalf("%d loads, want %d", loads.count(), keys)
	}
	if len(perNode) != len(nodes) {
		t.Fatalf("loads spread over %d nodes, want %d: %v", len(perNode), len(nodes), perNode)
	}
	if s := sumStats(nodes); s.PeerLoads == 0 {
		t.Fatalf("no peer loads recorded: %+v", s)
	}
}

// TestContradictoryRings gives two nodes rings that disagree (different
// hashes) and asks each for a key that each thinks the other owns. With the
// one-hop rule, each asks the other once and the other loads: no ping-pong,
// no deadlock, at most two loads, done within the peer timeout plus the
// origin's latency.
func TestContradictoryRings(t *testing.T) {
	t.Parallel()
	const (
		peerTimeout = 2 * time.Second
		latency     = 50 * time.Millisecond
		callers     = 50
	)
	hashes := []consistenthash.Hash{consistenthash.CRC32, consistenthash.FNV1_32}
	nodes, loads := newCluster(t, 2, clusterOpts{
		pool: func(i int, c *Config) {
			c.Hash = hashes[i]
			c.PeerTimeout = peerTimeout
		},
		origin: func(ctx context.Context, node, key string) (cache.Value, error) {
			select { // a slow origin, not an ordering device
			case <-time.After(latency):
			case <-ctx.Done():
				return cache.Value{}, ctx.Err()
			}
			return defaultOrigin(ctx, node, key)
		},
	})
	a, b := nodes[0], nodes[1]
	if a.pool.Version() == b.pool.Version() {
		t.Fatal("rings with different hashes report the same version")
	}
	key := ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprint("k", i)
		if a.pool.Owner(k) == b.url && b.pool.Owner(k) == a.url {
			key = k
		}
	}
	c := testClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), peerTimeout+latency)
	defer cancel()
	errs := make(chan error, 2*callers)
	var wg sync.WaitGroup
	for i := range 2 * callers {
		wg.Go(func() {
			n := nodes[i%2]
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, publicURL(n.url, testGroup, key), nil)
			if err != nil {
				errs <- err
				return
			}
			res, err := c.Do(req)
			if err != nil {
				errs <- err
				return
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("GET at %s: status %d", n.url, res.StatusCode)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := errorsJoin(errs); err != nil {
		t.Fatalf("within %v: %v", peerTimeout+latency, err)
	}
	if got := loads.of(key); len(got) > 2 || len(got) == 0 {
		t.Fatalf("loads of %q = %v, want 1 or 2", key, got)
	}
	for _, n := range nodes {
		if got := n.group.Stats().PeerErrors; got != 0 {
			t.Errorf("%s: %d peer errors, want 0 (a timeout would show here)", n.url, got)
		}
	}
}

// TestSetRemoveAcrossNodes sets a key through one node, reads it through the
// others with no origin load, removes it through a third and reads the
// origin's value again everywhere (hot copies included).
func TestSetRemoveAcrossNodes(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 3, clusterOpts{
		group: func(c *cache.GroupConfig) { c.HotAfter = 1 }, // every fetched value goes hot
	})
	c := testClient(t)
	const key = "set/me"
	o := owner(t, nodes, key)
	var others []*testNode
	for _, n := range nodes {
		if n != o {
			others = append(others, n)
		}
	}
	x, y := others[0], others[1]

	r := mustDo(t, c, http.MethodPut, publicURL(x.url, testGroup, key), strings.NewReader("stored"),
		"Content-Type", "text/plain", "Cache-Control", "max-age=60")
	if r.status != http.StatusNoContent {
		t.Fatalf("PUT: %d %q", r.status, r.body)
	}
	for _, n := range []*testNode{y, o, x, x} { // x twice: the second read is hot
		r := mustDo(t, c, http.MethodGet, publicURL(n.url, testGroup, key), nil)
		if r.status != http.StatusOK || r.body != "stored" || r.header.Get("Content-Type") != "text/plain" {
			t.Fatalf("GET at %s after PUT: %d %q %q", n.url, r.status, r.body, r.header.Get("Content-Type"))
		}
		if cc := r.header.Get("Cache-Control"); cc != "max-age=60" && cc != "max-age=59" {
			t.Errorf("GET at %s: Cache-Control %q, want max-age=60 (or 59)", n.url, cc)
		}
	}
	if n := loads.count(); n != 0 {
		t.Fatalf("%d origin loads after a PUT, want 0", n)
	}
	if s := x.group.Stats(); s.HotItems != 1 {
		t.Fatalf("x holds %d hot items, want the value it fetched", s.HotItems)
	}

	r = mustDo(t, c, http.MethodDelete, publicURL(y.url, testGroup, key), nil)
	if r.status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %q", r.status, r.body)
	}
	if s := x.group.Stats(); s.HotItems != 0 {
		t.Fatalf("x still holds %d hot items after DELETE at y", s.HotItems)
	}
	for _, n := range nodes {
		if err := get(t, c, n, key); err != nil {
			t.Fatal(err)
		}
	}
	if got := loads.of(key); !slices.Equal(got, []string{o.url}) {
		t.Fatalf("loads after DELETE = %v, want one by the owner %s", got, o.url)
	}
}

// TestOwnerDown stops a key's owner: another node loads the key itself and
// keeps it out of its main cache.
func TestOwnerDown(t *testing.T) {
	t.Parallel()
	type call struct {
		peer, op string
		err      error
	}
	var mu sync.Mutex
	var calls []call
	nodes, loads := newCluster(t, 3, clusterOpts{
		pool: func(i int, c *Config) {
			c.OnPeerRequest = func(peer, op string, d time.Duration, err error) {
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, call{peer, op, err})
			}
		},
	})
	c := testClient(t)
	const key = "orphan"
	o := owner(t, nodes, key)
	x := notOwner(t, nodes, key)
	o.srv.Close()

	if err := get(t, c, x, key); err != nil {
		t.Fatal(err)
	}
	if got := loads.of(key); !slices.Equal(got, []string{x.url}) {
		t.Fatalf("loads = %v, want one fallback load by %s", got, x.url)
	}
	s := x.group.Stats()
	if s.PeerErrors != 1 || s.MainItems != 0 {
		t.Fatalf("stats after fallback: %+v; want 1 peer error and nothing in the main cache", s)
	}
	mu.Lock()
	defer mu.Unlock()
	var pe *PeerError
	if len(calls) != 1 || calls[0].peer != o.url || calls[0].op != "get" || !errors.As(calls[0].err, &pe) {
		t.Fatalf("OnPeerRequest calls = %+v; want one failed get to %s", calls, o.url)
	}
}

// TestSignedPeers runs a cluster with a secret: signed peer requests work,
// and unsigned, forged or stale ones get 401, load nothing and change no
// entry. A node with the wrong secret cannot reach its peers and loads for
// itself.
func TestSignedPeers(t *testing.T) {
	t.Parallel()
	secret := []byte("cluster secret of 32 bytes......")
	nodes, loads := newCluster(t, 3, clusterOpts{
		pool: func(i int, c *Config) { c.Secrets = secretsOf(secret) },
	})
	c := testClient(t)
	const key = "guarded"
	o := owner(t, nodes, key)
	x := notOwner(t, nodes, key)
	if err := get(t, c, x, key); err != nil { // x asks o, signed
		t.Fatal(err)
	}
	if got := loads.of(key); !slices.Equal(got, []string{o.url}) {
		t.Fatalf("loads = %v, want one by the owner", got)
	}
	if s := x.group.Stats(); s.PeerLoads != 1 || s.PeerErrors != 0 {
		t.Fatalf("signed fetch: stats %+v, want 1 peer load", s)
	}

	path := peerPath(DefaultBasePath, testGroup, key)
	otherKey := peerPath(DefaultBasePath, testGroup, "never-loaded")
	now := time.Now()
	signed := func(secret []byte, method, path string, at time.Time) []string {
		return signFor(secret, method, o.url, path, at, nil)
	}
	tests := []struct {
		name   string
		method string
		path   string
		hdr    []string
	}{
		{"unsigned get", "GET", otherKey, nil},
		{"unsigned delete", "DELETE", path, nil},
		{"unsigned put", "PUT", path, nil},
		{"wrong secret", "GET", otherKey, signed([]byte("guess"), "GET", otherKey, now)},
		{"signed for another path", "GET", otherKey, signed(secret, "GET", path, now)},
		{"signed for another method", "DELETE", path, signed(secret, "GET", path, now)},
		{"stale", "GET", otherKey, signed(secret, "GET", otherKey, now.Add(-120*time.Second))},
		{"signed for another node", "GET", otherKey, signFor(secret, "GET", x.url, otherKey, now, nil)},
		{"bad path unsigned", "GET", DefaultBasePath + "nosuch", nil},
	}
	before := o.group.Stats()
	for _, tt := range tests {
		r := mustDo(t, c, tt.method, o.url+tt.path, strings.NewReader("evil"), tt.hdr...)
		if r.status != http.StatusUnauthorized {
			t.Errorf("%s: status %d %q, want 401", tt.name, r.status, r.body)
		}
	}
	// A valid signature made here, as a peer would: accepted.
	hdr := signed(secret, "GET", path, now)
	r := mustDo(t, c, "GET", o.url+path, nil, hdr...)
	if r.status != http.StatusOK {
		t.Fatalf("signed GET: %d %q", r.status, r.body)
	}
	// The same request again, as someone who captured it would send it.
	if r := mustDo(t, c, "GET", o.url+path, nil, hdr...); r.status != http.StatusUnauthorized {
		t.Fatalf("replayed signed GET: %d %q, want 401", r.status, r.body)
	}
	if n := loads.count(); n != 1 {
		t.Fatalf("%d loads after refused requests, want 1", n)
	}
	after := o.group.Stats()
	if after.MainItems != before.MainItems || after.MainBytes != before.MainBytes {
		t.Fatalf("refused requests changed the cache: %+v -> %+v", before, after)
	}
	if err := get(t, c, o, key); err != nil {
		t.Fatal(err)
	}

	// A node with another secret: its fetches are refused, so it loads
	// the key itself.
	odd, oddLoads := newCluster(t, 2, clusterOpts{
		pool: func(i int, c *Config) { c.Secrets = [][]byte{[]byte(fmt.Sprint("a secret of node ", i))} },
	})
	k := ""
	for i := 0; k == ""; i++ {
		if cand := fmt.Sprint("k", i); odd[0].pool.Owner(cand) == odd[1].url {
			k = cand
		}
	}
	if err := get(t, c, odd[0], k); err != nil {
		t.Fatal(err)
	}
	if got := oddLoads.of(k); !slices.Equal(got, []string{odd[0].url}) {
		t.Fatalf("loads = %v, want a fallback load by the node whose fetch was refused", got)
	}
	if s := odd[0].group.Stats(); s.PeerErrors != 1 {
		t.Fatalf("stats %+v, want 1 peer error", s)
	}
}

// syncBuffer is a strings.Builder safe for a slog handler used concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestRingVersionMismatchIsLogged: two nodes whose rings differ each see the
// other's ring version (on the request at the owner, on the response at the
// requester) and, once the disagreement outlasts a membership change (the
// settle time, zero here), log it at Warn once per pair of versions, not
// per request; nodes that agree log nothing.
func TestRingVersionMismatchIsLogged(t *testing.T) {
	t.Parallel()
	const msg = "peer sees another ring"
	for _, agree := range []bool{false, true} {
		t.Run(fmt.Sprint("agree=", agree), func(t *testing.T) {
			t.Parallel()
			logs := []*syncBuffer{{}, {}}
			hashes := []consistenthash.Hash{consistenthash.CRC32, consistenthash.FNV1_32}
			nodes, _ := newCluster(t, 2, clusterOpts{pool: func(i int, c *Config) {
				c.Logger = slog.New(slog.NewTextHandler(logs[i], &slog.HandlerOptions{Level: slog.LevelWarn}))
				if !agree {
					c.Hash = hashes[i]
				}
			}})
			for _, n := range nodes {
				n.pool.versionSettle = 0
			}
			a, b := nodes[0], nodes[1]
			fetched := 0
			for i := 0; fetched < 3; i++ {
				key := fmt.Sprint("k", i)
				pe, ok := a.pool.PickPeer(key)
				if !ok {
					continue
				}
				if _, err := pe.Fetch(t.Context(), testGroup, key); err != nil {
					t.Fatal(err)
				}
				fetched++
			}
			for i, who := range []struct{ self, peer *testNode }{{a, b}, {b, a}} {
				out := logs[i].String()
				n := strings.Count(out, msg)
				if agree {
					if n != 0 {
						t.Errorf("%s logged a mismatch although the rings agree:\n%s", who.self.url, out)
					}
					continue
				}
				if n != 1 || !strings.Contains(out, "peer="+who.peer.url) ||
					!strings.Contains(out, fmt.Sprintf("peer_ring_version=%x", who.peer.pool.Version())) {
					t.Errorf("%s: want one warning naming %s and its version %x, got:\n%s",
						who.self.url, who.peer.url, who.peer.pool.Version(), out)
				}
			}
		})
	}
}

// TestUnreachablePeerIsSkipped: a peer that cannot be dialled is suspected,
// so requests for a dead node's keys fall back at once without dialling it
// again; a background probe notices when it answers again, and requests
// reach it from then on.
func TestUnreachablePeerIsSkipped(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: dialling is refused

	p, err := NewPool(Config{Self: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := p.Set("http://" + addr); err != nil {
		t.Fatal(err)
	}
	pe := p.Peers()[0]
	ctx := t.Context()

	_, err = pe.Fetch(ctx, "g", "k")
	if err == nil || errors.Is(err, ErrPeerDown) || !isDialError(err) {
		t.Fatalf("first fetch: err = %v, want a dial error", err)
	}
	if got := p.Suspected(); len(got) != 1 || got[0] != "http://"+addr {
		t.Fatalf("Suspected() = %v, want the peer", got)
	}
	_, err = pe.Fetch(ctx, "g", "k")
	if !errors.Is(err, ErrPeerDown) {
		t.Fatalf("second fetch: err = %v, want ErrPeerDown", err)
	}
	if err := pe.Drop(ctx, "g", "k"); !errors.Is(err, ErrPeerDown) {
		t.Fatalf("drop: err = %v, want ErrPeerDown", err)
	}

	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(hdrNotFound, "1")
		w.WriteHeader(http.StatusNotFound)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	// Requests keep failing fast; each kicks at most one probe in flight,
	// and a probe that gets any answer closes the breaker.
	poll.Until(t, 10*time.Second, func() (bool, string) {
		if len(p.Suspected()) == 0 {
			return true, ""
		}
		if _, err := pe.Fetch(ctx, "g", "k"); err != nil && !errors.Is(err, ErrPeerDown) && !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("fetch while suspected: %v", err)
		}
		return false, "the peer is still suspected after it came back"
	})
	if _, err := pe.Fetch(ctx, "g", "k"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("fetch after a good probe: err = %v, want the peer's answer (not found)", err)
	}
}

// TestPeerResponseLimit: a peer's response over MaxResponseBytes is refused
// (and the cache then loads locally) rather than read into memory.
func TestPeerResponseLimit(t *testing.T) {
	t.Parallel()
	value := bytes.Repeat([]byte("v"), 1000)
	body := append(getResponsePrefix(len(value)), value...)
	for _, tc := range []struct {
		name          string
		contentLength int64
		limit         int64
		ok            bool
	}{
		{"fits", int64(len(body)), int64(len(body)), true},
		{"fits, length unknown", -1, int64(len(body)), true},
		{"declared too long", int64(len(body)), int64(len(body)) - 1, false},
		{"too long, length unknown", -1, int64(len(body)) - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &http.Response{
				StatusCode:    http.StatusOK,
				Header:        http.Header{},
				ContentLength: tc.contentLength,
				Body:          io.NopCloser(bytes.NewReader(body)),
			}
			v, err := decodeValue(res, tc.limit)
			if tc.ok {
				if err != nil || !bytes.Equal(v.Data, value) {
					t.Fatalf("decodeValue = %d bytes, %v; want the value", len(v.Data), err)
				}
				return
			}
			if !errors.Is(err, ErrBadResponse) {
				t.Fatalf("decodeValue err = %v, want ErrBadResponse", err)
			}
		})
	}
}
