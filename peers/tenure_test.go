package peers

import (
	"slices"
	"testing"
	"time"
)

// TestTenure: a registered node holds its tenure under its lease's term. Cut
// off from etcd, it loses the tenure before the others drop it from their
// rings (so it cannot serve, as the owner, keys they may already write
// elsewhere); back in contact, it registers again under a new term.
func TestTenure(t *testing.T) {
	t.Parallel()
	te := startEtcd(t)
	px := newProxy(t, te.clientURL.Host)
	tweak := func(c *Config) { c.TTL = 3 * time.Second; c.HoldDown = time.Second }
	a := startNode(t, te.endpoints(), "a", tweak)
	c := startNode(t, px.endpoints(), "c", tweak)
	converge(t, urls("a", "c"), 10*time.Second, a, c)

	term, ok := c.r.Tenure()
	c.r.mu.Lock()
	lease := uint64(c.r.lease)
	c.r.mu.Unlock()
	if !ok || term == 0 || term != lease {
		t.Fatalf("Tenure() = %x, %v; want the lease %x, true", term, ok, lease)
	}

	cut := time.Now()
	px.cut()
	var lost time.Time
	deadline := time.Now().Add(15 * time.Second)
	for lost.IsZero() || !slices.Equal(a.r.State().Peers, urls("a")) {
		if time.Now().After(deadline) {
			t.Fatalf("after 15s: tenure lost at %v, a's peers %v", lost, a.r.State().Peers)
		}
		if _, ok := c.r.Tenure(); !ok && lost.IsZero() {
			lost = time.Now()
			if !slices.Contains(a.r.State().Peers, c.url) {
				t.Fatal("the others dropped c before its tenure ended")
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	dropped := time.Now()
	t.Logf("cut off: tenure lost after %v, dropped by the others after %v", lost.Sub(cut).Round(time.Millisecond), dropped.Sub(cut).Round(time.Millisecond))

	px.restore()
	converge(t, urls("a", "c"), 15*time.Second, a, c)
	waitState(t, c.r, "registered", 10*time.Second, func(s State) bool { return s.Registered })
	term2, ok := c.r.Tenure()
	if !ok || term2 == term {
		t.Fatalf("Tenure() after registering again = %x, %v; want a new term (was %x), true", term2, ok, term)
	}
}
