package ui

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// fixed is a Source that always shows the same node, with names that would
// break out of markup if anything were not escaped.
type fixed struct{ snap Snapshot }

func (f fixed) Snapshot(context.Context) Snapshot { return f.snap }

func (f fixed) Locate(key string) Location {
	return Location{Key: key, Owner: f.snap.Members[1].URL, Hash: 1 << 30, Version: f.snap.Version}
}

const (
	evilMember = `http://x/"><script>alert(1)</script>`
	evilKey    = `k"><img src=x onerror=alert(2)>`
)

func testSnapshot() Snapshot {
	rates := 12.5
	return Snapshot{
		Time: time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC), Self: "http://a:1", NodeID: "node1",
		Version: "abc123", Ready: true, Etcd: &Etcd{Connected: true, Registered: true},
		Agreement: Agreement{Agree: 2, Unknown: 0, Fresh: 30 * time.Second},
		Members: []Member{
			{URL: "http://a:1", ID: "node1", Self: true, State: StateReady, Weight: 1, Share: 0.5, SeenVersion: "abc123",
				Arcs: [][2]uint64{{0, 1 << 31}}},
			{URL: evilMember, ID: "node2", State: StateSuspected, Weight: 2, Share: 0.5, SeenVersion: "abc123", SeenAgo: 3.7,
				Arcs: [][2]uint64{{1 << 31, 1 << 31}}},
		},
		Groups: []Group{{
			Name: "demo", Gets: 100, MainHits: 40, HotHits: 10, OriginLoads: 7, PeerLoads: 30, Evictions: 2,
			MainBytes: 2048, HotBytes: 512, MaxBytes: 64 << 20, HotMaxBytes: 8 << 20, GetsPerSec: &rates,
			HotKeys: []HotKey{{Key: evilKey, Estimate: 9, Bytes: 300}},
		}},
		Timeline: []Event{{Time: time.Date(2026, 12, 1, 9, 29, 0, 0, time.UTC), Kind: EventJoined, Member: evilMember}},
	}
}

func newTestServer(t *testing.T) *httptest.Server {
	t.Helper()
	h, err := NewHandler(fixed{testSnapshot()}, Config{MaxKeyBytes: 10 + len(evilKey)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func fetch(t *testing.T, u string) (*http.Response, string) {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

func TestPageRendersWithoutScript(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	res, body := fetch(t, srv.URL+"/ui/?key="+url.QueryEscape(evilKey))
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("status %d, type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	for _, raw := range []string{"<script>alert(1)", "<img src=x"} {
		if strings.Contains(body, raw) {
			t.Errorf("the page holds %q unescaped", raw)
		}
	}
	for _, want := range []string{
		`&lt;script&gt;alert(1)&lt;/script&gt;`, // the member, escaped
		`&lt;img src=x onerror=alert(2)&gt;`,    // the hot key and the asked key, escaped
		`<td data-field="gets">100</td>`,
		`<td data-field="main_hit_ratio">40.0%</td>`,
		`<td data-field="hot_hit_ratio">10.0%</td>`,
		`<td data-field="gets_per_s">12.5/s</td>`,
		`<td data-field="origin_loads_per_s">…</td>`,
		`data-value="2048">2.0 KiB</td>`,
		`data-value="67108864">64.0 MiB</td>`,
		`all 2 nodes agree`,
		`etcd connected`,
		`<td class="state">suspected</td>`,
		`3s ago`,
		`09:29:00`,
		`hashes to <code>40000000</code>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if n := strings.Count(body, `<g class="member`); n != 2 {
		t.Errorf("%d member groups in the SVG, want 2", n)
	}
	// The key's owner, the second member, is highlighted; the first is not.
	if !strings.Contains(body, `<g class="member hl" data-member="http://x/&#34;&gt;&lt;script&gt;`) ||
		!strings.Contains(body, `<g class="member" data-member="http://a:1">`) {
		t.Error("the owner's arcs are not the highlighted ones")
	}
	if !strings.Contains(body, `<g id="keymark" transform="rotate(90.00)">`) {
		t.Error("the key's mark is not at a quarter turn")
	}
}

func TestStateJSON(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	res, body := fetch(t, srv.URL+"/ui/state?key=hello")
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("status %d, headers %v", res.StatusCode, res.Header)
	}
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Members) != 2 || s.Members[0].Color == s.Members[1].Color || s.Members[1].Path == "" ||
		s.Members[1].URL != evilMember || s.Agreement.Text != "all 2 nodes agree" {
		t.Errorf("members %+v, agreement %+v", s.Members, s.Agreement)
	}
	// Hash 2^30 is a quarter turn clockwise from the top.
	if s.Key == nil || s.Key.Key != "hello" || s.Key.Angle != 90 || len(s.Palette) < 2 {
		t.Errorf("key = %+v", s.Key)
	}
	_, body = fetch(t, srv.URL+"/ui/state")
	s = Snapshot{}
	if err := json.Unmarshal([]byte(body), &s); err != nil || s.Key != nil {
		t.Errorf("a state without ?key= answers a key: %v %+v", err, s.Key)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	long := strings.Repeat("k", 11+len(evilKey))
	for _, c := range []struct {
		path   string
		status int
		body   string
	}{
		{"/ui/state?key=" + long, 400, "key over"},
		{"/ui/?key=" + long, 400, "key over"},
		{"/ui/nope", 404, ""},
		{"/ui/static/nope.js", 404, ""},
	} {
		res, body := fetch(t, srv.URL+c.path)
		if res.StatusCode != c.status || !strings.Contains(body, c.body) {
			t.Errorf("GET %s = %d %.80q, want %d with %q", c.path, res.StatusCode, body, c.status, c.body)
		}
	}
	res, err := http.Post(srv.URL+"/ui/state", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/state = %d, want 405: the page is read-only", res.StatusCode)
	}
}

func TestStaticAssets(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	for path, typ := range map[string]string{
		"/ui/static/ui.js":    "text/javascript",
		"/ui/static/ui.css":   "text/css",
		"/ui/static/icon.svg": "image/svg+xml",
	} {
		res, body := fetch(t, srv.URL+path)
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), typ) || len(body) == 0 {
			t.Errorf("GET %s = %d %q", path, res.StatusCode, res.Header.Get("Content-Type"))
		}
	}
	// The script never writes markup from data.
	_, js := fetch(t, srv.URL+"/ui/static/ui.js")
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if strings.Contains(js, bad) {
			t.Errorf("ui.js uses %s", bad)
		}
	}
}

func TestNewHandlerConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{Prefix: "ui/"}, {Prefix: "/ui"}, {MaxKeyBytes: -1}} {
		if _, err := NewHandler(fixed{}, cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("NewHandler(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}

func TestGeometry(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		h    uint64
		x, y float64
	}{{0, 0, -ringRadius}, {1 << 30, ringRadius, 0}, {1 << 31, 0, ringRadius}, {3 << 30, -ringRadius, 0}} {
		if x, y := point(c.h, ringRadius); math.Abs(x-c.x) > 1e-9 || math.Abs(y-c.y) > 1e-9 {
			t.Errorf("point(%d) = %v, %v, want %v, %v", c.h, x, y, c.x, c.y)
		}
	}
	// A whole circle is drawn as two half arcs; a short arc as one small one.
	if got := arcsPath([][2]uint64{{0, circle}}); got != "M0.00 -90.00A90 90 0 0 1 0.00 90.00M0.00 90.00A90 90 0 0 1 -0.00 -90.00" {
		t.Errorf("full circle = %q", got)
	}
	if got := arcsPath([][2]uint64{{0, 3 << 30}}); !strings.Contains(got, "A90 90 0 1 1") {
		t.Errorf("three quarters = %q, want the large-arc flag", got)
	}
	if color(0) == color(1) || color(12) == color(13) || !strings.HasPrefix(color(40), "#") || len(color(40)) != 7 {
		t.Errorf("colours %s %s %s %s %s", color(0), color(1), color(12), color(13), color(40))
	}
}
