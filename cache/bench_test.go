package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang/groupcache"
	"github.com/ringcache/ringcache/cache/internal/store"
)

// gcGroups names groupcache groups uniquely: its registry is process-wide
// and panics on a second group of the same name, and a benchmark function
// runs several times.
var gcGroups atomic.Int64

func newGroupcache(cacheBytes int64, value []byte) *groupcache.Group {
	name := fmt.Sprintf("bench%d", gcGroups.Add(1))
	return groupcache.NewGroup(name, cacheBytes, groupcache.GetterFunc(
		func(_ context.Context, _ string, dest groupcache.Sink) error {
			return dest.SetBytes(value)
		}))
}

// BenchmarkGetHit reads cached 1 KiB values from all Ps, next to groupcache
// doing the same: keys=1 is one value every caller asks for (the lock and
// the counters are all the callers share), keys=10000 a set as large as
// compare.sh's, each caller reading them in an order of its own, so that
// the CPU caches miss as a server's do.
func BenchmarkGetHit(b *testing.B) {
	value := make([]byte, 1024)
	ctx := context.Background()
	for _, n := range []int{1, 10000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "key-" + strconv.Itoa(i)
		}
		// each runs a caller's get, from newGet, over the keys from every
		// P, each caller starting at a key of its own and stepping by a
		// prime, so that no two callers walk the keys in step.
		each := func(b *testing.B, newGet func() func(key string) error) {
			var callers atomic.Uint32
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				get := newGet()
				i := int(callers.Add(1)) * 7919
				for pb.Next() {
					i += 4099
					if err := get(keys[i%n]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		// impl=ringcache-ttl has values that expire, which costs a hit a
		// clock read; groupcache's never expire.
		for _, ttl := range []time.Duration{0, time.Hour} {
			impl := map[bool]string{false: "ringcache", true: "ringcache-ttl"}[ttl > 0]
			b.Run(fmt.Sprintf("keys=%d/impl=%s", n, impl), func(b *testing.B) {
				g := newTestGroup(b, GroupConfig{MaxBytes: 64 << 20, TTL: ttl}, func(context.Context, string) (Value, error) {
					return Value{Data: value}, nil
				})
				for _, k := range keys {
					if _, err := g.Get(ctx, k); err != nil {
						b.Fatal(err)
					}
				}
				each(b, func() func(string) error {
					return func(key string) error {
						_, err := g.Get(ctx, key)
						return err
					}
				})
				if st := g.Stats(); st.LocalLoads != int64(n) {
					b.Fatalf("%d loads for %d keys: not every Get was a hit", st.LocalLoads, n)
				}
			})
		}
		b.Run(fmt.Sprintf("keys=%d/impl=groupcache", n), func(b *testing.B) {
			g := newGroupcache(64<<20, value)
			for _, k := range keys {
				var v groupcache.ByteView
				if err := g.Get(ctx, k, groupcache.ByteViewSink(&v)); err != nil {
					b.Fatal(err)
				}
			}
			each(b, func() func(string) error {
				var v groupcache.ByteView // one per caller, as a caller would keep
				return func(key string) error { return g.Get(ctx, key, groupcache.ByteViewSink(&v)) }
			})
			if loads := g.Stats.LocalLoads.Get(); loads != int64(n) {
				b.Fatalf("%d loads for %d keys: not every Get was a hit", loads, n)
			}
		})
	}
}

// BenchmarkGetMiss reads distinct keys through a trivial Getter: a cache of
// about 1,000 entries read in a cycle of 65,536 keys never hits (LRU), so
// every Get is a full miss: lookup, single-flight, load, store, eviction.
func BenchmarkGetMiss(b *testing.B) {
	value := make([]byte, 100)
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "key" + strconv.Itoa(i)
	}
	ctx := context.Background()
	cacheBytes := int64(1000 * (store.Overhead + 110))
	// ctx=background: the load runs on the caller's goroutine; ctx=cancelable:
	// on its own, so that the caller can leave when ctx ends.
	cancelable, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{{"background", ctx}, {"cancelable", cancelable}} {
		b.Run("impl=ringcache/ctx="+bc.name, func(b *testing.B) {
			g := newTestGroup(b, GroupConfig{MaxBytes: cacheBytes}, func(context.Context, string) (Value, error) {
				return Value{Data: value}, nil
			})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := g.Get(bc.ctx, keys[i%len(keys)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			s := g.Stats()
			b.ReportMetric(float64(s.MainHits)/float64(s.Gets), "hits/op")
		})
	}
	b.Run("impl=groupcache", func(b *testing.B) {
		g := newGroupcache(cacheBytes, value)
		b.ReportAllocs()
		var v groupcache.ByteView
		i := 0
		for b.Loop() {
			if err := g.Get(ctx, keys[i%len(keys)], groupcache.ByteViewSink(&v)); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkCopiesShare reads random keys of a space four times a group's
// budget while copies of other nodes' keys arrive, N-1 for each read (as
// at copies=N when every node reads alike), and reports the part of the
// bytes that copies hold once it settled (copies-share): own values read
// again outrank copies, which are never read, so copies hold less than
// (N-1)/N.
func BenchmarkCopiesShare(b *testing.B) {
	for _, copies := range []int{2, 3} {
		b.Run(fmt.Sprintf("copies=%d", copies), func(b *testing.B) {
			const n = 4000
			v := Value{Data: make([]byte, 200)}
			g := newTestGroup(b, GroupConfig{MaxBytes: n * EntryBytes("own00000", v), Copies: copies},
				func(context.Context, string) (Value, error) { return v, nil })
			rng := rand.New(rand.NewPCG(1, 2))
			ctx := context.Background()
			var stamp uint64
			for b.Loop() {
				if _, err := g.Get(ctx, fmt.Sprintf("own%05d", rng.IntN(4*n))); err != nil {
					b.Fatal(err)
				}
				for range copies - 1 {
					stamp++
					g.KeepCopy(fmt.Sprintf("cpy%05d", rng.IntN(4*n*(copies-1))), v, "node1", stamp)
				}
			}
			s := g.Stats()
			b.ReportMetric(float64(s.CopyBytes)/float64(s.MainBytes+s.CopyBytes), "copies-share")
		})
	}
}
