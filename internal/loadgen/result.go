package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// Result is what a run, or one of its workers, measured.
type Result struct {
	Hist      Histogram
	Status    [600]int64 // by status code; other codes count in 0
	Transport int64      // operations that got no answer
	Wrong     int64      // bodies that are not the key's value
	Other     int64      // bodies with the key's other known value (Verdict Other)
	Checked   int64      // bodies judged by the Check
	BytesIn   int64      // body bytes read
	BytesOut  int64      // body bytes sent
	Errs      map[string]int64
	// Dropped counts the ticks of an open loop that found every worker
	// busy; Elapsed is how long the run took.
	Dropped int64
	Elapsed time.Duration
}

// Requests returns the operations that were answered or failed.
func (r *Result) Requests() int64 {
	n := r.Transport
	for _, c := range r.Status {
		n += c
	}
	return n
}

// Merge adds o's counts to r's.
func (r *Result) Merge(o *Result) {
	r.Hist.Merge(&o.Hist)
	for i, c := range o.Status {
		r.Status[i] += c
	}
	r.Transport += o.Transport
	r.Wrong += o.Wrong
	r.Other += o.Other
	r.Checked += o.Checked
	r.BytesIn += o.BytesIn
	r.BytesOut += o.BytesOut
	for k, v := range o.Errs {
		if r.Errs == nil {
			r.Errs = map[string]int64{}
		}
		r.Errs[k] += v
	}
}

// Histogram records latencies in log-linear buckets, as HdrHistogram does:
// exact below 256ns, then 128 buckets per power of two, so a percentile is
// within 0.4% of the true value. Recording is an increment in a fixed
// array: no allocation and no lock (each worker owns one; Merge sums
// them). The zero value is ready to use; a Histogram is not safe for
// concurrent use.
type Histogram struct {
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

// Record adds d.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.n++
	h.max = max(h.max, d)
}

// Merge adds o's values.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Max returns the largest value recorded.
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the latency below which a fraction q of the recorded
// ones lie (the middle of its bucket; the maximum itself for q = 1).
func (h *Histogram) Quantile(q float64) time.Duration {
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
