package peers

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/consistenthash"
	"github.com/ringcache/ringcache/internal/poll"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestJoinLeaveCrash follows one cluster through a typical life, with the
// default TTL and hold-down: three nodes converge on one ring, a fourth joins, the fourth
// leaves gracefully (seen within 1s), and a third crashes (removed within TTL+hold-down+1s).
// It reports the three figures.
func TestJoinLeaveCrash(t *testing.T) {
	t.Parallel()
	te := startEtcd(t)
	eps := te.endpoints()

	a := startNode(t, eps, "a", nil)
	b := startNode(t, eps, "b", nil)
	c := startNode(t, eps, "c", nil)
	converge(t, urls("a", "b", "c"), 10*time.Second, a, b, c)
	settled := a.rec.count()

	// The state an operator sees, as JSON: the members with their descriptions.
	b1, err := json.Marshal(a.r.State())
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(b1, &st); err != nil || !st.Connected || !slices.Equal(st.Peers, urls("a", "b", "c")) ||
		len(st.Members) != 3 || st.Members[1].PeerURL != peerURL("b") || st.Members[1].Version != "test" {
		t.Errorf("state as JSON: %s (%v)", b1, err)
	}

	start := time.Now()
	d := startNode(t, eps, "d", nil)
	joined := converge(t, urls("a", "b", "c", "d"), 10*time.Second, a, b, c, d)
	t.Logf("figure: join, New of a fourth node to its peer URL in every other node's ring: %v", joined.Sub(start).Round(time.Millisecond))

	start = time.Now()
	if err := d.r.Close(); err != nil {
		t.Fatal(err)
	}
	left := converge(t, urls("a", "b", "c"), 5*time.Second, a, b, c)
	if dur := left.Sub(start); dur > time.Second {
		t.Errorf("graceful leave reached every ring after %v, want within 1s", dur)
	} else {
		t.Logf("figure: graceful leave, Close to every other node's ring change: %v", dur.Round(time.Millisecond))
	}
	select {
	case <-d.r.Done():
	default:
		t.Error("Done not closed after Close")
	}
	if d.r.Ready() {
		t.Error("Ready after Close")
	}

	start = time.Now()
	c.r.crash()
	// The hold-down is visible: c's key is gone but c is still in the ring, as pending.
	waitState(t, a.r, "c pending", 10*time.Second, func(s State) bool {
		return slices.ContainsFunc(s.Pending, func(m Member) bool { return m.ID == "c" })
	})
	cfg, _ := Config{Endpoints: eps, NodeID: "x", PeerURL: "http://x"}.withDefaults()
	removed := converge(t, urls("a", "b"), cfg.TTL+cfg.HoldDown+5*time.Second, a, b)
	bound := cfg.TTL + cfg.HoldDown + time.Second
	if dur := removed.Sub(start); dur > bound {
		t.Errorf("crashed node removed after %v, want within TTL+hold-down+1s = %v", dur, bound)
	} else {
		t.Logf("figure: crash, keepalives stopped to removal from every ring (TTL %v, hold-down %v): %v", cfg.TTL, cfg.HoldDown, dur.Round(time.Millisecond))
	}
	calls, _ := a.rec.snapshot()
	var got [][]string
	for _, c := range calls[settled:] {
		got = append(got, c.peers)
	}
	if want := [][]string{urls("a", "b", "c", "d"), urls("a", "b", "c"), urls("a", "b")}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("a's Setter calls since the three converged: %q, want %q", got, want)
	}
}

// TestEtcdRestart stops etcd for longer than the TTL and starts it again on the same data
// directory and ports: no node's ring changes at any time, each registers again under a new
// lease, and no member key is ever deleted.
func TestEtcdRestart(t *testing.T) {
	t.Parallel()
	te := startEtcd(t)
	eps := te.endpoints()
	// The default TTL: with etcd's minimum of 2s, a loaded machine (the race detector, other
	// packages' tests) stalls etcd long enough to expire leases while it runs.
	const ttl = DefaultTTL
	tweak := func(c *Config) { c.TTL = ttl }
	nodes := []*node{startNode(t, eps, "a", tweak), startNode(t, eps, "b", tweak), startNode(t, eps, "c", tweak)}
	want := urls("a", "b", "c")
	converge(t, want, 10*time.Second, nodes...)
	settled := map[string]int{}
	for _, n := range nodes {
		settled[n.id] = n.rec.count()
	}

	raw := te.client(t)
	created := map[string]int64{} // key -> CreateRevision: changes if the key is ever deleted
	resp, err := raw.Get(t.Context(), "/ringcache/default/members/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		created[string(kv.Key)] = kv.CreateRevision
	}
	oldLeases := map[string]clientv3.LeaseID{}
	terms := map[string]uint64{}
	for _, n := range nodes {
		n.r.mu.Lock()
		oldLeases[n.id] = n.r.lease
		n.r.mu.Unlock()
		terms[n.id], _ = n.r.Tenure()
	}

	stopped := time.Now()
	te.stop()
	for _, n := range nodes {
		st := waitState(t, n.r, "lease lost", 3*ttl, func(s State) bool { return !s.Registered })
		if st.Connected || !n.r.Ready() || !slices.Equal(st.Peers, want) {
			t.Errorf("%s during the outage: connected %v, ready %v, peers %q; want false, true, %q", n.id, st.Connected, n.r.Ready(), st.Peers, want)
		}
		// The lease may have run out (the daemon then asks its peers
		// whether they still count the node in); the term is unchanged.
		if term, held := n.r.Tenure(); held || term != terms[n.id] {
			t.Errorf("%s during the outage: Tenure() = %d, %v; want %d, false", n.id, term, held, terms[n.id])
		}
	}
	// The outage itself is what is under test: keep etcd down for longer than the TTL.
	time.Sleep(time.Until(stopped.Add(ttl + time.Second)))
	te.start()
	restarted := time.Now()

	for _, n := range nodes {
		waitState(t, n.r, "registered again", 15*time.Second, func(s State) bool { return s.Registered && s.Connected })
		n.r.mu.Lock()
		lease := n.r.lease
		n.r.mu.Unlock()
		if lease == oldLeases[n.id] {
			t.Errorf("%s kept lease %x; want a new one", n.id, lease)
		}
		if term, ok := n.r.Tenure(); !ok || term != terms[n.id] {
			t.Errorf("%s registered again: Tenure() = %d, %v; want the same term %d, true (its key was never deleted)", n.id, term, ok, terms[n.id])
		}
	}
	t.Logf("all nodes registered again %v after etcd came back", time.Since(restarted).Round(time.Millisecond))

	// The old leases expire after the restart; the keys must survive that.
	for _, lease := range oldLeases { // nothing announces a lease's expiry
		poll.Until(t, 20*time.Second, func() (bool, string) {
			ttlResp, err := raw.TimeToLive(t.Context(), lease)
			return err == nil && ttlResp.TTL == -1, fmt.Sprintf("old lease %x still alive: %+v, %v", lease, ttlResp, err)
		})
	}
	resp, err = raw.Get(t.Context(), "/ringcache/default/members/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 3 {
		t.Fatalf("%d member keys after the restart, want 3", len(resp.Kvs))
	}
	for _, kv := range resp.Kvs {
		if created[string(kv.Key)] != kv.CreateRevision {
			t.Errorf("%s was deleted and created again (create revision %d, was %d)", kv.Key, kv.CreateRevision, created[string(kv.Key)])
		}
	}
	for _, n := range nodes {
		if calls, _ := n.rec.snapshot(); len(calls) != settled[n.id] {
			t.Errorf("%s: Setter called again during or after the outage: %v", n.id, calls[settled[n.id]:])
		}
		if st := n.r.State(); len(st.Pending) != 0 {
			t.Errorf("%s: pending removals %v", n.id, ids(st.Pending))
		}
	}
}

// TestCutOff cuts one node off from etcd (its client goes through a proxy that is closed)
// while the others change, twice: it keeps its last ring while cut off; after reconnecting,
// the second time after a compaction, it registers again and all converge.
func TestCutOff(t *testing.T) {
	t.Parallel()
	te := startEtcd(t)
	eps := te.endpoints()
	px := newProxy(t, te.clientURL.Host)
	tweak := func(c *Config) { c.TTL = 3 * time.Second; c.HoldDown = time.Second }

	a := startNode(t, eps, "a", tweak)
	b := startNode(t, eps, "b", tweak)
	c := startNode(t, px.endpoints(), "c", tweak)
	converge(t, urls("a", "b", "c"), 10*time.Second, a, b, c)

	round := func(leaver *node, joiner string, compact bool) *node {
		t.Helper()
		before := c.rec.count()
		ring := c.r.State().Peers
		px.cut()
		j := startNode(t, eps, joiner, tweak)
		if err := leaver.r.Close(); err != nil {
			t.Fatal(err)
		}
		// The others see the leave, the join, and c's lease expiring.
		converge(t, urls("a", joiner), 15*time.Second, a, j)
		waitState(t, c.r, "lease lost", 10*time.Second, func(s State) bool { return !s.Registered })
		if st := c.r.State(); c.rec.count() != before || !slices.Equal(st.Peers, ring) || st.Connected {
			t.Fatalf("cut-off node changed: %d Set calls (had %d), peers %q (had %q), connected %v",
				c.rec.count(), before, st.Peers, ring, st.Connected)
		}
		if compact {
			resp, err := te.client(t).Compact(t.Context(), currentRev(t, te), clientv3.WithCompactPhysical())
			if err != nil {
				t.Fatalf("compact: %v, %v", resp, err)
			}
		}
		restored := time.Now()
		px.restore()
		at := converge(t, urls("a", "c", joiner), 15*time.Second, a, c, j)
		waitState(t, c.r, "connected", 10*time.Second, func(s State) bool { return s.Registered && s.Connected })
		t.Logf("cut-off node back in every ring %v after reconnecting (compaction %v)", at.Sub(restored).Round(time.Millisecond), compact)
		return j
	}
	d := round(b, "d", false)
	round(d, "e", true)
	if c.r.compactions.Load() == 0 {
		t.Error("the cut-off node's watch never hit the compacted revision")
	}
}

func currentRev(t *testing.T, te *testEtcd) int64 {
	t.Helper()
	resp, err := te.client(t).Get(t.Context(), "/")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// TestRapidChanges makes 100 membership changes as fast as etcd takes them while 8 goroutines
// read the ring and the State: no race, no lost update, and the final ring is the final set.
//
// Not parallel: the eight readers spin on both cores, which would stall the etcd servers of
// the other tests past their leases.
func TestRapidChanges(t *testing.T) {
	te := startEtcd(t)
	self := startNode(t, te.endpoints(), "self", func(c *Config) {
		c.HoldDown = 100 * time.Millisecond
		c.ConfirmDelay = 200 * time.Millisecond
	})
	raw := te.client(t)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ring := self.rec.ring.Load()
				owner := ring.Get(fmt.Sprintf("key-%d-%d", i, reads.Add(1)))
				st := self.r.State()
				if owner == "" || !slices.IsSorted(st.Peers) || !slices.Contains(st.Peers, self.url) {
					errs <- fmt.Errorf("reader %d: owner %q, peers %q", i, owner, st.Peers)
					return
				}
			}
		})
	}

	rng := rand.New(rand.NewPCG(1, 2))
	present := map[string]bool{}
	for range 100 {
		id := fmt.Sprintf("m%02d", rng.IntN(12))
		key := "/ringcache/default/members/" + id
		var err error
		if present[id] {
			_, err = raw.Delete(t.Context(), key)
		} else {
			m := member(id)
			v, _ := m.encode()
			_, err = raw.Put(t.Context(), key, v)
		}
		if err != nil {
			t.Fatal(err)
		}
		present[id] = !present[id]
	}
	want := []string{"self"}
	for id, ok := range present {
		if ok {
			want = append(want, id)
		}
	}
	slices.Sort(want)
	self.rec.waitFor(t, "self", urls(want...), 10*time.Second)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := ids(self.r.State().Members); !slices.Equal(got, want) {
		t.Errorf("members %q, want %q", got, want)
	}
	t.Logf("%d ring reads, %d Set calls during 100 changes", reads.Load(), self.rec.count())
}

// TestCloseStopsEverything checks that Close returns only when every goroutine of the
// Registry has ended, removes the key, and is idempotent.
func TestCloseStopsEverything(t *testing.T) {
	te := startEtcd(t)
	n := startNode(t, te.endpoints(), "a", nil)
	// Every goroutine of a Registry is started by start (not yet started, its frame is
	// start's gowrap closure rather than the method).
	const mine = "created by github.com/ringcache/ringcache/peers.(*Registry).start"
	if len(goroutinesCreatedBy(mine)) == 0 {
		t.Fatal("found no Registry goroutine while running: the check below would prove nothing")
	}
	if err := n.r.Close(); err != nil {
		t.Fatal(err)
	}
	if gs := goroutinesCreatedBy(mine); len(gs) > 0 {
		t.Errorf("still running after Close:\n%s", gs)
	}
	if err := n.r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	resp, err := te.client(t).Get(t.Context(), "/ringcache/default/members/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 0 {
		t.Errorf("keys after Close: %v, %v", resp, err)
	}
}

// TestDoneWhenClientClosed checks that a Registry on a caller's client stops, and says so
// through Done, when that client is closed.
func TestDoneWhenClientClosed(t *testing.T) {
	t.Parallel()
	te := startEtcd(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: te.endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, nil, "a", func(cfg *Config) { cfg.Client = c })
	c.Close()
	select {
	case <-n.r.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the client was closed")
	}
}

// TestOwnKeyPutBack deletes a node's key behind its back: the node puts it again under its
// live lease, and its ring never changes.
func TestOwnKeyPutBack(t *testing.T) {
	t.Parallel()
	te := startEtcd(t)
	a := startNode(t, te.endpoints(), "a", nil)
	raw := te.client(t)
	key := "/ringcache/default/members/a"
	del, err := raw.Delete(t.Context(), key)
	if err != nil || del.Deleted != 1 {
		t.Fatalf("delete: %v, %v", del, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for wresp := range raw.Watch(ctx, key, clientv3.WithRev(del.Header.Revision+1)) {
		for _, ev := range wresp.Events {
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			a.r.mu.Lock()
			lease := a.r.lease
			a.r.mu.Unlock()
			if clientv3.LeaseID(ev.Kv.Lease) != lease {
				t.Errorf("key put back under lease %x, want the live lease %x", ev.Kv.Lease, lease)
			}
			if n := a.rec.count(); n != 1 {
				t.Errorf("Setter called %d times, want 1", n)
			}
			return
		}
	}
	t.Fatal("key not put back within 10s")
}

// TestNewUnreachable checks that New gives up within its context when etcd does not answer,
// and leaves nothing running.
func TestNewUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	r, err := New(ctx, Config{Endpoints: []string{"http://" + freeAddr(t)}, DialTimeout: time.Second, NodeID: "a", PeerURL: "http://a"})
	if err == nil {
		r.Close()
		t.Fatal("New succeeded without etcd")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("New took %v to fail", d)
	}
}

// TestWeightsReachTheSetter registers two nodes of weights 1 and 3 against a real etcd: a
// Setter that implements WeightedSetter receives both weights through SetWeighted (never
// Set) on every node, builds the same weighted ring everywhere, and is called again when
// only a weight changes. A plain Setter in the same cluster is not called for a weight-only
// change, and State shows the weights either way.
func TestWeightsReachTheSetter(t *testing.T) {
	t.Parallel()
	te := startEtcd(t)
	eps := te.endpoints()
	wa, wb := newWeightRecorder(), newWeightRecorder()
	a := startNode(t, eps, "a", func(c *Config) { c.Setter = wa }) // Weight 0 reads as 1
	b := startNode(t, eps, "b", func(c *Config) { c.Weight = 3; c.Setter = wb })
	x := startNode(t, eps, "x", nil) // a plain Setter
	want := map[string]int{peerURL("a"): 1, peerURL("b"): 3, peerURL("x"): 1}
	wa.waitWeights(t, "a", want, 10*time.Second)
	wb.waitWeights(t, "b", want, 10*time.Second)
	x.rec.waitFor(t, "x", urls("a", "b", "x"), 10*time.Second)

	ref := consistenthash.New(0, nil)
	for _, p := range slices.Sorted(maps.Keys(want)) {
		if err := ref.AddWeighted(p, want[p]); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []*weightRecorder{wa, wb} {
		if n := w.plainSets.Load(); n != 0 {
			t.Errorf("Set called %d times on a WeightedSetter", n)
		}
		w.mu.Lock()
		if w.err != nil {
			t.Error(w.err)
		}
		w.mu.Unlock()
		if v := w.ring.Load().Version(); v != ref.Version() {
			t.Errorf("weighted ring version %x, want %x", v, ref.Version())
		}
	}
	for _, n := range []*node{a, b, x} {
		if st := n.r.State(); !maps.Equal(st.Weights, want) || !slices.Equal(st.Peers, urls("a", "b", "x")) {
			t.Errorf("%s: State weights %v, peers %q; want %v", n.id, st.Weights, st.Peers, want)
		}
	}

	// A member that changes only its weight reaches every WeightedSetter.
	raw := te.client(t)
	putMember := func(m Member) {
		t.Helper()
		v, err := m.encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Put(t.Context(), "/ringcache/default/members/"+m.ID, v); err != nil {
			t.Fatal(err)
		}
	}
	c := member("c")
	c.Weight = 2
	putMember(c)
	want[peerURL("c")] = 2
	wa.waitWeights(t, "a", want, 10*time.Second)
	wb.waitWeights(t, "b", want, 10*time.Second)
	x.rec.waitFor(t, "x", urls("a", "b", "c", "x"), 10*time.Second)
	plainCalls := x.rec.count()

	c.Weight = 5
	putMember(c)
	want[peerURL("c")] = 5
	wa.waitWeights(t, "a", want, 10*time.Second)
	wb.waitWeights(t, "b", want, 10*time.Second)
	waitState(t, x.r, "c at weight 5", 10*time.Second, func(s State) bool { return s.Weights[peerURL("c")] == 5 })
	if n := x.rec.count(); n != plainCalls {
		t.Errorf("plain Setter called for a weight-only change: %d calls, had %d", n, plainCalls)
	}
}

// TestLeave: a node that marks itself leaving is dropped by the others at once, stays
// registered (its lease is kept alive for the hand-off), and does not put its key back as if
// it had gone missing: the mark's put is the last write to its key until Close.
func TestLeave(t *testing.T) {
	t.Parallel()
	te := startEtcd(t)
	eps := te.endpoints()
	a, b := startNode(t, eps, "a", nil), startNode(t, eps, "b", nil)
	converge(t, urls("a", "b"), 10*time.Second, a, b)

	if err := b.r.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	converge(t, urls("a"), 2*time.Second, a)
	raw := te.client(t)
	key := "/ringcache/default/members/b"
	read := func() (rev int64, m Member) {
		t.Helper()
		resp, err := raw.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("%s: %d keys, want 1", key, len(resp.Kvs))
		}
		m, err = decodeMember("b", resp.Kvs[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Kvs[0].ModRevision, m
	}
	rev, m := read()
	if !m.Leaving {
		t.Fatalf("b's key after Leave: %+v, want it marked leaving", m)
	}
	time.Sleep(time.Second)
	if again, _ := read(); again != rev {
		t.Errorf("b's key was written again after Leave (mod revision %d, then %d): the node put back a key it had marked leaving", rev, again)
	}
	if st := b.r.State(); !st.Registered {
		t.Errorf("b after Leave: registered %v; want true until Close", st.Registered)
	}
	if _, held := b.r.Tenure(); !held {
		t.Error("b after Leave: Tenure not held; want it held until Close")
	}
	if err := b.r.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err := raw.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Errorf("b's key after Close: %q; want it gone with its lease (no explicit arcs to keep)", resp.Kvs[0].Value)
	}
}
