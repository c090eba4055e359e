package transport

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
)

// signFor returns the headers, as name/value pairs, that a peer holding
// secret sends with a request of method for path to the node at audience,
// dated at, with body.
func signFor(secret []byte, method, audience, path string, at time.Time, body []byte) []string {
	a := newPeerAuth(Config{Secrets: [][]byte{secret}, SignatureWindow: DefaultSignatureWindow, MaxNonces: 1})
	req, err := http.NewRequest(method, audience+path, bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	a.sign(req, audience, body, at)
	var hdr []string
	for k, v := range req.Header {
		hdr = append(hdr, k, v[0])
	}
	return hdr
}

func testNonce(i int) nonce {
	var n nonce
	n[0], n[1], n[2] = byte(i), byte(i>>8), byte(i>>16)
	return n
}

// TestNonceCache checks replays, expiry and the bound by hand.
func TestNonceCache(t *testing.T) {
	t.Parallel()
	const window = 30_000
	now := int64(1_700_000_000_000)
	c := newNonceCache(4, window)
	if err := c.check(testNonce(1), now, now); err != nil {
		t.Fatalf("first use: %v", err)
	}
	if err := c.check(testNonce(1), now, now+1); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("replay: %v, want ErrUnauthorized", err)
	}
	// Expiry: once its date is a window old the nonce goes, and the floor
	// keeps refusing it even if the clock steps back.
	if err := c.check(testNonce(2), now+window+1, now+window+1); err != nil {
		t.Fatal(err)
	}
	if got := c.len(); got != 1 {
		t.Fatalf("after expiry: %d nonces remembered, want 1", got)
	}
	if err := c.check(testNonce(1), now, now); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("replay of an expired nonce with the clock stepped back: %v, want refused", err)
	}
	// The bound: a fifth nonce pushes the oldest out and raises the floor
	// to its date; requests dated at or before it are refused, later ones
	// accepted.
	at := now + window + 10
	for i := 3; i <= 6; i++ {
		if err := c.check(testNonce(i), at+int64(i), at); err != nil {
			t.Fatalf("nonce %d: %v", i, err)
		}
	}
	if got := c.len(); got != 4 {
		t.Fatalf("%d nonces remembered, want the bound 4", got)
	}
	if err := c.check(testNonce(2), now+window+1, at); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("replay of the evicted nonce: %v, want refused", err)
	}
	if err := c.check(testNonce(7), now+window+1, at); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("new nonce dated at the floor: %v, want refused", err)
	}
	if err := c.check(testNonce(8), at+100, at); err != nil {
		t.Fatalf("new nonce dated after the floor: %v", err)
	}
}

// TestNonceCacheNeverTwice drives a small cache with random requests and
// replays of them, dated within and around the window, and a clock that
// mostly advances but sometimes steps back, and checks the one property
// that matters: no request is ever accepted twice.
func TestNonceCacheNeverTwice(t *testing.T) {
	t.Parallel()
	const window = 1000
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		c := newNonceCache(1+r.IntN(64), window)
		// A replay repeats nonce and date: the signature covers both.
		accepted := map[nonceEntry]bool{}
		var sent []nonceEntry
		now := int64(1_000_000)
		for range 20_000 {
			now += int64(r.IntN(50)) - 5
			if r.IntN(500) == 0 {
				now -= 2 * window // an NTP step back
			}
			e := nonceEntry{testNonce(r.IntN(1 << 20)), now + int64(r.IntN(2*window+200)) - window - 100}
			if len(sent) > 0 && r.IntN(2) == 0 {
				e = sent[r.IntN(len(sent))]
			} else {
				sent = append(sent, e)
			}
			if c.check(e.n, e.date, now) == nil {
				if accepted[e] {
					t.Fatalf("seed %d: nonce %x of date %d accepted twice", seed, e.n[:3], e.date)
				}
				accepted[e] = true
			}
		}
		if len(accepted) < 1000 || len(accepted) == len(sent) {
			t.Fatalf("seed %d: %d of %d distinct requests accepted: the schedule tests nothing", seed, len(accepted), len(sent))
		}
		if c.len() > c.max {
			t.Fatalf("seed %d: %d nonces remembered, bound %d", seed, c.len(), c.max)
		}
	}
}

// fetchAll has every node fetch key from every other node directly (no
// cache in between) and returns the failures.
func fetchAll(t *testing.T, nodes []*testNode, key string) error {
	t.Helper()
	var errs []error
	for _, from := range nodes {
		for _, p := range from.pool.Peers() {
			if _, err := p.Fetch(t.Context(), testGroup, key); err != nil {
				errs = append(errs, fmt.Errorf("%s -> %s: %w", from.url, p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// TestSecretRotation rotates the cluster secret node by node as README
// says, checking after every single step that every node still reaches
// every other, and at the end that the old secret is refused.
func TestSecretRotation(t *testing.T) {
	t.Parallel()
	old, new := []byte("old cluster secret"), []byte("new cluster secret")
	nodes, _ := newCluster(t, 3, clusterOpts{pool: func(_ int, c *Config) { c.Secrets = [][]byte{old} }})
	if err := fetchAll(t, nodes, "k"); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		secrets [][]byte
	}{
		{"accept new", [][]byte{old, new}},
		{"sign with new", [][]byte{new, old}},
		{"drop old", [][]byte{new}},
	}
	for _, st := range steps {
		for i, n := range nodes {
			if err := n.pool.SetSecrets(st.secrets...); err != nil {
				t.Fatal(err)
			}
			if err := fetchAll(t, nodes, "k"); err != nil {
				t.Fatalf("%s, after node %d of %d: %v", st.name, i+1, len(nodes), err)
			}
		}
	}
	c := testClient(t)
	o := nodes[0]
	path := peerPath(DefaultBasePath, testGroup, "k")
	if r := mustDo(t, c, "GET", o.url+path, nil, signFor(old, "GET", o.url, path, time.Now(), nil)...); r.status != http.StatusUnauthorized {
		t.Fatalf("signed with the old secret after the rotation: %d %q, want 401", r.status, r.body)
	}
	if r := mustDo(t, c, "GET", o.url+path, nil, signFor(new, "GET", o.url, path, time.Now(), nil)...); r.status != http.StatusOK {
		t.Fatalf("signed with the new secret: %d %q, want 200", r.status, r.body)
	}

	for _, bad := range []struct {
		name    string
		pool    *Pool
		secrets [][]byte
	}{
		{"no secrets on a signed pool", o.pool, nil},
		{"an empty secret", o.pool, [][]byte{new, {}}},
		{"too many", o.pool, slicesRepeat(new, MaxSecrets+1)},
		{"secrets on an unsigned pool", mustPool(t, Config{Self: "http://127.0.0.1:1"}), [][]byte{new}},
	} {
		if err := bad.pool.SetSecrets(bad.secrets...); !errors.Is(err, ErrConfig) {
			t.Errorf("SetSecrets with %s: %v, want ErrConfig", bad.name, err)
		}
	}
	if r := mustDo(t, c, "GET", o.url+path, nil, signFor(new, "GET", o.url, path, time.Now(), nil)...); r.status != http.StatusOK {
		t.Fatalf("after refused SetSecrets calls, the new secret: %d %q, want 200", r.status, r.body)
	}
}

func slicesRepeat(b []byte, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

func mustPool(t testing.TB, cfg Config) *Pool {
	t.Helper()
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// captured is a peer request as it arrived, to be sent again.
type captured struct {
	method, path string
	header       http.Header
	body         []byte
}

// TestReplayRefused captures real signed peer requests (a PUT, a GET and a
// DELETE) as an eavesdropper would, sends each again, and checks that the
// replays get 401 and change nothing; so does the captured PUT's signature
// on another body.
func TestReplayRefused(t *testing.T) {
	t.Parallel()
	secret := []byte("cluster secret for replays")
	var mu sync.Mutex
	var caught []captured
	nodes, _ := newCluster(t, 3, clusterOpts{
		pool: func(_ int, c *Config) { c.Secrets = secretsOf(secret) },
		wrapPeer: func(_ int, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				caught = append(caught, captured{r.Method, r.URL.EscapedPath(), r.Header.Clone(), body})
				mu.Unlock()
				r.Body = io.NopCloser(bytes.NewReader(body))
				h.ServeHTTP(w, r)
			})
		},
	})
	const key = "replayed"
	o, x := owner(t, nodes, key), notOwner(t, nodes, key)
	ctx := t.Context()
	if _, err := x.group.Set(ctx, key, cache.Value{Data: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.group.Set(ctx, key, cache.Value{Data: []byte("second")}); err != nil {
		t.Fatal(err)
	}
	// x's fetch of another key, and a drop of a third.
	if _, err := x.pool.Peers()[0].Fetch(ctx, testGroup, "other"); err != nil {
		t.Fatal(err)
	}
	if err := x.pool.Peers()[0].Drop(ctx, testGroup, "third"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	reqs := slices.Clone(caught)
	mu.Unlock()
	var firstPut *captured
	seen := map[string]bool{}
	for i := range reqs {
		if reqs[i].method == http.MethodPut && firstPut == nil {
			firstPut = &reqs[i]
		}
		seen[reqs[i].method] = true
	}
	if firstPut == nil || !seen["GET"] || !seen["DELETE"] {
		t.Fatalf("captured %d requests, methods %v: want a PUT, a GET and a DELETE", len(reqs), seen)
	}

	c := testClient(t)
	send := func(rq captured, body []byte) response {
		hdr := []string{}
		for k, v := range rq.header {
			hdr = append(hdr, k, v[0])
		}
		// Every captured request went to one of the nodes; send it to all,
		// so the replay cannot pass by reaching a node that never saw it.
		var last response
		for _, n := range nodes {
			r := mustDo(t, c, rq.method, n.url+rq.path, bytes.NewReader(body), hdr...)
			if r.status != http.StatusUnauthorized {
				return r
			}
			last = r
		}
		return last
	}
	for _, rq := range reqs {
		if r := send(rq, rq.body); r.status != http.StatusUnauthorized {
			t.Errorf("replayed %s %s: %d %q, want 401", rq.method, rq.path, r.status, r.body)
		}
	}
	if r := send(captured{firstPut.method, firstPut.path, firstPut.header, nil}, []byte("forged")); r.status != http.StatusUnauthorized {
		t.Errorf("captured PUT signature on another body: %d %q, want 401", r.status, r.body)
	}
	// The body check alone: a fresh signature, another body.
	path := peerPath(DefaultBasePath, testGroup, key)
	hdr := signFor(secret, http.MethodPut, o.url, path, time.Now(), []byte("signed body"))
	if r := mustDo(t, c, http.MethodPut, o.url+path, strings.NewReader("other body"), hdr...); r.status != http.StatusUnauthorized {
		t.Errorf("PUT whose body differs from the signed one: %d %q, want 401", r.status, r.body)
	}
	// The same for a hand-off batch (POST): its body is signed too.
	adopt := DefaultBasePath + adoptRoute + testGroup
	hdr = signFor(secret, http.MethodPost, o.url, adopt, time.Now(), []byte("signed batch"))
	if r := mustDo(t, c, http.MethodPost, o.url+adopt, strings.NewReader("other batch"), hdr...); r.status != http.StatusUnauthorized {
		t.Errorf("hand-off POST whose body differs from the signed one: %d %q, want 401", r.status, r.body)
	}
	hdr = signFor(secret, http.MethodPost, o.url, adopt, time.Now(), []byte("signed batch"))
	if r := mustDo(t, c, http.MethodPost, o.url+adopt, strings.NewReader("signed batch"), hdr...); r.status != http.StatusBadRequest {
		t.Errorf("hand-off POST with its signed body (not a valid batch): %d %q, want 400 past the signature", r.status, r.body)
	}
	// And for a batch of keys (POST): a body other than the signed one, no
	// signature, and a replay are refused; the signed batch is answered.
	fetch := DefaultBasePath + batchRoute + testGroup
	keysBody := appendKeys(nil, []string{key})
	hdr = signFor(secret, http.MethodPost, o.url, fetch, time.Now(), keysBody)
	if r := mustDo(t, c, http.MethodPost, o.url+fetch, bytes.NewReader(appendKeys(nil, []string{"other"})), hdr...); r.status != http.StatusUnauthorized {
		t.Errorf("batch POST whose keys differ from the signed ones: %d %q, want 401", r.status, r.body)
	}
	if r := mustDo(t, c, http.MethodPost, o.url+fetch, bytes.NewReader(keysBody)); r.status != http.StatusUnauthorized {
		t.Errorf("unsigned batch POST: %d %q, want 401", r.status, r.body)
	}
	hdr = signFor(secret, http.MethodPost, o.url, fetch, time.Now(), keysBody)
	r := mustDo(t, c, http.MethodPost, o.url+fetch, bytes.NewReader(keysBody), hdr...)
	res := make([]batchResult, 1)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != batchType {
		t.Fatalf("signed batch POST: %d %q", r.status, r.body)
	}
	if err := readFrames(bufio.NewReader(strings.NewReader(r.body)), res, batchValueBytes); err != nil || !res[0].final || string(res[0].v.Data) != "second" {
		t.Errorf("signed batch POST answered %+v, %v; want the owner's value", res[0], err)
	}
	if r := mustDo(t, c, http.MethodPost, o.url+fetch, bytes.NewReader(keysBody), hdr...); r.status != http.StatusUnauthorized {
		t.Errorf("replayed batch POST: %d %q, want 401", r.status, r.body)
	}
	// The owner still holds the last write.
	v, err := o.group.Get(ctx, key)
	if err != nil || string(v.Data) != "second" {
		t.Fatalf("owner's value after the replays: %q, %v; want \"second\"", v.Data, err)
	}
}

// TestRefusedLogged sends a burst of forged peer requests and checks that
// the node warns about them once, not once per request.
func TestRefusedLogged(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nodes, _ := newCluster(t, 1, clusterOpts{pool: func(_ int, c *Config) {
		c.Secrets = [][]byte{[]byte("cluster secret of 32 bytes......")}
		c.Logger = log
	}})
	c := testClient(t)
	path := peerPath(DefaultBasePath, testGroup, "k")
	for range 50 {
		hdr := signFor([]byte("a guess"), "GET", nodes[0].url, path, time.Now(), nil)
		if r := mustDo(t, c, "GET", nodes[0].url+path, nil, hdr...); r.status != http.StatusUnauthorized {
			t.Fatalf("forged request: %d, want 401", r.status)
		}
	}
	if n := strings.Count(buf.String(), "refused peer requests"); n != 1 {
		t.Fatalf("%d warnings for 50 forged requests, want 1:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "bad signature") {
		t.Errorf("the warning does not say why: %s", buf.String())
	}
}

// secretsOf is Config.Secrets for one secret, or none when it is empty.
func secretsOf(secret []byte) [][]byte {
	if len(secret) == 0 {
		return nil
	}
	return [][]byte{secret}
}
