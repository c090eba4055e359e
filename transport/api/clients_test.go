package api

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ringcache/ringcache/cache"
)

func TestClientKey(t *testing.T) {
	t.Parallel()
	same := [][2]string{
		{"10.0.0.1:1000", "10.0.0.1:2000"},
		{"[::ffff:10.0.0.1]:1", "10.0.0.1:2"},
		{"[2001:db8::1]:1", "[2001:db8::ffff:2]:2"},
	}
	different := [][2]string{
		{"10.0.0.1:1", "10.0.0.2:1"},
		{"[2001:db8::1]:1", "[2001:db8:0:1::1]:1"},
		{"10.0.0.1:1", "[2001:db8::1]:1"},
	}
	for _, p := range same {
		if ClientOf(p[0]) != ClientOf(p[1]) {
			t.Errorf("%s and %s: different clients, want one", p[0], p[1])
		}
	}
	for _, p := range different {
		if ClientOf(p[0]) == ClientOf(p[1]) {
			t.Errorf("%s and %s: one client, want two", p[0], p[1])
		}
	}
}

// TestClientLimiterConcurrent: a client gets MaxMisses slots; another
// client is not affected; a release frees a slot, once.
func TestClientLimiterConcurrent(t *testing.T) {
	t.Parallel()
	l, err := NewClientLimiter(ClientLimitConfig{MaxMisses: 2})
	if err != nil {
		t.Fatal(err)
	}
	r1, err1 := l.Acquire("10.0.0.1:1")
	r2, err2 := l.Acquire("10.0.0.1:2")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if _, err := l.Acquire("10.0.0.1:3"); !errors.Is(err, ErrTooManyRequests) {
		t.Fatalf("third miss = %v, want ErrTooManyRequests", err)
	}
	r3, err := l.Acquire("10.0.0.2:1")
	if err != nil {
		t.Fatalf("another client: %v", err)
	}
	r1()
	r1() // a second release must not free another slot
	r4, err := l.Acquire("10.0.0.1:4")
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := l.Acquire("10.0.0.1:5"); !errors.Is(err, ErrTooManyRequests) {
		t.Fatalf("a double release freed two slots: %v", err)
	}
	r2()
	r3()
	r4()
	if n := l.Tracked(); n != 0 {
		t.Fatalf("%d idle clients remembered without a rate limit, want 0", n)
	}
}

// TestClientLimiterRate runs the token bucket on synctest's clock.
func TestClientLimiterRate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l, err := NewClientLimiter(ClientLimitConfig{MissRate: 10, MissBurst: 5})
		if err != nil {
			t.Fatal(err)
		}
		take := func() error {
			release, err := l.Acquire("10.0.0.1:1")
			if err == nil {
				release()
			}
			return err
		}
		for i := range 5 {
			if err := take(); err != nil {
				t.Fatalf("miss %d of the burst: %v", i+1, err)
			}
		}
		if err := take(); !errors.Is(err, ErrTooManyRequests) {
			t.Fatalf("miss 6 = %v, want ErrTooManyRequests", err)
		}
		time.Sleep(100 * time.Millisecond) // one token at 10/s
		if err := take(); err != nil {
			t.Fatalf("after 100ms: %v", err)
		}
		if err := take(); !errors.Is(err, ErrTooManyRequests) {
			t.Fatalf("a second miss after 100ms = %v, want ErrTooManyRequests", err)
		}
		// Over a long run the rate holds: 10 s admit about 100 more.
		admitted := 0
		for range 1000 {
			if take() == nil {
				admitted++
			}
			time.Sleep(10 * time.Millisecond)
		}
		if admitted < 99 || admitted > 101 {
			t.Fatalf("admitted %d misses in 10s at 10/s, want about 100", admitted)
		}
	})
}

// TestClientLimiterForgets: a client whose bucket has refilled is forgotten
// when the map is swept, so memory follows the recently active clients.
func TestClientLimiterForgets(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l, err := NewClientLimiter(ClientLimitConfig{MissRate: 100, MissBurst: 10})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 * minSweep {
			release, err := l.Acquire(fmt.Sprintf("10.%d.%d.1:1", i/256, i%256))
			if err != nil {
				t.Fatal(err)
			}
			release()
			if i%minSweep == minSweep-1 {
				time.Sleep(time.Second) // every bucket so far refills
			}
		}
		if n := l.Tracked(); n > 2*minSweep {
			t.Fatalf("%d clients remembered, want at most %d", n, 2*minSweep)
		}
	})
}

func TestClientLimitConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   ClientLimitConfig
		field string // "": valid
	}{
		{ClientLimitConfig{}, ""},
		{ClientLimitConfig{MaxMisses: 32, MissRate: 500, MissBurst: 1000}, ""},
		{ClientLimitConfig{MaxMisses: -1}, "MaxMisses"},
		{ClientLimitConfig{MissRate: -0.5}, "MissRate"},
		{ClientLimitConfig{MissRate: math.NaN()}, "MissRate"},
		{ClientLimitConfig{MissRate: 1, MissBurst: -1}, "MissBurst"},
	} {
		err := tc.cfg.Validate()
		if _, nerr := NewClientLimiter(tc.cfg); (nerr == nil) != (err == nil) {
			t.Errorf("%+v: NewClientLimiter = %v but Validate = %v", tc.cfg, nerr, err)
		}
		if tc.field == "" {
			if err != nil {
				t.Errorf("%+v: Validate = %v", tc.cfg, err)
			}
			continue
		}
		if ce, ok := errors.AsType[*cache.ConfigError](err); !ok || ce.Field != tc.field || !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: Validate = %v, want a ConfigError for %s", tc.cfg, err, tc.field)
		}
	}
}
