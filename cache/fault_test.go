package cache

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ringcache/ringcache/cache/internal/store"
)

// switchRing is a PeerPicker for two fakePeers whose owner of every key a
// test moves between them.
type switchRing struct {
	self  int
	peers []*fakePeer
	owner *atomic.Int64
}

func (r switchRing) PickPeer(string) (Peer, bool) {
	if i := int(r.owner.Load()); i != r.self {
		return r.peers[i], true
	}
	return nil, false
}

func (r switchRing) DropCopies(ctx context.Context, group, key string) []string {
	return ring{self: r.self, peers: r.peers, owner: func(string) int { return int(r.owner.Load()) }}.DropCopies(ctx, group, key)
}

// twoNodes returns two nodes sharing one movable owner (node 1 at first),
// whose origin returns "o<n>:key" for its n-th load.
func twoNodes(t *testing.T, cfg GroupConfig) (groups []*Group, nodes []*Node, owner *atomic.Int64, loads *atomic.Int64) {
	t.Helper()
	owner, loads = new(atomic.Int64), new(atomic.Int64)
	owner.Store(1)
	peers := []*fakePeer{{name: "node0"}, {name: "node1"}}
	for i := range 2 {
		n := newNode(t, Config{Peers: switchRing{self: i, peers: peers, owner: owner}})
		peers[i].node = n
		cfg.Name = "g"
		cfg.Getter = GetterFunc(func(_ context.Context, key string) (Value, error) {
			return Value{Data: fmt.Appendf(nil, "o%d:%s", loads.Add(1), key)}, nil
		})
		g, err := n.NewGroup(cfg)
		if err != nil {
			t.Fatal(err)
		}
		groups, nodes = append(groups, g), append(nodes, n)
	}
	return groups, nodes, owner, loads
}

// TestOwnershipLostAndRegainedDropsTheOldEntry: node 1 holds a written value
// for k; k moves to node 0, where it is written again; k moves back. Node 1
// must not serve what it held before it lost k: it reads k again (here from
// the origin: a write lives in its owner's memory only), never the old write.
func TestOwnershipLostAndRegainedDropsTheOldEntry(t *testing.T) {
	t.Parallel()
	groups, nodes, owner, _ := twoNodes(t, GroupConfig{MaxBytes: 1 << 20})
	move := func(to int64) {
		owner.Store(to)
		for _, n := range nodes {
			n.RingChanged()
		}
	}
	if _, err := groups[0].Set(t.Context(), "k", Value{Data: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	mustGet(t, groups[1], "k", "old")
	move(0)
	if s := groups[1].Stats(); s.MainItems != 0 {
		t.Fatalf("node 1 MainItems = %d after losing k, want 0", s.MainItems)
	}
	if _, err := groups[1].Set(t.Context(), "k", Value{Data: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	mustGet(t, groups[1], "k", "new")
	move(1)
	for i, g := range groups {
		v, err := g.Get(t.Context(), "k")
		if err != nil || string(v.Data) == "old" {
			t.Fatalf("node %d Get(k) after k came back = %q, %v; the pre-move write came back", i, v.Data, err)
		}
	}
}

// TestLoadAcrossARingChangeIsNotStored: a load that began before a ring
// change is returned but not stored, so it cannot outlive the change.
func TestLoadAcrossARingChangeIsNotStored(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{})
	n := newNode(t, Config{})
	g, err := n.NewGroup(GroupConfig{Name: "g", MaxBytes: 1 << 20, Getter: GetterFunc(func(context.Context, string) (Value, error) {
		close(started)
		<-release
		return Value{Data: []byte("v")}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { _, err := g.Get(context.Background(), "k"); done <- err }()
	<-started
	n.RingChanged()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := g.Stats(); s.MainItems != 0 {
		t.Fatalf("MainItems = %d, want 0: the load straddled a ring change", s.MainItems)
	}
}

// TestTenure: main entries are served only while the node's tenure holds,
// and only under the term they were stored in; writes need it too.
func TestTenure(t *testing.T) {
	t.Parallel()
	var term atomic.Uint64
	var held atomic.Bool
	term.Store(1)
	held.Store(true)
	var loads atomic.Int64
	n := newNode(t, Config{Tenure: func() (uint64, bool) { return term.Load(), held.Load() }})
	g, err := n.NewGroup(GroupConfig{Name: "g", MaxBytes: 1 << 20, Getter: GetterFunc(func(_ context.Context, key string) (Value, error) {
		return Value{Data: fmt.Appendf(nil, "o%d", loads.Add(1))}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	mustGet(t, g, "k", "o1")
	mustGet(t, g, "k", "o1")
	held.Store(false) // the lease may have expired (the node was paused)
	mustGet(t, g, "k", "o2")
	mustGet(t, g, "k", "o3") // not stored while the tenure is in doubt
	if _, err := g.Set(t.Context(), "k", Value{Data: []byte("w")}); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Set without tenure: err = %v, want ErrNotOwner", err)
	}
	held.Store(true)
	mustGet(t, g, "k", "o1") // the same term: the registration never lapsed
	term.Store(2)            // registered again under a new lease
	mustGet(t, g, "k", "o4")
	mustGet(t, g, "k", "o4")

	// A written key is not read from the origin while the tenure is in
	// doubt: the write may still be this node's to serve.
	if _, err := g.Set(t.Context(), "w", Value{Data: []byte("written")}); err != nil {
		t.Fatal(err)
	}
	held.Store(false)
	if _, err := g.Get(t.Context(), "w"); !errors.Is(err, ErrOwnerUnreachable) {
		t.Fatalf("Get of a written key with the tenure in doubt: err = %v, want ErrOwnerUnreachable", err)
	}
	mustGet(t, g, "k", "o5") // a key nobody wrote is read from the origin, as before
	held.Store(true)
	mustGet(t, g, "w", "written") // the peers confirmed the term: the write was never lost
}

// TestNotCurrent: while the node may have missed a purge (Config.Current
// false), nothing is served from its caches: a key nobody wrote is read
// from the origin, and a written key it owns is answered
// ErrOwnerUnreachable, not with the origin's value in place of the write.
// Once current again, it serves what it kept.
func TestNotCurrent(t *testing.T) {
	t.Parallel()
	var current atomic.Bool
	current.Store(true)
	var loads atomic.Int64
	n := newNode(t, Config{Current: current.Load})
	g, err := n.NewGroup(GroupConfig{Name: "g", MaxBytes: 1 << 20, Getter: GetterFunc(func(_ context.Context, key string) (Value, error) {
		return Value{Data: fmt.Appendf(nil, "o%d", loads.Add(1))}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	mustGet(t, g, "k", "o1")
	if _, err := g.Set(t.Context(), "w", Value{Data: []byte("written")}); err != nil {
		t.Fatal(err)
	}
	current.Store(false)
	mustGet(t, g, "k", "o2")
	if v, err := g.Get(t.Context(), "w"); !errors.Is(err, ErrOwnerUnreachable) {
		t.Fatalf("Get of a written key while not current: %q, %v; want ErrOwnerUnreachable", v.Data, err)
	}
	current.Store(true)
	mustGet(t, g, "w", "written")
}

// TestHotCopiesLiveUnderTheOwnersLease: a hot copy is served while its
// owner's contact lease holds, not while it is lapsed, and never again under
// a later epoch. A fallback copy (owner unreachable) is served without a
// lease until contact returns.
func TestHotCopiesLiveUnderTheOwnersLease(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	c := newCluster(t, 2, hashOwner(2), GroupConfig{MaxBytes: 1 << 20, HotAfter: 1}, o.getter)
	key := keyOwnedBy(t, c.owner, 1)
	owner := c.peers[1]
	owner.setLease(1, true)
	mustGet(t, c.groups[0], key, "v:"+key)
	mustGet(t, c.groups[0], key, "v:"+key)
	if f := owner.fetches.Load(); f != 1 {
		t.Fatalf("fetches = %d, want 1 (the second Get is a hot hit)", f)
	}
	owner.setLease(1, false)
	mustGet(t, c.groups[0], key, "v:"+key)
	if f := owner.fetches.Load(); f != 2 {
		t.Fatalf("fetches = %d with the lease lapsed, want 2", f)
	}
	owner.setLease(2, true) // renewed after the lapse: a new epoch
	c.groups[0].hot.Add(key, store.Entry{V: store.Value{Data: []byte("stale")}, Size: 1, Ref: owner, Tag: 1}, nil)
	mustGet(t, c.groups[0], key, "v:"+key)

	// The owner is unreachable: the fallback copy is served without a lease.
	owner.setFail(errUnreachable)
	owner.setLease(2, false)
	c.groups[0].hot.Remove(key) // not a drop: that would say the key was written
	mustGet(t, c.groups[0], key, "v:"+key)
	loads := o.total.Load()
	mustGet(t, c.groups[0], key, "v:"+key)
	if o.total.Load() != loads {
		t.Fatal("the fallback copy was not served")
	}
	// Contact returns: the fallback copy is dropped.
	owner.setFail(nil)
	owner.setLease(3, true)
	before := owner.fetches.Load()
	mustGet(t, c.groups[0], key, "v:"+key)
	if owner.fetches.Load() != before+1 {
		t.Fatal("the fallback copy outlived the owner's return")
	}
}

// TestOwnersRefusalOfAWrittenKeyIsFinal: an owner that answers that it
// cannot read a key's written value now (ErrOwnerUnreachable: its tenure is
// in doubt) has answered; the asking node passes the error on and does not
// load the origin's older value as a fallback, though it never heard of the
// write itself.
func TestOwnersRefusalOfAWrittenKeyIsFinal(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	c := newCluster(t, 2, hashOwner(2), GroupConfig{MaxBytes: 1 << 20}, o.getter)
	key := keyOwnedBy(t, c.owner, 1)
	c.peers[1].setFail(fmt.Errorf("owner in doubt: %w", ErrOwnerUnreachable))
	if _, err := c.groups[0].Get(t.Context(), key); !errors.Is(err, ErrOwnerUnreachable) {
		t.Fatalf("Get = %v, want ErrOwnerUnreachable", err)
	}
	if n := o.total.Load(); n != 0 {
		t.Fatalf("%d origin loads, want none: the owner answered", n)
	}
}
