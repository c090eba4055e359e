package peers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/consistenthash"
	"github.com/ringcache/ringcache/internal/poll"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// testPositions is the daemon's default number of positions per node.
const testPositions = 16

// rangesPlacer places a joining node as the daemon does.
var rangesPlacer = PlacerFunc(func(ring map[string][]uint32, node string) ([]uint32, error) {
	return consistenthash.JoinPositions(testPositions, ring, node)
})

// rangesRecorder is a RangesSetter that does what transport.Pool does with the positions
// (build the ring with consistenthash.RangesFrom and swap it in) and records every call.
type rangesRecorder struct {
	ring      atomic.Pointer[consistenthash.Ranges]
	plainSets atomic.Int64

	mu      sync.Mutex
	err     error
	calls   []map[string][]uint32
	changed chan struct{}
}

func newRangesRecorder() *rangesRecorder { return &rangesRecorder{changed: make(chan struct{})} }

func (rec *rangesRecorder) Set(...string) error { rec.plainSets.Add(1); return nil }

func (rec *rangesRecorder) SetRanges(positions map[string][]uint32) error {
	r, err := consistenthash.RangesFrom(testPositions, consistenthash.XXHash, positions)
	if err == nil {
		rec.ring.Store(r)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if err != nil && rec.err == nil {
		rec.err = err
	}
	rec.calls = append(rec.calls, positions)
	close(rec.changed)
	rec.changed = make(chan struct{})
	return nil
}

// waitMembers waits until the last SetRanges named want's peers and returns its positions.
func (rec *rangesRecorder) waitMembers(t *testing.T, name string, want []string, timeout time.Duration) map[string][]uint32 {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		rec.mu.Lock()
		calls, changed, err := slices.Clone(rec.calls), rec.changed, rec.err
		rec.mu.Unlock()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := len(calls); n > 0 && slices.Equal(slices.Sorted(maps.Keys(calls[n-1])), want) {
			return calls[n-1]
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%s: ring members are not %q after %v", name, want, timeout)
		}
	}
}

type rangesNode struct {
	id  string
	r   *Registry
	rec *rangesRecorder
}

// newRangesNode registers id with placement; it does not fail the test itself, so that it
// can run on a goroutine of its own.
func newRangesNode(t *testing.T, endpoints []string, id string, tweak func(*Config)) (*rangesNode, error) {
	n := &rangesNode{id: id, rec: newRangesRecorder()}
	cfg := Config{
		Endpoints: endpoints,
		NodeID:    id,
		PeerURL:   peerURL(id),
		Logger:    testLogger(t).With("test", t.Name()),
		Setter:    n.rec,
		Placer:    rangesPlacer,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r, err := New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("New(%s): %w", id, err)
	}
	n.r = r
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close(%s): %v", id, err)
		}
	})
	return n, nil
}

// startTogether starts one registry per id, all released at the same instant.
func startTogether(t *testing.T, endpoints []string, ids []string, tweak func(*Config)) []*rangesNode {
	t.Helper()
	nodes := make([]*rangesNode, len(ids))
	errs := make([]error, len(ids))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			<-start
			nodes[i], errs[i] = newRangesNode(t, endpoints, id, tweak)
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// storedPositions reads every member's positions from etcd, by ID.
func storedPositions(t *testing.T, c *clientv3.Client) map[string][]uint32 {
	t.Helper()
	resp, err := c.Get(t.Context(), "/ringcache/default/members/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]uint32{}
	for _, kv := range resp.Kvs {
		id := string(kv.Key[len("/ringcache/default/members/"):])
		m, err := decodeMember(id, kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = m.Positions
	}
	return out
}

// checkDisjoint fails unless every member holds want positions and no two share one.
func checkDisjoint(t *testing.T, stored map[string][]uint32, want int) {
	t.Helper()
	owner := map[uint32]string{}
	for id, ps := range stored {
		if len(ps) != want {
			t.Errorf("%s holds %d positions, want %d", id, len(ps), want)
		}
		for _, p := range ps {
			if o, ok := owner[p]; ok {
				t.Errorf("position %d held by %s and %s", p, o, id)
			}
			owner[p] = id
		}
	}
}

func maxOverMean(shares map[string]float64) float64 {
	var mx float64
	for _, s := range shares {
		mx = max(mx, s)
	}
	return mx * float64(len(shares))
}

// converged waits until every node's ring has want's members and checks that the rings are
// one ring; it returns it.
func converged(t *testing.T, want []string, nodes []*rangesNode) *consistenthash.Ranges {
	t.Helper()
	for _, n := range nodes {
		n.rec.waitMembers(t, n.id, want, 10*time.Second)
	}
	ring := nodes[0].rec.ring.Load()
	for _, n := range nodes {
		if v := n.rec.ring.Load().Version(); v != ring.Version() {
			t.Errorf("%s: ring version %x, %s has %x", n.id, v, nodes[0].id, ring.Version())
		}
		if s := n.rec.plainSets.Load(); s != 0 {
			t.Errorf("%s: Set called %d times on a RangesSetter", n.id, s)
		}
	}
	return ring
}

// TestJoinRaceDeterministic makes two nodes read the ring at the same revision before either
// commits: exactly one transaction must lose, and the loser must place itself around the
// winner.
func TestJoinRaceDeterministic(t *testing.T) {
	t.Parallel()
	te := startEtcd(t)
	arrived := make(chan struct{}, 2)
	release := make(chan struct{})
	go func() {
		<-arrived
		<-arrived
		close(release)
	}()
	hook := func(c *Config) {
		c.beforeCommit = func(attempt int) {
			if attempt == 1 {
				arrived <- struct{}{}
				select {
				case <-release:
				case <-time.After(10 * time.Second): // the other one never came: the test fails below
				}
			}
		}
	}
	nodes := startTogether(t, te.endpoints(), []string{"a", "b"}, hook)
	if c := nodes[0].r.ClaimConflicts() + nodes[1].r.ClaimConflicts(); c != 1 {
		t.Errorf("%d conflicts, want exactly 1 (a %d, b %d)", c, nodes[0].r.ClaimConflicts(), nodes[1].r.ClaimConflicts())
	}
	stored := storedPositions(t, te.client(t))
	checkDisjoint(t, stored, testPositions)
	ring := converged(t, urls("a", "b"), nodes)
	if mm := maxOverMean(ring.Shares()); mm > 1.0001 {
		t.Errorf("two nodes: max/mean %.4f, want 1", mm)
	}
}

// TestStartTogetherBalanced starts ten nodes at the same instant: none shares a position
// with another, every node builds the same ring, and the largest share is within 1.10 of
// the mean; then three and four nodes of a fresh cluster (the compose cluster's sizes).
func TestStartTogetherBalanced(t *testing.T) {
	t.Parallel()
	for _, n := range []int{10, 3} {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			t.Parallel()
			te := startEtcd(t)
			var ids []string
			for i := range n {
				ids = append(ids, fmt.Sprintf("node%d", i+1))
			}
			nodes := startTogether(t, te.endpoints(), ids, nil)
			var conflicts int64
			for _, nd := range nodes {
				conflicts += nd.r.ClaimConflicts()
			}
			t.Logf("%d nodes started together: %d join conflicts retried", n, conflicts)
			checkDisjoint(t, storedPositions(t, te.client(t)), testPositions)
			ring := converged(t, urls(ids...), nodes)
			if mm := maxOverMean(ring.Shares()); mm > 1.10 {
				t.Errorf("%d nodes: max/mean %.4f > 1.10", n, mm)
			} else {
				t.Logf("%d nodes: max/mean %.6f", n, mm)
			}
			if n != 3 {
				return
			}
			fourth, err := newRangesNode(t, te.endpoints(), "node4", nil)
			if err != nil {
				t.Fatal(err)
			}
			nodes = append(nodes, fourth)
			checkDisjoint(t, storedPositions(t, te.client(t)), testPositions)
			ring = converged(t, urls(append(ids, "node4")...), nodes)
			if mm := maxOverMean(ring.Shares()); mm > 1.10 {
				t.Errorf("4 nodes: max/mean %.4f > 1.10", mm)
			} else {
				t.Logf("4 nodes: max/mean %.6f", mm)
			}
		})
	}
}

// TestLeaveKeepsOthersPositions: a graceful leave removes only the leaver's positions, so only
// its keys move (to the owners of the preceding arcs); a node whose key vanished puts it back
// with the same positions, so the ring comes back unchanged.
func TestLeaveKeepsOthersPositions(t *testing.T) {
	t.Parallel()
	te := startEtcd(t)
	ids := []string{"a", "b", "c", "d"}
	var nodes []*rangesNode
	for _, id := range ids { // one after another: no race here
		n, err := newRangesNode(t, te.endpoints(), id, nil)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	before := converged(t, urls(ids...), nodes)
	raw := te.client(t)
	stored := storedPositions(t, raw)

	if err := nodes[3].r.Close(); err != nil {
		t.Fatal(err)
	}
	after := converged(t, urls("a", "b", "c"), nodes[:3])
	for _, id := range ids[:3] {
		if got, _ := after.Positions(peerURL(id)); !slices.Equal(got, stored[id]) {
			t.Errorf("%s: positions changed on d's leave: %v, were %v", id, got, stored[id])
		}
	}
	leaver := peerURL("d")
	moved := 0
	for i := range 20000 {
		k := fmt.Sprintf("key-%d", i)
		was, is := before.Get(k), after.Get(k)
		switch {
		case was != leaver && is != was:
			t.Fatalf("%s moved from %s to %s, though only d left", k, was, is)
		case was == leaver:
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no key was on d")
	}

	// The key of a is deleted by hand: a puts it back, and keeps its positions.
	if _, err := raw.Delete(t.Context(), "/ringcache/default/members/a"); err != nil {
		t.Fatal(err)
	}
	var back []uint32
	poll.Until(t, 10*time.Second, func() (bool, string) {
		var ok bool
		back, ok = storedPositions(t, raw)["a"]
		return ok, "a's key not put back"
	})
	if !slices.Equal(back, stored["a"]) {
		t.Errorf("a came back with positions %v, had %v", back, stored["a"])
	}
	if v := converged(t, urls("a", "b", "c"), nodes[:3]).Version(); v != after.Version() {
		t.Errorf("ring version %x after a's key came back, want %x", v, after.Version())
	}
}

// startRanges starts ids one after another (no race: the later ones cut the earlier ones'
// arcs, so placing b of a, b, c anew differs from what it holds) and waits for their ring.
func startRanges(t *testing.T, te *testEtcd, ids ...string) ([]*rangesNode, *consistenthash.Ranges) {
	t.Helper()
	var nodes []*rangesNode
	for _, id := range ids {
		n, err := newRangesNode(t, te.endpoints(), id, nil)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	return nodes, converged(t, urls(ids...), nodes)
}

// TestRestartKeepsPositions: a node that comes back under the same ID takes its positions
// back, so its arcs and the ring come back unchanged: after a crash, from its key while the
// lease still runs; after a graceful leave, from the key kept marked leaving, while the other
// members hold exactly the positions they held when it left (a rolling restart).
func TestRestartKeepsPositions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		stop func(*Registry) error
	}{
		{"crash within lease", func(r *Registry) error { r.crash(); return nil }},
		{"graceful leave", (*Registry).Close},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			te := startEtcd(t)
			nodes, before := startRanges(t, te, "a", "b", "c")
			raw := te.client(t)
			old := storedPositions(t, raw)["b"]
			if err := tc.stop(nodes[1].r); err != nil {
				t.Fatal(err)
			}
			// The lease b's key is under now: the dead process's, or the
			// one that keeps it parked.
			resp, err := raw.Get(t.Context(), "/ringcache/default/members/b")
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("b's key after it stopped: %v, %v; want it kept", resp, err)
			}
			held := clientv3.LeaseID(resp.Kvs[0].Lease)
			again, err := newRangesNode(t, te.endpoints(), "b", nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := storedPositions(t, raw)["b"]; !slices.Equal(got, old) {
				t.Errorf("b came back with positions %v, had %v", got, old)
			}
			nodes[1] = again
			if v := converged(t, urls("a", "b", "c"), nodes).Version(); v != before.Version() {
				t.Errorf("ring version %x after b came back, want %x", v, before.Version())
			}
			// That lease running out later must not take the new
			// registration with it.
			if _, err := raw.Revoke(t.Context(), held); err != nil {
				t.Fatal(err)
			}
			if m, ok := readMember(t, raw, "b"); !ok || m.Leaving {
				t.Errorf("b's key after its old lease ended: %+v, present %v; want b registered", m, ok)
			}
		})
	}
}

// readMember returns the member value stored under id's key, and whether there is one.
func readMember(t *testing.T, c *clientv3.Client, id string) (Member, bool) {
	t.Helper()
	resp, err := c.Get(t.Context(), "/ringcache/default/members/"+id)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return Member{}, false
	}
	m, err := decodeMember(id, resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return m, true
}

// TestRejoinAfterChange: a node that left gracefully while another member joined is placed
// anew when it comes back: the arcs it left were the joiner's to cut.
func TestRejoinAfterChange(t *testing.T) {
	t.Parallel()
	te := startEtcd(t)
	nodes, _ := startRanges(t, te, "a", "b", "c")
	raw := te.client(t)
	old := storedPositions(t, raw)["b"]
	if err := nodes[1].r.Close(); err != nil {
		t.Fatal(err)
	}
	converged(t, urls("a", "c"), []*rangesNode{nodes[0], nodes[2]})
	d, err := newRangesNode(t, te.endpoints(), "d", nil)
	if err != nil {
		t.Fatal(err)
	}
	converged(t, urls("a", "c", "d"), []*rangesNode{nodes[0], nodes[2], d})
	back, err := newRangesNode(t, te.endpoints(), "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	converged(t, urls("a", "b", "c", "d"), []*rangesNode{nodes[0], back, nodes[2], d})
	stored := storedPositions(t, raw)
	if slices.Equal(stored["b"], old) {
		t.Errorf("b took its old positions back though d joined while it was away")
	}
	checkDisjoint(t, stored, len(old))
}

// TestPlacementConfig: a Placer needs a RangesSetter and weight 1, and a Placer's bad
// answer fails the registration instead of storing it.
func TestPlacementConfig(t *testing.T) {
	t.Parallel()
	base := Config{Endpoints: []string{"http://127.0.0.1:1"}, NodeID: "a", PeerURL: peerURL("a"), Placer: rangesPlacer}
	cases := []struct {
		name  string
		tweak func(*Config)
		ok    bool
	}{
		{"ranges setter", func(c *Config) { c.Setter = newRangesRecorder() }, true},
		{"no setter", func(c *Config) {}, true},
		{"plain setter", func(c *Config) { c.Setter = newRecorder() }, false},
		{"weight", func(c *Config) { c.Setter = newRangesRecorder(); c.Weight = 2 }, false},
	}
	for _, c := range cases {
		cfg := base
		c.tweak(&cfg)
		_, err := cfg.withDefaults()
		if (err == nil) != c.ok {
			t.Errorf("%s: withDefaults() = %v, want ok=%v", c.name, err, c.ok)
		}
	}

	te := startEtcd(t)
	bad := []struct {
		name   string
		placer PlacerFunc
	}{
		{"none", func(map[string][]uint32, string) ([]uint32, error) { return nil, nil }},
		{"repeated", func(map[string][]uint32, string) ([]uint32, error) { return []uint32{3, 3}, nil }},
		{"too many", func(map[string][]uint32, string) ([]uint32, error) {
			p := make([]uint32, MaxPositions+1)
			for i := range p {
				p[i] = uint32(i)
			}
			return p, nil
		}},
	}
	for _, b := range bad {
		_, err := newRangesNode(t, te.endpoints(), "x", func(c *Config) { c.Placer = b.placer })
		if err == nil || !errors.Is(err, ErrBadPositions) {
			t.Errorf("%s: New = %v, want ErrBadPositions", b.name, err)
		}
	}
	if got := storedPositions(t, te.client(t)); len(got) != 0 {
		t.Errorf("refused placements left keys behind: %v", got)
	}
}
