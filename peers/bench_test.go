package peers

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkApplyChange measures what the applier does for one watch event in a cluster of n
// members: observe a join, settle, and build the member set and peer URLs handed to the
// Setter.
func BenchmarkApplyChange(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			m := newMembership("m0", time.Second, time.Second)
			all := make([]string, n)
			for i := range all {
				all[i] = fmt.Sprintf("m%d", i)
			}
			m.observe(list(all...))
			now := time.Unix(1800000000, 0)
			m.settle(now)
			join, gone := put("joiner"), del("joiner")
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					m.observe(join)
				} else {
					m.observe(gone)
				}
				m.settle(now)
				if len(peerURLs(m.members())) == 0 {
					b.Fatal("empty member set")
				}
			}
		})
	}
}
