package main

import (
	"math"
	"math/bits"
	"time"
)

// histogram records latencies in log-linear buckets, as HdrHistogram does:
// exact below 256ns, then 128 buckets per power of two, so a percentile is
// within 0.4% of the true value. Recording is an increment in a fixed
// array: no allocation and no lock (each worker owns one; merge sums them).
// The zero value is ready to use; a histogram is not safe for concurrent
// use.
type histogram struct {
	counts [histBuckets]int64
	n      int64
	max    time.Duration
}

const (
	histSub     = 128 // buckets per power of two above 256ns
	histMaxExp  = 33  // values are clamped below 1<<(histMaxExp+8) ns, about 36 min
	histBuckets = 256 + histMaxExp*histSub
)

func bucketOf(v uint64) int {
	if v < 256 {
		return int(v)
	}
	v = min(v, 1<<(histMaxExp+8)-1)
	e := bits.Len64(v) - 8 // v>>e is in [128, 255]
	return 256 + (e-1)*histSub + int(v>>e) - histSub
}

// bucketRange returns the smallest and largest value of bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < 256 {
		return uint64(i), uint64(i)
	}
	j := i - 256
	e := uint(j/histSub + 1)
	m := uint64(j%histSub + histSub)
	return m << e, (m+1)<<e - 1
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.n++
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the latency below which a fraction q of the recorded
// ones lie (the middle of its bucket; the maximum itself for q = 1).
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q >= 1 {
		return h.max
	}
	// The nearest rank: the ceil(q*n)-th smallest value.
	rank := min(max(int64(math.Ceil(q*float64(h.n))), 1), h.n)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketRange(i)
			return min(time.Duration(lo+(hi-lo)/2), h.max)
		}
	}
	return h.max
}
