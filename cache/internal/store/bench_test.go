package store

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
)

// BenchmarkLRUChurn reads random keys of a full lru whose keys overflow it
// by 3/8, storing each miss, which evicts (hits/op says how many hit,
// compactions/op how often a page was copied). It is the main cache's
// share of deploy/bench/memory.sh's reads. Values of 1 to 2 KiB of mixed
// sizes leave closed pages a tail of about half an entry each, which is
// where compaction bounds cost most. A budget of 1 MiB has smaller pages,
// and keeps values over 1/64 of one in allocations of their own.
func BenchmarkLRUChurn(b *testing.B) {
	mixed := func(i int) int { return 1024 + i*7919%1025 }
	for _, tc := range []struct {
		name   string
		budget int64
		size   int
		sizeOf func(int) int
	}{
		{"value=100", 64 << 20, 100, nil},
		{"value=1024", 64 << 20, 1024, nil},
		{"value=1024-2048", 64 << 20, 1536, mixed},
		{"value=100/budget=1MiB", 1 << 20, 100, nil},
		{"value=1024/budget=1MiB", 1 << 20, 1024, nil},
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
				l, keys := lruKeysSized(tc.budget, tc.size, tc.sizeOf)
				l.slru = slru
				b.ReportAllocs()
				churnBench(b, l, keys, tc.sizeOf)
			})
		}
	}
}

// churnBench reads random keys of l, storing each miss with a value of
// sizeOf(its index) bytes.
func churnBench(b *testing.B, l *Store, keys []string, sizeOf func(int) int) {
	rng := rand.New(rand.NewPCG(1, 2))
	hits := 0
	compactions := l.compactions
	for b.Loop() {
		i := rng.IntN(len(keys))
		if _, ok := l.Get(keys[i], new(Clock)); ok {
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
	_, n := l.Usage()
	b.ReportMetric(float64(n), "entries")
	for b.Loop() {
		runtime.GC()
	}
	runtime.KeepAlive(l)
}

// lruKeys fills a new store of budget bytes with size-byte values under keys
// that overflow it by 3/8 (as deploy/bench/memory.sh does) and returns it
// with the keys.
func lruKeys(budget int64, size int) (*Store, []string) {
	return lruKeysSized(budget, size, func(int) int { return size })
}

// lruKeysSized is lruKeys with key i's value sizeOf(i) bytes, about size
// on average.
func lruKeysSized(budget int64, size int, sizeOf func(i int) int) (*Store, []string) {
	l := New(budget)
	keys := make([]string, int(1.375*float64(budget)/float64(size+Overhead+11)))
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(1000000+i)
		addVal(l, keys[i], sizeOf(i))
	}
	return l, keys
}
