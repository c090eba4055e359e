package transport

import (
	"testing"
	"time"
)

// TestPurgeLogUnreadTooLong: a node whose last read of the purge log is
// older than the log keeps purges (a day) drops every cached value when it
// reads the log again, since it cannot know what it missed; one that read it
// within that keeps them.
func TestPurgeLogUnreadTooLong(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		gap  time.Duration
		kept bool
	}{{time.Hour, true}, {purgeRetention + time.Minute, false}} {
		nodes, _ := newCluster(t, 1, clusterOpts{})
		n := nodes[0]
		if _, err := n.group.Get(t.Context(), "k"); err != nil {
			t.Fatal(err)
		}
		ps := n.pool.purges
		ps.freshAt.Store(1)
		ps.catchUp(1+int64(tc.gap), 0, nil)
		_, cached, _ := n.group.GetCached("k")
		if cached != tc.kept {
			t.Errorf("log unread for %v: k cached %v, want %v", tc.gap, cached, tc.kept)
		}
	}
}

// TestLookupsStopTrustingAnUnreadLog: a node whose purge log went unread
// for its purge lease serves nothing from its caches. Lookups read a flag
// a timer clears (no clock read each): it turns off before current() does,
// never after, and on again when the log is read.
func TestLookupsStopTrustingAnUnreadLog(t *testing.T) {
	t.Parallel()
	// The flag goes off lease/16 early (100ms here): a timer that fires
	// later than that, as under the race detector on a busy machine, would
	// be the failure this test looks for, so the margin is kept well above
	// a scheduling delay (with the default lease it is 3.75s).
	const lease = 1600 * time.Millisecond
	nodes, _ := newCluster(t, 1, clusterOpts{pool: func(_ int, c *Config) { c.PurgeLease = lease }})
	n := nodes[0]
	ps := n.pool.purges
	ps.log.Store(&purgeLogBox{}) // a log that is never read
	ps.markFresh(ps.since())
	if _, err := n.group.Get(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	if _, cached, _ := n.group.GetCached("k"); !cached || !n.pool.PurgesCurrent() {
		t.Fatalf("just after a read of the log: cached %v, current %v", cached, n.pool.PurgesCurrent())
	}
	start := time.Now()
	for n.pool.PurgesCurrent() {
		if !ps.current() {
			t.Fatal("lookups still trust the log after current() stopped")
		}
		if time.Since(start) > 2*lease {
			t.Fatalf("lookups still trust a log unread for %v (lease %v)", time.Since(start), lease)
		}
		time.Sleep(time.Millisecond)
	}
	if _, cached, _ := n.group.GetCached("k"); cached {
		t.Fatal("served from the cache with the log unread past its lease")
	}
	ps.markFresh(ps.since())
	if _, cached, _ := n.group.GetCached("k"); !cached {
		t.Fatal("not served from the cache once the log was read again")
	}
}
