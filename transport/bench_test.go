package transport

import (
	"context"
	"fmt"
	"net/http"
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
				fetch := func() {
					v, err := pe.Fetch(ctx, testGroup, key)
					if err != nil || len(v.Data) != size {
						b.Fatalf("Fetch: %d bytes, %v", len(v.Data), err)
					}
				}
				b.ReportAllocs()
				b.SetBytes(int64(size))
				if parallel {
					// 32 callers per CPU: more concurrent fetches than
					// groupcache's 2 idle connections per host.
					b.SetParallelism(32)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							fetch()
						}
					})
					return
				}
				for b.Loop() {
					fetch()
				}
			})
			name = fmt.Sprintf("client=groupcache/size=%dKiB/parallel=%v", size>>10, parallel)
			b.Run(name, func(b *testing.B) {
				nodes, key := benchOwner(b, size)
				getter := groupcacheClient(nodes[1].url)
				b.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
				ctx := b.Context()
				fetch := func() {
					req := &groupcachepb.GetRequest{Group: new(testGroup), Key: &key}
					var res groupcachepb.GetResponse
					if err := getter.Get(ctx, req, &res); err != nil || len(res.Value) != size {
						b.Fatalf("Get: %d bytes, %v", len(res.Value), err)
					}
				}
				b.ReportAllocs()
				b.SetBytes(int64(size))
				if parallel {
					// 32 callers per CPU: more concurrent fetches than
					// groupcache's 2 idle connections per host.
					b.SetParallelism(32)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							fetch()
						}
					})
					return
				}
				for b.Loop() {
					fetch()
				}
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
