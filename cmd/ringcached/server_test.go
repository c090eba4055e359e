package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringcache/ringcache/internal/freeport"
	"github.com/ringcache/ringcache/transport"
	"github.com/ringcache/ringcache/transport/origin"
)

// getJSON fetches url and decodes its JSON body into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	status, body := get(t, url)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, status, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
}

// TestServeSingleNode runs "serve" as main does and checks every route of
// the public listener, then that a canceled context stops it cleanly.
func TestServeSingleNode(t *testing.T) {
	t.Parallel()
	base, _, stop := serveNode(t, "-group", "name=demo,origin=demo,demo-size=100")

	if status, body := get(t, base+"/healthz"); status != 200 || body != "ok" {
		t.Errorf("/healthz = %d %q", status, body)
	}
	if status, _ := get(t, base+"/readyz"); status != 200 {
		t.Errorf("/readyz = %d, want 200", status)
	}
	want := string(origin.DemoValue("demo", "k/1", 100))
	for range 2 {
		if status, body := get(t, base+"/cache/demo/k/1"); status != 200 || body != want {
			t.Fatalf("/cache/demo/k/1 = %d %q, want %q", status, body, want)
		}
	}
	if status, _ := get(t, base+"/cache/nope/k"); status != 404 {
		t.Errorf("unknown group: %d, want 404", status)
	}

	var loads map[string]origin.DemoLoads
	getJSON(t, base+"/debug/origin", &loads)
	if got := loads["demo"]; got.Loads != 1 || got.Keys["k/1"] != 1 {
		t.Errorf("/debug/origin = %+v, want one load of k/1", loads)
	}

	var ring ringInfo
	getJSON(t, base+"/debug/ring?key=k/1", &ring)
	if ring.Self != base || len(ring.Members) != 1 || ring.Members[0] != base || ring.Owner != base ||
		!ring.Static || ring.Etcd != nil || ring.Shares[base] != 1 || ring.Version == "" || !ring.Ready {
		t.Errorf("/debug/ring = %+v", ring)
	}

	mfs := scrape(t, base)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"ringcache_gets_total", []string{"group", "demo"}, 2},
		{"ringcache_hits_total", []string{"group", "demo", "cache", "main"}, 1},
		{"ringcache_hits_total", []string{"group", "demo", "cache", "hot"}, 0},
		{"ringcache_loads_total", []string{"group", "demo", "source", "local"}, 1},
		{"ringcache_loads_total", []string{"group", "demo", "source", "peer"}, 0},
		{"ringcache_origin_duration_seconds", []string{"group", "demo", "outcome", "ok"}, 1},
		{"ringcache_items", []string{"group", "demo", "cache", "main"}, 1},
		{"ringcache_max_bytes", []string{"group", "demo"}, defaultGroupBytes},
		{"ringcache_members", nil, 1},
		{"ringcache_ready", nil, 1},
		{"ringcache_ring_version_info", []string{"version", ring.Version}, 1},
	} {
		if got := value(t, mfs, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if _, ok := mfs["ringcache_etcd_connected"]; ok {
		t.Error("ringcache_etcd_connected exported without etcd")
	}
	if got := value(t, mfs, "ringcache_bytes", "group", "demo", "cache", "main"); got < 100 {
		t.Errorf("ringcache_bytes{main} = %v, want at least the value's 100 bytes", got)
	}

	if err := stop(); err != nil {
		t.Fatalf("run returned %v after a clean stop", err)
	}
}

// TestServeFastHTTP runs a node whose public listener is fasthttp's: the
// public API, health, metrics and debug routes answer on it, a hit is
// counted as one, and writes are refused or applied as on net/http: a body
// just over max-value-bytes gets the handler's 413, not a reset.
func TestServeFastHTTP(t *testing.T) {
	t.Parallel()
	base, out, stop := serveNode(t, "-http-server", "fasthttp", "-peer-listen", "127.0.0.1:0", "-write-token", testToken,
		"-group", "name=demo,origin=demo,demo-size=100")
	if status, body := get(t, base+"/healthz"); status != 200 || body != "ok" {
		t.Errorf("/healthz = %d %q (log: %s)", status, body, out.String())
	}
	want := string(origin.DemoValue("demo", "k/1", 100))
	for range 3 {
		if status, body := get(t, base+"/cache/demo/k/1"); status != 200 || body != want {
			t.Fatalf("/cache/demo/k/1 = %d %q, want %q", status, body, want)
		}
	}
	for _, tc := range []struct {
		body, token string
		want        int
	}{
		{"x", "", http.StatusUnauthorized},
		{strings.Repeat("v", 1<<20+1), testToken, http.StatusRequestEntityTooLarge}, // the default max-value-bytes, 1 MiB
		{strings.Repeat("v", 1<<20), testToken, http.StatusNoContent},
	} {
		req, _ := http.NewRequest(http.MethodPut, base+"/cache/demo/put", strings.NewReader(tc.body))
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != tc.want {
			t.Errorf("PUT of %d bytes: %v %v, want %d", len(tc.body), resp, err, tc.want)
		} else {
			resp.Body.Close()
		}
	}
	var ring ringInfo
	getJSON(t, base+"/debug/ring?key=k/1", &ring)
	if len(ring.Members) != 1 || !ring.Ready {
		t.Errorf("/debug/ring = %+v", ring)
	}
	mfs := scrape(t, base)
	if got := value(t, mfs, "ringcache_hits_total", "group", "demo", "cache", "main"); got != 2 {
		t.Errorf("main hits = %v, want 2", got)
	}
	if got := value(t, mfs, "ringcache_gets_total", "group", "demo"); got != 3 {
		t.Errorf("gets = %v, want 3", got)
	}
	if err := stop(); err != nil {
		t.Fatalf("run returned %v after a clean stop", err)
	}
}

// TestServeFailsEarly checks that a node whose port is taken, or whose
// config is invalid, stops at start with the reason.
func TestServeFailsEarly(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = run(t.Context(), []string{"serve", "-listen", ln.Addr().String(), "-group", demoGroup}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("port in use: err = %v", err)
	}
	err = run(t.Context(), []string{"-listen", "127.0.0.1:0", "-group", "name=d,origin=dir,dir=/nonexistent"}, env(nil), io.Discard)
	if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), `group "d"`) {
		t.Errorf("missing dir: err = %v, want errConfig naming the group", err)
	}
	// What only the start can check is named like the rest: an origin's
	// rule, and a token file's tokens with -open-writes.
	err = run(t.Context(), []string{"-listen", "127.0.0.1:0", "-group", "name=h,origin=http,url=http://o/{key},timeout=-1s"}, env(nil), io.Discard)
	if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), `group "h"`) || !strings.Contains(err.Error(), "timeout -1s") {
		t.Errorf("negative origin timeout: err = %v, want errConfig naming the group and the field", err)
	}
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = run(t.Context(), []string{"-listen", "127.0.0.1:0", "-group", demoGroup, "-open-writes", "-write-token-file", tokenFile}, env(nil), io.Discard)
	if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), "open-writes: ") {
		t.Errorf("open writes and a token file: err = %v, want errConfig naming open-writes", err)
	}
	err = run(t.Context(), []string{"-listen", "127.0.0.1:0", "-group", demoGroup, "-etcd", "127.0.0.1:1", "-lease-ttl", "1s"}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Errorf("unreachable etcd: err = %v", err)
	}
}

// TestPeerSignatures checks the peer route of a node with a secret: a peer
// that signs with it is served; one without a signature, or with another
// secret, gets 401, and neither touches the cache nor loads from the origin.
func TestPeerSignatures(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef-test-secret"
	base, _, _ := serveNode(t, "-secret", secret, "-group", "name=demo,origin=demo")

	peerOf := func(secret string) *transport.Pool {
		p, err := transport.NewPool(transport.Config{Self: "http://127.0.0.1:1", Secrets: [][]byte{[]byte(secret)}})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Set(base); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}

	v, err := peerOf(secret).Peers()[0].Fetch(t.Context(), "demo", "signed")
	if err != nil || string(v.Data) != string(origin.DemoValue("demo", "signed", 64)) {
		t.Fatalf("signed fetch = %q, %v", v.Data, err)
	}
	_, err = peerOf("another secret, same length").Peers()[0].Fetch(t.Context(), "demo", "forged")
	if !errors.Is(err, transport.ErrUnauthorized) {
		t.Errorf("fetch with another secret: err = %v, want ErrUnauthorized", err)
	}
	if status, _ := get(t, base+"/_groupcache/demo/unsigned"); status != http.StatusUnauthorized {
		t.Errorf("unsigned GET: %d, want 401", status)
	}
	req, _ := http.NewRequest(http.MethodPut, base+"/_groupcache/demo/planted", strings.NewReader("evil"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unsigned PUT: %d, want 401", resp.StatusCode)
	}

	var loads map[string]origin.DemoLoads
	getJSON(t, base+"/debug/origin", &loads)
	if got := loads["demo"]; got.Loads != 1 || got.Keys["signed"] != 1 {
		t.Errorf("origin loads = %+v, want only the signed key's", got)
	}
	if _, body := get(t, base+"/cache/demo/planted"); body == "evil" {
		t.Error("an unsigned PUT set the value")
	}
	if got := value(t, scrape(t, base), "ringcache_peer_gets_total", "group", "demo"); got != 1 {
		t.Errorf("ringcache_peer_gets_total = %v, want 1 (the signed fetch only)", got)
	}
}

// TestPeerListen checks that -peer-listen moves the peer routes off the
// public listener, and that the derived peer URL names the peer port.
func TestPeerListen(t *testing.T) {
	t.Parallel()
	base, out, _ := serveNode(t, "-peer-listen", "127.0.0.1:0", "-group", demoGroup)
	if !strings.Contains(out.String(), "http_server=fasthttp") {
		t.Errorf("with -peer-listen the public listener is not on fasthttp (auto): %s", out.String())
	}
	var ring ringInfo
	getJSON(t, base+"/debug/ring", &ring)
	if ring.Self == base || !strings.HasPrefix(ring.Self, "http://127.0.0.1:") {
		t.Fatalf("self = %q, want the peer listener's URL, not %s (log: %s)", ring.Self, base, out.String())
	}
	if status, _ := get(t, base+"/_groupcache/demo/k"); status != http.StatusNotFound {
		t.Errorf("peer route on the public listener: %d, want 404", status)
	}
	if status, _ := get(t, ring.Self+"/_groupcache/demo/k"); status != http.StatusOK {
		t.Errorf("peer route on the peer listener: %d, want 200", status)
	}
	if status, _ := get(t, ring.Self+"/cache/demo/k"); status != http.StatusNotFound {
		t.Errorf("public API on the peer listener: %d, want 404", status)
	}
}

// blockingOrigin is an HTTP upstream whose answers wait for release.
type blockingOrigin struct {
	*httptest.Server
	arrived chan string
	release chan struct{}
	once    sync.Once
}

// unblock lets every request, present and future, have its answer.
func (o *blockingOrigin) unblock() { o.once.Do(func() { close(o.release) }) }

func newBlockingOrigin(t *testing.T) *blockingOrigin {
	o := &blockingOrigin{arrived: make(chan string, 16), release: make(chan struct{})}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.arrived <- r.URL.Path
		select {
		case <-o.release:
			fmt.Fprint(w, "slow value of "+r.URL.Path)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(o.Close)
	t.Cleanup(o.unblock) // first: a load the node left running must end
	return o
}

// startTestNode starts a node from cfg and stops it at cleanup. Its logs go
// to the returned output. An empty or default Listen (":8080", every
// interface) becomes a free loopback port: tests run in parallel and send
// traffic to loopback only.
func startTestNode(t testing.TB, cfg Config) (*node, *output) {
	t.Helper()
	if cfg.Listen == "" || cfg.Listen == DefaultConfig().Listen {
		cfg.Listen = "127.0.0.1:0"
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	out := newOutput()
	n, err := startNode(t.Context(), cfg, slog.New(slog.NewTextHandler(out, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Bounded: a test that failed with etcd still out of reach would
		// otherwise wait for its leave forever, and never say why it failed.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n.stop(ctx)
	})
	return n, out
}

// TestGracefulShutdown stops a node with a request in flight: the node stops
// being ready at once, the request still gets its whole answer, and stop
// returns after it.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	for _, server := range []string{serverNetHTTP, serverFast} {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			testGracefulShutdown(t, server)
		})
	}
}

func testGracefulShutdown(t *testing.T, server string) {
	up := newBlockingOrigin(t)
	cfg := DefaultConfig()
	cfg.Groups = []GroupSpec{{Name: "slow", Origin: originHTTP, URL: up.URL + "/{key}"}}
	if cfg.Public.HTTPServer = server; server == serverFast {
		cfg.PeerListen = "127.0.0.1:0"
	}
	n, out := startTestNode(t, cfg)
	base := "http://" + n.addrs[0].String()

	type answer struct {
		status int
		body   string
		err    error
	}
	answers := make(chan answer, 1)
	go func() {
		resp, err := http.Get(base + "/cache/slow/k")
		if err != nil {
			answers <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		answers <- answer{resp.StatusCode, string(body), err}
	}()
	<-up.arrived // the request is in flight, waiting for the origin

	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n.stop(ctx)
	}()
	out.await(t, regexp.MustCompile(`msg="stopping: not ready`), nil)
	// Readiness is the first thing a stop turns off; the listener may
	// already refuse connections, so ask the handler itself.
	rec := httptest.NewRecorder()
	n.tn.PublicHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while stopping = %d, want 503", rec.Code)
	}
	select {
	case <-stopped:
		t.Fatal("stop returned with a request in flight")
	default:
	}

	up.unblock()
	a := <-answers
	if a.err != nil || a.status != 200 || a.body != "slow value of /k" {
		t.Errorf("in-flight request: %d %q %v, want 200 and the value", a.status, a.body, a.err)
	}
	<-stopped
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("the node still accepts connections after stop")
	}
}

// TestShutdownTimeout checks that a request longer than -shutdown-timeout
// does not hold the node up: run returns, and the request is cut off.
func TestShutdownTimeout(t *testing.T) {
	t.Parallel()
	up := newBlockingOrigin(t)
	base, _, stop := serveNode(t, "-shutdown-timeout", "100ms", "-group", "name=slow,origin=http,url="+up.URL+"/{key}")
	failed := make(chan error, 1)
	go func() {
		resp, err := http.Get(base + "/cache/slow/k")
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		failed <- err
	}()
	<-up.arrived
	if err := stop(); err != nil {
		t.Errorf("run = %v, want nil", err)
	}
	if err := <-failed; err == nil {
		t.Error("the cut-off request succeeded")
	}
}

func TestHealthcheck(t *testing.T) {
	t.Parallel()
	base, _, _ := serveNode(t, "-group", demoGroup)
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	}))
	t.Cleanup(unavailable.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	tests := []struct {
		url string
		ok  bool
	}{
		{base + "/readyz", true},
		{base + "/healthz", true},
		{base + "/nope", false},
		{unavailable.URL + "/readyz", false},
		{closed.URL + "/readyz", false},
	}
	for _, tt := range tests {
		err := run(t.Context(), []string{"healthcheck", "-url", tt.url}, env(nil), io.Discard)
		if (err == nil) != tt.ok {
			t.Errorf("healthcheck %s = %v, want ok=%v", tt.url, err, tt.ok)
		}
	}
}

func TestDefaultHealthURL(t *testing.T) {
	t.Parallel()
	for listen, want := range map[string]string{
		"":               "http://127.0.0.1:8080/readyz",
		":9090":          "http://127.0.0.1:9090/readyz",
		"0.0.0.0:9091":   "http://127.0.0.1:9091/readyz",
		"10.1.2.3:9092":  "http://10.1.2.3:9092/readyz",
		"[::]:9093":      "http://127.0.0.1:9093/readyz",
		"[::1]:9094":     "http://[::1]:9094/readyz",
		"127.0.0.1:0":    "http://127.0.0.1:8080/readyz",
		"not an address": "http://127.0.0.1:8080/readyz",
	} {
		if got := defaultHealthURL(listen); got != want {
			t.Errorf("defaultHealthURL(%q) = %q, want %q", listen, got, want)
		}
	}
}

func TestDerivePeerURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr *net.TCPAddr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "http://node-a:8080"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "http://node-a:8080"},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8081}, "http://127.0.0.1:8081"},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 8082}, "http://[::1]:8082"},
	} {
		if got := derivePeerURL("http", "node-a", tt.addr); got != tt.want {
			t.Errorf("derivePeerURL(%v) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}

func TestRunCommands(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if err := run(t.Context(), []string{"help"}, env(nil), &out); err != nil || !strings.Contains(out.String(), "RINGCACHE_LISTEN") {
		t.Errorf("help: %v, %q", err, out.String())
	}
	if err := run(t.Context(), []string{"serve", "-h"}, env(nil), io.Discard); err != nil {
		t.Errorf("serve -h: %v, want nil", err)
	}
	if err := run(t.Context(), []string{"frobnicate"}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "frobnicate") {
		t.Errorf("unknown command: %v", err)
	}
	if err := run(t.Context(), []string{"dev", "-nodes", "0"}, env(nil), io.Discard); !errors.Is(err, errConfig) {
		t.Errorf("dev -nodes 0: %v, want errConfig", err)
	}
	if err := run(t.Context(), []string{"dev", "-log-level", "loud"}, env(nil), io.Discard); !errors.Is(err, errConfig) {
		t.Errorf("dev -log-level loud: %v, want errConfig", err)
	}
}

// freeAddr returns a loopback address a node can bind later (freeport).
func freeAddr(t testing.TB) string { return freeport.Addr(t) }

// TestNoPublicGetsBeforeJoin checks that the node answers nothing while it
// joins: with a ring of itself alone, it would load every key as its owner
// and keep in its main cache copies that the real owner's PUT or DELETE
// never reaches. A request that arrives meanwhile waits in the accept queue,
// and here, where the join fails, it is never answered.
func TestNoPublicGetsBeforeJoin(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Listen = freeAddr(t)
	cfg.Etcd = []string{"http://127.0.0.1:1"} // nothing there: the join waits for ctx
	cfg.LeaseTTL = time.Minute
	cfg.ShutdownTimeout = time.Second
	cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan error, 1)
	go func() {
		n, err := startNode(ctx, cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			n.stop(context.Background())
		}
		started <- err
	}()
	// The listener is bound at once; wait for it so that the GET below
	// reaches it rather than a closed port.
	var conn net.Conn
	for range 500 {
		var err error
		if conn, err = net.Dial("tcp", cfg.Listen); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if conn == nil {
		t.Fatal("the node never listened")
	}
	conn.Close()

	answered := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + cfg.Listen + "/cache/demo/k")
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	select {
	case code := <-answered:
		t.Fatalf("GET while joining answered %d, want no answer until the node has joined", code)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	if err := <-started; err == nil {
		t.Fatal("startNode succeeded without etcd")
	}
	if code := <-answered; code != 0 {
		t.Fatalf("GET queued while joining answered %d after the join failed, want none", code)
	}
}

// TestRingShowsSuspected: /debug/ring lists a peer this node could not
// reach among "suspected", and the node still answers for its keys.
func TestRingShowsSuspected(t *testing.T) {
	t.Parallel()
	addr, dead := freeAddr(t), freeAddr(t) // nothing listens on dead
	self, peer := "http://"+addr, "http://"+dead
	base, _, _ := serveNode(t, "-group", "name=demo,origin=demo,demo-size=10", "-listen", addr,
		"-peer-url", self, "-peers", self+","+peer)
	var ring ringInfo
	getJSON(t, base+"/debug/ring", &ring)
	if ring.Suspected == nil || len(ring.Suspected) != 0 {
		t.Fatalf("suspected = %#v before any request; want an empty list", ring.Suspected)
	}
	key := ""
	for i := 0; key == "" && i < 100; i++ {
		getJSON(t, fmt.Sprintf("%s/debug/ring?key=k%d", base, i), &ring)
		if ring.Owner == peer {
			key = fmt.Sprintf("k%d", i)
		}
	}
	if key == "" {
		t.Fatalf("none of 100 keys is owned by %s", peer)
	}
	if status, body := get(t, base+"/cache/demo/"+key); status != 200 || body != string(origin.DemoValue("demo", key, 10)) {
		t.Fatalf("GET %s owned by a dead peer = %d %q; want the value, loaded here", key, status, body)
	}
	getJSON(t, base+"/debug/ring", &ring)
	if !slices.Equal(ring.Suspected, []string{peer}) {
		t.Errorf("suspected = %v after a request for its key failed to reach it; want [%s]", ring.Suspected, peer)
	}
}
