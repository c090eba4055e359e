package cache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// keyOwnedBy returns a key that owner(key) assigns to node i.
func keyOwnedBy(t *testing.T, owner func(string) int, i int) string {
	t.Helper()
	for n := range 1000 {
		if k := fmt.Sprintf("key%d", n); owner(k) == i {
			return k
		}
	}
	t.Fatalf("no key owned by node %d", i)
	return ""
}

// TestClusterColdKeyLoadsOnce: 200 concurrent Gets of one cold key spread
// over three nodes cause exactly one origin load, by the owner.
func TestClusterColdKeyLoadsOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		o := newOrigin()
		c := newCluster(t, 3, hashOwner(3), GroupConfig{MaxBytes: 1 << 20}, func(i int) Getter {
			inner := o.getter(i)
			return GetterFunc(func(ctx context.Context, key string) (Value, error) {
				<-release
				return inner.Get(ctx, key)
			})
		})
		key := keyOwnedBy(t, c.owner, 1)
		var wg sync.WaitGroup
		var ok atomic.Int64
		for i := range 200 {
			wg.Go(func() {
				if v, err := c.groups[i%3].Get(context.Background(), key); err == nil && string(v.Data) == "v:"+key {
					ok.Add(1)
				}
			})
		}
		synctest.Wait() // all 200 wait on one load at node 1
		close(release)
		wg.Wait()
		if ok.Load() != 200 {
			t.Fatalf("%d of 200 Gets got the value", ok.Load())
		}
		if got := o.loadsOf(key); !slices.Equal(got, []int{1}) {
			t.Fatalf("loads by node: %v, want [1]", got)
		}
		// Nodes 0 and 2 each sent one fetch for their ~67 callers.
		if f := c.peers[1].fetches.Load(); f != 2 {
			t.Fatalf("fetches at the owner = %d, want 2", f)
		}
	})
}

// TestClusterEveryKeyLoadedOnceByItsOwner: 1,000 keys read 5 times each from
// random nodes are loaded once each, always by the key's owner.
func TestClusterEveryKeyLoadedOnceByItsOwner(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	c := newCluster(t, 3, hashOwner(3), GroupConfig{MaxBytes: 1 << 22}, o.getter)
	type read struct {
		key  string
		node int
	}
	var reads []read
	for k := range 1000 {
		for range 5 {
			reads = append(reads, read{fmt.Sprintf("key%d", k), rand.IntN(3)})
		}
	}
	rand.Shuffle(len(reads), func(i, j int) { reads[i], reads[j] = reads[j], reads[i] })
	work := make(chan read)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for r := range work {
				v, err := c.groups[r.node].Get(context.Background(), r.key)
				if err != nil || string(v.Data) != "v:"+r.key {
					t.Errorf("node %d Get(%q) = %q, %v", r.node, r.key, v.Data, err)
				}
			}
		})
	}
	for _, r := range reads {
		work <- r
	}
	close(work)
	wg.Wait()
	for k := range 1000 {
		key := fmt.Sprintf("key%d", k)
		if got := o.loadsOf(key); !slices.Equal(got, []int{c.owner(key)}) {
			t.Fatalf("loads of %s by node: %v, want [%d]", key, got, c.owner(key))
		}
	}
	var local int64
	for _, g := range c.groups {
		local += g.Stats().LocalLoads
	}
	if local != 1000 {
		t.Fatalf("LocalLoads summed over nodes = %d, want 1000", local)
	}
}

// TestContradictoryRings: two nodes that each think the other owns a key do
// not deadlock (the one-hop rule) and load it at most once each.
func TestContradictoryRings(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		o := newOrigin()
		const latency = time.Second
		// Node i thinks node 1-i owns every key.
		peers := []*fakePeer{{name: "a"}, {name: "b"}}
		var groups []*Group
		for i := range 2 {
			n := newNode(t, Config{Peers: ring{self: i, peers: peers, owner: func(string) int { return 1 - i }}})
			peers[i].node = n
			inner := o.getter(i)
			g, err := n.NewGroup(GroupConfig{Name: "g", MaxBytes: 1 << 20, Getter: GetterFunc(func(ctx context.Context, key string) (Value, error) {
				time.Sleep(latency)
				return inner.Get(ctx, key)
			})})
			if err != nil {
				t.Fatal(err)
			}
			groups = append(groups, g)
		}
		start := time.Now()
		var wg sync.WaitGroup
		for i := range 2 {
			for range 10 {
				wg.Go(func() {
					if _, err := groups[i].Get(context.Background(), "k"); err != nil {
						t.Error(err)
					}
				})
			}
		}
		wg.Wait() // synctest reports a deadlock if the nodes wait on each other
		if d := time.Since(start); d > latency {
			t.Fatalf("Gets took %v, want the origin's %v", d, latency)
		}
		if n := o.total.Load(); n < 1 || n > 2 {
			t.Fatalf("loads = %d, want 1 or 2", n)
		}
		// Neither node owns k by its ring: the values live in hot caches only.
		for i, g := range groups {
			if s := g.Stats(); s.MainItems != 0 {
				t.Fatalf("node %d MainItems = %d, want 0", i, s.MainItems)
			}
		}
	})
}

func TestGetLocalNeverAsksAPeer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		o := newOrigin()
		c := newCluster(t, 2, hashOwner(2), GroupConfig{MaxBytes: 1 << 20}, o.getter)
		key := keyOwnedBy(t, c.owner, 1)
		start := time.Now()
		v, err := c.groups[0].getLocal(t.Context(), key, "", 0, nil)
		if err != nil || string(v.Data) != "v:"+key {
			t.Fatalf("getLocal = %q, %v", v.Data, err)
		}
		if c.peers[1].fetches.Load() != 0 {
			t.Fatal("getLocal fetched from the owner")
		}
		if !v.Expires.Equal(start.Add(5 * time.Second)) {
			t.Fatalf("Expires = %v, want start + FallbackTTL", v.Expires)
		}
		s := c.groups[0].Stats()
		if s.MainItems != 0 || s.HotItems != 1 || s.PeerGets != 1 || s.LocalLoads != 1 {
			t.Fatalf("Stats: MainItems %d, HotItems %d, PeerGets %d, LocalLoads %d; want 0, 1, 1, 1",
				s.MainItems, s.HotItems, s.PeerGets, s.LocalLoads)
		}
		time.Sleep(5 * time.Second)
		if _, err := c.groups[0].getLocal(t.Context(), key, "", 0, nil); err != nil {
			t.Fatal(err)
		}
		if got := o.loadsOf(key); !slices.Equal(got, []int{0, 0}) {
			t.Fatalf("loads by node: %v, want [0 0] (the copy lived FallbackTTL)", got)
		}
		// For a key it owns, getLocal fills the main cache.
		own := keyOwnedBy(t, c.owner, 0)
		if _, err := c.groups[0].getLocal(t.Context(), own, "", 0, nil); err != nil {
			t.Fatal(err)
		}
		if s := c.groups[0].Stats(); s.MainItems != 1 {
			t.Fatalf("MainItems = %d, want 1", s.MainItems)
		}
	})
}

// TestFallbackWhenOwnerUnreachable: the value is loaded locally and served
// from the hot cache for FallbackTTL, never from the main cache.
func TestFallbackWhenOwnerUnreachable(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var logs syncBuffer
		o := newOrigin()
		peers := []*fakePeer{{name: "node0"}, {name: "node1"}}
		owner := hashOwner(2)
		n := newNode(t, Config{Peers: ring{self: 0, peers: peers, owner: owner}, Logger: bufferLogger(&logs)})
		peers[0].node = n
		peers[1].node = newNode(t, Config{})
		peers[1].setFail(errUnreachable)
		g, err := n.NewGroup(GroupConfig{Name: "g", MaxBytes: 1 << 20, Getter: o.getter(0), TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		key := keyOwnedBy(t, owner, 1)
		start := time.Now()
		v := mustGet(t, g, key, "v:"+key)
		// The client is told the value's own expiry; the copy is served
		// for FallbackTTL (below).
		if !v.Expires.Equal(start.Add(time.Hour)) {
			t.Fatalf("Expires = %v, want start + the 1h TTL, not the copy's FallbackTTL (5s)", v.Expires)
		}
		mustGet(t, g, key, "v:"+key)
		s := g.Stats()
		if s.PeerErrors != 1 || s.LocalLoads != 1 || s.HotHits != 1 || s.MainItems != 0 || s.HotItems != 1 {
			t.Fatalf("Stats = %+v; want PeerErrors 1, LocalLoads 1, HotHits 1, MainItems 0, HotItems 1", s)
		}
		if !strings.Contains(logs.String(), "peer=node1") || !strings.Contains(logs.String(), "connection refused") {
			t.Fatalf("the peer error was not logged: %q", logs.String())
		}
		time.Sleep(5 * time.Second)
		mustGet(t, g, key, "v:"+key)
		if s := g.Stats(); s.PeerErrors != 2 || s.LocalLoads != 2 {
			t.Fatalf("after FallbackTTL: PeerErrors %d, LocalLoads %d; want 2, 2", s.PeerErrors, s.LocalLoads)
		}
	})
}

// TestOwnerAnswersAreFinal: not-found and a failed load at the owner are
// returned as they are, with no local load.
func TestOwnerAnswersAreFinal(t *testing.T) {
	t.Parallel()
	boom := errors.New("origin down")
	tests := []struct {
		name      string
		originErr error
		want      error
	}{
		{"not found", fmt.Errorf("no row: %w", ErrNotFound), ErrNotFound},
		{"load failed", boom, ErrLoad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var loads [2]atomic.Int64
			c := newCluster(t, 2, hashOwner(2), GroupConfig{MaxBytes: 1 << 20}, func(i int) Getter {
				return GetterFunc(func(context.Context, string) (Value, error) {
					loads[i].Add(1)
					return Value{}, tt.originErr
				})
			})
			key := keyOwnedBy(t, c.owner, 1)
			_, err := c.groups[0].Get(t.Context(), key)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if loads[0].Load() != 0 || loads[1].Load() != 1 {
				t.Fatalf("loads: node0 %d, node1 %d; want 0, 1", loads[0].Load(), loads[1].Load())
			}
			if s := c.groups[0].Stats(); s.PeerErrors != 0 {
				t.Fatalf("PeerErrors = %d, want 0", s.PeerErrors)
			}
		})
	}
}

// equalKeysOwnedBy returns n distinct keys owned by node i, all of one
// length, so that their copies of the origin's values are all one size.
func equalKeysOwnedBy(t *testing.T, owner func(string) int, i, n int) []string {
	t.Helper()
	var keys []string
	for k := 0; k < 10000 && len(keys) < n; k++ {
		if key := fmt.Sprintf("hk%04d", k); owner(key) == i {
			keys = append(keys, key)
		}
	}
	if len(keys) < n {
		t.Fatalf("only %d keys owned by node %d", len(keys), i)
	}
	return keys
}

// hotRoom is a HotBytes that holds exactly n copies of the origin's value of
// a key as long as those equalKeysOwnedBy returns.
func hotRoom(n int) int64 {
	return int64(n) * entrySize("hk0000", Value{Data: []byte("v:hk0000")})
}

// fullMain is a GroupConfig whose main cache has room for 2 of the
// origin's values under equalKeysOwnedBy's keys, and its hot cache for hot;
// fillMain fills the main cache of node 0's group with them, so that the
// hot cache has no room to borrow and holds hot copies exactly.
func fullMain(hot int64) GroupConfig { return GroupConfig{MaxBytes: hot + hotRoom(2), HotBytes: hot} }

func fillMain(t *testing.T, c *cluster) {
	t.Helper()
	for _, key := range equalKeysOwnedBy(t, c.owner, 0, 2) {
		mustGet(t, c.groups[0], key, "v:"+key)
	}
	if s := c.groups[0].Stats(); s.MainItems != 2 || s.Evictions != 0 {
		t.Fatalf("after filling the main cache: %+v", s)
	}
}

// TestHotPromotion: while the hot cache has room every fetched value is kept;
// once it is full, a peer-owned key displaces another only on its
// HotAfter-th miss.
func TestHotPromotion(t *testing.T) {
	t.Parallel()
	t.Run("room", func(t *testing.T) {
		t.Parallel()
		o := newOrigin()
		c := newCluster(t, 2, hashOwner(2), fullMain(hotRoom(10)), o.getter)
		fillMain(t, c)
		keys := equalKeysOwnedBy(t, c.owner, 1, 11)
		g := c.groups[0]
		for _, key := range keys[:10] {
			mustGet(t, g, key, "v:"+key)
		}
		if s := g.Stats(); s.PeerLoads != 10 || s.HotItems != 10 || s.HotPromotions != 10 {
			t.Fatalf("after one Get of each of 10 keys: %+v; want PeerLoads, HotItems and HotPromotions 10", s)
		}
		for _, key := range keys[:10] {
			mustGet(t, g, key, "v:"+key)
		}
		if s := g.Stats(); s.PeerLoads != 10 || s.HotHits != 10 {
			t.Fatalf("after a second Get of each: PeerLoads %d, HotHits %d; want 10, 10", s.PeerLoads, s.HotHits)
		}
		// Full: a key read once is served but displaces nothing.
		mustGet(t, g, keys[10], "v:"+keys[10])
		if s := g.Stats(); s.HotItems != 10 || s.HotPromotions != 10 || s.Evictions != 0 {
			t.Fatalf("after a cold key in a full hot cache: %+v; want HotItems 10, HotPromotions 10, no evictions", s)
		}
	})
	t.Run("third miss", func(t *testing.T) {
		t.Parallel()
		o := newOrigin()
		c := newCluster(t, 2, hashOwner(2), fullMain(hotRoom(1)), o.getter)
		fillMain(t, c)
		keys := equalKeysOwnedBy(t, c.owner, 1, 2)
		filler, key := keys[0], keys[1]
		g := c.groups[0]
		mustGet(t, g, filler, "v:"+filler) // fills the hot cache
		for i := 1; i <= 3; i++ {
			mustGet(t, g, key, "v:"+key)
			if s := g.Stats(); s.PeerLoads != int64(1+i) || s.HotPromotions != int64(1+i/3) {
				t.Fatalf("after Get %d: PeerLoads %d, HotPromotions %d", i, s.PeerLoads, s.HotPromotions)
			}
		}
		mustGet(t, g, key, "v:"+key)
		s := g.Stats()
		if s.PeerLoads != 4 || s.HotHits != 1 || s.HotItems != 1 || s.MainItems != 2 {
			t.Fatalf("Stats = %+v; want PeerLoads 4, HotHits 1, HotItems 1, MainItems 2", s)
		}
		// The popular key displaced the filler.
		mustGet(t, g, filler, "v:"+filler)
		if s := g.Stats(); s.PeerLoads != 5 {
			t.Fatalf("PeerLoads %d after the displaced filler, want 5", s.PeerLoads)
		}
		// Other keys, read once each, stay cold.
		for n := range 50 {
			other := fmt.Sprintf("other%d", n)
			if c.owner(other) == 1 {
				mustGet(t, g, other, "v:"+other)
			}
		}
		if s := g.Stats(); s.HotItems != 1 || s.HotPromotions != 2 {
			t.Fatalf("HotItems %d, HotPromotions %d after reading other keys once; want 1, 2", s.HotItems, s.HotPromotions)
		}
	})
	t.Run("decay", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			o := newOrigin()
			cfg := fullMain(hotRoom(1))
			cfg.HotWindow, cfg.HotTTL = 10*time.Second, time.Hour
			c := newCluster(t, 2, hashOwner(2), cfg, o.getter)
			fillMain(t, c)
			keys := equalKeysOwnedBy(t, c.owner, 1, 2)
			filler, key := keys[0], keys[1]
			g := c.groups[0]
			mustGet(t, g, filler, "v:"+filler) // fills the hot cache
			mustGet(t, g, key, "v:"+key)
			mustGet(t, g, key, "v:"+key) // count 2
			time.Sleep(10 * time.Second) // halved: 1
			mustGet(t, g, key, "v:"+key) // 2: still cold
			if g.Stats().HotPromotions != 1 {
				t.Fatal("promoted although the count decayed")
			}
			mustGet(t, g, key, "v:"+key) // 3: hot
			if g.Stats().HotPromotions != 2 {
				t.Fatal("not promoted at count 3")
			}
		})
	})
	t.Run("HotTTL and the owner's expiry bound a hot copy", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			o := newOrigin()
			for _, tc := range []struct {
				ttl, hotTTL, want time.Duration
			}{
				{0, 30 * time.Second, 30 * time.Second},
				{10 * time.Second, 30 * time.Second, 10 * time.Second},
			} {
				c := newCluster(t, 2, hashOwner(2), GroupConfig{MaxBytes: 1 << 20, HotAfter: 1, TTL: tc.ttl, HotTTL: tc.hotTTL}, o.getter)
				key := keyOwnedBy(t, c.owner, 1)
				g := c.groups[0]
				mustGet(t, g, key, "v:"+key)
				time.Sleep(tc.want - 1)
				mustGet(t, g, key, "v:"+key)
				if s := g.Stats(); s.HotHits != 1 {
					t.Fatalf("%+v: HotHits %d before expiry, want 1", tc, s.HotHits)
				}
				time.Sleep(time.Nanosecond) // to the instant of expiry
				mustGet(t, g, key, "v:"+key)
				if s := g.Stats(); s.HotHits != 1 || s.PeerLoads != 2 {
					t.Fatalf("%+v: HotHits %d, PeerLoads %d after expiry; want 1, 2", tc, s.HotHits, s.PeerLoads)
				}
			}
		})
	})
	t.Run("no hot cache", func(t *testing.T) {
		t.Parallel()
		o := newOrigin()
		c := newCluster(t, 2, hashOwner(2), GroupConfig{MaxBytes: 1 << 20, HotBytes: -1, HotAfter: 1}, o.getter)
		key := keyOwnedBy(t, c.owner, 1)
		for range 5 {
			mustGet(t, c.groups[0], key, "v:"+key)
		}
		if s := c.groups[0].Stats(); s.PeerLoads != 5 || s.HotItems != 0 {
			t.Fatalf("PeerLoads %d, HotItems %d; want 5, 0", s.PeerLoads, s.HotItems)
		}
	})
}

func TestSetAndRemoveAcrossNodes(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	c := newCluster(t, 3, hashOwner(3), GroupConfig{MaxBytes: 1 << 20, HotAfter: 1}, o.getter)
	key := keyOwnedBy(t, c.owner, 1)
	ctx := t.Context()

	// Set from a non-owner lands in the owner's main cache.
	if _, err := c.groups[0].Set(ctx, key, Value{Data: []byte("set")}); err != nil {
		t.Fatal(err)
	}
	if c.peers[1].stores.Load() != 1 {
		t.Fatalf("stores at the owner = %d, want 1", c.peers[1].stores.Load())
	}
	for i := range 3 {
		mustGet(t, c.groups[i], key, "set")
	}
	if o.total.Load() != 0 {
		t.Fatalf("the origin saw %d loads after Set", o.total.Load())
	}
	if s := c.groups[1].Stats(); s.MainItems != 1 {
		t.Fatalf("owner MainItems = %d, want 1", s.MainItems)
	}
	// Nodes 0 and 2 hold hot copies (HotAfter 1).
	for _, i := range []int{0, 2} {
		if s := c.groups[i].Stats(); s.HotItems != 1 {
			t.Fatalf("node %d HotItems = %d, want 1", i, s.HotItems)
		}
	}

	// Set from a non-owner drops every hot copy, not only the writer's:
	// node 0 serves the new value at once (read-your-writes from any node).
	if _, err := c.groups[2].Set(ctx, key, Value{Data: []byte("set2")}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mustGet(t, c.groups[i], key, "set2")
	}

	// Remove from node 2: the owner's value and every hot copy go.
	if _, err := c.groups[2].Remove(ctx, key); err != nil {
		t.Fatal(err)
	}
	for i, g := range c.groups {
		if s := g.Stats(); s.MainItems != 0 || s.HotItems != 0 {
			t.Fatalf("node %d after Remove: MainItems %d, HotItems %d", i, s.MainItems, s.HotItems)
		}
	}
	// The owner applied the writes and dropped the copies itself: it is
	// never sent a Drop; every other node, the writer included, one per
	// write (three writes).
	if got := c.peers[1].invalidates.Load(); got != 0 {
		t.Fatalf("drops at the owner = %d, want 0", got)
	}
	for _, i := range []int{0, 2} {
		if got := c.peers[i].invalidates.Load(); got != 3 {
			t.Fatalf("drops at node %d = %d, want 3", i, got)
		}
	}
	mustGet(t, c.groups[0], key, "v:"+key)
	if got := o.loadsOf(key); !slices.Equal(got, []int{1}) {
		t.Fatalf("loads after Remove: %v, want [1]", got)
	}
}

// TestWriteReportsUnreachedCopies: a node that cannot be told to drop its
// copy does not fail a write the owner applied: the write succeeds and
// names it. A write whose owner cannot be reached fails.
func TestWriteReportsUnreachedCopies(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	c := newCluster(t, 3, hashOwner(3), GroupConfig{MaxBytes: 1 << 20}, o.getter)
	key := keyOwnedBy(t, c.owner, 1)
	mustGet(t, c.groups[1], key, "v:"+key)
	c.peers[2].setFail(errUnreachable)
	res, err := c.groups[0].Remove(t.Context(), key)
	if err != nil || !slices.Equal(res.Unreached, []string{"node2"}) {
		t.Fatalf("Remove = %+v, %v; want Unreached [node2], nil", res, err)
	}
	if s := c.groups[1].Stats(); s.MainItems != 0 {
		t.Fatalf("owner MainItems = %d after Remove, want 0", s.MainItems)
	}
	res, err = c.groups[0].Set(t.Context(), key, Value{Data: []byte("x")})
	if err != nil || !slices.Equal(res.Unreached, []string{"node2"}) {
		t.Fatalf("Set = %+v, %v; want Unreached [node2], nil", res, err)
	}
	mustGet(t, c.groups[0], key, "x")
	// The owner's failure fails the write.
	c.peers[1].setFail(errUnreachable)
	if _, err := c.groups[0].Set(t.Context(), key, Value{Data: []byte("y")}); !errors.Is(err, errUnreachable) {
		t.Fatalf("Set err = %v, want the owner's error", err)
	}
	if _, err := c.groups[0].Remove(t.Context(), key); !errors.Is(err, errUnreachable) {
		t.Fatalf("Remove err = %v, want the owner's error", err)
	}
}

// TestWriteAtANonOwnerIsRefused: setLocal and removeLocal apply writes as
// the owner only; a node that does not own the key stores nothing.
func TestWriteAtANonOwnerIsRefused(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	c := newCluster(t, 2, hashOwner(2), GroupConfig{MaxBytes: 1 << 20}, o.getter)
	key := keyOwnedBy(t, c.owner, 1)
	if _, err := c.groups[0].setLocal(t.Context(), key, Value{Data: []byte("forged")}); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("setLocal at a non-owner: err = %v, want ErrNotOwner", err)
	}
	if _, err := c.groups[0].removeLocal(t.Context(), key); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("removeLocal at a non-owner: err = %v, want ErrNotOwner", err)
	}
	for i := range 2 {
		mustGet(t, c.groups[i], key, "v:"+key)
	}
}

// TestRemoveIsNotUndoneByAConcurrentGet: a Get at the removing node that runs
// after that node dropped its own copy but before the owner dropped its value
// fetches the owner's old value; Remove must not leave that copy behind.
// Interleaving: node0 Remove, node0 drops k, [node0 Get fetches "old" from
// the owner and keeps it hot], owner drops k, Remove returns.
func TestRemoveIsNotUndoneByAConcurrentGet(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	c := newCluster(t, 2, hashOwner(2), GroupConfig{MaxBytes: 1 << 20, HotAfter: 1}, o.getter)
	key := keyOwnedBy(t, c.owner, 1)
	if _, err := c.groups[1].setLocal(t.Context(), key, Value{Data: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	c.peers[1].beforeInvalidate = func() { mustGet(t, c.groups[0], key, "old") }
	if _, err := c.groups[0].Remove(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if s := c.groups[0].Stats(); s.HotItems != 0 {
		t.Fatalf("node0 HotItems = %d after Remove, want 0 (the owner's old value came back)", s.HotItems)
	}
	mustGet(t, c.groups[0], key, "v:"+key)
}

// TestPeerFailuresLoggedOncePerSecond: a dead owner fails every fetch for
// its keys until the ring drops it; the log gets one line a second, Stats
// counts every failure.
func TestPeerFailuresLoggedOncePerSecond(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var logs syncBuffer
		peers := []*fakePeer{{name: "node0"}, {name: "node1"}}
		owner := hashOwner(2)
		n := newNode(t, Config{Peers: ring{self: 0, peers: peers, owner: owner}, Logger: bufferLogger(&logs)})
		peers[0].node = n
		peers[1].node = newNode(t, Config{})
		peers[1].setFail(errUnreachable)
		// No hot cache: every Get fetches again and fails again.
		g, err := n.NewGroup(GroupConfig{Name: "g", MaxBytes: 1 << 20, HotBytes: -1, Getter: newOrigin().getter(0)})
		if err != nil {
			t.Fatal(err)
		}
		key := keyOwnedBy(t, owner, 1)
		const msg = "peer fetch failed"
		for range 50 {
			mustGet(t, g, key, "v:"+key)
		}
		if got := strings.Count(logs.String(), msg); got != 1 {
			t.Fatalf("%d log lines for 50 failed fetches within a second, want 1", got)
		}
		time.Sleep(time.Second)
		mustGet(t, g, key, "v:"+key)
		if got := strings.Count(logs.String(), msg); got != 2 {
			t.Fatalf("%d log lines after a second more, want 2", got)
		}
		if s := g.Stats(); s.PeerErrors != 51 {
			t.Fatalf("PeerErrors = %d, want 51", s.PeerErrors)
		}
	})
}

// withinBudget fails the test unless g's main and hot caches, their dead
// page bytes and what its hand-off holds fit its MaxBytes, and returns its
// Stats.
func withinBudget(t *testing.T, g *Group, when string) Stats {
	t.Helper()
	s := g.Stats()
	held, _ := g.handoff.Usage()
	held += g.handoff.DeadBytes()
	if used := s.MainBytes + s.HotBytes + s.DeadBytes + held; used > g.cfg.MaxBytes {
		t.Fatalf("%s: main %d + hot %d + dead %d + hand-off %d bytes > MaxBytes %d", when, s.MainBytes, s.HotBytes, s.DeadBytes, held, g.cfg.MaxBytes)
	}
	return s
}

// TestHotBorrowsMainRoom: the hot cache keeps copies beyond its own part
// in the room the main cache leaves free, and gives that room back as the
// main cache grows, evicting copies and never the keys this node owns;
// main and hot together stay within MaxBytes throughout.
func TestHotBorrowsMainRoom(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	cfg := GroupConfig{MaxBytes: hotRoom(40), HotBytes: hotRoom(10)}
	c := newCluster(t, 2, hashOwner(2), cfg, o.getter)
	g := c.groups[0]
	check := func(when string) Stats {
		t.Helper()
		return withinBudget(t, g, when)
	}
	peerKeys := equalKeysOwnedBy(t, c.owner, 1, 40)
	ownKeys := equalKeysOwnedBy(t, c.owner, 0, 30)
	for _, key := range peerKeys[:30] {
		mustGet(t, g, key, "v:"+key)
		check("copying peers' keys")
	}
	if s := check("after 30 copies"); s.HotItems != 30 || s.Evictions != 0 {
		t.Fatalf("after 30 copies into a hot part of 10 and an empty main cache of 30: %+v; want all 30 kept", s)
	}
	for i, key := range ownKeys {
		mustGet(t, g, key, "v:"+key)
		s := check("loading own keys")
		if s.MainItems != int64(i+1) {
			t.Fatalf("after %d own keys: %d in the main cache; a copy displaced an owned key", i+1, s.MainItems)
		}
		if want := int64(40 - (i + 1)); s.HotItems > want {
			t.Fatalf("after %d own keys: %d copies, want at most %d", i+1, s.HotItems, want)
		}
	}
	if s := check("main cache full"); s.HotItems != 10 {
		t.Fatalf("with the main cache full: %d copies, want the hot part's 10", s.HotItems)
	}
	// Popular copies (third miss) displace others within the hot part only.
	for _, key := range peerKeys[30:] {
		for range 3 {
			mustGet(t, g, key, "v:"+key)
		}
		if s := check("copying with the main cache full"); s.HotItems > 10 || s.MainItems != 30 {
			t.Fatalf("%+v: want at most 10 copies and all 30 own keys", s)
		}
	}
}

// TestOwnedKeysUseTheHotPart: the hot cache's part is the main cache's
// while no copy uses it, so a node's own keys fill the whole budget; a copy
// then takes room from them only for a popular key (its HotAfter-th miss),
// and copies never take more than the hot part from owned keys.
func TestOwnedKeysUseTheHotPart(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	// PolicyLRU: the counts below are entries exactly, which the SLRU's
	// ghost table (2 bytes an entry, from the first eviction) would move
	// by one.
	cfg := GroupConfig{MaxBytes: hotRoom(40), HotBytes: hotRoom(10), HotAfter: 3, Policy: PolicyLRU}
	c := newCluster(t, 2, hashOwner(2), cfg, o.getter)
	g := c.groups[0]
	ownKeys := equalKeysOwnedBy(t, c.owner, 0, 40)
	peerKeys := equalKeysOwnedBy(t, c.owner, 1, 12)
	for _, key := range ownKeys {
		mustGet(t, g, key, "v:"+key)
	}
	if s := withinBudget(t, g, "after 40 own keys"); s.MainItems != 40 || s.Evictions != 0 {
		t.Fatalf("after 40 own keys in a budget of 40: %+v; want all 40 kept", s)
	}
	mustGet(t, g, peerKeys[0], "v:"+peerKeys[0])
	mustGet(t, g, peerKeys[0], "v:"+peerKeys[0])
	if s := withinBudget(t, g, "after two misses of a peer's key"); s.HotItems != 0 || s.MainItems != 40 {
		t.Fatalf("after two misses of a peer's key: %+v; an unpopular copy displaced an owned key", s)
	}
	mustGet(t, g, peerKeys[0], "v:"+peerKeys[0])
	if s := withinBudget(t, g, "after its third miss"); s.HotItems != 1 || s.MainItems != 39 {
		t.Fatalf("after a peer's key's third miss: %+v; want its copy kept in place of one owned key", s)
	}
	for _, key := range peerKeys[1:] {
		for range 3 {
			mustGet(t, g, key, "v:"+key)
		}
		if s := withinBudget(t, g, "popular copies"); s.HotItems > 10 || s.MainItems < 30 {
			t.Fatalf("%+v: copies took more than the hot part (10) from owned keys", s)
		}
	}
	if s := g.Stats(); s.HotItems != 10 || s.MainItems != 30 {
		t.Fatalf("after 12 popular copies: %+v; want 10 copies and 30 owned keys", s)
	}
}

// TestHotBorrowsMainRoomConcurrently: copies of peers' keys and loads of
// this node's own keys race, so that the hot cache's bound is set from the
// main cache's room while the main cache grows. Once they are done, main
// and hot (with their dead bytes) are within MaxBytes, and every owned key
// is still cached: no copy took room an owned key needed.
func TestHotBorrowsMainRoomConcurrently(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	cfg := GroupConfig{MaxBytes: hotRoom(200), HotBytes: hotRoom(20)}
	c := newCluster(t, 2, hashOwner(2), cfg, o.getter)
	g := c.groups[0]
	peerKeys := equalKeysOwnedBy(t, c.owner, 1, 400)
	ownKeys := equalKeysOwnedBy(t, c.owner, 0, 150) // under the main cache's 180
	for round := range 20 {
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < len(peerKeys); i += 4 {
					mustGet(t, g, peerKeys[i], "v:"+peerKeys[i])
				}
			})
		}
		wg.Go(func() {
			for _, key := range ownKeys {
				mustGet(t, g, key, "v:"+key)
			}
		})
		wg.Wait()
		s := withinBudget(t, g, fmt.Sprintf("round %d", round))
		if s.MainItems != int64(len(ownKeys)) {
			t.Fatalf("round %d: %d of %d owned keys in the main cache", round, s.MainItems, len(ownKeys))
		}
		// Drop the owned keys, so that the next round's loads grow the
		// main cache into room the hot cache borrowed meanwhile.
		for _, key := range ownKeys {
			g.main.Remove(key)
		}
	}
}
