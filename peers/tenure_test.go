package peers

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringcache/ringcache/internal/poll"
)

// TestTenure: a registered node holds its tenure under its key's create
// revision. Cut off from etcd past its lease, it no longer holds it. Back in
// contact after the others dropped it (its key was deleted), it registers
// again under a new term, so what it owned before is not served.
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
	if st := c.r.State(); st.Term != term {
		t.Fatalf("State().Term = %d; want the term %d", st.Term, term)
	}

	px.cut()
	waitState(t, c.r, "lease lost", 10*time.Second, func(s State) bool { return !s.Registered })
	if got, held := c.r.Tenure(); held || got != term {
		t.Fatalf("cut off past its lease: Tenure() = %d, %v; want %d, false", got, held, term)
	}
	poll.Until(t, 20*time.Second, func() (bool, string) {
		peers := a.r.State().Peers
		return slices.Equal(peers, urls("a")), fmt.Sprintf("a still has peers %v", peers)
	})

	px.restore()
	converge(t, urls("a", "c"), 15*time.Second, a, c)
	waitState(t, c.r, "registered", 10*time.Second, func(s State) bool { return s.Registered })
	// Held again once a keepalive answers (on a loaded machine that can
	// trail the registration by more than the lease's first stretch).
	poll.Until(t, 10*time.Second, func() (bool, string) {
		term2, held := c.r.Tenure()
		if term2 == term {
			t.Fatalf("Tenure() after registering again = %d: the term did not change, though the key was deleted", term2)
		}
		if held {
			if st := c.r.State(); st.Term != term2 {
				t.Fatalf("State().Term = %d after registering again; want the new term %d", st.Term, term2)
			}
		}
		return held, fmt.Sprintf("Tenure() = %d, false after registering again", term2)
	})
}
