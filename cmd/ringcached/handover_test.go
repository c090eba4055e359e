package main

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ringcache/ringcache/transport/origin"
)

// TestGracefulStopHandsKeysOver: three nodes with a real etcd, warm; one
// stops gracefully. The keys that move to the survivors are handed over
// (pushed before the node left), so reading every key again through the
// survivors costs the origin nothing; with both placements.
func TestGracefulStopHandsKeysOver(t *testing.T) {
	t.Parallel()
	for _, placement := range []string{placementHashed, placementRanges} {
		t.Run(placement, func(t *testing.T) {
			t.Parallel()
			c, err := startDev(t.Context(), devConfig{Nodes: 3, DemoSize: 64, LogLevel: "warn", Placement: placement}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.stop(10 * time.Second) })
			nodes := c.urls()
			const keys = 300
			read := func(through []string) {
				for k := range keys {
					key := fmt.Sprintf("k%d", k)
					want := string(origin.DemoValue("demo", key, 64))
					base := through[k%len(through)]
					if status, body := get(t, base+"/cache/demo/"+key); status != 200 || body != want {
						t.Fatalf("%s: %s = %d %q, want %q", base, key, status, body, want)
					}
				}
			}
			// The survivors' origin loads: the stopped node's end with it.
			total := func() (n int64) {
				for _, c := range originLoads(t, nodes[:2]) {
					n += c
				}
				return n
			}
			read(nodes)
			warm := total()
			gone := c.nodes[2]
			owned := int(gone.groups()[0].Stats().MainItems)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			gone.stop(ctx)
			if err := c.nodes[0].awaitMembers(ctx, func(m int) bool { return m == 2 }, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			read(nodes[:2])
			var taken int64
			for _, n := range c.nodes[:2] {
				taken += n.groups()[0].Stats().HandoffsTaken
			}
			extra := total() - warm
			t.Logf("%s: %d keys moved from the stopped node, %d taken over, %d origin loads after the stop", placement, owned, taken, extra)
			if owned == 0 || extra > int64(owned/20) || taken < int64(owned-owned/20) {
				t.Fatalf("%d keys moved, %d taken over, %d origin loads; want at most 0.05 loads per moved key", owned, taken, extra)
			}
		})
	}
}
