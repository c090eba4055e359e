package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/ringcache/ringcache/transport/origin"
)

var nodeLine = regexp.MustCompile(`(?m)^  node\d  (http://\S+)$`)

// TestDev runs "ringcached dev" as a developer would (on free ports), reads
// the node URLs from its banner, and checks the cluster through all three
// nodes: the same value from every node, one origin load per key, metrics
// that add up to the traffic, and a peer route closed to unsigned requests.
func TestDev(t *testing.T) {
	t.Parallel()
	out, stop, done := startRun(t, "dev", "-base-port", "0", "-demo-latency", "20ms", "-log-level", "warn")
	out.await(t, regexp.MustCompile(`Press Ctrl-C to stop`), done)
	// Each step is told as it comes up, even at -log-level warn.
	steps := regexp.MustCompile(`(?m)^dev: +[0-9.]+s  (starting an embedded etcd|etcd ready|node1 ready|node2 ready|node3 ready|every node sees all 3)`)
	if got := steps.FindAllStringSubmatch(out.String(), -1); len(got) != 6 {
		t.Errorf("%d of the 6 steps told:\n%s", len(got), out.String())
	}
	var nodes []string
	for _, m := range nodeLine.FindAllStringSubmatch(out.String(), -1) {
		nodes = append(nodes, m[1])
	}
	if len(nodes) != 3 {
		t.Fatalf("banner names %d nodes, want 3:\n%s", len(nodes), out.String())
	}

	// Every node has the same ring.
	var rings [3]ringInfo
	for i, base := range nodes {
		getJSON(t, base+"/debug/ring?key=k0", &rings[i])
		if len(rings[i].Members) != 3 || rings[i].Etcd == nil || !rings[i].Etcd.Connected || rings[i].Static {
			t.Fatalf("%s: /debug/ring = %+v", base, rings[i])
		}
	}
	for _, r := range rings[1:] {
		if r.Version != rings[0].Version || r.Owner != rings[0].Owner {
			t.Fatalf("rings differ: %+v vs %+v", r, rings[0])
		}
	}

	// Phase 1: K keys, each read through node 1, 2, 3 in turn.
	const K = 12
	for k := range K {
		key := fmt.Sprintf("k%d", k)
		want := string(origin.DemoValue("demo", key, 64))
		for _, base := range nodes {
			if status, body := get(t, base+"/cache/demo/"+key); status != 200 || body != want {
				t.Fatalf("%s: %s = %d %q, want %q", base, key, status, body, want)
			}
		}
	}
	loads := originLoads(t, nodes)
	for k := range K {
		if n := loads[fmt.Sprintf("k%d", k)]; n != 1 {
			t.Errorf("k%d loaded %d times, want once in the cluster", k, n)
		}
	}

	// The metrics add up to that traffic. Per key: three public Gets; the
	// two that reached a non-owner missed and fetched from the owner (two
	// peer requests, served by PeerView.Get: two more Gets at the owner); the
	// owner loaded once and hit its main cache twice. Nothing went hot:
	// a key becomes hot after several misses, not one.
	sum := func(name string, labels ...string) float64 {
		var s float64
		for _, base := range nodes {
			s += value(t, scrape(t, base), name, labels...)
		}
		return s
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"ringcache_gets_total", []string{"group", "demo"}, 5 * K},
		{"ringcache_peer_gets_total", []string{"group", "demo"}, 2 * K},
		{"ringcache_loads_total", []string{"group", "demo", "source", "local"}, K},
		{"ringcache_loads_total", []string{"group", "demo", "source", "peer"}, 2 * K},
		{"ringcache_loads_total", []string{"group", "demo", "source", "dedup"}, 0},
		{"ringcache_hits_total", []string{"group", "demo", "cache", "main"}, 2 * K},
		{"ringcache_hits_total", []string{"group", "demo", "cache", "hot"}, 0},
		{"ringcache_origin_duration_seconds", []string{"group", "demo", "outcome", "ok"}, K},
		{"ringcache_peer_requests_total", []string{"op", "get", "outcome", "ok"}, 2 * K},
		{"ringcache_peer_request_duration_seconds", []string{"op", "get"}, 2 * K},
		{"ringcache_errors_total", []string{"group", "demo"}, 0},
		{"ringcache_items", []string{"group", "demo", "cache", "main"}, K},
		{"ringcache_members", nil, 9},
		{"ringcache_ready", nil, 3},
		{"ringcache_etcd_connected", nil, 3},
		{"ringcache_ring_version_info", []string{"version", rings[0].Version}, 3},
	} {
		if got := sum(c.name, c.labels...); got != c.want {
			t.Errorf("sum over nodes of %s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	// Phase 2: concurrent readers of fresh keys on every node; each key
	// is still loaded once (single-flight on the owner, one fetch per node).
	var wg sync.WaitGroup
	for k := range 4 {
		for _, base := range nodes {
			for range 3 {
				wg.Go(func() {
					key := fmt.Sprintf("hot%d", k)
					resp, err := http.Get(base + "/cache/demo/" + key)
					if err != nil {
						t.Error(err)
						return
					}
					defer resp.Body.Close()
					body, _ := io.ReadAll(resp.Body)
					if string(body) != string(origin.DemoValue("demo", key, 64)) {
						t.Errorf("%s: %s = %q", base, key, body)
					}
				})
			}
		}
	}
	wg.Wait()
	loads = originLoads(t, nodes)
	for k := range 4 {
		if n := loads[fmt.Sprintf("hot%d", k)]; n != 1 {
			t.Errorf("hot%d loaded %d times under concurrency, want once", k, n)
		}
	}

	// An unsigned peer request is refused and loads nothing.
	for _, base := range nodes {
		if status, _ := get(t, base+"/_groupcache/demo/unsigned"); status != http.StatusUnauthorized {
			t.Errorf("%s: unsigned peer request = %d, want 401", base, status)
		}
	}
	if n, ok := originLoads(t, nodes)["unsigned"]; ok {
		t.Errorf("an unsigned peer request caused %d origin loads", n)
	}

	if err := stop(); err != nil {
		t.Errorf("dev returned %v after Ctrl-C", err)
	}
}

// originLoads adds up the demo origin's per-key loads over the nodes.
func originLoads(t *testing.T, nodes []string) map[string]int64 {
	t.Helper()
	total := map[string]int64{}
	for _, base := range nodes {
		var loads map[string]origin.DemoLoads
		getJSON(t, base+"/debug/origin", &loads)
		for k, n := range loads["demo"].Keys {
			total[k] += n
		}
	}
	return total
}

// TestLeaveRing checks that a node that stops gracefully leaves the ring at
// once: the other node drops it well before its lease (5s) could expire.
func TestLeaveRing(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	c, err := startDev(t.Context(), devConfig{Nodes: 2, DemoSize: 64, LogLevel: "info"}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(10 * time.Second) })
	first, second := c.nodes[0], c.nodes[1]

	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	second.stop(ctx)
	if err := first.awaitMembers(ctx, func(m int) bool { return m < 2 }, 3*time.Second); err != nil {
		t.Fatalf("after a graceful stop: %v", err)
	}
	t.Logf("the ring dropped the stopped node %v after its stop began", time.Since(start))
	if got := first.pool.Members(); len(got) != 1 || got[0] != first.self {
		t.Errorf("members = %v, want only %s", got, first.self)
	}
}
