package transport_test

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport"
	"github.com/ringcache/ringcache/transport/api"
	"github.com/ringcache/ringcache/transport/fast"
)

// fastFront serves node's public API with a FastServer on a listener of its
// own, and returns its base URL and the number of requests that reached the
// http.Handler behind it (the slow path).
func fastFront(t *testing.T, n *transport.Node, cfg fast.Config) (base string, slow *atomic.Int64) {
	t.Helper()
	slow = new(atomic.Int64)
	h := cmpHandler(cfg.Handler, n.PublicHandler())
	cfg.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slow.Add(1)
		h.ServeHTTP(w, r)
	})
	srv, err := fast.New(n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln := transport.MustListen(t)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("fast server shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("fast server Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return "http://" + ln.Addr().String(), slow
}

func cmpHandler(h, def http.Handler) http.Handler {
	if h != nil {
		return h
	}
	return def
}

// TestFastServerAnswersAsNetHTTP sends the same requests to a node's public
// API through net/http's server and through a FastServer, twice each (the
// second GET of a key is a hit, which the fast path answers), and requires
// the same status, body and headers from both, but Date. Hits must not
// reach the slow path, and everything else must.
func TestFastServerAnswersAsNetHTTP(t *testing.T) {
	t.Parallel()
	meta := transport.MetadataOrigin(time.Now().Add(time.Hour))
	var staleMu sync.Mutex
	staleLoads := map[string]int{}
	hold := make(chan struct{})
	nodes, _ := transport.NewTestCluster(t, 3, transport.TestOpts{
		Group: func(c *cache.GroupConfig) { c.StaleWhileRevalidate, c.NotFoundTTL = time.Hour, time.Hour },
		Origin: func(ctx context.Context, node, key string) (cache.Value, error) {
			if v, ok := meta(key); ok {
				return v, nil
			}
			switch key {
			case "empty":
				return cache.Value{}, nil
			case "stale":
				// Its revalidation never ends while the test runs, so that
				// it stays stale.
				staleMu.Lock()
				staleLoads[node]++
				first := staleLoads[node] == 1
				staleMu.Unlock()
				if !first {
					<-hold
					return cache.Value{}, cache.ErrNotFound
				}
				return cache.Value{Data: []byte("old"), Expires: time.Now().Add(50 * time.Millisecond)}, nil
			case "missing":
				return cache.Value{}, cache.ErrNotFound
			}
			return transport.DefaultOrigin(ctx, node, key)
		},
	})
	t.Cleanup(func() { close(hold) }) // before the nodes shut down
	c := transport.TestClient(t)
	var fronts [][2]front
	for i, n := range nodes {
		base, slow := fastFront(t, n.Node(), fast.Config{})
		fronts = append(fronts, [2]front{{fmt.Sprintf("net/http %d", i), n.URL(), nil}, {fmt.Sprintf("fasthttp %d", i), base, slow}})
	}

	// Each key through every node: through its owner the main cache
	// answers after the first GET, through the others the hot cache.
	keys := []string{"plain", "typed", "volatile", "large", "edge", "empty", "stale", "missing", "a/b", "%2F", "100%", "sp ace",
		"~!$&'()*+,;=:@", strings.Repeat("k", api.DefaultMaxKeyBytes)}
	for _, key := range keys {
		cached := key != "volatile"
		u := api.PublicPrefix + transport.TestGroup + "/" + transport.EscapeSegment(key)
		if key == "stale" {
			for _, f := range fronts {
				transport.MustDo(t, c, http.MethodGet, f[0].base+u, nil)
			}
			time.Sleep(100 * time.Millisecond) // past its expiry: served stale from now on
		}
		for i, f := range fronts {
			// A stale value, and a remembered not-found (NotFoundTTL), are
			// served from the owner's main cache; a hot copy past its
			// expiry is dropped and fetched again, and a not-found is not
			// copied.
			cached := cached && (key != "stale" && key != "missing" || nodes[i] == transport.Owner(t, nodes, key))
			// The first GET through net/http fills the node's cache: both
			// servers then answer from it.
			transport.MustDo(t, c, http.MethodGet, f[0].base+u, nil)
			for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodGet} {
				for _, q := range []string{"", "?q=1"} {
					before := f[1].slow.Load()
					same(t, c, method, u+q, nil, f[0], f[1])
					if reached := f[1].slow.Load() > before; reached == cached {
						t.Errorf("%s %s %q: slow path reached %v, want %v", f[1].name, method, key+q, reached, !cached)
					}
				}
			}
		}
	}

	// What the fast path leaves to the Handler, each through the slow path.
	n := fronts[1]
	for _, tc := range []struct {
		method, path string
		hdr          []string
		body         string
		noHandler    bool // refused by the server before any handler
	}{
		{method: http.MethodGet, path: "/cache/g/plain", hdr: []string{"If-None-Match", `"x", *`}},
		{method: http.MethodGet, path: "/cache/g/plain", hdr: []string{"If-None-Match", `"other"`}},
		{method: http.MethodGet, path: "/cache/g/a//b"},
		{method: http.MethodGet, path: "/cache/g/a/../b"},
		{method: http.MethodGet, path: "/cache/g/%zz", noHandler: true},
		{method: http.MethodGet, path: "/cache/nosuch/k"},
		{method: http.MethodGet, path: "/cache/g/" + strings.Repeat("k", api.DefaultMaxKeyBytes+1)},
		{method: http.MethodGet, path: "/cache/g/"},
		{method: http.MethodGet, path: "/cache/"},
		{method: http.MethodGet, path: "/cache"},
		{method: http.MethodGet, path: "/healthz"},
		{method: http.MethodGet, path: "/readyz"},
		{method: http.MethodGet, path: "/elsewhere"},
		{method: http.MethodPost, path: "/cache/g/plain", body: "x"},
		{method: http.MethodPut, path: "/cache/g/written", body: "new value", hdr: []string{"Content-Type", "text/x-new", "Cache-Control", "max-age=60"}},
		{method: http.MethodGet, path: "/cache/g/written"},
		{method: http.MethodDelete, path: "/cache/g/written"},
		{method: http.MethodGet, path: "/cache/g/written"},
	} {
		var body func() io.Reader
		if tc.body != "" {
			body = func() io.Reader { return strings.NewReader(tc.body) }
		}
		if tc.method == http.MethodGet {
			transport.MustDo(t, c, tc.method, n[0].base+tc.path, nil) // as above
		}
		before := n[1].slow.Load()
		same(t, c, tc.method, tc.path, body, n[0], n[1], tc.hdr...)
		// A GET of the written key is a hit unless it was just deleted.
		hit := tc.method == http.MethodGet && tc.path == "/cache/g/written"
		if reached := n[1].slow.Load() > before; !hit && reached == tc.noHandler {
			t.Errorf("%s %s: slow path reached %v, want %v", tc.method, tc.path, reached, !tc.noHandler)
		}
	}
}

// front is one server of a node's public API: its base URL, and for a
// FastServer the count of requests that reached its slow path.
type front struct {
	name string
	base string
	slow *atomic.Int64
}

// same sends one request to a and then to b and fails the test unless both
// answer alike: status, body, and every header but Date (max-age may differ
// by the second that passed between them).
func same(t *testing.T, c *http.Client, method, path string, body func() io.Reader, a, b front, hdr ...string) {
	t.Helper()
	var rs [2]transport.TestResponse
	for i, to := range []string{a.base, b.base} {
		var r io.Reader
		if body != nil {
			r = body()
		}
		rs[i] = transport.MustDo(t, c, method, to+path, r, hdr...)
	}
	if rs[0].Status() != rs[1].Status() || rs[0].Body() != rs[1].Body() {
		t.Errorf("%s %q: %s: %d %q; %s: %d %q", method, path, a.name, rs[0].Status(), rs[0].Body(), b.name, rs[1].Status(), rs[1].Body())
	}
	for _, h := range []http.Header{rs[0].Header(), rs[1].Header()} {
		h.Del("Date")
	}
	for k := range mergeKeys(rs[0].Header(), rs[1].Header()) {
		va, vb := rs[0].Header().Get(k), rs[1].Header().Get(k)
		// A length one side leaves to the connection's close is no
		// difference to the client.
		length := k == "Content-Length" && (va == "" || vb == "") && cmp.Or(va, vb) == strconv.Itoa(len(rs[0].Body()))
		if va == vb || length || k == "Cache-Control" && maxAgeClose(va, vb) {
			continue
		}
		t.Errorf("%s %q: header %s: %s %q, %s %q", method, path, k, a.name, va, b.name, vb)
	}
}

func mergeKeys(a, b http.Header) map[string]bool {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

// maxAgeClose reports whether two "max-age=N" values are a second apart.
func maxAgeClose(a, b string) bool {
	na, erra := strconv.Atoi(strings.TrimPrefix(a, "max-age="))
	nb, errb := strconv.Atoi(strings.TrimPrefix(b, "max-age="))
	return erra == nil && errb == nil && (na-nb == 1 || nb-na == 1)
}

// TestFastServerTokens: with read tokens, a hit with a valid token (a read
// or a write token) is answered by the fast path; a read without one, or
// with a wrong one, goes the slow way and is refused as net/http's server
// refuses it (401 with its challenge), and nothing is served for it.
func TestFastServerTokens(t *testing.T) {
	t.Parallel()
	const read, write = "read-token-0123456789", "write-token-0123456789"
	auth, err := api.NewAuth(api.AuthConfig{ReadTokens: []string{read}, WriteTokens: []string{write}})
	if err != nil {
		t.Fatal(err)
	}
	nodes, _ := transport.NewTestCluster(t, 1, transport.TestOpts{Handler: func(_ int, c *api.HandlerConfig) { c.Auth = auth }})
	base, slow := fastFront(t, nodes[0].Node(), fast.Config{})
	net := front{"net/http", nodes[0].URL(), nil}
	fast := front{"fasthttp", base, slow}
	c := transport.TestClient(t)
	transport.MustDo(t, c, http.MethodGet, net.base+"/cache/g/k", nil, "Authorization", "Bearer "+read) // now cached
	for _, tc := range []struct {
		authorization string
		served        bool
	}{
		{"", false},
		{"Bearer wrong-token-0123456789", false},
		{"Basic " + read, false},
		{"Bearer " + read, true},
		{"bearer " + write, true},
	} {
		var hdr []string
		if tc.authorization != "" {
			hdr = []string{"Authorization", tc.authorization}
		}
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			before := slow.Load()
			same(t, c, method, "/cache/g/k", nil, net, fast, hdr...)
			r := transport.MustDo(t, c, method, fast.base+"/cache/g/k", nil, hdr...)
			if want := map[bool]int{true: http.StatusOK, false: http.StatusUnauthorized}[tc.served]; r.Status() != want {
				t.Errorf("%s with %q: %d, want %d", method, tc.authorization, r.Status(), want)
			}
			if !tc.served && r.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("%s with %q: a 401 without a challenge", method, tc.authorization)
			}
			if reached := slow.Load() > before; reached == tc.served {
				t.Errorf("%s with %q: slow path reached %v, want %v", method, tc.authorization, reached, !tc.served)
			}
		}
	}
}

// TestFastServerLimits: slowloris headers are cut at ReadHeaderTimeout,
// oversized headers get 431 and oversized bodies 413, and the server keeps
// serving.
func TestFastServerLimits(t *testing.T) {
	t.Parallel()
	nodes, _ := transport.NewTestCluster(t, 1, transport.TestOpts{})
	base, _ := fastFront(t, nodes[0].Node(), fast.Config{ReadHeaderTimeout: 300 * time.Millisecond, MaxHeaderBytes: 4096, MaxBodyBytes: 1000})
	limit := 1000 + 256<<10 /* fast.Config.MaxBodyBytes' margin */
	addr := strings.TrimPrefix(base, "http://")

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "GET /cache/g/k HTTP/1.1\r\nHost: x\r\n") // and never the blank line
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(conn)
	if took := time.Since(start); err != nil || took > 3*time.Second {
		t.Errorf("slow headers: connection ended after %v with %v, want closed near 300ms", took, err)
	}

	c := transport.TestClient(t)
	if r := transport.MustDo(t, c, http.MethodGet, base+"/cache/g/k", nil, "X-Big", strings.Repeat("b", 8000)); r.Status() != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("8 KB header: %d %q, want 431", r.Status(), r.Body())
	}
	// The server answers 413 as soon as it has read its bound, and closes
	// the connection: a client still writing the rest may see the close
	// as a reset, which can discard the answer before it is read. Either
	// is a refusal; the GET below checks that nothing was stored.
	r, err := transport.Do(t, c, http.MethodPut, base+"/cache/g/k", strings.NewReader(strings.Repeat("v", limit+1)))
	switch {
	case err != nil && errors.Is(err, syscall.ECONNRESET):
	case err != nil:
		t.Errorf("a body over the server's bound: %v, want 413 or a reset", err)
	case r.Status() != http.StatusRequestEntityTooLarge:
		t.Errorf("a body over the server's bound: %d %q, want 413", r.Status(), r.Body())
	}
	if r := transport.MustDo(t, c, http.MethodGet, base+"/cache/g/k", nil); r.Status() != http.StatusOK || r.Body() != string(valueOf("k")) {
		t.Errorf("after the refusals: %d %q", r.Status(), r.Body())
	}
}

// TestFastServerShutdownWaits: transport.Node.Shutdown stops a FastServer added to it
// only after the request in flight (a slow origin load) is answered.
func TestFastServerShutdownWaits(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	nodes, _ := transport.NewTestCluster(t, 1, transport.TestOpts{Origin: func(ctx context.Context, node, key string) (cache.Value, error) {
		if key == "slow" {
			started <- struct{}{}
			<-release
		}
		return transport.DefaultOrigin(ctx, node, key)
	}})
	n := nodes[0].Node()
	srv, err := fast.New(n, fast.Config{Handler: n.PublicHandler()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.AddServer(srv); err != nil {
		t.Fatal(err)
	}
	ln := transport.MustListen(t)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	got := make(chan error, 1)
	go func() {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			got <- err
			return
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /cache/g/slow HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			got <- err
			return
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(b) != string(valueOf("slow")) {
			err = fmt.Errorf("%d %q", resp.StatusCode, b)
		}
		got <- err
	}()
	<-started
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- n.Shutdown(ctx)
	}()
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-got; err != nil {
		t.Errorf("the request in flight: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
	}
}

// TestFastServerOwnsRequestStrings: what a handler keeps of a request that
// went the slow way (here, the keys the origin was asked for) stays as it
// was after fasthttp reuses the connection's buffers for the next request.
func TestFastServerOwnsRequestStrings(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var asked []string
	nodes, _ := transport.NewTestCluster(t, 1, transport.TestOpts{Origin: func(ctx context.Context, node, key string) (cache.Value, error) {
		mu.Lock()
		asked = append(asked, key)
		mu.Unlock()
		return transport.DefaultOrigin(ctx, node, key)
	}})
	base, _ := fastFront(t, nodes[0].Node(), fast.Config{})
	c := transport.TestClient(t)
	var want []string
	for i := range 200 {
		key := fmt.Sprintf("key-%d", i)
		want = append(want, key)
		// A content type on the request too: header values alias the
		// same buffers.
		if r := transport.MustDo(t, c, http.MethodGet, base+"/cache/g/"+key, nil, "Accept", "text/"+key); r.Status() != http.StatusOK || r.Body() != string(valueOf(key)) {
			t.Fatalf("GET %s: %d %q", key, r.Status(), r.Body())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range want {
		if i >= len(asked) || asked[i] != want[i] {
			t.Fatalf("the origin was asked for %q as load %d, now reads %q: a key changed after its request", want[i], i, asked[min(i, len(asked)-1)])
		}
	}
}

// TestNewFastServerRefuses: a fast.Config without a handler, or with a
// negative bound, is an transport.ErrConfig.
func TestNewFastServerRefuses(t *testing.T) {
	t.Parallel()
	nodes, _ := transport.NewTestCluster(t, 1, transport.TestOpts{})
	h := nodes[0].Node().PublicHandler()
	for _, cfg := range []fast.Config{
		{},
		{Handler: h, MaxHeaderBytes: -1},
		{Handler: h, MaxBodyBytes: -1},
		{Handler: h, IdleTimeout: -time.Second},
		{Handler: h, ReadHeaderTimeout: -time.Second},
	} {
		if _, err := fast.New(nodes[0].Node(), cfg); !errors.Is(err, transport.ErrConfig) {
			t.Errorf("NewFastServer(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}

// TestFastServerRecovers: a panic in the fast path is answered 500 with the
// connection closed, and logged, as net/http's server does, rather than
// ending the process. The panic is made by a node without its public
// handler, which no constructor builds.
func TestFastServerRecovers(t *testing.T) {
	t.Parallel()
	nodes, _ := transport.NewTestCluster(t, 1, transport.TestOpts{})
	var logs strings.Builder
	var mu sync.Mutex
	// A Node of no constructor: no api, so the fast path dereferences nil.
	srv, err := fast.New(&transport.Node{}, fast.Config{Handler: nodes[0].Node().PublicHandler(),
		Logger: slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logs.Write(p)
		}), nil))})
	if err != nil {
		t.Fatal(err)
	}
	var req fasthttp.Request
	req.SetRequestURI(api.PublicPrefix + transport.TestGroup + "/k")
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, nil, nil)
	srv.ServeFastHTTP(&ctx)
	if code := ctx.Response.StatusCode(); code != http.StatusInternalServerError || !ctx.Response.ConnectionClose() {
		t.Errorf("after a panic: status %d, connection close %v; want 500 and close", code, ctx.Response.ConnectionClose())
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "handler panicked") {
		t.Errorf("the panic was not logged: %q", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestFastServerRefusesLargeBodyAnswered: a PUT just over the group's
// MaxValueBytes, sent chunked (no length to refuse it by up front), gets
// the handler's 413, not a connection closed under the client while it is
// still sending, as fasthttp does past its own bound.
func TestFastServerRefusesLargeBodyAnswered(t *testing.T) {
	t.Parallel()
	nodes, _ := transport.NewTestCluster(t, 1, transport.TestOpts{})
	base, _ := fastFront(t, nodes[0].Node(), fast.Config{}) // MaxBodyBytes: the default MaxValueBytes
	c := transport.TestClient(t)
	body := io.MultiReader(strings.NewReader(strings.Repeat("v", cache.DefaultMaxValueBytes+1))) // no length: chunked
	r, err := transport.Do(t, c, http.MethodPut, base+"/cache/g/big", body)
	if err != nil || r.Status() != http.StatusRequestEntityTooLarge {
		t.Fatalf("a chunked PUT of MaxValueBytes+1: %d %q %v, want 413", r.Status(), r.Body(), err)
	}
}
