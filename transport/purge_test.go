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
