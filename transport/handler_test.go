package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// TestKeyRoundTrip reads awkward keys through a node that does not own them:
// the owner's origin must receive exactly the key, and the value come back
// unchanged, through the public route and the peer hop.
func TestKeyRoundTrip(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{"", "signed, sixteen bytes or more"} {
		t.Run("secret="+secret, func(t *testing.T) {
			t.Parallel()
			testKeyRoundTrip(t, []byte(secret))
		})
	}
}

func testKeyRoundTrip(t *testing.T, secret []byte) {
	nodes, loads := newCluster(t, 3, clusterOpts{pool: func(_ int, c *Config) { c.Secrets = secretsOf(secret) }})
	c := testClient(t)
	keys := append(slices.Clone(awkwardKeys), strings.Repeat("é", api.DefaultMaxKeyBytes/2))
	for _, key := range keys {
		x := notOwner(t, nodes, key)
		if err := get(t, c, x, key); err != nil {
			t.Errorf("%q: %v", key, err)
			continue
		}
		if got, want := loads.of(key), []string{owner(t, nodes, key).url}; !slices.Equal(got, want) {
			t.Errorf("loads of %q = %v, want one by the owner %v", key, got, want)
		}
	}
	// Slashes may also arrive unescaped where path cleaning leaves them.
	for _, key := range []string{"a/b/c", "trailing/", "dir/file.txt"} {
		x := notOwner(t, nodes, key)
		raw := x.url + api.PublicPrefix + testGroup + "/" + key
		if r := mustDo(t, c, http.MethodGet, raw, nil); r.status != http.StatusOK || r.body != string(valueOf(key)) {
			t.Errorf("GET %s: %d %q", raw, r.status, r.body)
		}
	}
	if s := sumStats(nodes); s.PeerLoads == 0 || s.PeerErrors != 0 {
		t.Fatalf("stats %+v: want peer loads and no peer errors", s)
	}
}

// TestValueMetadata checks what a 200 carries, through the peer hop: the
// origin's content type and expiry, the ETag and its 304, and HEAD.
func TestValueMetadata(t *testing.T) {
	t.Parallel()
	meta := metadataOrigin(time.Now().Add(time.Hour))
	nodes, _ := newCluster(t, 3, clusterOpts{
		origin: func(ctx context.Context, node, key string) (cache.Value, error) {
			if v, ok := meta(key); ok {
				return v, nil
			}
			return defaultOrigin(ctx, node, key)
		},
	})
	c := testClient(t)
	for _, key := range []string{"typed", "plain", "volatile", "large", "edge"} {
		x := notOwner(t, nodes, key)
		u := publicURL(x.url, testGroup, key)
		r := mustDo(t, c, http.MethodGet, u, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET %q: %d %q", key, r.status, r.body)
		}
		tag, body := r.header.Get("ETag"), r.body
		if tag != api.ETag([]byte(r.body)) {
			t.Errorf("%q: ETag %q, want %q", key, tag, api.ETag([]byte(r.body)))
		}
		if r.header.Get("Content-Length") != fmt.Sprint(len(r.body)) {
			t.Errorf("%q: Content-Length %q for %d bytes", key, r.header.Get("Content-Length"), len(r.body))
		}
		ct, cc := r.header.Get("Content-Type"), r.header.Get("Cache-Control")
		switch key {
		case "typed":
			if ct != "text/html" || (cc != "max-age=3600" && cc != "max-age=3599") {
				t.Errorf("typed: Content-Type %q, Cache-Control %q", ct, cc)
			}
		case "plain":
			if ct != "application/octet-stream" || cc != "" {
				t.Errorf("plain: Content-Type %q, Cache-Control %q", ct, cc)
			}
		case "volatile":
			if cc != "no-store" {
				t.Errorf("volatile: Cache-Control %q, want no-store", cc)
			}
		}
		if r := mustDo(t, c, http.MethodGet, u, nil, "If-None-Match", tag); r.status != http.StatusNotModified || r.body != "" || r.header.Get("ETag") != tag {
			t.Errorf("%q: conditional GET: %d %q ETag %q, want 304", key, r.status, r.body, r.header.Get("ETag"))
		}
		if r := mustDo(t, c, http.MethodGet, u, nil, "If-None-Match", `"other"`); r.status != http.StatusOK {
			t.Errorf("%q: GET with a stale ETag: %d, want 200", key, r.status)
		}
		if r := mustDo(t, c, http.MethodHead, u, nil); r.status != http.StatusOK || r.body != "" || r.header.Get("ETag") != tag {
			t.Errorf("%q: HEAD: %d %q ETag %q", key, r.status, r.body, r.header.Get("ETag"))
		} else if got := r.header.Get("Content-Length"); got != fmt.Sprint(len(body)) {
			t.Errorf("%q: HEAD: Content-Length %q, want the GET's", key, got)
		}
	}
}

// autoLengthMax is the largest body whose length net/http sets by itself
// (its response buffer), which api's handler sets by hand above.
const autoLengthMax = 2048

// metadataOrigin returns the values of keys whose metadata a response
// carries: "typed" (a content type, and an expiry at expires), "volatile"
// (no-store), "large" (above net/http's buffer: its length is set by hand)
// and "edge" (the largest whose length net/http sets).
func metadataOrigin(expires time.Time) func(key string) (cache.Value, bool) {
	return func(key string) (cache.Value, bool) {
		switch key {
		case "typed":
			return cache.Value{Data: []byte("<p>"), ContentType: "text/html", Expires: expires}, true
		case "volatile":
			return cache.Value{Data: []byte("now"), NoStore: true}, true
		case "large":
			return cache.Value{Data: bytes.Repeat([]byte("l"), 3*autoLengthMax)}, true
		case "edge":
			return cache.Value{Data: bytes.Repeat([]byte("e"), autoLengthMax)}, true
		}
		return cache.Value{}, false
	}
}

// TestOriginErrors maps the origin's answers, seen through a non-owner, to
// status codes and bodies: not found (no fallback load: the owner answered),
// failure, timeout, a panic and a value over the limit. A failure is
// remembered at the owner for ErrorTTL, so the second request of each does
// not reach the origin; a not-found is not remembered (NotFoundTTL is 0).
func TestOriginErrors(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 3, clusterOpts{
		origin: func(ctx context.Context, node, key string) (cache.Value, error) {
			switch {
			case strings.HasPrefix(key, "missing"):
				return cache.Value{}, fmt.Errorf("no row in secret internals: %w", cache.ErrNotFound)
			case strings.HasPrefix(key, "refused"):
				return cache.Value{}, fmt.Errorf("secret internals reject it: %w", cache.ErrBadKey)
			case strings.HasPrefix(key, "fail"):
				return cache.Value{}, errors.New("database down: secret internals")
			case strings.HasPrefix(key, "slow"):
				// What an origin with its own timeout returns; the group's
				// LoadTimeout ends up the same way, only later.
				return cache.Value{}, fmt.Errorf("upstream: %w", context.DeadlineExceeded)
			case strings.HasPrefix(key, "panic"):
				panic("getter bug")
			case strings.HasPrefix(key, "huge"):
				return cache.Value{Data: make([]byte, 2<<20)}, nil
			}
			return defaultOrigin(ctx, node, key)
		},
	})
	c := testClient(t)
	tests := []struct {
		key    string
		status int
		body   string
		loads  int
	}{
		{"missing", http.StatusNotFound, "not found", 2},
		{"refused", http.StatusBadRequest, "bad request", 1},
		{"fail", http.StatusBadGateway, "origin failed", 1},
		{"slow", http.StatusGatewayTimeout, "origin timed out", 1},
		{"panic", http.StatusBadGateway, "origin failed", 1},
		{"huge", http.StatusBadGateway, "origin value too large", 1},
	}
	for _, tt := range tests {
		for _, n := range []*testNode{notOwner(t, nodes, tt.key), owner(t, nodes, tt.key)} {
			r := mustDo(t, c, http.MethodGet, publicURL(n.url, testGroup, tt.key), nil)
			if r.status != tt.status || strings.TrimSpace(r.body) != tt.body {
				t.Errorf("GET %q at %s: %d %q, want %d %q", tt.key, n.url, r.status, r.body, tt.status, tt.body)
			}
			if strings.Contains(r.body, "internals") || strings.Contains(r.body, "getter bug") || strings.Contains(r.body, "http://") {
				t.Errorf("GET %q: body %q leaks the origin's error", tt.key, r.body)
			}
			for name := range r.header {
				if strings.HasPrefix(name, "X-Ringcache-") {
					t.Errorf("GET %q: the public answer carries the peer protocol's %s header", tt.key, name)
				}
			}
		}
		// The owner answered each time, so nobody loaded in its place.
		o := owner(t, nodes, tt.key).url
		if got := loads.of(tt.key); len(got) != tt.loads || got[0] != o {
			t.Errorf("loads of %q = %v, want %d by the owner", tt.key, got, tt.loads)
		}
	}
	// Peer route: an unknown group is a plain 404, which the peer client
	// does not take for "not found".
	r := mustDo(t, c, http.MethodGet, nodes[0].url+peerPath(DefaultBasePath, "nosuch", "k"), nil)
	if r.status != http.StatusNotFound || r.header.Get(hdrNotFound) != "" {
		t.Errorf("peer GET of an unknown group: %d, marker %q", r.status, r.header.Get(hdrNotFound))
	}
}

// TestBadInputs sends malformed requests to the public and the peer routes:
// each gets its documented status, none reaches the origin, and a cached
// entry stays as it was.
func TestBadInputs(t *testing.T) {
	t.Parallel()
	const maxValue = 1 << 10
	nodes, loads := newCluster(t, 1, clusterOpts{
		group: func(c *cache.GroupConfig) { c.MaxValueBytes = maxValue },
	})
	n := nodes[0]
	c := testClient(t)
	const warm = "warm"
	if err := get(t, c, n, warm); err != nil {
		t.Fatal(err)
	}
	before := n.group.Stats()
	long := strings.Repeat("k", api.DefaultMaxKeyBytes+1)
	big := strings.Repeat("x", maxValue+1)
	pub := n.url + api.PublicPrefix
	peer := n.url + DefaultBasePath
	tests := []struct {
		name   string
		method string
		url    string
		body   string
		hdr    []string
		status int
		allow  string
	}{
		{name: "public: empty key", method: "GET", url: pub + "g/", status: 400},
		{name: "public: no group", method: "GET", url: pub, status: 400},
		{name: "public: long key", method: "GET", url: pub + "g/" + long, status: 400},
		{name: "public: long escaped key", method: "GET", url: pub + "g/" + strings.Repeat("%C3%A9", 126), status: 400},
		{name: "public: bad escape", method: "GET", url: pub + "g/%zz", status: 400},
		{name: "public: unknown group", method: "GET", url: pub + "nosuch/k", status: 404},
		{name: "public: POST", method: "POST", url: pub + "g/" + warm, status: 405, allow: "GET, HEAD, PUT, DELETE"},
		{name: "public: PATCH", method: "PATCH", url: pub + "g/" + warm, body: "x", status: 405, allow: "GET, HEAD, PUT, DELETE"},
		{name: "public: PUT too large", method: "PUT", url: pub + "g/" + warm, body: big, status: 413},
		{name: "public: PUT empty key", method: "PUT", url: pub + "g/", body: "x", status: 400},
		{name: "public: PUT unknown group", method: "PUT", url: pub + "nosuch/" + warm, body: "x", status: 404},
		{name: "public: DELETE empty key", method: "DELETE", url: pub + "g/", status: 400},
		{name: "public: DELETE long key", method: "DELETE", url: pub + "g/" + long, status: 400},
		{name: "public: purge with an empty prefix", method: "DELETE", url: pub + "g?prefix=", status: 400},
		{name: "public: purge with a long prefix", method: "DELETE", url: pub + "g?prefix=" + long, status: 400},
		{name: "public: purge of an unknown group", method: "DELETE", url: pub + "nosuch", status: 404},
		{name: "peer: no key", method: "GET", url: peer + "g", status: 400},
		{name: "peer: base only", method: "GET", url: peer, status: 400},
		{name: "peer: empty key", method: "GET", url: peer + "g/", status: 400},
		// A Node routes peer paths to the peer handler without a mux, which
		// would clean "//" away and redirect: the handler refuses it.
		{name: "peer: empty group", method: "GET", url: peer + "/" + warm, status: 400},
		{name: "peer: long key", method: "GET", url: peer + "g/" + long, status: 400},
		{name: "peer: bad escape", method: "GET", url: peer + "g/%zz", status: 400},
		{name: "peer: unknown group", method: "GET", url: peer + "nosuch/" + warm, status: 404},
		{name: "peer: POST", method: "POST", url: peer + "g/" + warm, status: 405, allow: "GET, PUT, DELETE"},
		{name: "peer: PUT too large", method: "PUT", url: peer + "g/" + warm, body: big, status: 413},
		{name: "peer: PUT bad expiry", method: "PUT", url: peer + "g/" + warm, body: "x", hdr: []string{hdrExpires, "soon"}, status: 400},
		{name: "peer: DELETE empty key", method: "DELETE", url: peer + "g/", status: 400},
	}
	for _, tt := range tests {
		var body *strings.Reader
		if tt.body != "" {
			body = strings.NewReader(tt.body)
		}
		var r response
		if body != nil {
			r = mustDo(t, c, tt.method, tt.url, body, tt.hdr...)
		} else {
			r = mustDo(t, c, tt.method, tt.url, nil, tt.hdr...)
		}
		if r.status != tt.status {
			t.Errorf("%s: %s %s: status %d %q, want %d", tt.name, tt.method, tt.url, r.status, r.body, tt.status)
		}
		if tt.allow != "" && r.header.Get("Allow") != tt.allow {
			t.Errorf("%s: Allow %q, want %q", tt.name, r.header.Get("Allow"), tt.allow)
		}
		if tt.status < 400 {
			continue
		}
		if len(r.body) > 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
			t.Errorf("%s: body %q (%s), want a short text", tt.name, r.body, r.header.Get("Content-Type"))
		}
		// For the HTTP user, a sentence: no Go package names.
		if strings.HasPrefix(tt.name, "public:") && (strings.Contains(r.body, "transport:") || strings.Contains(r.body, "cache:")) {
			t.Errorf("%s: body %q names a Go package", tt.name, r.body)
		}
	}
	if got := loads.count(); got != 1 {
		t.Fatalf("%d origin loads, want 1 (the warm-up): bad input reached the origin", got)
	}
	after := n.group.Stats()
	if after.MainItems != before.MainItems || after.MainBytes != before.MainBytes || after.LocalLoads != before.LocalLoads {
		t.Fatalf("bad input changed the cache: %+v -> %+v", before, after)
	}
	if err := get(t, c, n, warm); err != nil {
		t.Fatal(err)
	}
	if got := loads.count(); got != 1 {
		t.Fatalf("the warm entry was reloaded: %d loads", got)
	}
}

// TestHandlerKeyLimit checks a configured key limit and the config errors.
func TestHandlerKeyLimit(t *testing.T) {
	t.Parallel()
	if _, err := api.NewHandler(nil, api.HandlerConfig{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("NewHandler(nil) error = %v, want ErrConfig", err)
	}
	node := cache.New(cache.Config{})
	if _, err := api.NewHandler(node, api.HandlerConfig{MaxKeyBytes: -1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("negative MaxKeyBytes: error = %v, want ErrConfig", err)
	}
	if _, err := node.NewGroup(cache.GroupConfig{Name: "g", MaxBytes: 1 << 20,
		Getter: cache.GetterFunc(func(_ context.Context, key string) (cache.Value, error) {
			return cache.Value{Data: []byte(key)}, nil
		})}); err != nil {
		t.Fatal(err)
	}
	h, err := api.NewHandler(node, api.HandlerConfig{MaxKeyBytes: 4})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int{"abcd": 200, "abcde": 400, "%C3%A9%C3%A9": 200, "%C3%A9%C3%A9x": 400} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/cache/g/"+key, nil))
		if w.Code != want {
			t.Errorf("GET key %q with a 4-byte limit: %d, want %d", key, w.Code, want)
		}
	}
}

// FuzzPublicPath sends arbitrary paths and methods to the public handler of a
// single node: it never panics, answers a documented status, and its origin
// sees only keys that are valid.
func FuzzPublicPath(f *testing.F) {
	for _, k := range awkwardKeys {
		f.Add("GET", "/cache/g/"+escapeSegment(k))
	}
	f.Add("GET", "/cache/g/")
	f.Add("PUT", "/cache/g/k")
	f.Add("DELETE", "/cache/nosuch/%2F")
	f.Add("BREW", "/cache/g/k")
	node := cache.New(cache.Config{})
	var bad error
	if _, err := node.NewGroup(cache.GroupConfig{Name: "g", MaxBytes: 1 << 20,
		Getter: cache.GetterFunc(func(_ context.Context, key string) (cache.Value, error) {
			if key == "" || len(key) > api.DefaultMaxKeyBytes {
				bad = fmt.Errorf("origin got key %q", key)
			}
			return cache.Value{Data: []byte(key)}, nil
		})}); err != nil {
		f.Fatal(err)
	}
	h, err := api.NewHandler(node, api.HandlerConfig{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path string) {
		u, err := url.ParseRequestURI(path)
		if err != nil || !validMethod(method) {
			return
		}
		r := httptest.NewRequest(http.MethodGet, "/", strings.NewReader("body"))
		r.Method, r.URL, r.RequestURI = method, u, path
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case 200, 204, 301, 307, 308, 400, 404, 405, 413:
		default:
			t.Fatalf("%s %q: status %d %q", method, path, w.Code, w.Body)
		}
		if bad != nil {
			t.Fatal(bad)
		}
	})
}

func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range m {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// TestPutValueHasNoSpareCapacity: the cache keeps the slice a PUT body was
// read into and accounts for its length only, so the slice must not hide a
// larger array (bytes.Buffer.ReadFrom doubles it on the final read that
// finds EOF, even when it was grown to the exact Content-Length).
func TestPutValueHasNoSpareCapacity(t *testing.T) {
	t.Parallel()
	nodes, _ := newCluster(t, 1, clusterOpts{})
	n := nodes[0]
	c := testClient(t)
	for _, size := range []int{1, 1000, 64 << 10, 1 << 20} {
		for _, route := range []string{"public", "peer"} {
			for _, chunked := range []bool{false, true} {
				key := fmt.Sprintf("put-%s-%d-%v", route, size, chunked)
				u := publicURL(n.url, testGroup, key)
				if route == "peer" {
					u = n.url + peerPath(DefaultBasePath, testGroup, key)
				}
				var body io.Reader = strings.NewReader(strings.Repeat("x", size))
				if chunked {
					body = io.MultiReader(body) // no length: sent chunked
				}
				if r := mustDo(t, c, http.MethodPut, u, body); r.status != http.StatusNoContent {
					t.Fatalf("PUT %s: %d %q", key, r.status, r.body)
				}
				v, err := n.group.Get(t.Context(), key)
				if err != nil || len(v.Data) != size {
					t.Fatalf("Get %s: %d bytes, %v", key, len(v.Data), err)
				}
				// Allocation size classes round up by at most 1/8.
				if c := cap(v.Data); c > size+size/8+16 {
					t.Errorf("%s: the cached value holds %d bytes of array for %d bytes of data", key, c, size)
				}
			}
		}
	}
}
