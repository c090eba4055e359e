package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/poll"
	"github.com/ringcache/ringcache/transport/api"
)

// keyOf returns a key that n owns by every node's ring (they agree here).
func keyOf(t testing.TB, nodes []*testNode, n *testNode, prefix string) string {
	t.Helper()
	for i := range 10000 {
		k := fmt.Sprintf("%s%d", prefix, i)
		if owner(t, nodes, k) == n {
			return k
		}
	}
	t.Fatalf("no key owned by %s", n.url)
	return ""
}

// slowOriginLatencies are the origin latencies TestSlowOriginLoadsOnce runs
// with: RINGCACHE_SLOW_ORIGINS (a comma-separated list of durations, for
// measuring long origins by hand) or one that is three PeerTimeouts long.
func slowOriginLatencies(t *testing.T, def time.Duration) []time.Duration {
	env := os.Getenv("RINGCACHE_SLOW_ORIGINS")
	if env == "" {
		return []time.Duration{def}
	}
	var out []time.Duration
	for f := range strings.SplitSeq(env, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("RINGCACHE_SLOW_ORIGINS: %v", err)
		}
		out = append(out, d)
	}
	return out
}

// TestSlowOriginLoadsOnce: an origin that takes much longer than the peer
// timeout is still loaded once for the whole cluster, however many callers
// on however many nodes wait for it: the owner shows it is alive (102) and
// the non-owners wait for it instead of loading the key themselves. Callers
// whose own deadline ends first get their error at once, and the load goes
// on for the others.
func TestSlowOriginLoadsOnce(t *testing.T) {
	t.Parallel()
	// The default: a shorter one would make a test on a loaded machine
	// depend on scheduling more than on the protocol.
	peerTimeout := DefaultPeerTimeout
	for _, latency := range slowOriginLatencies(t, 3*peerTimeout) {
		t.Run(latency.String(), func(t *testing.T) {
			t.Parallel()
			nodes, loads := newCluster(t, 3, clusterOpts{
				pool:  func(_ int, c *Config) { c.PeerTimeout = peerTimeout },
				group: func(g *cache.GroupConfig) { g.LoadTimeout = latency + 10*time.Second },
				origin: func(ctx context.Context, node, key string) (cache.Value, error) {
					select {
					case <-time.After(latency):
					case <-ctx.Done():
						return cache.Value{}, ctx.Err()
					}
					return defaultOrigin(ctx, node, key)
				},
			})
			c := testClient(t)
			key := "slow"
			start := time.Now()
			var wg sync.WaitGroup
			var ok, timedOut atomic.Int64
			for i := range 30 {
				wg.Go(func() {
					if err := get(t, c, nodes[i%3], key); err != nil {
						t.Error(err)
						return
					}
					ok.Add(1)
				})
			}
			// Impatient callers: their deadline is a fraction of the
			// origin's latency.
			for i := range 30 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), latency/4)
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, publicURL(nodes[i%3].url, testGroup, key), nil)
					res, err := c.Do(req)
					if err == nil {
						res.Body.Close()
						t.Errorf("an impatient caller got %d before the origin answered", res.StatusCode)
						return
					}
					if time.Since(start) > latency/2 {
						t.Errorf("an impatient caller waited %v past its deadline", time.Since(start))
					}
					timedOut.Add(1)
				})
			}
			wg.Wait()
			if ok.Load() != 30 || timedOut.Load() != 30 {
				t.Fatalf("%d patient callers served, %d impatient ones timed out; want 30 and 30", ok.Load(), timedOut.Load())
			}
			if got := loads.of(key); len(got) != 1 || got[0] != owner(t, nodes, key).url {
				t.Fatalf("origin loads of %q = %v, want one, by the owner", key, got)
			}
			t.Logf("origin latency %v, peer timeout %v: %d origin load(s) for 60 callers on 3 nodes", latency, peerTimeout, len(loads.of(key)))
		})
	}
}

// TestPausedOwnerCostsOneTimeout: requests for the keys of a node that
// accepts connections and never answers (paused) wait PeerTimeout once; the
// node is then suspected and its keys are served by local fallback at once.
// When it answers again, a probe notices and requests reach it again.
func TestPausedOwnerCostsOneTimeout(t *testing.T) {
	t.Parallel()
	const peerTimeout = DefaultPeerTimeout
	nodes, _ := newCluster(t, 3, clusterOpts{pool: func(_ int, c *Config) { c.PeerTimeout = peerTimeout }})
	c := testClient(t)
	paused := nodes[2]
	var keys []string
	for i := range 20 {
		keys = append(keys, keyOf(t, nodes, paused, fmt.Sprintf("p%d-", i)))
	}
	paused.gate.pause()
	var slow []time.Duration
	for _, k := range keys {
		start := time.Now()
		if err := get(t, c, nodes[0], k); err != nil {
			t.Fatal(err)
		}
		// Waiting on the paused owner takes the whole PeerTimeout; half
		// of it tells that from a scheduling hiccup on a busy machine.
		if d := time.Since(start); d > peerTimeout/2 {
			slow = append(slow, d)
		}
	}
	if len(slow) != 1 || slow[0] < peerTimeout || slow[0] > peerTimeout+time.Second {
		t.Fatalf("slow requests %v, want one of about %v", slow, peerTimeout)
	}
	if got := nodes[0].pool.Suspected(); len(got) != 1 || got[0] != paused.url {
		t.Fatalf("Suspected() = %v, want the paused node", got)
	}
	paused.gate.resume()
	poll.Until(t, 10*time.Second, func() (bool, string) {
		if len(nodes[0].pool.Suspected()) == 0 {
			return true, ""
		}
		if err := get(t, c, nodes[0], keys[0]); err != nil { // kicks the probe
			t.Fatal(err)
		}
		return false, "the node is still suspected after it resumed"
	})
	before := nodes[0].group.Stats().PeerLoads
	if err := get(t, c, nodes[0], keyOf(t, nodes, paused, "after-")); err != nil {
		t.Fatal(err)
	}
	if nodes[0].group.Stats().PeerLoads != before+1 {
		t.Fatal("a request for the resumed node's key did not reach it")
	}
}

// put writes a value through a node's public API and returns the answer.
func put(t testing.TB, c *http.Client, n *testNode, key, value string) response {
	t.Helper()
	return mustDo(t, c, http.MethodPut, publicURL(n.url, testGroup, key), strings.NewReader(value))
}

// mustRead checks that key reads as want through n.
func mustRead(t testing.TB, c *http.Client, n *testNode, key, want string) {
	t.Helper()
	r := mustDo(t, c, http.MethodGet, publicURL(n.url, testGroup, key), nil)
	if r.status != http.StatusOK || r.body != want {
		t.Fatalf("GET %q at %s = %d %q, want %q", key, n.url, r.status, r.body, want)
	}
}

// TestPutReachesEveryHotCopy: a key hot on a non-owner, written through
// another node, reads as the new value on the hot node at once.
func TestPutReachesEveryHotCopy(t *testing.T) {
	t.Parallel()
	nodes, _ := newCluster(t, 3, clusterOpts{group: func(g *cache.GroupConfig) { g.HotAfter = 1 }})
	c := testClient(t)
	key := keyOf(t, nodes, nodes[1], "hot")
	if r := put(t, c, nodes[0], key, "v1"); r.status != http.StatusNoContent {
		t.Fatalf("PUT = %d %q", r.status, r.body)
	}
	for range 3 {
		mustRead(t, c, nodes[2], key, "v1")
	}
	if s := nodes[2].group.Stats(); s.HotItems != 1 {
		t.Fatalf("node 2 HotItems = %d, want 1", s.HotItems)
	}
	r := put(t, c, nodes[0], key, "v2")
	if r.status != http.StatusNoContent || r.header.Get(api.HeaderUnreached) != "" {
		t.Fatalf("PUT = %d %q, %s %q", r.status, r.body, api.HeaderUnreached, r.header.Get(api.HeaderUnreached))
	}
	for _, n := range nodes {
		mustRead(t, c, n, key, "v2")
	}
}

// TestWriteWithAPausedNode: a write while a node that holds a hot copy is
// paused answers 204 within about a lease, naming the paused node; once it
// resumes, that node serves the new value, never its old copy. A write whose
// owner is paused is a 502: it was not applied.
func TestWriteWithAPausedNode(t *testing.T) {
	t.Parallel()
	const peerTimeout, leaseTTL = 300 * time.Millisecond, 2 * time.Second
	nodes, _ := newCluster(t, 3, clusterOpts{
		pool:  func(_ int, c *Config) { c.PeerTimeout, c.LeaseTTL = peerTimeout, leaseTTL },
		group: func(g *cache.GroupConfig) { g.HotAfter = 1 },
	})
	c := testClient(t)
	key := keyOf(t, nodes, nodes[1], "w")
	put(t, c, nodes[0], key, "v1")
	mustRead(t, c, nodes[2], key, "v1")
	mustRead(t, c, nodes[2], key, "v1")
	if s := nodes[2].group.Stats(); s.HotItems != 1 {
		t.Fatalf("node 2 HotItems = %d, want 1", s.HotItems)
	}
	nodes[2].gate.pause()
	for i, method := range []string{http.MethodPut, http.MethodDelete} {
		start := time.Now()
		r := mustDo(t, c, method, publicURL(nodes[0].url, testGroup, key), strings.NewReader(fmt.Sprintf("v%d", i+2)))
		d := time.Since(start)
		if r.status != http.StatusNoContent || r.header.Get(api.HeaderUnreached) != nodes[2].url {
			t.Fatalf("%s with node 2 paused = %d %q, %s %q; want 204 naming %s", method, r.status, r.body,
				api.HeaderUnreached, r.header.Get(api.HeaderUnreached), nodes[2].url)
		}
		if limit := peerTimeout + leaseTTL + leaseMargin(leaseTTL) + 500*time.Millisecond; d > limit {
			t.Fatalf("%s took %v with a paused node, want under %v", method, d, limit)
		}
		t.Logf("%s with a paused node: 204 in %v", method, d)
		if method == http.MethodPut {
			mustRead(t, c, nodes[0], key, "v2")
		}
	}
	nodes[2].gate.resume()
	mustRead(t, c, nodes[2], key, string(valueOf(key)))

	// The owner paused: the write is not applied, and says so.
	nodes[1].gate.pause()
	defer nodes[1].gate.resume()
	// It fails after PeerTimeout of silence: a live owner would have sent
	// 102 while it waited for the paused node's lease.
	start := time.Now()
	r := put(t, c, nodes[0], key, "lost")
	if r.status != http.StatusBadGateway || strings.TrimSpace(r.body) != "key owner unreachable" {
		t.Fatalf("PUT with the owner paused = %d %q, want 502 key owner unreachable", r.status, r.body)
	}
	if d := time.Since(start); d > peerTimeout+time.Second {
		t.Fatalf("PUT with the owner paused failed after %v, want about %v", d, peerTimeout)
	}
}

// TestNoOldValueAfterRejoin: the owner of k holds a written value; it is
// paused long enough for the others to drop it from their rings, k is
// written again through another node, then the old owner resumes and
// rejoins. No node may serve the first value again: the others dropped
// the old owner (its peers' tokens for it changed), so what it held before
// is not served.
func TestNoOldValueAfterRejoin(t *testing.T) {
	t.Parallel()
	type tenure struct {
		term atomic.Uint64
		held atomic.Bool
	}
	ten := make([]*tenure, 3)
	for i := range ten {
		ten[i] = &tenure{}
		ten[i].term.Store(1)
		ten[i].held.Store(true)
	}
	nodes, _ := newCluster(t, 3, clusterOpts{tenure: func(i int) func() (uint64, bool) {
		return func() (uint64, bool) { return ten[i].term.Load(), ten[i].held.Load() }
	}})
	c := testClient(t)
	old := nodes[1]
	key := keyOf(t, nodes, old, "k")
	put(t, c, nodes[0], key, "first")
	mustRead(t, c, old, key, "first")

	old.gate.pause()
	ten[1].held.Store(false) // its etcd lease runs out while it is paused
	// The others drop a paused node only its lease's TTL and their
	// hold-down after its last keepalive (seconds): by then what it last
	// heard from them is past the window in which their word counts
	// (twice the contact lease, Pool.MemberConfirmed). Pause it that long.
	time.Sleep(2 * old.pool.Config().LeaseTTL)
	for _, n := range []*testNode{nodes[0], nodes[2]} {
		if err := n.pool.Set(nodes[0].url, nodes[2].url); err != nil {
			t.Fatal(err)
		}
	}
	if r := put(t, c, nodes[0], key, "second"); r.status != http.StatusNoContent {
		t.Fatalf("PUT while the old owner is out = %d %q", r.status, r.body)
	}
	mustRead(t, c, nodes[2], key, "second")

	old.gate.resume()
	ten[1].term.Store(2) // registered again, under a new lease
	ten[1].held.Store(true)
	for _, n := range []*testNode{nodes[0], nodes[2]} {
		if err := n.pool.Set(nodes[0].url, nodes[1].url, nodes[2].url); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		r := mustDo(t, c, http.MethodGet, publicURL(n.url, testGroup, key), nil)
		if r.status != http.StatusOK || r.body == "first" {
			t.Fatalf("GET at %s after the rejoin = %d %q; the first write came back", n.url, r.status, r.body)
		}
	}
}

// TestDroppedOwnerLearnsFromTheRequest: the others drop the owner of k and
// take it back at once, between two of its probes, while its own
// registration never lapsed (it does not probe then): k was written
// meanwhile through the others. The first peer request it gets carries the
// asker's new token for it, and it serves nothing of what it held before.
func TestDroppedOwnerLearnsFromTheRequest(t *testing.T) {
	t.Parallel()
	nodes, _ := newCluster(t, 3, clusterOpts{tenure: func(int) func() (uint64, bool) {
		return func() (uint64, bool) { return 1, true }
	}})
	c := testClient(t)
	owner := nodes[1]
	key := keyOf(t, nodes, owner, "k")
	put(t, c, nodes[0], key, "first")
	mustRead(t, c, owner, key, "first")
	// The owner's probes bring each peer's token for it: its baseline, to
	// which a later token is compared. A probe sent when the owner added a
	// peer that had not added the owner yet (the nodes take their rings one
	// after another) brings none, so the owner asks again until each did.
	poll.Until(t, 5*time.Second, func() (bool, string) {
		owner.pool.probeMembers()
		known := 0
		for _, pe := range owner.pool.state.Load().peers {
			if pe.since.Load() != nil {
				known++
			}
		}
		return known == 2, fmt.Sprintf("the owner knows %d of 2 peers' tokens for it", known)
	})

	others := []*testNode{nodes[0], nodes[2]}
	for _, n := range others {
		if err := n.pool.Set(nodes[0].url, nodes[2].url); err != nil {
			t.Fatal(err)
		}
	}
	if r := put(t, c, nodes[0], key, "second"); r.status != http.StatusNoContent {
		t.Fatalf("PUT while the owner is out = %d %q", r.status, r.body)
	}
	for _, n := range others {
		if err := n.pool.Set(nodes[0].url, nodes[1].url, nodes[2].url); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		r := mustDo(t, c, http.MethodGet, publicURL(n.url, testGroup, key), nil)
		if r.status != http.StatusOK || r.body == "first" {
			t.Fatalf("GET at %s after the owner was taken back = %d %q; the first write came back", n.url, r.status, r.body)
		}
	}
}

// TestFailingOriginIsAskedOncePerErrorTTL: 50 requests for a key whose
// origin fails, through every node, reach the origin once per ErrorTTL.
func TestFailingOriginIsAskedOncePerErrorTTL(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 3, clusterOpts{origin: func(context.Context, string, string) (cache.Value, error) {
		return cache.Value{}, errors.New("origin answered 500")
	}})
	c := testClient(t)
	start := time.Now()
	for i := range 50 {
		r := mustDo(t, c, http.MethodGet, publicURL(nodes[i%3].url, testGroup, "bad"), nil)
		if r.status != http.StatusBadGateway {
			t.Fatalf("GET = %d %q, want 502", r.status, r.body)
		}
	}
	allowed := 1 + int(time.Since(start)/time.Second) // the default ErrorTTL
	if n := len(loads.of("bad")); n < 1 || n > allowed {
		t.Fatalf("origin loads = %d for 50 requests in %v, want 1 to %d", n, time.Since(start), allowed)
	}
}

// TestPeerWriteToANonOwnerIsRefused: a peer PUT or DELETE (owner scope) for
// a key the receiving node does not own is a 421, and no node serves the
// value it carried.
func TestPeerWriteToANonOwnerIsRefused(t *testing.T) {
	t.Parallel()
	nodes, _ := newCluster(t, 3, clusterOpts{})
	c := testClient(t)
	key := keyOf(t, nodes, nodes[1], "f")
	mustRead(t, c, nodes[1], key, string(valueOf(key)))
	u := nodes[0].url + peerPath(DefaultBasePath, testGroup, key)
	if r := mustDo(t, c, http.MethodPut, u, strings.NewReader("forged")); r.status != http.StatusMisdirectedRequest {
		t.Fatalf("peer PUT at a non-owner = %d %q, want 421", r.status, r.body)
	}
	if r := mustDo(t, c, http.MethodDelete, u, nil); r.status != http.StatusMisdirectedRequest {
		t.Fatalf("peer DELETE at a non-owner = %d %q, want 421", r.status, r.body)
	}
	for _, n := range nodes {
		mustRead(t, c, n, key, string(valueOf(key)))
	}
}

// TestStaleAnswers: a value served past its expiry, through its owner or
// another node, is a 200 with its Age, and one refresh brings it back fresh.
func TestStaleAnswers(t *testing.T) {
	t.Parallel()
	var loads atomic.Int64
	nodes, _ := newCluster(t, 2, clusterOpts{
		group: func(g *cache.GroupConfig) { g.TTL, g.StaleWhileRevalidate = time.Second, time.Minute },
		origin: func(context.Context, string, string) (cache.Value, error) {
			n := loads.Add(1)
			if n > 1 {
				time.Sleep(time.Second) // the refresh: the stale reads do not wait for it
			}
			return cache.Value{Data: fmt.Appendf(nil, "v%d", n)}, nil
		},
	})
	c := testClient(t)
	key := keyOf(t, nodes, nodes[1], "s")
	mustRead(t, c, nodes[0], key, "v1")
	time.Sleep(2100 * time.Millisecond)
	for _, n := range nodes {
		start := time.Now()
		r := mustDo(t, c, http.MethodGet, publicURL(n.url, testGroup, key), nil)
		if time.Since(start) > 500*time.Millisecond {
			t.Fatalf("a stale read at %s waited %v for the refresh", n.url, time.Since(start))
		}
		if r.status != http.StatusOK || r.body != "v1" || r.header.Get("Age") < "2" || r.header.Get("Cache-Control") != "max-age=0" {
			t.Fatalf("stale GET at %s = %d %q, Age %q, Cache-Control %q", n.url, r.status, r.body, r.header.Get("Age"), r.header.Get("Cache-Control"))
		}
	}
	poll.Until(t, 5*time.Second, func() (bool, string) {
		r := mustDo(t, c, http.MethodGet, publicURL(nodes[0].url, testGroup, key), nil)
		return r.body == "v2" && r.header.Get("Age") == "", fmt.Sprintf("no fresh value after the stale reads: %q", r.body)
	})
	if loads.Load() != 2 {
		t.Fatalf("loads = %d, want 2", loads.Load())
	}
}

// TestMemberConfirmed: a node hears from its peers whether they count it
// in: yes while they do, no once they dropped it, and nothing to go on
// before it asked (it asks in the background when it needs to know).
func TestMemberConfirmed(t *testing.T) {
	t.Parallel()
	nodes, _ := newCluster(t, 2, clusterOpts{})
	a, b := nodes[0], nodes[1]
	waitFor := func(want bool) {
		t.Helper()
		poll.Until(t, 5*time.Second, func() (bool, string) {
			return a.pool.MemberConfirmed() == want, fmt.Sprintf("MemberConfirmed() is not %v", want)
		})
	}
	if a.pool.MemberConfirmed() {
		t.Fatal("confirmed before any peer said so")
	}
	waitFor(true)                        // the first call pinged b
	if err := b.pool.Set(); err != nil { // b drops a
		t.Fatal(err)
	}
	waitFor(false)
	alone, err := NewPool(Config{Self: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(alone.Close)
	if !alone.MemberConfirmed() {
		t.Fatal("a node without peers is not its own cluster")
	}
}

// TestSilentPeerReleasesEveryWaiter: requests sent to a paused owner one
// after another do not each wait their own PeerTimeout: when the first finds
// the owner silent, the others, which have heard nothing from it either,
// fall back at once.
func TestSilentPeerReleasesEveryWaiter(t *testing.T) {
	t.Parallel()
	nodes, _ := newCluster(t, 2, clusterOpts{pool: func(_ int, c *Config) { c.PeerTimeout = DefaultPeerTimeout }})
	c := testClient(t)
	paused := nodes[1]
	paused.gate.pause()
	defer paused.gate.resume()
	start := time.Now()
	var wg sync.WaitGroup
	done := make([]time.Duration, 10)
	for i := range done {
		key := keyOf(t, nodes, paused, fmt.Sprintf("w%d-", i))
		time.Sleep(time.Until(start.Add(time.Duration(i) * 60 * time.Millisecond)))
		wg.Go(func() {
			if err := get(t, c, nodes[0], key); err != nil {
				t.Error(err)
			}
			done[i] = time.Since(start)
		})
	}
	wg.Wait()
	// Without the release the last one, sent at +540ms, would end at
	// about +1.54s.
	for i, d := range done {
		if d > DefaultPeerTimeout+350*time.Millisecond {
			t.Fatalf("request %d (sent at +%v) ended at +%v: it waited out its own timeout", i, time.Duration(i)*60*time.Millisecond, d)
		}
	}
	t.Logf("10 requests sent over 540ms to a paused owner all ended by +%v", slices.Max(done))
}

// TestNoFallbackForAWrittenKey: a node cut off from a key's owner loads a
// fallback copy from the origin for a key nobody wrote, but not for one
// written at the owner before the cut, whose origin value is older than the
// write: that read is a 503 with Retry-After (cache.ErrOwnerUnreachable),
// on the node that forwarded the write and on the one the owner's drop
// reached. Once the owner answers again, the written value is served.
func TestNoFallbackForAWrittenKey(t *testing.T) {
	t.Parallel()
	const peerTimeout = 300 * time.Millisecond
	nodes, _ := newCluster(t, 3, clusterOpts{pool: func(_ int, c *Config) { c.PeerTimeout = peerTimeout }})
	c := testClient(t)
	own := nodes[2]
	written, unwritten := keyOf(t, nodes, own, "w"), keyOf(t, nodes, own, "u")
	mustRead(t, c, nodes[1], written, string(valueOf(written)))
	if r := put(t, c, nodes[0], written, "put"); r.status != http.StatusNoContent {
		t.Fatalf("PUT = %d %q", r.status, r.body)
	}
	own.gate.pause()
	defer own.gate.resume()
	for _, n := range nodes[:2] {
		r := mustDo(t, c, http.MethodGet, publicURL(n.url, testGroup, written), nil)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Errorf("GET of the written key at %s with its owner paused = %d %q; want 503 with Retry-After", n.url, r.status, r.body)
		}
		mustRead(t, c, n, unwritten, string(valueOf(unwritten)))
	}
	own.gate.resume()
	poll.Until(t, 10*time.Second, func() (bool, string) {
		r := mustDo(t, c, http.MethodGet, publicURL(nodes[0].url, testGroup, written), nil)
		return r.status == http.StatusOK && r.body == "put", fmt.Sprintf("GET %d %q", r.status, r.body)
	})
}

// TestEvictedWriteLeavesNoCopy: the owner of a written key evicts it while
// another node holds a hot copy of the written value. The owner's next read
// of the key loads the origin's value, and drops the copies first: no read
// returns the written value after one returned the origin's.
func TestEvictedWriteLeavesNoCopy(t *testing.T) {
	t.Parallel()
	nodes, _ := newCluster(t, 3, clusterOpts{group: func(g *cache.GroupConfig) {
		g.MaxBytes, g.HotAfter, g.Policy = 64<<10, 1, cache.PolicyLRU
	}})
	c := testClient(t)
	own, other := nodes[1], nodes[2]
	key := keyOf(t, nodes, own, "w")
	if r := put(t, c, nodes[0], key, "put"); r.status != http.StatusNoContent {
		t.Fatalf("PUT = %d %q", r.status, r.body)
	}
	mustRead(t, c, other, key, "put")
	if _, cached, _ := other.group.GetCached(key); !cached {
		t.Fatal("the other node kept no hot copy of the written value")
	}
	// Fill the owner until the written value is evicted: five times what
	// it holds (a lookup would count as a read and keep it).
	for i := range 2000 {
		if _, err := own.group.Get(t.Context(), keyOf(t, nodes, own, fmt.Sprintf("fill%d-", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, cached, _ := own.group.GetCached(key); cached {
		t.Fatalf("the owner never evicted the written value: %+v", own.group.Stats())
	}
	mustRead(t, c, own, key, string(valueOf(key)))
	mustRead(t, c, other, key, string(valueOf(key)))
}
