package loadgen

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Picker draws key indexes in [0, n): uniformly, or with the Zipf law
// P(k) ∝ 1/(k+1)^s, where index 0 is the most popular key. Unlike
// math/rand's Zipf, which needs s > 1, any s > 0 works: 0.99, the skew
// YCSB and memtier use, included. A Picker is immutable and safe for
// concurrent use; each caller passes its own *rand.Rand.
type Picker struct {
	n   int
	cdf []float64 // Zipf only: cdf[k] = P(index <= k); nil for uniform
}

// NewPicker returns a Picker of n keys, uniform for s <= 0.
func NewPicker(n int, s float64) Picker {
	p := Picker{n: n}
	if s <= 0 {
		return p
	}
	p.cdf = make([]float64, n)
	var sum float64
	for k := range n {
		sum += math.Pow(float64(k+1), -s)
		p.cdf[k] = sum
	}
	for k := range p.cdf {
		p.cdf[k] /= sum
	}
	p.cdf[n-1] = 1 // no rounding gap above the last key
	return p
}

// Pick returns a key index.
func (p Picker) Pick(r *rand.Rand) int {
	if p.cdf == nil {
		return r.IntN(p.n)
	}
	i, _ := slices.BinarySearch(p.cdf, r.Float64())
	return min(i, p.n-1)
}

// Prob returns the probability of index k.
func (p Picker) Prob(k int) float64 {
	if p.cdf == nil {
		return 1 / float64(p.n)
	}
	if k == 0 {
		return p.cdf[0]
	}
	return p.cdf[k] - p.cdf[k-1]
}
