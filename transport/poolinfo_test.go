package transport

import (
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/consistenthash"
)

// TestPoolInfoVersions checks what a node learns of its peers' rings: from
// a fetch (both ends), from a probe (which touches no group and no metric),
// and that a disagreement and a departed member show.
func TestPoolInfoVersions(t *testing.T) {
	t.Parallel()
	var peerCalls atomic.Int64
	nodes, _ := newCluster(t, 3, clusterOpts{pool: func(i int, c *Config) {
		c.Secrets = [][]byte{[]byte("0123456789abcdef")}
		c.OnPeerRequest = func(string, string, time.Duration, error) { peerCalls.Add(1) }
	}})
	a := nodes[0]
	info := a.pool.Info()
	if info.Self != a.url || len(info.Members) != 3 || len(info.Arcs) < 3 {
		t.Fatalf("Info = %+v", info)
	}
	total := 0.0
	for _, m := range info.Members {
		total += m.Share
		if m.Weight != 1 || m.Suspected || (m.URL == a.url) != m.Self {
			t.Errorf("member %+v", m)
		}
		if !m.Self && !m.SeenAt.IsZero() {
			t.Errorf("%s heard from before any request", m.URL)
		}
	}
	if math.Abs(total-1) > 1e-9 {
		t.Errorf("shares sum to %v", total)
	}
	if agree, differ, unknown := info.Agreement(time.Now(), time.Minute); agree != 1 || differ != 0 || unknown != 2 {
		t.Errorf("before any traffic: agree %d differ %d unknown %d, want 1 0 2", agree, differ, unknown)
	}

	// a fetches a key b owns: each end hears the other's version.
	var key string
	for i := 0; ; i++ {
		key = "k" + strconv.Itoa(i)
		if a.pool.Owner(key) == nodes[1].url {
			break
		}
	}
	if err := get(t, testClient(t), a, key); err != nil {
		t.Fatal(err)
	}
	if owner, h, v := a.pool.Locate(key); owner != nodes[1].url || v != info.Version ||
		!slices.ContainsFunc(info.Arcs, func(arc consistenthash.Arc) bool { return arc.Owner == owner && arc.Contains(h) }) {
		t.Errorf("Locate(%q) = %s %d %x", key, owner, h, v)
	}
	seen := func(from, of *testNode) (uint64, bool) {
		for _, m := range from.pool.Info().Members {
			if m.URL == of.url {
				return m.SeenVersion, !m.SeenAt.IsZero()
			}
		}
		t.Fatalf("%s is not a member at %s", of.url, from.url)
		return 0, false
	}
	if v, ok := seen(a, nodes[1]); !ok || v != info.Version {
		t.Errorf("a heard %x (%v) from b, want %x", v, ok, info.Version)
	}
	if v, ok := seen(nodes[1], a); !ok || v != info.Version {
		t.Errorf("b heard %x (%v) from a, want %x", v, ok, info.Version)
	}
	if _, ok := seen(a, nodes[2]); ok {
		t.Error("a heard from c, which it never talked to")
	}

	// A probe reaches only c (b was heard from just now) and costs c nothing.
	callsBefore := peerCalls.Load()
	a.pool.ProbeVersions(t.Context(), time.Hour)
	if v, ok := seen(a, nodes[2]); !ok || v != info.Version {
		t.Errorf("after a probe, a heard %x (%v) from c", v, ok)
	}
	if _, ok := seen(nodes[2], a); !ok {
		t.Error("c did not hear a's version from the probe")
	}
	if s := nodes[2].group.Stats(); s.Gets != 0 || peerCalls.Load() != callsBefore {
		t.Errorf("the probe touched a group (%d gets) or a metric (%d calls)", s.Gets, peerCalls.Load()-callsBefore)
	}
	if agree, differ, unknown := a.pool.Info().Agreement(time.Now(), time.Minute); agree != 3 || differ != 0 || unknown != 0 {
		t.Errorf("agree %d differ %d unknown %d, want 3 0 0", agree, differ, unknown)
	}

	// c moves to another ring; a's next probe (fresh 0: probe everyone)
	// sees it.
	if err := nodes[2].pool.Set(a.url, nodes[1].url, nodes[2].url, "http://127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	a.pool.ProbeVersions(t.Context(), 0)
	if v, _ := seen(a, nodes[2]); v != nodes[2].pool.Version() || v == info.Version {
		t.Errorf("a heard %x from c, want c's new version %x", v, nodes[2].pool.Version())
	}
	if agree, differ, _ := a.pool.Info().Agreement(time.Now(), time.Minute); agree != 2 || differ != 1 {
		t.Errorf("agree %d differ %d, want 2 1", agree, differ)
	}

	// c leaves a's ring: its entry goes.
	if err := a.pool.Set(a.url, nodes[1].url); err != nil {
		t.Fatal(err)
	}
	info = a.pool.Info()
	if _, ok := a.pool.versions.m.Load(nodes[2].url); ok {
		t.Error("the version of a departed member is still kept")
	}
	// What b reported was about a's old ring: it no longer counts, and a
	// probe (even with a fresh report in hand) asks b again.
	if agree, differ, unknown := info.Agreement(time.Now(), time.Minute); agree != 1 || differ != 0 || unknown != 1 {
		t.Errorf("after a's ring changed: agree %d differ %d unknown %d, want 1 0 1", agree, differ, unknown)
	}
	a.pool.ProbeVersions(t.Context(), time.Hour)
	if agree, differ, unknown := a.pool.Info().Agreement(time.Now(), time.Minute); agree != 1 || differ != 1 || unknown != 0 {
		t.Errorf("after a probe: agree %d differ %d unknown %d, want 1 1 0 (b still has three members)", agree, differ, unknown)
	}
}

// TestPoolVersionsOnlyMembers checks that a peer request claiming a name
// that is not a member records nothing: without a secret anyone can claim
// any name, and the map must stay bounded.
func TestPoolVersionsOnlyMembers(t *testing.T) {
	t.Parallel()
	nodes, _ := newCluster(t, 2, clusterOpts{})
	a := nodes[0]
	c := testClient(t)
	for i := range 20 {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, a.url+DefaultBasePath+"g/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(hdrPeer, "http://stranger-"+strconv.Itoa(i))
		req.Header.Set(hdrRingVersion, "abc")
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	// Serving may make a talk to b, a member, whose version it may keep.
	a.pool.versions.m.Range(func(k, _ any) bool {
		if k.(string) != nodes[1].url {
			t.Errorf("a version recorded from %s, not a member", k)
		}
		return true
	})
}

// TestPoolSuspected checks that a peer that cannot be dialled is
// suspected, in Suspected and Info, and that probes skip it.
func TestPoolSuspected(t *testing.T) {
	t.Parallel()
	nodes, _ := newCluster(t, 2, clusterOpts{pool: func(i int, c *Config) {
		// Long enough that the circuit cannot close during the test.
		c.PeerTimeout, c.DialTimeout = time.Hour, time.Hour
	}})
	a, b := nodes[0], nodes[1]
	if got := a.pool.Suspected(); len(got) != 0 {
		t.Fatalf("Suspected = %v before any failure", got)
	}
	b.srv.Close()
	var key string
	for i := 0; ; i++ {
		key = "k" + strconv.Itoa(i)
		if a.pool.Owner(key) == b.url {
			break
		}
	}
	if err := get(t, testClient(t), a, key); err != nil {
		t.Fatal(err) // a falls back to its own load
	}
	if got := a.pool.Suspected(); !slices.Equal(got, []string{b.url}) {
		t.Fatalf("Suspected = %v, want [%s]", got, b.url)
	}
	for _, m := range a.pool.Info().Members {
		if m.Suspected != (m.URL == b.url) {
			t.Errorf("member %+v", m)
		}
	}
	a.pool.ProbeVersions(t.Context(), 0) // returns at once: b is skipped, not dialled for an hour
	if _, ok := a.pool.versions.m.Load(b.url); ok {
		t.Error("a suspected peer was probed")
	}
}

// TestProbeVersionsOneAtATime checks that a probe while another is in
// flight returns at once instead of sending a second request: page views
// cannot pile requests onto a peer that accepts and never answers.
func TestProbeVersionsOneAtATime(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 8)
	release := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(silent.Close)
	p, err := NewPool(Config{Self: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := p.Set(silent.URL); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.ProbeVersions(t.Context(), 0)
	}()
	<-arrived
	p.ProbeVersions(t.Context(), 0) // the first is in flight: nothing to do
	select {
	case <-done:
		t.Fatal("the first probe ended before its peer answered")
	default:
	}
	close(release)
	<-done
	if n := len(arrived); n != 0 {
		t.Errorf("%d more probes reached the peer, want 0", n)
	}
}

// BenchmarkNoteVersion measures what recording a peer's ring version adds
// to every peer request and response, from many goroutines at once as a
// loaded node does; compare it with BenchmarkPeerFetch in the same run.
func BenchmarkNoteVersion(b *testing.B) {
	p, err := NewPool(Config{Self: "http://10.0.0.1:8080"})
	if err != nil {
		b.Fatal(err)
	}
	peers := []string{"http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"}
	if err := p.Set(peers...); err != nil {
		b.Fatal(err)
	}
	st := p.state.Load()
	// The clock read alone, for scale: noteVersion reads it once.
	b.Run("op=clock", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = p.now()
			}
		})
	})
	// A map lookup, for scale: noteVersion does one before anything else.
	b.Run("op=lookup", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = st.peers[peers[1]]
			}
		})
	})
	b.Run("op=note", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p.noteVersion(st, peers[1], st.versionHeader[0])
			}
		})
	})
}
