package main

import (
	"math"
	"math/rand/v2"
	"slices"
)

// keyPicker draws key indexes in [0, n): uniformly, or with the Zipf law
// P(k) ∝ 1/(k+1)^s, where index 0 is the most popular key. Unlike
// math/rand's Zipf, which needs s > 1, any s > 0 works: 0.99, the skew
// YCSB and memtier use, included. A keyPicker is immutable and safe for
// concurrent use; each worker passes its own *rand.Rand.
type keyPicker struct {
	n   int
	cdf []float64 // Zipf only: cdf[k] = P(index <= k); nil for uniform
}

func newKeyPicker(n int, s float64) keyPicker {
	p := keyPicker{n: n}
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

// pick returns a key index.
func (p keyPicker) pick(r *rand.Rand) int {
	if p.cdf == nil {
		return r.IntN(p.n)
	}
	i, _ := slices.BinarySearch(p.cdf, r.Float64())
	return min(i, p.n-1)
}

// prob returns the probability of index k: the tests check the draws against it.
func (p keyPicker) prob(k int) float64 {
	if p.cdf == nil {
		return 1 / float64(p.n)
	}
	if k == 0 {
		return p.cdf[0]
	}
	return p.cdf[k] - p.cdf[k-1]
}
