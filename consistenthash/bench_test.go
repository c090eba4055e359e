package consistenthash

import (
	"fmt"
	"testing"

	gcring "github.com/golang/groupcache/consistenthash"
)

// BenchmarkGet compares Map.Get with groupcache's consistenthash.Map.Get on
// the same hash (crc32), nodes and keys, in one run.
func BenchmarkGet(b *testing.B) {
	keys := testKeys(1 << 12)
	for _, nodes := range []int{3, 10, 100, 1000} {
		for _, replicas := range []int{50, 160} {
			names := addrs(nodes)
			ours := New(replicas, CRC32)
			mustAdd(b, ours, names...)
			theirs := gcring.New(replicas, nil)
			theirs.Add(names...)
			prefix := fmt.Sprintf("nodes=%d/replicas=%d", nodes, replicas)
			b.Run(prefix+"/impl=ringcache", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					ours.Get(keys[i&(len(keys)-1)])
					i++
				}
			})
			b.Run(prefix+"/impl=groupcache", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					theirs.Get(keys[i&(len(keys)-1)])
					i++
				}
			})
		}
	}
}

// BenchmarkGetHash measures Get with each built-in hash on 100 nodes × 160
// replicas.
func BenchmarkGetHash(b *testing.B) {
	keys := testKeys(1 << 12)
	for _, name := range HashNames() {
		fn, _ := HashByName(name)
		m := New(160, fn)
		mustAdd(b, m, addrs(100)...)
		b.Run("hash="+name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				m.Get(keys[i&(len(keys)-1)])
				i++
			}
		})
	}
}

// BenchmarkBuild measures building a 100-node × 160-replica ring in one Add
// (the target is under 5 ms), node by node, and groupcache's build.
func BenchmarkBuild(b *testing.B) {
	names := addrs(100)
	b.Run("nodes=100/replicas=160/impl=ringcache", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			mustAdd(b, New(160, CRC32), names...)
		}
	})
	b.Run("nodes=100/replicas=160/impl=ringcache/one-by-one", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := New(160, CRC32)
			for _, n := range names {
				mustAdd(b, m, n)
			}
		}
	})
	b.Run("nodes=100/replicas=160/impl=groupcache", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			gcring.New(160, nil).Add(names...)
		}
	})
}

// BenchmarkRanges measures Ranges.Get and joining the 100th node.
func BenchmarkRanges(b *testing.B) {
	keys := testKeys(1 << 12)
	r := NewRanges(16, XXHash)
	joinAll(b, r, addrs(99)...)
	b.Run("get/nodes=99/positions=16", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r.Get(keys[i&(len(keys)-1)])
			i++
		}
	})
	b.Run("join/nodes=99/positions=16", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			joinAll(b, r.Clone(), "newcomer")
		}
	})
}
