package loadgen

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringcache/ringcache/transport/origin"
)

// BenchmarkRequestLoop compares one worker's requests (reused request,
// read buffer and path scratch; the demo check included) with the plain
// http.Get and io.ReadAll loop a quick load script would write, over the
// same loopback server, in one run. The server runs in this process, so
// allocs/op include its own (the same in both).
func BenchmarkRequestLoop(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, "/cache/demo/")
		w.Write(origin.DemoValue("demo", key, 64))
	}))
	b.Cleanup(srv.Close)
	for _, check := range []string{"demo", "none"} {
		b.Run("worker/check="+check, func(b *testing.B) {
			cfg := Config{Client: NewClient(1, 1, 5*time.Second), Targets: URLs(srv.URL), Group: "demo", KeyPrefix: "bench-",
				Workers: 1, Source: Reads(NewPicker(1000, 0)), Requests: int64(b.N)}
			if check == "demo" {
				cfg.Check = DemoCheck("demo", "bench-", 0)
			}
			defer cfg.Client.CloseIdleConnections()
			b.ReportAllocs()
			b.ResetTimer()
			res, err := Do(context.Background(), cfg)
			if err != nil || res.Status[http.StatusOK] != int64(b.N) || res.Wrong > 0 {
				b.Fatalf("%v: %d of %d answered 200, %d wrong", err, res.Status[http.StatusOK], b.N, res.Wrong)
			}
		})
	}
	b.Run("http.Get", func(b *testing.B) {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		defer client.CloseIdleConnections()
		keys := NewPicker(1000, 0)
		r := newWorker(&Run{}, 0).rng
		b.ReportAllocs()
		for b.Loop() {
			resp, err := client.Get(srv.URL + "/cache/demo/bench-" + strconv.Itoa(keys.Pick(r)))
			if err != nil {
				b.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || len(body) != 64 {
				b.Fatal(err)
			}
		}
	})
}
