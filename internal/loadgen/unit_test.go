package loadgen

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ringcache/ringcache/transport/origin"
)

func TestBucketsAreContiguous(t *testing.T) {
	t.Parallel()
	prevHi := uint64(0)
	for i := 1; i < histBuckets; i++ {
		lo, hi := bucketRange(i)
		if lo != prevHi+1 || hi < lo {
			t.Fatalf("bucket %d = [%d, %d], previous ended at %d", i, lo, hi, prevHi)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d = [%d, %d] but bucketOf gives %d, %d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		if i >= 256 && float64(hi-lo+1)/float64(lo) > 1.0/128+1e-12 {
			t.Fatalf("bucket %d = [%d, %d]: wider than 1/128 of its values", i, lo, hi)
		}
		prevHi = hi
	}
	if got := bucketOf(math.MaxUint64); got != histBuckets-1 {
		t.Errorf("bucketOf(max) = %d, want the last bucket %d", got, histBuckets-1)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	t.Parallel()
	// Against the exact nearest-rank percentiles of the same samples.
	r := rand.New(rand.NewPCG(1, 2))
	for _, dist := range []string{"uniform", "lognormal", "tiny"} {
		t.Run(dist, func(t *testing.T) {
			var h Histogram
			var xs []time.Duration
			for range 20000 {
				var d time.Duration
				switch dist {
				case "uniform":
					d = time.Duration(r.Int64N(int64(10 * time.Millisecond)))
				case "lognormal":
					d = time.Duration(math.Exp(r.NormFloat64()*1.5 + 13)) // around 0.4ms, long tail
				case "tiny":
					d = time.Duration(r.IntN(300))
				}
				h.Record(d)
				xs = append(xs, d)
			}
			slices.Sort(xs)
			for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
				exact := xs[int(math.Ceil(q*float64(len(xs))))-1]
				got := h.Quantile(q)
				// Exact below 256ns; within half a bucket (1/256) above.
				if diff := math.Abs(float64(got-exact)) / math.Max(float64(exact), 1); diff > 1.0/256 {
					t.Errorf("q%v = %v, exact %v (%.2f%% off)", q, got, exact, 100*diff)
				}
			}
			if h.Quantile(1) != xs[len(xs)-1] || h.Max() != xs[len(xs)-1] {
				t.Errorf("max %v, want %v", h.Quantile(1), xs[len(xs)-1])
			}
		})
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 {
		t.Error("quantile of an empty Histogram")
	}
}

func TestHistogramMerge(t *testing.T) {
	t.Parallel()
	var a, b, both Histogram
	for i := range 1000 {
		d := time.Duration(i) * time.Microsecond
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
		both.Record(d)
	}
	a.Merge(&b)
	if a.counts != both.counts || a.n != both.n || a.max != both.max {
		t.Error("merging two halves differs from recording the whole")
	}
}

func TestPickerZipf(t *testing.T) {
	t.Parallel()
	for _, s := range []float64{0.5, 0.99, 1.5} {
		p := NewPicker(1000, s)
		r := rand.New(rand.NewPCG(3, 4))
		const draws = 200000
		counts := make([]int, 1000)
		for range draws {
			counts[p.Pick(r)]++
		}
		// The hottest keys' frequencies are within 5 standard deviations of
		// 1/(k+1)^s over the generalized harmonic number.
		var hn float64
		for k := range 1000 {
			hn += math.Pow(float64(k+1), -s)
		}
		for _, k := range []int{0, 1, 9, 99} {
			want := math.Pow(float64(k+1), -s) / hn
			if math.Abs(p.Prob(k)-want) > 1e-12 {
				t.Errorf("s=%v: prob(%d) = %v, want %v", s, k, p.Prob(k), want)
			}
			sd := math.Sqrt(draws * want * (1 - want))
			if got := float64(counts[k]); math.Abs(got-draws*want) > 5*sd {
				t.Errorf("s=%v: key %d drawn %v times, want %.0f ± %.0f", s, k, got, draws*want, 5*sd)
			}
		}
	}
}

func TestPickerUniform(t *testing.T) {
	t.Parallel()
	p := NewPicker(10, 0)
	r := rand.New(rand.NewPCG(5, 6))
	counts := make([]int, 10)
	for range 100000 {
		counts[p.Pick(r)]++
	}
	for k, c := range counts {
		if c < 9500 || c > 10500 { // 10000 ± 5 sd (sd ≈ 95)
			t.Errorf("key %d drawn %d times of 100000", k, c)
		}
	}
	one := NewPicker(1, 0.99)
	for range 100 {
		if one.Pick(r) != 0 {
			t.Fatal("a one-key picker drew another key")
		}
	}
}

func TestValueRule(t *testing.T) {
	t.Parallel()
	// The PUT values follow the demo origin's rule with another prefix: the
	// same code, checked against the origin's, for sizes around the 64-byte
	// period.
	for _, size := range []int{1, 63, 64, 65, 128, 1000} {
		v := make([]byte, size)
		Fill(v, []byte("ringcache-demo/g/k"))
		if want := origin.DemoValue("g", "k", size); !bytes.Equal(v, want) {
			t.Errorf("size %d: fill differs from origin.DemoValue", size)
		}
		if !Matches(v, []byte("ringcache-demo/g/k")) || Matches(v, []byte("ringcache-demo/g/k2")) {
			t.Errorf("size %d: matches is wrong", size)
		}
		v[size-1] ^= 1
		if Matches(v, []byte("ringcache-demo/g/k")) {
			t.Errorf("size %d: a changed last byte still matches", size)
		}
	}
}
