package peers

import (
	"slices"
	"testing"
	"time"
)

// TestTenure: a registered node holds its tenure under its key's create
// revision. Cut off from etcd while it runs, it keeps it (it cannot tell an
// etcd outage, when nobody can change the ring, from a cut of its own); a
// process that was stalled (paused) past its lease loses it until etcd
// answers. Back in contact after the others dropped it (its key was
// deleted), it registers again under a new term, and what it owned before
// is not served.
func TestTenure(t *testing.T) {
	t.Parallel()
	te := startEtcd(t)
	px := newProxy(t, te.clientURL.Host)
	tweak := func(c *Config) { c.TTL = 3 * time.Second; c.HoldDown = time.Second }
	a := startNode(t, te.endpoints(), "a", tweak)
	c := startNode(t, px.endpoints(), "c", tweak)
	converge(t, urls("a", "c"), 10*time.Second, a, c)

	term, ok := c.r.Tenure()
	if !ok || term == 0 {
		t.Fatalf("Tenure() = %d, %v; want a term, true", term, ok)
	}

	px.cut()
	waitState(t, c.r, "lease lost", 10*time.Second, func(s State) bool { return !s.Registered })
	if got, ok := c.r.Tenure(); !ok || got != term {
		t.Fatalf("cut off, running: Tenure() = %d, %v; want %d, true", got, ok, term)
	}
	// As if the process had not run for two seconds (docker pause).
	c.r.tenure.tick.Store(int64(time.Since(c.r.tenure.born) - 2*time.Second))
	if _, ok := c.r.Tenure(); ok {
		t.Fatal("stalled past its lease: Tenure() holds")
	}
	deadline := time.Now().Add(20 * time.Second)
	for !slices.Equal(a.r.State().Peers, urls("a")) {
		if time.Now().After(deadline) {
			t.Fatalf("a still has peers %v", a.r.State().Peers)
		}
		time.Sleep(10 * time.Millisecond)
	}

	px.restore()
	converge(t, urls("a", "c"), 15*time.Second, a, c)
	waitState(t, c.r, "registered", 10*time.Second, func(s State) bool { return s.Registered })
	term2, ok := c.r.Tenure()
	if !ok || term2 == term {
		t.Fatalf("Tenure() after registering again = %d, %v; want a new term (was %d), true", term2, ok, term)
	}
}
