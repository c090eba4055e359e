package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ringcache/ringcache/transport/origin"
)

// BenchmarkServeHit measures a GET of a cached 1 KiB value through a whole
// single node (mux, public handler, group, response), over loopback with
// keep-alive, next to a bare net/http handler writing the same bytes in the
// same run: the ratio is the daemon's cost per hit.
func BenchmarkServeHit(b *testing.B) {
	value := origin.DemoValue("demo", "key", 1024)
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(value) }))
	defer bare.Close()

	cfg := DefaultConfig()
	cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo, DemoSize: 1024}}
	n, _ := startTestNode(b, cfg)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	for _, bm := range []struct{ name, url string }{
		{"bare", bare.URL + "/cache/demo/key"},
		{"node", "http://" + n.addrs[0].String() + "/cache/demo/key"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Get(bm.url)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}

// BenchmarkOriginTimer measures what the origin latency histogram adds to a
// load.
func BenchmarkOriginTimer(b *testing.B) {
	d, err := origin.NewDemo(origin.DemoConfig{Group: "demo", MaxKeys: 1})
	if err != nil {
		b.Fatal(err)
	}
	timed := newMetrics(nil).timedGetter("demo", d)
	for _, bm := range []struct {
		name string
		get  func(context.Context, string) error
	}{
		{"direct", func(ctx context.Context, k string) error { _, err := d.Get(ctx, k); return err }},
		{"timed", func(ctx context.Context, k string) error { _, err := timed.Get(ctx, k); return err }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for b.Loop() {
				if err := bm.get(ctx, "key"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScrape measures a /metrics scrape of a node with 10 groups, the
// cost of reading every group's Stats at scrape time.
func BenchmarkScrape(b *testing.B) {
	cfg := DefaultConfig()
	for i := range 10 {
		cfg.Groups = append(cfg.Groups, GroupSpec{Name: fmt.Sprintf("g%d", i), Origin: originDemo})
	}
	n, _ := startTestNode(b, cfg)
	h := n.metrics.handler()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}

// BenchmarkOneAddress is TestOneAddressIsNeverRefused as a benchmark: one
// client address with 256 connections reads b.N distinct keys through the
// three nodes of a cluster at the daemon's default settings, cold, then
// the same keys warm. It reports refused answers (anything but a 200) and
// origin loads per key; both must be 0 and 1.
func BenchmarkOneAddress(b *testing.B) {
	const conns = 256
	o := newCountingOrigin(b, 0)
	nodes := startDefaultCluster(b, 3, o, "")
	c := clientFrom("127.0.0.1", conns)
	var st statuses
	keys := b.N
	b.ResetTimer()
	for range 2 { // cold, then warm
		runWorkers(conns, keys, func(i int) { st.get(c, nodes[i%len(nodes)], fmt.Sprintf("k%d", i)) })
	}
	b.StopTimer()
	loads, _, _ := o.stats()
	b.ReportMetric(float64(2*keys-st.counts[http.StatusOK]), "refused")
	b.ReportMetric(float64(loads)/float64(keys), "loads/key")
	if st.counts[http.StatusOK] != 2*keys || st.wrong != 0 {
		b.Errorf("%d keys cold then warm: %v", keys, &st)
	}
}
