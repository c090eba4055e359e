package cache

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

func TestSketchCountsAndDecays(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newSketch(10 * time.Second)
		for want := 1; want <= 4; want++ {
			if got := s.add("k"); got != want {
				t.Fatalf("add #%d = %d", want, got)
			}
		}
		if got := s.estimate("k"); got != 4 {
			t.Fatalf("estimate = %d, want 4", got)
		}
		if got := s.estimate("other"); got != 0 {
			t.Fatalf("estimate of an unseen key = %d, want 0", got)
		}
		time.Sleep(10 * time.Second)
		if got := s.estimate("k"); got != 2 {
			t.Fatalf("after one window estimate = %d, want 2 (halved)", got)
		}
		time.Sleep(20 * time.Second)
		if got := s.estimate("k"); got != 0 {
			t.Fatalf("after two more windows estimate = %d, want 0", got)
		}
		for range 300 {
			s.add("k")
		}
		if got := s.estimate("k"); got != 255 {
			t.Fatalf("estimate = %d, want 255 (saturated, not wrapped)", got)
		}
		time.Sleep(time.Hour)
		if got := s.estimate("k"); got != 0 {
			t.Fatalf("after an idle hour estimate = %d, want 0", got)
		}
		// The schedule restarted from now: one window later, one halving.
		s.add("k")
		s.add("k")
		time.Sleep(10 * time.Second)
		if got := s.estimate("k"); got != 1 {
			t.Fatalf("estimate = %d, want 1", got)
		}
	})
}

// TestSketchKeepsColdKeysCold checks the over-estimate on a realistic load:
// 5,000 distinct keys seen once each must not make an unseen key look hot.
func TestSketchKeepsColdKeysCold(t *testing.T) {
	t.Parallel()
	s := newSketch(time.Hour)
	for i := range 5000 {
		s.add("key" + strconv.Itoa(i))
	}
	hot := 0
	for i := range 1000 {
		if s.estimate("unseen"+strconv.Itoa(i)) >= DefaultHotAfter {
			hot++
		}
	}
	if hot > 0 {
		t.Fatalf("%d of 1000 unseen keys estimated >= %d", hot, DefaultHotAfter)
	}
}
