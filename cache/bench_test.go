package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang/groupcache"
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
	cacheBytes := int64(1000 * (entryOverhead + 110))
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

// lruKeys fills a new lru of budget bytes with size-byte values under keys
// that overflow it by 3/8 (as deploy/bench/memory.sh does) and returns it
// with the keys.
func lruKeys(budget int64, size int) (*lru, []string) {
	return lruKeysSized(budget, size, func(int) int { return size })
}

// lruKeysSized is lruKeys with key i's value sizeOf(i) bytes, about size
// on average.
func lruKeysSized(budget int64, size int, sizeOf func(i int) int) (*lru, []string) {
	l := newLRU(budget)
	keys := make([]string, int(1.375*float64(budget)/float64(size+entryOverhead+11)))
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(1000000+i)
		addVal(l, keys[i], sizeOf(i))
	}
	return l, keys
}

// BenchmarkLRUChurn reads random keys of a full lru whose keys overflow it
// by 3/8, storing each miss, which evicts (hits/op says how many hit,
// compactions/op how often a page was copied). It is the main cache's
// share of deploy/bench/memory.sh's reads. Values of 1 to 2 KiB of mixed
// sizes leave closed pages a tail of about half an entry each, which is
// where compaction bounds cost most.
func BenchmarkLRUChurn(b *testing.B) {
	mixed := func(i int) int { return 1024 + i*7919%1025 }
	for _, tc := range []struct {
		name   string
		size   int
		sizeOf func(int) int
	}{
		{"value=100", 100, nil},
		{"value=1024", 1024, nil},
		{"value=1024-2048", 1536, mixed},
	} {
		if tc.sizeOf == nil {
			tc.sizeOf = func(int) int { return tc.size }
		}
		for _, slru := range []bool{false, true} {
			name := tc.name
			if slru {
				name += "/policy=slru"
			}
			b.Run(name, func(b *testing.B) {
				l, keys := lruKeysSized(64<<20, tc.size, tc.sizeOf)
				l.slru = slru
				b.ReportAllocs()
				churnBench(b, l, keys, tc.sizeOf)
			})
		}
	}
}

// churnBench reads random keys of l, storing each miss with a value of
// sizeOf(its index) bytes.
func churnBench(b *testing.B, l *lru, keys []string, sizeOf func(int) int) {
	rng := rand.New(rand.NewPCG(1, 2))
	hits := 0
	compactions := l.compactions
	for b.Loop() {
		i := rng.IntN(len(keys))
		if _, ok := l.get(keys[i], new(clock)); ok {
			hits++
		} else {
			addVal(l, keys[i], sizeOf(i))
		}
	}
	b.ReportMetric(float64(hits)/float64(b.N), "hits/op")
	b.ReportMetric(float64(l.compactions-compactions)/float64(b.N), "compactions/op")
}

// BenchmarkCollectFullCache times one full collection of a heap that holds
// a full 256 MiB lru of 100-byte values: what every cycle of the collector
// costs a node with such a budget, and under a memory limit cycles are
// frequent.
func BenchmarkCollectFullCache(b *testing.B) {
	l, _ := lruKeys(256<<20, 100)
	_, n := l.usage()
	b.ReportMetric(float64(n), "entries")
	for b.Loop() {
		runtime.GC()
	}
	runtime.KeepAlive(l)
}
