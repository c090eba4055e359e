package origin

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// demoRule is the rule as README states it, written independently of
// DemoValue.
func demoRule(group, key string, size int) string {
	h := fmt.Sprintf("%x", sha256.Sum256([]byte("ringcache-demo/"+group+"/"+key)))
	return strings.Repeat(h, size/len(h)+1)[:size]
}

func TestDemoValue(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1, 63, 64, 65, 128, 1000} {
		for _, key := range []string{"k", "a/b", "ünï", ""} {
			if got, want := string(DemoValue("demo", key, size)), demoRule("demo", key, size); got != want {
				t.Errorf("DemoValue(demo, %q, %d) = %q, want %q", key, size, got, want)
			}
		}
	}
	if got := DemoValue("g", "k", 0); len(got) != 0 {
		t.Errorf("size 0: got %q", got)
	}
	if string(DemoValue("g1", "k", 64)) == string(DemoValue("g2", "k", 64)) {
		t.Error("the group is not part of the value")
	}
	// A fixed point, so that a change of the rule cannot go unnoticed.
	// (sha256sum of "ringcache-demo/demo/hello"; ExampleDemoValue shows it too).
	if got := string(DemoValue("demo", "hello", 16)); got != "7c4873c5fe9734b1" {
		t.Errorf("got %q", got)
	}
}

func TestDemoGetAndCounts(t *testing.T) {
	t.Parallel()
	d, err := NewDemo(DemoConfig{Group: "demo", Size: 100, MaxKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "b", "a", "c", "a"} {
		v, err := d.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if string(v.Data) != demoRule("demo", key, 100) || v.ContentType != DemoContentType || v.NoStore || !v.Expires.IsZero() {
			t.Fatalf("Get(%q) = %+v", key, v)
		}
	}
	got := d.Loads()
	// "c" came after MaxKeys distinct keys: counted in the total only.
	if got.Loads != 5 || len(got.Keys) != 2 || got.Keys["a"] != 3 || got.Keys["b"] != 1 {
		t.Errorf("Loads() = %+v, want 5 loads, a:3 b:1", got)
	}
	got.Keys["a"] = 100 // a snapshot: changing it changes nothing
	if d.Loads().Keys["a"] != 3 {
		t.Error("Loads returned the live map")
	}
}

func TestDemoDefaults(t *testing.T) {
	t.Parallel()
	d, err := NewDemo(DemoConfig{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := d.Get(t.Context(), "k")
	if err != nil || len(v.Data) != 64 {
		t.Fatalf("Get = %d bytes, %v; want 64", len(v.Data), err)
	}
	for name, cfg := range map[string]DemoConfig{
		"size":     {Size: -1},
		"latency":  {Latency: -time.Second},
		"max keys": {MaxKeys: -1},
	} {
		if _, err := NewDemo(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: NewDemo(%+v) = %v, want ErrConfig", name, cfg, err)
		}
	}
}

func TestDemoLatency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		d, err := NewDemo(DemoConfig{Group: "g", Latency: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := d.Get(t.Context(), "k"); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 20*time.Millisecond {
			t.Errorf("Get took %v, want exactly the latency", took)
		}

		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
		defer cancel()
		start = time.Now()
		if _, err := d.Get(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want DeadlineExceeded", err)
		}
		if took := time.Since(start); took != 5*time.Millisecond {
			t.Errorf("canceled Get took %v, want 5ms", took)
		}
		if n := d.Loads().Keys["k"]; n != 2 {
			t.Errorf("loads of k = %d, want 2 (a canceled load counts)", n)
		}
	})
}

func TestDemoConcurrent(t *testing.T) {
	t.Parallel()
	d, err := NewDemo(DemoConfig{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for j := range 100 {
				if _, err := d.Get(context.Background(), fmt.Sprint(j%10)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	got := d.Loads()
	if got.Loads != 800 || len(got.Keys) != 10 || got.Keys["3"] != 80 {
		t.Errorf("Loads() = %d loads, %d keys, key 3: %d; want 800, 10, 80", got.Loads, len(got.Keys), got.Keys["3"])
	}
}

func BenchmarkDemoValue(b *testing.B) {
	for _, size := range []int{64, 1024} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				DemoValue("demo", "some-key", size)
			}
		})
	}
}
