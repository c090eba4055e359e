package consistenthash

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// cvOfShares is the coefficient of variation (sample standard deviation
// over the mean) of the shares.
func cvOfShares(sh map[string]float64) float64 {
	n := float64(len(sh))
	mean := 1 / n
	var ss float64
	for _, s := range sh {
		ss += (s - mean) * (s - mean)
	}
	return math.Sqrt(ss/(n-1)) / mean
}

// cvRatios returns CV / (1/sqrt(160)) of 160-replica rings of the given
// size, one per name set, sorted. Node names are deterministic, so the
// result is too.
func cvRatios(t *testing.T, fn Hash, nodes, sets int) []float64 {
	t.Helper()
	var out []float64
	for set := range sets {
		names := make([]string, nodes)
		for i := range names {
			names[i] = fmt.Sprintf("s%d-node-%d", set, i)
		}
		m := New(160, fn)
		mustAdd(t, m, names...)
		out = append(out, cvOfShares(m.Shares())*math.Sqrt(160))
	}
	slices.Sort(out)
	return out
}

// TestBalanceAcrossNameSets: one ring's CV is a single draw (at 10 nodes
// its standard error is about a quarter), so the balance target is checked
// on the median over many name sets. XXHash must match random placement
// (median CV within 1.15 × 1/sqrt(replicas)); CRC32 is known to be worse.
func TestBalanceAcrossNameSets(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		nodes, sets int
	}{{10, 40}, {100, 20}} {
		median := map[string]float64{}
		for _, name := range HashNames() {
			fn, _ := HashByName(name)
			r := cvRatios(t, fn, tt.nodes, tt.sets)
			median[name] = r[len(r)/2]
			// fnv1_32's Shares count the unused half of the circle
			// (see the package doc), so its figure here is not balance.
			t.Logf("nodes=%d × 160 replicas, %d name sets: %-8s cv/ideal median %.3f min %.3f max %.3f",
				tt.nodes, tt.sets, name, median[name], r[0], r[len(r)-1])
		}
		if median["xxhash"] > 1.15 {
			t.Errorf("nodes=%d: xxhash median cv/ideal %.3f > 1.15", tt.nodes, median["xxhash"])
		}
		if median["crc32"] <= median["xxhash"] {
			t.Errorf("nodes=%d: crc32 (%.3f) balanced as well as xxhash (%.3f); update the package doc",
				tt.nodes, median["crc32"], median["xxhash"])
		}
	}
}
