package transport

import (
	"math"
	"net/http"
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
		c.Secret = []byte("0123456789abcdef")
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
	n := 0
	a.pool.versions.m.Range(func(k, _ any) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d versions recorded from strangers", n)
	}
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
