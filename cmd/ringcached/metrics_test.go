package main

import (
	"testing"
	"time"
)

// TestPeerSeriesForgotten checks that the per-peer series of a peer that
// left the ring are deleted at the membership change: peer URLs come from
// the membership, and with containers that get a new name on every restart
// they would otherwise pile up for the life of the process.
func TestPeerSeriesForgotten(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo}}
	n, _ := startTestNode(t, cfg)
	base := "http://" + n.addrs[0].String()
	const a, b = "http://10.0.0.1:8080", "http://10.0.0.2:8080"

	setter := n.tn // the membership feeds the transport.Node
	if err := setter.Set(a, b); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{a, b} {
		n.metrics.observePeer(p, "get", time.Millisecond, nil)
	}
	mfs := scrape(t, base)
	for _, p := range []string{a, b} {
		if got := value(t, mfs, "ringcache_peer_requests_total", "peer", p); got != 1 {
			t.Fatalf("before the change: ringcache_peer_requests_total{peer=%q} = %v, want 1", p, got)
		}
	}

	if err := setter.Set(a); err != nil { // b leaves
		t.Fatal(err)
	}
	mfs = scrape(t, base)
	if got := value(t, mfs, "ringcache_peer_requests_total", "peer", a); got != 1 {
		t.Errorf("ringcache_peer_requests_total{peer=%q} = %v, want 1: a member's series stays", a, got)
	}
	for _, name := range []string{"ringcache_peer_requests_total", "ringcache_peer_request_duration_seconds"} {
		for _, m := range mfs[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "peer" && l.GetValue() == b {
					t.Errorf("%s still has a series for %s, which left the ring", name, b)
				}
			}
		}
	}
}
