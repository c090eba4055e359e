package consistenthash

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

func TestLookupMatchesBinarySearch(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 3, 7, 100, 1000, 5000} {
		points := make([]uint32, 0, n+2)
		for range n {
			points = append(points, rng.Uint32())
		}
		if n > 3 { // edges and a dense run that shares one bucket
			points = append(points, 0, math.MaxUint32, 77, 78, 79, 80)
		}
		slices.Sort(points)
		points = slices.Compact(points)
		l := newLookup(points)
		probe := []uint32{0, 1, math.MaxUint32, math.MaxUint32 - 1, 76, 78, 81}
		for _, p := range points {
			probe = append(probe, p, p-1, p+1)
		}
		for range 2000 {
			probe = append(probe, rng.Uint32())
		}
		for _, h := range probe {
			want := sort.Search(len(points), func(i int) bool { return points[i] >= h })
			if got := l.ceil(h); got != want {
				t.Fatalf("n=%d: ceil(%d) = %d, want %d", len(points), h, got, want)
			}
		}
	}
}
