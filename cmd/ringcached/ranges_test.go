package main

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ringcache/ringcache/transport/origin"
)

// TestPlacementRanges runs four nodes with -placement ranges through a real
// etcd: /debug/ring shows the same ring on every node, 16 arcs per member
// tiling the hash space with shares within 1.10 of the mean, keys load once
// and read the same everywhere; after a graceful stop only the stopped
// node's arcs change hands.
func TestPlacementRanges(t *testing.T) {
	t.Parallel()
	c, err := startDev(t.Context(), devConfig{Nodes: 4, DemoSize: 64, LogLevel: "warn", Placement: placementRanges}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(10 * time.Second) })
	nodes := c.urls()

	rings := make([]ringInfo, len(nodes))
	for i, base := range nodes {
		getJSON(t, base+"/debug/ring?key=k0", &rings[i])
	}
	for i, r := range rings {
		if r.Placement != placementRanges || r.Version != rings[0].Version || r.Owner != rings[0].Owner {
			t.Fatalf("%s: ring %s/%s owner %s; %s has %s/%s owner %s", nodes[i], r.Placement, r.Version, r.Owner, nodes[0], rings[0].Placement, rings[0].Version, rings[0].Owner)
		}
	}
	r := rings[0]
	var covered uint64
	var most float64
	for _, m := range r.Members {
		if len(r.Arcs[m]) != 16 {
			t.Errorf("%s: %d arcs, want 16", m, len(r.Arcs[m]))
		}
		var own uint64
		for _, a := range r.Arcs[m] {
			own += a.Size
		}
		if got := float64(own) / (1 << 32); got != r.Shares[m] {
			t.Errorf("%s: arcs add up to %v, share %v", m, got, r.Shares[m])
		}
		covered += own
		most = max(most, r.Shares[m])
	}
	if covered != 1<<32 {
		t.Errorf("arcs cover %d points, want 2^32", covered)
	}
	if mm := most * float64(len(r.Members)); mm > 1.10 {
		t.Errorf("4 nodes: max/mean %.4f > 1.10", mm)
	}

	for k := range 20 {
		key := fmt.Sprintf("k%d", k)
		want := string(origin.DemoValue("demo", key, 64))
		for _, base := range nodes {
			if status, body := get(t, base+"/cache/demo/"+key); status != 200 || body != want {
				t.Fatalf("%s: %s = %d %q, want %q", base, key, status, body, want)
			}
		}
	}
	for k, n := range originLoads(t, nodes) {
		if n != 1 {
			t.Errorf("%s loaded %d times, want once", k, n)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	gone := c.nodes[3]
	gone.stop(ctx)
	if err := c.nodes[0].awaitMembers(ctx, func(m int) bool { return m == 3 }, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var after ringInfo
	getJSON(t, nodes[0]+"/debug/ring", &after)
	if _, ok := after.Arcs[gone.self]; ok || len(after.Members) != 3 {
		t.Fatalf("after the stop: members %v, arcs of the stopped node %v", after.Members, after.Arcs[gone.self])
	}
	for _, m := range after.Members {
		if after.Arcs[m][0].Start != r.Arcs[m][0].Start || len(after.Arcs[m]) != 16 {
			t.Errorf("%s: arcs changed on another node's leave", m)
		}
	}
}
