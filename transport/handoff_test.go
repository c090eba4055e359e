package transport

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/consistenthash"
	"github.com/ringcache/ringcache/internal/poll"
)

// setRing gives every node in nodes the member set of members.
func setRing(t *testing.T, nodes, members []*testNode) {
	t.Helper()
	var urls []string
	for _, m := range members {
		urls = append(urls, m.url)
	}
	for _, n := range nodes {
		if err := n.pool.Set(urls...); err != nil {
			t.Fatal(err)
		}
	}
}

// warm reads keys through the nodes in turn and checks every value.
func warm(t *testing.T, c *http.Client, nodes []*testNode, keys []string) {
	t.Helper()
	for i, k := range keys {
		if err := get(t, c, nodes[i%len(nodes)], k); err != nil {
			t.Fatal(err)
		}
	}
}

// testKeys returns n distinct keys.
func testKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	return keys
}

// countOwned returns how many of keys n owns by its ring.
func countOwned(n *testNode, keys []string) int {
	owned := 0
	for _, k := range keys {
		if n.pool.Owner(k) == n.url {
			owned++
		}
	}
	return owned
}

// handoffStats sums the hand-off counters over nodes.
func handoffStats(nodes []*testNode) (taken, given int64) {
	for _, n := range nodes {
		s := n.group.Stats()
		taken += s.HandoffsTaken
		given += s.HandoffsGiven
	}
	return taken, given
}

// TestJoinTakesKeysWarm: a fourth node joins a warm cluster; the keys that
// move to it are taken from their previous owners, not loaded again.
func TestJoinTakesKeysWarm(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 4, clusterOpts{})
	c := testClient(t)
	three, joiner := nodes[:3], nodes[3]
	setRing(t, three, three)
	setRing(t, []*testNode{joiner}, []*testNode{joiner})
	keys := testKeys(600)
	warm(t, c, three, keys)
	before := loads.count()
	if before != len(keys) {
		t.Fatalf("warming loaded %d times for %d keys", before, len(keys))
	}
	setRing(t, nodes, nodes)
	moved := countOwned(joiner, keys)
	// Through the joiner: the other nodes may serve a moved key from a hot
	// copy they kept, and never ask the joiner for it.
	warm(t, c, []*testNode{joiner}, keys)
	taken, given := handoffStats(nodes)
	t.Logf("%d of %d keys moved to the joiner: %d origin loads, %d taken over", moved, len(keys), loads.count()-before, taken)
	// The joiner's share depends on where its port's URL lands on the
	// test ring (crc32, 50 points a node): from under a tenth to over a
	// third. A twentieth is enough for the test to mean something.
	if moved < len(keys)/20 {
		t.Fatalf("only %d keys moved", moved)
	}
	if extra := loads.count() - before; extra != 0 || taken != int64(moved) || given != int64(moved) {
		t.Fatalf("after the join: %d origin loads, %d taken, %d given; want 0, %d, %d", extra, taken, given, moved, moved)
	}
}

// TestGracefulLeaveDrains: a node that leaves hands its values to their
// next owners before it stops, whether their rings have dropped it yet or
// not; the keys that move cost the origin nothing.
func TestGracefulLeaveDrains(t *testing.T) {
	t.Parallel()
	for _, ringsFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("rings updated first=%v", ringsFirst), func(t *testing.T) {
			t.Parallel()
			nodes, loads := newCluster(t, 4, clusterOpts{})
			c := testClient(t)
			keys := testKeys(600)
			warm(t, c, nodes, keys)
			before := loads.count()
			leaver, rest := nodes[3], nodes[:3]
			owned := int(leaver.group.Stats().MainItems)
			leaver.node.Retire()
			if ringsFirst {
				setRing(t, rest, rest)
			}
			stats := leaver.pool.Drain(t.Context(), leaver.node, 0)
			if !ringsFirst {
				setRing(t, rest, rest)
			}
			// The leaver is gone: nothing can be fetched from it any more.
			leaver.srv.Close()
			warm(t, c, rest, keys)
			t.Logf("drain: %+v of %d owned; %d origin loads after", stats, owned, loads.count()-before)
			if stats.Offered != owned || stats.Adopted != owned || stats.Failed != 0 {
				t.Fatalf("drain %+v, want %d offered and adopted", stats, owned)
			}
			if extra := loads.count() - before; extra != 0 {
				t.Fatalf("%d origin loads after the leave, want 0", extra)
			}
		})
	}
}

// TestDrainNeverUndoesAWrite: a value handed over does not replace a value
// the next owner holds, nor bring back a key it removed.
func TestDrainNeverUndoesAWrite(t *testing.T) {
	t.Parallel()
	nodes, _ := newCluster(t, 2, clusterOpts{})
	c := testClient(t)
	leaver, next := nodes[1], nodes[0]
	written, removed := keyOf(t, nodes, leaver, "w"), keyOf(t, nodes, leaver, "r")
	put(t, c, leaver, written, "old")
	put(t, c, leaver, removed, "old")
	leaver.node.Retire()
	setRing(t, []*testNode{next}, []*testNode{next})
	put(t, c, next, written, "new")
	mustDo(t, c, http.MethodDelete, publicURL(next.url, testGroup, removed), nil)
	stats := leaver.pool.Drain(t.Context(), leaver.node, 0)
	if stats.Offered != 2 || stats.Adopted != 0 {
		t.Fatalf("drain %+v, want 2 offered, 0 adopted", stats)
	}
	mustRead(t, c, next, written, "new")
	mustRead(t, c, next, removed, string(valueOf(removed)))
}

// TestDrainRecordRoundTrip: what appendRecord writes, readRecord reads back.
func TestDrainRecordRoundTrip(t *testing.T) {
	t.Parallel()
	exp := time.Unix(1_900_000_000, 123)
	in := []cache.KeyValue{
		{Key: "a", Value: cache.Value{Data: []byte("1"), ContentType: "text/plain", Expires: exp}},
		{Key: "b/c", Value: cache.Value{Data: []byte{}}},
	}
	var b []byte
	for _, kv := range in {
		b = appendRecord(b, kv.Key, kv.Value)
	}
	for _, want := range in {
		key, v, n, err := readRecord(b)
		if err != nil || key != want.Key || !bytes.Equal(v.Data, want.Value.Data) || v.ContentType != want.Value.ContentType || !v.Expires.Equal(want.Value.Expires) {
			t.Fatalf("readRecord = %q %+v %v, want %q %+v", key, v, err, want.Key, want.Value)
		}
		b = b[n:]
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes left", len(b))
	}
}

// FuzzReadRecord: any bytes are read or refused, never a panic, and what is
// read re-encodes to the same bytes.
func FuzzReadRecord(f *testing.F) {
	f.Add(appendRecord(nil, "k", cache.Value{Data: []byte("v"), ContentType: "t"}))
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		key, v, n, err := readRecord(b)
		if err != nil {
			return
		}
		if got := appendRecord(nil, key, v); !bytes.Equal(got, b[:n]) && v.Expires.IsZero() == (len(b) > 0) {
			// Varints have one canonical form only when written by us:
			// check that the record at least decodes to itself.
			k2, v2, _, err := readRecord(got)
			if err != nil || k2 != key || !bytes.Equal(v2.Data, v.Data) {
				t.Fatalf("re-encoding changed the record")
			}
		}
	})
}

// TestJoinIsWarmBeforeItIsAsked: with OfferOnChange (a Node's default), the previous owners
// push the keys that move to a node that joins, without waiting for a read:
// the joiner holds them, and reading them costs the origin nothing.
func TestJoinIsWarmBeforeItIsAsked(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 4, clusterOpts{offer: true})
	c := testClient(t)
	three, joiner := nodes[:3], nodes[3]
	setRing(t, three, three)
	setRing(t, []*testNode{joiner}, []*testNode{joiner})
	keys := testKeys(600)
	warm(t, c, three, keys)
	before := loads.count()
	setRing(t, nodes, nodes)
	moved := countOwned(joiner, keys)
	poll.Until(t, 10*time.Second, func() (bool, string) {
		held := joiner.group.Stats().MainItems
		return held >= int64(moved), fmt.Sprintf("the joiner holds %d of the %d keys that moved to it", held, moved)
	})
	warm(t, c, nodes, keys)
	if extra := loads.count() - before; extra != 0 {
		t.Fatalf("%d origin loads after the join, want 0", extra)
	}
	t.Logf("%d keys moved to the joiner, all pushed to it before any read", moved)
}

// TestGracefulLeaveDrainsRanges: with explicit arcs a leaving node's arcs
// join the arcs before them, so its values go to the owners of those, not
// to the owners of the arcs that follow. The leaver joined last: each of
// its arcs cut another member's, so the arc after it is usually someone
// else's.
func TestGracefulLeaveDrainsRanges(t *testing.T) {
	t.Parallel()
	for _, ringsFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("rings updated first=%v", ringsFirst), func(t *testing.T) {
			t.Parallel()
			nodes, loads := newCluster(t, 4, clusterOpts{})
			c := testClient(t)
			positions := map[string][]uint32{}
			for _, n := range nodes {
				p, err := consistenthash.JoinPositions(consistenthash.DefaultPositions, positions, n.url)
				if err != nil {
					t.Fatal(err)
				}
				positions[n.url] = p
			}
			setRanges := func(on []*testNode, members map[string][]uint32) {
				for _, n := range on {
					if err := n.pool.SetRanges(members); err != nil {
						t.Fatal(err)
					}
				}
			}
			setRanges(nodes, positions)
			keys := testKeys(600)
			warm(t, c, nodes, keys)
			before := loads.count()
			leaver, rest := nodes[3], nodes[:3]
			others := maps.Clone(positions)
			delete(others, leaver.url)
			owned := int(leaver.group.Stats().MainItems)
			leaver.node.Retire()
			if ringsFirst {
				setRanges(rest, others)
			}
			stats := leaver.pool.Drain(t.Context(), leaver.node, 0)
			if !ringsFirst {
				setRanges(rest, others)
			}
			leaver.srv.Close()
			warm(t, c, rest, keys)
			t.Logf("drain: %+v of %d owned; %d origin loads after", stats, owned, loads.count()-before)
			if owned == 0 || stats.Offered != owned || stats.Adopted != owned || stats.Failed != 0 {
				t.Fatalf("drain %+v, want %d offered and adopted", stats, owned)
			}
			if extra := loads.count() - before; extra != 0 {
				t.Fatalf("%d origin loads after the leave, want 0", extra)
			}
		})
	}
}

// TestLeavingNodeSendsReadersOn: a node whose ring still counts a leaving
// node as a key's owner asks it, and is told to ask again (421) rather
// than served the origin's value, which a leaving node would load in place
// of a write it handed over; once its ring drops the leaver it reads the
// written value from the new owner, with no origin load.
func TestLeavingNodeSendsReadersOn(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 3, clusterOpts{group: noHotCache})
	leaver := nodes[2]
	var key string
	for _, k := range testKeys(100) {
		if leaver.pool.Owner(k) == leaver.url {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatal("the leaver owns none of 100 keys")
	}
	if _, err := nodes[0].group.Set(t.Context(), key, cache.Value{Data: []byte("written")}); err != nil {
		t.Fatal(err)
	}
	next, laggard := nodes[0], nodes[1]
	if after := ringWithout(leaver.pool.state.Load().ring, leaver.url); after.Get(key) != next.url {
		next, laggard = nodes[1], nodes[0]
	}
	// The leave as Node.Shutdown makes it: the others but the laggard drop
	// the leaver, which routes by the ring without itself, retires and
	// hands its values over.
	setRing(t, []*testNode{next}, []*testNode{nodes[0], nodes[1]})
	leaver.pool.leaveRing()
	leaver.node.Retire()
	if st := leaver.pool.Drain(t.Context(), leaver.node, 0); st.Adopted != 1 {
		t.Fatalf("drain %+v, want the written value adopted", st)
	}
	before := loads.count()
	go func() {
		time.Sleep(200 * time.Millisecond)
		setRing(t, []*testNode{laggard}, []*testNode{nodes[0], nodes[1]})
	}()
	v, err := laggard.group.Get(t.Context(), key)
	if err != nil || string(v.Data) != "written" {
		t.Fatalf("read through a node whose ring still has the leaver: %q %v, want the written value", v.Data, err)
	}
	if n := loads.count() - before; n != 0 {
		t.Fatalf("%d origin loads, want 0", n)
	}
}

// TestReadAfterAWriteOutlivedItsRing: a read at a key's owner waits for a
// write of the key in progress there (one held up by a paused node); if
// the ring moves the key meanwhile, the read asks the new owner, which
// takes the value over, rather than loading the origin's value in place
// of the one acknowledged before.
func TestReadAfterAWriteOutlivedItsRing(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 4, clusterOpts{
		pool: func(_ int, c *Config) { c.PeerTimeout, c.LeaseTTL = 300*time.Millisecond, time.Second },
	})
	three, d := nodes[:3], nodes[3]
	setRing(t, three, three)
	setRing(t, []*testNode{d}, []*testNode{d})
	// a key that moves to d (about a quarter do), a its owner before, b
	// another node: which node is which depends on the ports' hashes,
	// and a given one may lose no key to d.
	all := ringOf(nodes)
	var key string
	var a, b *testNode
	for _, k := range testKeys(1000) {
		if all.Get(k) != d.url {
			continue
		}
		for i, n := range three {
			if three[0].pool.Owner(k) == n.url {
				key, a, b = k, n, three[(i+1)%3]
			}
		}
		break
	}
	if a == nil {
		t.Fatal("no key moves to d from one of the three")
	}
	if _, err := a.group.Set(t.Context(), key, cache.Value{Data: []byte("v1")}); err != nil {
		t.Fatal(err)
	}
	if v, err := b.group.Get(t.Context(), key); err != nil || string(v.Data) != "v1" {
		t.Fatalf("b reads %q %v", v.Data, err) // b now holds a copy under a's lease
	}
	before := loads.count()
	b.gate.pause()
	defer b.gate.resume()
	go a.group.Set(t.Context(), key, cache.Value{Data: []byte("v2")}) // waits for b
	time.Sleep(100 * time.Millisecond)
	read := make(chan string, 1)
	go func() {
		v, err := a.group.Get(t.Context(), key)
		read <- fmt.Sprintf("%s %v", v.Data, err)
	}()
	time.Sleep(100 * time.Millisecond)
	setRing(t, nodes, nodes)
	if got := <-read; got != "v1 <nil>" && got != "v2 <nil>" {
		t.Fatalf("a read that waited for the write reads %q, want v1 (or the write's v2)", got)
	}
	if n := loads.count() - before; n != 0 {
		t.Fatalf("%d origin loads, want 0", n)
	}
}

// keyOfALeaver returns a key owned by a (the first of three nodes), b the
// node it goes to when a leaves, and c the third.
func keyOfALeaver(t *testing.T, nodes []*testNode) (a, b, c *testNode, key string) {
	t.Helper()
	a = nodes[0]
	for _, k := range testKeys(1000) {
		if a.pool.Owner(k) != a.url {
			continue
		}
		b, c = nodes[1], nodes[2]
		if ringOf(nodes[1:3]).Get(k) == c.url {
			b, c = c, b
		}
		return a, b, c, k
	}
	t.Fatal("no key of a")
	return
}

// ringOf is the ring the nodes build from these members.
func ringOf(members []*testNode) *consistenthash.Map {
	cfg := members[0].pool.Config()
	m := consistenthash.New(cfg.Replicas, cfg.Hash)
	for _, n := range members {
		m.Add(n.url)
	}
	return m
}

// TestWriteThroughTheNextOwner: a write sent through the node that is about
// to take its key over is applied by the current owner, which then leaves
// and hands the written value over; the forwarding node, whose ring made it
// the owner while the write was on its way, takes the value over and
// serves it, rather than counting the write it only forwarded as its own
// and loading the origin's value in its place.
func TestWriteThroughTheNextOwner(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 3, clusterOpts{
		pool: func(_ int, c *Config) { c.PeerTimeout, c.LeaseTTL = 300*time.Millisecond, time.Second },
	})
	a, b, c, key := keyOfALeaver(t, nodes)
	if v, err := c.group.Get(t.Context(), key); err != nil || string(v.Data) != string(valueOf(key)) {
		t.Fatalf("c reads %q %v", v.Data, err) // c holds a copy under a's lease
	}
	before := loads.count()
	c.gate.pause() // a's write waits for c, about PeerTimeout + LeaseTTL
	written := make(chan error, 1)
	go func() {
		_, err := b.group.Set(t.Context(), key, cache.Value{Data: []byte("written")})
		written <- err
	}()
	time.Sleep(100 * time.Millisecond)
	setRing(t, []*testNode{b}, []*testNode{b, c}) // a leaves: b's ring drops it first
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	c.gate.resume()
	setRing(t, []*testNode{c}, []*testNode{b, c})
	a.pool.leaveRing()
	a.node.Retire()
	st := a.pool.Drain(t.Context(), a.node, 0)
	v, err := b.group.Get(t.Context(), key)
	if err != nil || string(v.Data) != "written" {
		t.Fatalf("b, the new owner, reads %q %v, want the written value (drain %+v)", v.Data, err, st)
	}
	if n := loads.count() - before; n != 0 {
		t.Fatalf("%d origin loads, want 0", n)
	}
}

// TestDrainBeforeTheReceiverSeesTheLeave: a writes key as its owner (the
// write drops b's copy), then leaves and hands key over to b, its next
// owner, before b's ring has dropped a. b takes the written value: the drop
// it saw came from a, whose hand-over is newer than a's own writes. On the
// old code b counted the drop as a write of its own since its last ring
// change, refused the value, and once it owned key loaded the origin's in
// place of the acknowledged write (TestRollingRestartLinearizable).
func TestDrainBeforeTheReceiverSeesTheLeave(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 3, clusterOpts{})
	a, b, c, key := keyOfALeaver(t, nodes)
	if _, err := c.group.Set(t.Context(), key, cache.Value{Data: []byte("written")}); err != nil {
		t.Fatal(err)
	}
	before := loads.count()
	a.pool.leaveRing()
	a.node.Retire()
	st := a.pool.Drain(t.Context(), a.node, 0)
	if st.Adopted != st.Offered {
		t.Errorf("drain %+v: b refused a value it will own", st)
	}
	a.srv.Close() // gone: nothing is left to pull from
	setRing(t, []*testNode{b, c}, []*testNode{b, c})
	for _, n := range []*testNode{b, c} {
		v, err := n.group.Get(t.Context(), key)
		if err != nil || string(v.Data) != "written" {
			t.Fatalf("%s reads %q %v, want the written value (drain %+v)", n.url, v.Data, err, st)
		}
	}
	if n := loads.count() - before; n != 0 {
		t.Fatalf("%d origin loads, want 0", n)
	}
}

// TestLeavingOwnerAsksTheNextOwner: a, leaving, has handed its written value
// of key to b, and a client's read reaches a, whose ring sends it to b. b's
// ring still names a as the owner: b waits for its ring to follow and
// answers as the owner, with the value a handed over. On the old code b
// answered at once as a non-owner, with a load of the origin's value in
// place of the acknowledged write (TestRollingRestartLinearizable).
func TestLeavingOwnerAsksTheNextOwner(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 3, clusterOpts{})
	a, b, c, key := keyOfALeaver(t, nodes)
	if _, err := c.group.Set(t.Context(), key, cache.Value{Data: []byte("written")}); err != nil {
		t.Fatal(err)
	}
	before := loads.count()
	a.pool.leaveRing()
	a.node.Retire()
	if st := a.pool.Drain(t.Context(), a.node, 0); st.Adopted != 1 {
		t.Fatalf("drain %+v, want the written value adopted", st)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		setRing(t, []*testNode{b, c}, []*testNode{b, c})
	}()
	v, err := a.group.Get(t.Context(), key)
	if err != nil || string(v.Data) != "written" {
		t.Fatalf("a read through the leaving node got %q %v, want the written value", v.Data, err)
	}
	if n := loads.count() - before; n != 0 {
		t.Fatalf("%d origin loads, want 0", n)
	}
}
