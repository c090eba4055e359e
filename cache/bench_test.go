package cache

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

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

// BenchmarkGetHit reads one cached 1 KiB value from all Ps, next to
// groupcache doing the same.
func BenchmarkGetHit(b *testing.B) {
	value := make([]byte, 1024)
	ctx := context.Background()
	b.Run("impl=ringcache", func(b *testing.B) {
		g := newTestGroup(b, GroupConfig{TTL: 1 << 40}, func(context.Context, string) (Value, error) {
			return Value{Data: value}, nil
		})
		if _, err := g.Get(ctx, "hot"); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := g.Get(ctx, "hot"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("impl=groupcache", func(b *testing.B) {
		g := newGroupcache(1<<20, value)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var v groupcache.ByteView
			for pb.Next() {
				if err := g.Get(ctx, "hot", groupcache.ByteViewSink(&v)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
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
