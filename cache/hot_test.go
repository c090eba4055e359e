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

// TestHotCopyTellsTheValuesOwnExpiry: a value read through a node that
// keeps a hot copy of it answers with the value's own expiry (none for a
// value without one), not the copy's HotTTL; the copy is still served for
// HotTTL only, then fetched again from the owner.
func TestHotCopyTellsTheValuesOwnExpiry(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{0, time.Hour} {
		t.Run(ttl.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := newOrigin()
				c := newCluster(t, 2, hashOwner(2), GroupConfig{MaxBytes: 1 << 20, TTL: ttl, HotTTL: time.Minute}, o.getter)
				key := keyOwnedBy(t, c.owner, 1)
				start := time.Now()
				var want time.Time
				if ttl > 0 {
					want = start.Add(ttl)
				}
				for range 2 { // the first fetches and keeps a copy, the second is served from it
					v := mustGet(t, c.groups[0], key, "v:"+key)
					if !v.Expires.Equal(want) {
						t.Fatalf("Expires = %v, want %v (the value's own, not the copy's HotTTL)", v.Expires, want)
					}
				}
				if s := c.groups[0].Stats(); s.HotHits != 1 || s.PeerLoads != 1 {
					t.Fatalf("HotHits %d, PeerLoads %d; want 1 and 1", s.HotHits, s.PeerLoads)
				}
				time.Sleep(time.Minute)
				mustGet(t, c.groups[0], key, "v:"+key)
				if s := c.groups[0].Stats(); s.PeerLoads != 2 {
					t.Fatalf("after HotTTL, PeerLoads = %d; want 2 (the copy is no longer served)", s.PeerLoads)
				}
			})
		})
	}
}
