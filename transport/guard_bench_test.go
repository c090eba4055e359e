package transport

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// BenchmarkPublicGuards measures what the daemon's guards add to a public
// GET hit of 1 KiB, next to the unguarded handler in the same run: "daemon"
// is a write token (reads open) and the default per-client limits (which
// a hit, answered by one lookup, does not reach); "read-token" also checks
// a bearer token on the read.
func BenchmarkPublicGuards(b *testing.B) {
	node := cache.New(cache.Config{})
	value := []byte(strings.Repeat("x", 1<<10))
	holding(b, node.NewGroup, "k", cache.Value{Data: value})
	writeOnly, err := api.NewAuth(api.AuthConfig{WriteTokens: []string{writeToken}})
	if err != nil {
		b.Fatal(err)
	}
	withReads, err := api.NewAuth(api.AuthConfig{WriteTokens: []string{writeToken}, ReadTokens: []string{readToken}})
	if err != nil {
		b.Fatal(err)
	}
	limits, err := api.NewClientLimiter(exampleClientLimits)
	if err != nil {
		b.Fatal(err)
	}
	for _, bm := range []struct {
		name string
		cfg  api.HandlerConfig
	}{
		{"open", api.HandlerConfig{}},
		{"daemon", api.HandlerConfig{Auth: writeOnly, Clients: limits}},
		{"read-token", api.HandlerConfig{Auth: withReads, Clients: limits}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			h, err := api.NewHandler(node, bm.cfg)
			if err != nil {
				b.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, api.PublicPrefix+testGroup+"/k", nil)
			req.Header.Set("Authorization", "Bearer "+readToken)
			w := &discardWriter{header: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.header)
				h.ServeHTTP(w, req)
				if w.code != http.StatusOK {
					b.Fatalf("status %d", w.code)
				}
			}
		})
	}
}

// BenchmarkClientLimiter measures admitting and ending one miss, from many
// goroutines and clients at once.
func BenchmarkClientLimiter(b *testing.B) {
	l, err := api.NewClientLimiter(api.ClientLimitConfig{MaxMisses: 1 << 20, MissRate: 1e9, MissBurst: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	addrs := []string{"10.0.0.1:1", "10.0.0.2:1", "[2001:db8::1]:1", "10.0.0.3:1"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			release, err := l.Acquire(addrs[i%len(addrs)])
			if err != nil {
				b.Fatal(err)
			}
			release()
			i++
		}
	})
}
