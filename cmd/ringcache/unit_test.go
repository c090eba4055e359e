package main

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
			var h histogram
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
				h.record(d)
				xs = append(xs, d)
			}
			slices.Sort(xs)
			for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
				exact := xs[int(math.Ceil(q*float64(len(xs))))-1]
				got := h.quantile(q)
				// Exact below 256ns; within half a bucket (1/256) above.
				if diff := math.Abs(float64(got-exact)) / math.Max(float64(exact), 1); diff > 1.0/256 {
					t.Errorf("q%v = %v, exact %v (%.2f%% off)", q, got, exact, 100*diff)
				}
			}
			if h.quantile(1) != xs[len(xs)-1] || h.max != xs[len(xs)-1] {
				t.Errorf("max %v, want %v", h.quantile(1), xs[len(xs)-1])
			}
		})
	}
	var empty histogram
	if empty.quantile(0.5) != 0 {
		t.Error("quantile of an empty histogram")
	}
}

func TestHistogramMerge(t *testing.T) {
	t.Parallel()
	var a, b, both histogram
	for i := range 1000 {
		d := time.Duration(i) * time.Microsecond
		if i%2 == 0 {
			a.record(d)
		} else {
			b.record(d)
		}
		both.record(d)
	}
	a.merge(&b)
	if a.counts != both.counts || a.n != both.n || a.max != both.max {
		t.Error("merging two halves differs from recording the whole")
	}
}

func TestKeyPickerZipf(t *testing.T) {
	t.Parallel()
	for _, s := range []float64{0.5, 0.99, 1.5} {
		p := newKeyPicker(1000, s)
		r := rand.New(rand.NewPCG(3, 4))
		const draws = 200000
		counts := make([]int, 1000)
		for range draws {
			counts[p.pick(r)]++
		}
		// The hottest keys' frequencies are within 5 standard deviations of
		// 1/(k+1)^s over the generalized harmonic number.
		var hn float64
		for k := range 1000 {
			hn += math.Pow(float64(k+1), -s)
		}
		for _, k := range []int{0, 1, 9, 99} {
			want := math.Pow(float64(k+1), -s) / hn
			if math.Abs(p.prob(k)-want) > 1e-12 {
				t.Errorf("s=%v: prob(%d) = %v, want %v", s, k, p.prob(k), want)
			}
			sd := math.Sqrt(draws * want * (1 - want))
			if got := float64(counts[k]); math.Abs(got-draws*want) > 5*sd {
				t.Errorf("s=%v: key %d drawn %v times, want %.0f ± %.0f", s, k, got, draws*want, 5*sd)
			}
		}
	}
}

func TestKeyPickerUniform(t *testing.T) {
	t.Parallel()
	p := newKeyPicker(10, 0)
	r := rand.New(rand.NewPCG(5, 6))
	counts := make([]int, 10)
	for range 100000 {
		counts[p.pick(r)]++
	}
	for k, c := range counts {
		if c < 9500 || c > 10500 { // 10000 ± 5 sd (sd ≈ 95)
			t.Errorf("key %d drawn %d times of 100000", k, c)
		}
	}
	one := newKeyPicker(1, 0.99)
	for range 100 {
		if one.pick(r) != 0 {
			t.Fatal("a one-key picker drew another key")
		}
	}
}

func TestBenchValueRule(t *testing.T) {
	t.Parallel()
	// The PUT values follow the demo origin's rule with another prefix: the
	// same code, checked against the origin's, for sizes around the 64-byte
	// period.
	for _, size := range []int{1, 63, 64, 65, 128, 1000} {
		v := make([]byte, size)
		fill(v, []byte("ringcache-demo/g/k"))
		if want := origin.DemoValue("g", "k", size); !bytes.Equal(v, want) {
			t.Errorf("size %d: fill differs from origin.DemoValue", size)
		}
		if !matches(v, []byte("ringcache-demo/g/k")) || matches(v, []byte("ringcache-demo/g/k2")) {
			t.Errorf("size %d: matches is wrong", size)
		}
		v[size-1] ^= 1
		if matches(v, []byte("ringcache-demo/g/k")) {
			t.Errorf("size %d: a changed last byte still matches", size)
		}
	}
}

func TestParseInterleaved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		pos   []string
		group string
	}{
		{"flags first", []string{"-group", "g", "k"}, []string{"k"}, "g"},
		{"flags after", []string{"k", "-group", "g"}, []string{"k"}, "g"},
		{"between", []string{"k", "-group", "g", "v"}, []string{"k", "v"}, "g"},
		{"dash dash", []string{"--", "-k", "-group"}, []string{"-k", "-group"}, "demo"},
		{"flag then dash dash", []string{"-group", "g", "--", "-k"}, []string{"-k"}, "g"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCommand("put", "put", environ{Stdout: &bytes.Buffer{}}).withGroup("demo", "")
			pos, err := c.parse(tt.args, 1, 2)
			if err != nil || !slices.Equal(pos, tt.pos) || c.opts.Group != tt.group {
				t.Errorf("parse(%q) = %q, group %q, %v; want %q, %q", tt.args, pos, c.opts.Group, err, tt.pos, tt.group)
			}
		})
	}
}

func TestURLsFromEnvironment(t *testing.T) {
	t.Parallel()
	c := newCommand("stats", "stats", environ{Stdout: &bytes.Buffer{},
		Getenv: func(k string) string {
			return map[string]string{"RINGCACHE_URL": " http://a:1/ ,https://b:2", "RINGCACHE_TOKEN": "tok"}[k]
		}})
	if _, err := c.parse(nil, 0, 0); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.opts.URLs, []string{"http://a:1", "https://b:2"}) || c.opts.Token != "tok" {
		t.Errorf("from the environment: %q, token %q", c.opts.URLs, c.opts.Token)
	}
	c = newCommand("stats", "stats", environ{Stdout: &bytes.Buffer{}})
	if _, err := c.parse(nil, 0, 0); err != nil || !slices.Equal(c.opts.URLs, []string{defaultURL}) {
		t.Errorf("default: %q, %v", c.opts.URLs, err)
	}
}

func TestKeyPath(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"hello": "/cache/g/hello",
		"a/b":   "/cache/g/a%2Fb",
		"a b?":  "/cache/g/a%20b%3F",
		".":     "/cache/g/%2E",
		"..":    "/cache/g/%2E%2E",
		"...":   "/cache/g/...",
		"ü":     "/cache/g/%C3%BC",
	} {
		if got := keyPath("g", key); got != want {
			t.Errorf("keyPath(%q) = %q, want %q", key, got, want)
		}
	}
}

func FuzzKeyPath(f *testing.F) {
	for _, s := range []string{"a", "a/b", "..", "%2F", "a?b#c", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		p := keyPath("g", key)
		// One segment after the group, whatever the key: no "/" inside,
		// nothing a router would clean, no query or fragment.
		seg := p[len("/cache/g/"):]
		if bytes.ContainsAny([]byte(seg), "/?# ") || seg == "." || seg == ".." {
			t.Errorf("keyPath(%q) = %q", key, p)
		}
	})
}
