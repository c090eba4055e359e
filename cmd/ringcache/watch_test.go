package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestWatchPlainLines(t *testing.T) {
	urls := devCluster(t)
	r := cli(t, "", urlEnv(urls...), "watch", "-interval", "100ms", "-count", "3")
	if r.err != nil {
		t.Fatal(r.err)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	// A header, then per sample a line per node and the total.
	if len(lines) != 1+3*4 {
		t.Fatalf("watch printed %d lines, want 13:\n%s", len(lines), r.stdout)
	}
	if !strings.HasPrefix(lines[0], "TIME") || !strings.Contains(lines[0], "REQ/S") || strings.Count(r.stdout, "REQ/S") != 1 {
		t.Errorf("header: %q", lines[0])
	}
	for _, l := range lines[1:] {
		want := 9 // time, node, 7 figures
		if strings.Contains(l, "all nodes") {
			want = 10
		}
		if strings.Contains(l, "\x1b") || len(strings.Fields(l)) != want {
			t.Errorf("line %q: want %d plain fields", l, want)
		}
	}
	if strings.Count(r.stdout, "all nodes") != 3 {
		t.Errorf("want a total per sample:\n%s", r.stdout)
	}
}

func TestWatchRedrawsOnATerminal(t *testing.T) {
	urls := devCluster(t)
	r := cliTerm(t, true, "", urlEnv(urls...), "watch", "-interval", "100ms", "-count", "3")
	if r.err != nil {
		t.Fatal(r.err)
	}
	// A frame: title, blank line, header, 3 nodes, total = 7 lines; each
	// later frame first moves up over the previous one and clears it.
	if n := strings.Count(r.stdout, "\x1b[7A\x1b[J"); n != 2 {
		t.Errorf("%d redraws, want 2:\n%q", n, r.stdout)
	}
	if strings.HasPrefix(r.stdout, "\x1b") || strings.Count(r.stdout, "ringcache watch") != 3 {
		t.Errorf("frames:\n%q", r.stdout)
	}
}

func TestWatchJSONSeesLoad(t *testing.T) {
	urls := devCluster(t)
	var wg sync.WaitGroup
	var load result
	wg.Go(func() {
		load = cli(t, "", urlEnv(urls...), "bench", "-d", "1500ms", "-c", "4", "-q", "-key-prefix", "watch-")
	})
	r := cli(t, "", urlEnv(urls...), "watch", "-interval", "300ms", "-count", "4", "-o", "json")
	wg.Wait()
	if r.err != nil || load.err != nil {
		t.Fatalf("watch: %v; bench: %v", r.err, load.err)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 {
		t.Fatalf("watch -o json printed %d lines, want 4", len(lines))
	}
	var peak float64
	for _, l := range lines {
		var s watchSample
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		if len(s.Nodes) != 3 || s.Time.IsZero() {
			t.Fatalf("sample %+v", s)
		}
		var sum float64
		for _, n := range s.Nodes {
			if n.Error != "" || n.ReqPerS < 0 || n.HitRatio < 0 || n.HitRatio > 1 {
				t.Errorf("node row %+v", n)
			}
			sum += n.ReqPerS
		}
		if d := sum - s.Total.ReqPerS; d > 1e-6 || d < -1e-6 {
			t.Errorf("total %v != sum of nodes %v", s.Total.ReqPerS, sum)
		}
		peak = max(peak, s.Total.ReqPerS)
	}
	if peak < 50 {
		t.Errorf("watch saw at most %.1f req/s while bench ran", peak)
	}
}

func TestWatchCtrlC(t *testing.T) {
	urls := devCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	r := cliCtx(t, ctx, false, "", urlEnv(urls...), "watch", "-interval", "100ms")
	if r.err != nil {
		t.Fatalf("watch stopped by Ctrl-C: %v", r.err)
	}
	if n := strings.Count(r.stdout, "all nodes"); n < 1 || n > 10 {
		t.Errorf("%d samples in 1s at 100ms:\n%s", n, r.stdout)
	}
}

func TestWatchNodeDown(t *testing.T) {
	urls := devCluster(t)
	closed := closedURL(t)
	r := cli(t, "", urlEnv(urls[0], closed), "watch", "-interval", "100ms", "-count", "2")
	if r.err != nil {
		t.Fatalf("watch with one node down should keep going: %v", r.err)
	}
	if strings.Count(r.stdout, closed+"  "+closed+": unreachable: connection refused") != 2 {
		t.Errorf("want the down node in each sample:\n%s", r.stdout)
	}
}

func TestRates(t *testing.T) {
	t.Parallel()
	a := scraped{stats: groupStats{Gets: 100, PeerGets: 20, MainHits: 50, LocalLoads: 10}}
	b := a
	b.at = a.at.Add(2e9)
	b.stats = groupStats{Gets: 300, PeerGets: 60, MainHits: 150, HotHits: 10, LocalLoads: 30}
	r := rates("n", a, b)
	// 200 gets in 2s, 40 from peers: 80 client req/s, 20 peer/s; 110 hits.
	if r.ReqPerS != 80 || r.PeerPerS != 20 || r.HitRatio != 110.0/200 || r.LoadsPerS != 10 {
		t.Errorf("rates = %+v", r)
	}
	// A restarted node: its counters began again.
	c := b
	c.at = b.at.Add(1e9)
	c.stats = groupStats{Gets: 5}
	if r := rates("n", b, c); r.ReqPerS != 5 {
		t.Errorf("after a restart: %+v, want 5 req/s", r)
	}
}
