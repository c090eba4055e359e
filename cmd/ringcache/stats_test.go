package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func statsJSON(t *testing.T, urls ...string) statsResult {
	t.Helper()
	r := cli(t, "", urlEnv(urls...), "stats", "-o", "json", "-group", "demo")
	if r.err != nil {
		t.Fatal(r.err)
	}
	var got statsResult
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("stats -o json: %v\n%s", err, r.stdout)
	}
	return got
}

func TestStatsCountsGets(t *testing.T) {
	urls := devCluster(t)
	before := statsJSON(t, urls...)
	// 30 new keys, each read twice through the first node: 30 origin
	// loads cluster-wide, and the second reads are hits.
	const n = 30
	prefix := freshPrefix("stats-")
	for round := range 2 {
		for i := range n {
			if r := cli(t, "", urlEnv(urls[0]), "get", fmt.Sprint(prefix, i)); r.err != nil {
				t.Fatalf("round %d: %v", round, r.err)
			}
		}
	}
	after := statsJSON(t, urls...)
	if len(after.Nodes) != 3 || len(after.Total) != 1 || after.Total[0].Group != "demo" {
		t.Fatalf("stats = %+v", after)
	}
	d := after.Total[0].sub(before.Total[0])
	// Other tests may run at the same time only if they are parallel; the
	// cluster tests are not, so the counts are exact.
	// A peer fetch that failed under load is followed by a local load.
	if d.ClientGets() != 2*n || d.LocalLoads != n+d.PeerErrors {
		t.Errorf("after %d gets of %d new keys: client gets +%d, origin loads +%d, peer errors +%d", 2*n, n, d.ClientGets(), d.LocalLoads, d.PeerErrors)
	}
	first := after.Nodes[0].Groups[0].sub(before.Nodes[0].Groups[0])
	if first.Gets-first.PeerGets != 2*n || first.MainHits+first.HotHits+first.LocalLoads+first.PeerLoads+first.DedupLoads < 2*n {
		t.Errorf("first node's delta %+v", first)
	}
	for _, nd := range after.Nodes {
		g := nd.Groups[0]
		if nd.Members != 3 || g.MaxBytes != 64<<20 || g.MainBytes < 0 {
			t.Errorf("node %s: members %d, %+v", nd.URL, nd.Members, g)
		}
	}
}

func TestStatsText(t *testing.T) {
	urls := devCluster(t)
	closed := closedURL(t)
	r := cli(t, "", urlEnv(append(urls, closed)...), "stats")
	if r.code() != exitFailure || !strings.Contains(r.err.Error(), closed) {
		t.Errorf("stats with a node down: exit %d, %v", r.code(), r.err)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 6 { // header, 3 nodes, the one down, all nodes
		t.Fatalf("stats printed %d lines, want 6:\n%s", len(lines), r.stdout)
	}
	for _, want := range []string{"NODE", "HIT MAIN", "BYTES / BUDGET", "EVICTIONS", urls[0], "64.0MiB", closed + "  ", "(no answer)", "all nodes", "192.0MiB"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stats lacks %q:\n%s", want, r.stdout)
		}
	}
	r = cli(t, "", urlEnv(urls...), "stats", "-group", "nope")
	if r.code() != exitFailure || !strings.Contains(r.err.Error(), `"nope"`) {
		t.Errorf("stats -group nope: exit %d, %v", r.code(), r.err)
	}
}

func TestBytesIEC(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1.0KiB", 1536: "1.5KiB", 64 << 20: "64.0MiB", 3 << 30: "3.0GiB"} {
		if got := bytesIEC(n); got != want {
			t.Errorf("bytesIEC(%d) = %q, want %q", n, got, want)
		}
	}
}
