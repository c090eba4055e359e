package transport

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// BenchmarkNodeGetHit compares a hit served by the bare public Handler with
// the same hit through a Node (its routing and the request count that
// Shutdown waits on), in one run, in parallel: the Node's share of a
// request's cost is the ratio of the two.
func BenchmarkNodeGetHit(b *testing.B) {
	n, err := NewNode(NodeConfig{Pool: Config{Self: "http://127.0.0.1:1"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Shutdown(context.Background()) })
	value := make([]byte, 1<<10)
	holding(b, n.NewGroup, "k", cache.Value{Data: value})
	bare, err := api.NewHandler(n.Cache(), api.HandlerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"handler", bare}, {"node", n}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(value)))
			b.RunParallel(func(pb *testing.PB) {
				req := httptest.NewRequest(http.MethodGet, api.PublicPrefix+testGroup+"/k", nil)
				w := &discardWriter{header: http.Header{}}
				for pb.Next() {
					clear(w.header)
					w.n = 0
					c.h.ServeHTTP(w, req)
					if w.code != http.StatusOK || w.n != len(value) {
						b.Fatalf("status %d, %d bytes", w.code, w.n)
					}
				}
			})
		})
	}
}
