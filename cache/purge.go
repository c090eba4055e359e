package cache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Purge is a purge of a group's values, cluster-wide: every key of the
// group, or every key that starts with Prefix.
type Purge struct {
	// ID names the purge; a purge applied twice (it reached a node by two
	// paths) is applied once.
	ID string `json:"id"`
	// Group is the group's name.
	Group string `json:"group"`
	// Prefix, if not empty, limits the purge to the keys that start with it.
	Prefix string `json:"prefix,omitempty"`
	// At is when the purge was asked for, by the clock of the node that took it.
	At time.Time `json:"at"`
	// By is the node that took it (its peer URL), empty for a single node.
	By string `json:"by,omitempty"`
	// Rev orders the purges in the cluster's purge log (etcd's revision of
	// its record); 0 when there is no log (static membership).
	Rev int64 `json:"rev,omitempty"`
}

// Scope describes what p purges: "group g" or "prefix p of group g".
func (p Purge) Scope() string {
	if p.Prefix == "" {
		return "group " + p.Group
	}
	return "prefix " + p.Prefix + " of group " + p.Group
}

// PurgeResult is what a purge reports once it returned.
type PurgeResult struct {
	Purge
	// Confirmed names the other nodes that applied the purge before it
	// returned.
	Confirmed []string `json:"confirmed"`
	// Unconfirmed names the nodes that did not answer. With a purge log
	// (etcd membership) the purge returned only once they could no longer
	// serve a value from before it (see transport.NodeConfig.PurgeLease),
	// and they apply it before they serve from their caches again. Without
	// one (a static peer list), they are retried in the background.
	Unconfirmed []string `json:"unconfirmed"`
	// Recorded reports whether the purge is in the cluster's purge log.
	Recorded bool `json:"recorded"`
}

// A Purger is a PeerPicker that takes a purge to every node of the
// cluster, this one included (through Node.ApplyPurge), and records it
// where a node that is down or cut off at the time finds it.
type Purger interface {
	Purge(ctx context.Context, p Purge) (PurgeResult, error)
}

// Purge drops every value of the group on every node, cluster-wide: once
// it returns, no node serves a value of the group that was loaded or
// written before it began. Values are loaded again on demand, once per key
// for the whole cluster, as after a cold start. A write that overlaps the
// purge may or may not survive it; one that began after it returned always
// does.
func (g *Group) Purge(ctx context.Context) (PurgeResult, error) {
	return g.PurgePrefix(ctx, "")
}

// PurgePrefix is Purge for the keys that start with prefix ("" is every
// key). It drops their values from every cache of every node: main, hot
// copies, the values kept for a hand-off.
func (g *Group) PurgePrefix(ctx context.Context, prefix string) (PurgeResult, error) {
	p := Purge{ID: newPurgeID(), Group: g.cfg.Name, Prefix: prefix, At: time.Now()}
	if pr, ok := g.peers.(Purger); ok {
		return pr.Purge(ctx, p)
	}
	g.node.ApplyPurge(p)
	g.node.EndPurge(p)
	return PurgeResult{Purge: p, Confirmed: []string{}, Unconfirmed: []string{}}, nil
}

func newPurgeID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// HoldPurge is the first of a purge's two rounds on this node. It drops
// the values of the purge's keys that this node holds for another one
// (hot and fallback copies, hand-offs, heirs' copies) and keeps none it
// takes from another node until EndPurge, but leaves the values it owns:
// those go in the second round (ApplyPurge), which the transport begins
// only once every node it could reach held the purge. So no node serves a
// copy from before the purge after an owner served a value loaded after
// it (a read going back in time). It returns how many entries it dropped.
func (n *Node) HoldPurge(p Purge) int {
	g, ok := n.Group(p.Group)
	if !ok {
		return 0
	}
	g.purges.begin(p.ID)
	return g.purgeLocal(p.Prefix, false)
}

// ApplyPurge applies p on this node only, both rounds at once (see
// HoldPurge), and returns how many entries it dropped; an unknown group has
// none. The transport calls it for a purge every node it could reach held,
// and EndPurge once the purge reached every node it could reach: in between,
// the group keeps no value it takes from another node (hot copies,
// hand-offs), which may not have applied the purge yet. Applied again, it
// drops again what was stored meanwhile: the transport applies each purge
// once (by its ID).
func (n *Node) ApplyPurge(p Purge) int {
	g, ok := n.Group(p.Group)
	if !ok {
		return 0
	}
	g.purges.begin(p.ID)
	return g.purgeLocal(p.Prefix, true)
}

// EndPurge ends p's purge on this node (see HoldPurge). A purge that is
// never ended ends by itself after purgeHold.
func (n *Node) EndPurge(p Purge) {
	g, ok := n.Group(p.Group)
	if !ok {
		return
	}
	g.purges.end(p.ID)
}

// purgeHold bounds a purge's hold on a group when its end never comes (the
// node that made it died before it sent it, or this node learnt of the
// purge from the log): longer than any purge takes to end, which is at most
// a purge lease (the transport bounds it at 5 minutes) after it began.
const purgeHold = 6 * time.Minute

// inPurges are the purges a group is in, between HoldPurge (or
// ApplyPurge) and EndPurge.
type inPurges struct {
	n atomic.Int32 // len(ids), for a lock-free check
	// gen moves at every begin and end: a value taken from another node
	// is kept only if gen did not move since it was asked for and no
	// purge was in progress then (guard.purge, takeGuard).
	gen atomic.Uint64
	mu  sync.Mutex
	// ids holds each purge's deadline (guarded by mu).
	ids map[string]time.Time
}

func (ps *inPurges) begin(id string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.ids == nil {
		ps.ids = map[string]time.Time{}
	}
	if _, ok := ps.ids[id]; !ok {
		ps.n.Add(1)
	}
	ps.ids[id] = time.Now().Add(purgeHold)
	ps.gen.Add(1)
}

func (ps *inPurges) end(id string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if _, ok := ps.ids[id]; ok {
		delete(ps.ids, id)
		ps.n.Add(-1)
	}
	ps.gen.Add(1)
}

// active reports whether the group is in a purge.
func (ps *inPurges) active() bool {
	if ps.n.Load() == 0 {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	now := time.Now()
	for id, until := range ps.ids {
		if now.After(until) {
			delete(ps.ids, id)
			ps.n.Add(-1)
			ps.gen.Add(1)
		}
	}
	return len(ps.ids) > 0
}

// takeGuard returns gd, for a value taken from another node beginning
// now, with the purge generation; ok is false while a purge is in
// progress (nothing taken from another node is kept then).
func (g *Group) takeGuard(gd guard) (_ guard, ok bool) {
	gd.purge, gd.wantPurge = &g.purges.gen, g.purges.gen.Load()
	return gd, !g.purges.active()
}

func (g *Group) bumpEpochs() {
	for i := range g.epochs {
		g.epochs[i].Add(1)
	}
}

// purgeLocal drops this node's values of the keys that start with prefix:
// with owned false, only those it holds for other nodes (HoldPurge). The
// order is invalidate's, for every key at once: every write epoch is
// bumped first, so that no load or fetch that began before the purge
// stores its result (it may carry a value from before it); then no caller
// joins such a load, no failure is remembered, and the entries go.
// Bumping every stripe also voids the hand-offs in progress (Adopt), for
// the same reason. Without owned, the purge generation (begin) voids the
// fetches and hand-offs in progress instead, and the owner's loads go on.
func (g *Group) purgeLocal(prefix string, owned bool) int {
	match := func(key string) bool { return strings.HasPrefix(key, prefix) }
	n := 0
	if owned {
		g.bumpEpochs()
		g.loads.forgetIf(match)
		g.failed.forgetIf(match)
		n += g.main.removeIf(match)
	}
	g.fetches.forgetIf(match)
	n += g.hot.removeIf(match)
	n += g.handoff.removeIf(match)
	n += g.copies.removeIf(match)
	g.st.purged.Add(int64(n))
	return n
}

// current reports whether the node may serve from its caches: false while
// it may have missed a purge (Config.Current).
func (n *Node) current() bool { return n.isCurrent == nil || n.isCurrent() }
