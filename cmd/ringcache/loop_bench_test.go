package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/transport/origin"
)

// BenchmarkRequestLoop compares one bench worker request (reused request,
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
	u, _ := url.Parse(srv.URL)

	for _, check := range []checkMode{checkDemo, checkNone} {
		name := map[checkMode]string{checkDemo: "worker/check=demo", checkNone: "worker/check=none"}[check]
		b.Run(name, func(b *testing.B) {
			spec := &loadSpec{
				client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, ResponseHeaderTimeout: 5 * time.Second}},
				nodes:  []url.URL{*u}, prefix: []string{"/cache/demo/bench-"},
				keys: newKeyPicker(1000, 0), group: "demo", kprefix: "bench-",
				check: check, demo: true, demoLen: &atomic.Int64{}, stop: &atomic.Bool{},
			}
			spec.demoLen.Store(-1)
			defer spec.client.CloseIdleConnections()
			w := newWorker(spec, 0, 1, &padded{}, &padded{})
			b.ReportAllocs()
			for b.Loop() {
				if !w.one(context.Background(), w.spec.keys.pick(w.rng)) {
					b.Fatalf("request failed: %+v", w.res.status)
				}
			}
		})
	}
	b.Run("http.Get", func(b *testing.B) {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		defer client.CloseIdleConnections()
		keys := newKeyPicker(1000, 0)
		w := newWorker(&loadSpec{nodes: []url.URL{*u}, keys: keys, stop: &atomic.Bool{}}, 0, 1, &padded{}, &padded{})
		b.ReportAllocs()
		for b.Loop() {
			resp, err := client.Get(srv.URL + "/cache/demo/bench-" + strconv.Itoa(keys.pick(w.rng)))
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
