package transport

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/golang/groupcache"
	"github.com/golang/groupcache/groupcachepb"

	"github.com/ringcache/ringcache/cache"
)

var benchSizes = []int{1 << 10, 64 << 10}

// benchOwner returns a two-node cluster whose second node owns key and holds
// its value (of size bytes) in its main cache.
func benchOwner(b *testing.B, size int) (nodes []*testNode, key string) {
	nodes, _ = newCluster(b, 2, clusterOpts{
		origin: func(ctx context.Context, node, key string) (cache.Value, error) {
			return cache.Value{Data: []byte(strings.Repeat("x", size))}, nil
		},
	})
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("bench-", i); nodes[0].pool.Owner(k) == nodes[1].url {
			key = k
		}
	}
	if _, err := nodes[1].group.Get(b.Context(), key); err != nil {
		b.Fatal(err)
	}
	return nodes, key
}

// BenchmarkPeerFetch measures one peer fetch over loopback: the requester's
// client, the owner's peer handler serving from its main cache, and the
// response decoded. parallel=true runs 32 callers per CPU. client=groupcache is groupcache's own HTTPPool client
// (http.DefaultTransport, 2 idle connections per host) against the same
// ringcache owner.
// fetches runs fetch for the benchmark: b.N times in a row, or from 32
// goroutines per CPU if parallel (more concurrent fetches than groupcache's
// 2 idle connections per host). A failure in a parallel worker is reported
// with Error: Fatal may only be called from the benchmark's own goroutine.
func fetches(b *testing.B, size int, parallel bool, fetch func() error) {
	b.ReportAllocs()
	b.SetBytes(int64(size))
	if parallel {
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := fetch(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		return
	}
	for b.Loop() {
		if err := fetch(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPeerFetch(b *testing.B) {
	for _, size := range benchSizes {
		for _, parallel := range []bool{false, true} {
			name := fmt.Sprintf("client=ringcache/size=%dKiB/parallel=%v", size>>10, parallel)
			b.Run(name, func(b *testing.B) {
				nodes, key := benchOwner(b, size)
				pe, ok := nodes[0].pool.PickPeer(key)
				if !ok {
					b.Fatal("no peer owns the key")
				}
				ctx := b.Context()
				fetches(b, size, parallel, func() error {
					v, err := pe.Fetch(ctx, testGroup, key)
					if err != nil || len(v.Data) != size {
						return fmt.Errorf("Fetch: %d bytes, %v", len(v.Data), err)
					}
					return nil
				})
			})
			name = fmt.Sprintf("client=groupcache/size=%dKiB/parallel=%v", size>>10, parallel)
			b.Run(name, func(b *testing.B) {
				nodes, key := benchOwner(b, size)
				getter := groupcacheClient(nodes[1].url)
				b.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
				ctx := b.Context()
				fetches(b, size, parallel, func() error {
					req := &groupcachepb.GetRequest{Group: new(testGroup), Key: &key}
					var res groupcachepb.GetResponse
					if err := getter.Get(ctx, req, &res); err != nil || len(res.Value) != size {
						return fmt.Errorf("Get: %d bytes, %v", len(res.Value), err)
					}
					return nil
				})
			})
		}
	}
}

// groupcache's HTTPPool can be made once per process; the benchmark points
// its ring at one owner at a time.
var (
	gcPoolOnce sync.Once
	gcPool     *groupcache.HTTPPool
)

func groupcacheClient(owner string) groupcache.ProtoGetter {
	gcPoolOnce.Do(func() {
		gcPool = groupcache.NewHTTPPoolOpts("http://groupcache-bench.invalid", nil)
	})
	gcPool.Set(owner)
	getter, ok := gcPool.PickPeer("any")
	if !ok {
		panic("groupcache picked itself")
	}
	return getter
}

// BenchmarkPublicGetHit measures the public handler serving a value from the
// main cache, without the network: what a GET costs the node besides the
// socket (path routing, the ETag, headers, the copy into the response).
func BenchmarkPublicGetHit(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("size=%dKiB", size>>10), func(b *testing.B) {
			node := cache.New(cache.Config{})
			value := []byte(strings.Repeat("x", size))
			g, err := node.NewGroup(cache.GroupConfig{Name: testGroup, MaxBytes: 64 << 20,
				Getter: cache.GetterFunc(func(context.Context, string) (cache.Value, error) {
					return cache.Value{Data: value}, nil
				})})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := g.Get(b.Context(), "k"); err != nil {
				b.Fatal(err)
			}
			h, err := NewHandler(node, HandlerConfig{})
			if err != nil {
				b.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, PublicPrefix+testGroup+"/k", nil)
			w := &discardWriter{header: http.Header{}}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				clear(w.header)
				h.ServeHTTP(w, req)
				if w.code != http.StatusOK || w.n != size {
					b.Fatalf("status %d, %d bytes", w.code, w.n)
				}
				w.n = 0
			}
		})
	}
}

// discardWriter is an http.ResponseWriter that keeps only the status and the
// body's length, so that a benchmark measures the handler, not a recorder.
type discardWriter struct {
	header http.Header
	code   int
	n      int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }
