package transport

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/poll"
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

// TestPurgeNeverGoesBackInTime: while a purge has not reached a node that
// holds a hot copy of a key, the key's owner keeps serving the value from
// before the purge. Were the owner to drop it at once, a client could read
// the owner's new value and then the other node's old copy: a read going
// back in time. Once the purge reached every node, both serve the new one.
func TestPurgeNeverGoesBackInTime(t *testing.T) {
	t.Parallel()
	var gen atomic.Int64
	gen.Store(1)
	held := make(chan struct{})
	var release sync.Once
	var holder string // the node whose purge rounds wait for release
	nodes, _ := newCluster(t, 3, clusterOpts{
		origin: func(_ context.Context, _, key string) (cache.Value, error) {
			return cache.Value{Data: fmt.Appendf(nil, "%s@%d", key, gen.Load())}, nil
		},
		wrapPeer: func(i int, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, purgeRoute) && "http://"+r.Host == holder {
					<-held
				}
				h.ServeHTTP(w, r)
			})
		},
	})
	// After newCluster's cleanups, so before them: a server closes only
	// once its handlers return.
	t.Cleanup(func() { release.Do(func() { close(held) }) })
	const key = "k"
	own, cp := owner(t, nodes, key), notOwner(t, nodes, key)
	var other *testNode
	for _, n := range nodes {
		if n != own && n != cp {
			other = n
		}
	}
	holder = cp.url
	read := func(n *testNode) string {
		t.Helper()
		v, err := n.group.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		return string(v.Data)
	}
	if v := read(cp); v != "k@1" {
		t.Fatalf("warming through a non-owner: %q", v)
	}
	if _, cached, _ := cp.group.GetCached(key); !cached {
		t.Fatal("the non-owner kept no hot copy")
	}
	gen.Store(2)
	done := make(chan error, 1)
	var res cache.PurgeResult
	go func() {
		var err error
		res, err = other.group.Purge(t.Context())
		done <- err
	}()
	poll.Until(t, 10*time.Second, func() (bool, string) {
		return len(own.pool.Purges()) == 1, fmt.Sprintf("the owner lists %d purges", len(own.pool.Purges()))
	})
	for range 20 {
		o, c := read(own), read(cp)
		if o == "k@2" && c == "k@1" {
			t.Fatalf("the owner served the value loaded after the purge, then the holder of a copy the one before it")
		}
		if o != "k@1" {
			t.Fatalf("the owner served %q before the purge reached every node", o)
		}
	}
	release.Do(func() { close(held) })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(res.Confirmed) != 2 || len(res.Unconfirmed) != 0 {
		t.Errorf("purge result %+v; want both other nodes confirmed", res)
	}
	for _, n := range nodes {
		if v := read(n); v != "k@2" {
			t.Errorf("%s after the purge: %q", n.url, v)
		}
	}
}

// TestHeldPurgeAppliesItself: a node that held a purge (its first round)
// and never got the second, its maker having died, drops its own values of
// the purge by itself once every node has held it or stopped serving from
// its caches: the purge lease and a margin after it held it.
func TestHeldPurgeAppliesItself(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	nodes, _ := newCluster(t, 1, clusterOpts{pool: func(_ int, c *Config) { c.PurgeLease = lease }})
	n := nodes[0]
	if _, err := n.group.Get(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	ps := n.pool.purges
	start := time.Now()
	ps.hold(cache.Purge{ID: "p1", Group: testGroup, At: start})
	if _, cached, _ := n.group.GetCached("k"); !cached {
		t.Fatal("the first round dropped the node's own value")
	}
	poll.Until(t, 10*time.Second, func() (bool, string) {
		_, cached, _ := n.group.GetCached("k")
		return !cached, "k still cached"
	})
	if d := time.Since(start); d < ps.roundWait() {
		t.Fatalf("the held purge applied itself after %v, before every node could have held it (%v)", d, ps.roundWait())
	}
}
