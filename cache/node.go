// Package cache is ringcache's node: named groups of a read-through,
// byte-bounded cache, each with one origin (a Getter), sharing a PeerPicker
// that says which node of the cluster owns a key. It has no HTTP and no
// process-wide state: a Node owns its groups, so several nodes can run in
// one process.
//
// # Data path
//
// Group.Get looks in the main cache (keys this node owns), then in the hot
// cache (copies of popular keys that peers own). On a miss it asks the
// PeerPicker: if a peer owns the key, one fetch per key and node goes to that
// peer, and if the peer cannot be reached the node loads the key from the
// origin itself and serves it from the hot cache for FallbackTTL only; if
// this node owns the key, one origin load per key and node fills the main
// cache. PeerView.Get, which serves requests that came from peers, never asks a
// peer (the one-hop rule), and origin loads never wait on a fetch, so nodes
// whose rings disagree cannot deadlock. Both caches are bounded by bytes
// (key, value and a fixed per-entry overhead, and the dead bytes of their
// pages), with per-entry expiry checked on read, and evict by
// GroupConfig.Policy: by default a segmented LRU, in which a key read again
// while cached, or soon after its eviction (a ghost of it, a 2-byte
// fingerprint, is kept for it), outlives keys read once (PolicySLRU). A
// hit takes a cache's lock only shared, and moves no entry: it marks its
// record read, and the writer that needs room reorders (store/slru.go). They
// hold entries without pointers (records in chunks, keys and values of up
// to 2 KiB in pages of bytes), so that the collector does not visit a
// million small entries on every cycle. A page is compacted once three
// quarters of it are dead, and the pages with the fewest live bytes once
// the dead bytes of a cache pass 1/36 of its budget, down to 1/56: a
// budget holds entries, not holes, whether the pages die piecemeal (random
// reads) or whole (a scan).
// They index entries by a seeded 64-bit hash of the key: of two keys with
// the same hash only one is cached at a time, as if the other had been
// evicted.
//
// # Writes and what a node may serve
//
// Set and Remove are applied by the key's owner (PeerView.Set, PeerView.Remove),
// which then drops the key's copy on every other node
// (PeerPicker.DropCopies) before the write returns, so that no node serves
// the value the write replaced. A hot copy is served only under its owner's
// contact lease (Leaser): never while the lease is lapsed, and never again
// once the lease has lapsed or was revoked, so a node the owner could not
// reach cannot serve an old value when it is reachable again. A main-cache
// entry is served only while the node's Tenure holds and under the term it
// was stored in, and a ring change drops the entries of keys the node no
// longer owns (loads that straddle it are not stored), so a node that lost
// and regained a key never serves what it held before. A written value
// lives in its owner's memory, and in its heirs' with Copies > 1: a ring
// change hands it to the key's next owner, as it hands loaded values; when
// its owner evicts it, or crashes without copies, the key is read through
// from the origin again. But no node reads a written key from the origin
// while the written value may still be served: a node that cannot reach the
// key's owner (and finds no heir's copy), or that owns it with its Tenure in
// doubt or while it is not Current, answers ErrOwnerUnreachable for a key
// written in the cluster that it heard of (a write it applied or
// forwarded, or the owner's drop), where for other keys it loads the
// origin's value. Otherwise a read could return
// the origin's value and then the written one again. For the same reason an
// owner that no longer holds a written value (evicted) drops the other
// nodes' copies of it before it serves the origin's (for the 32,768 keys
// written most recently that it heard of), taking a write's turn. An owner
// applies the writes of one key one at a time, each to the end of its drops
// and copies, so that no drop lands at an heir after a later write's copy.
//
// # The life of an entry
//
// On one node, a key's value is in one of these states. Each names the
// cache that holds it and what must still hold for the node to serve it:
//
//	state          held in            served while
//	absent         -                  (a Get loads or fetches it)
//	loading        a flight           (never stored if its guard broke)
//	owned          main cache         this node owns the key, its term holds, it is current
//	handed off     hand-off cache     never served; given to the key's new owner
//	hot copy       hot cache          the owner's contact lease holds, HotTTL
//	fallback copy  hot cache          the owner is out of contact, FallbackTTL
//	heir's copy    copies cache       never served while the owner is in the ring
//	failed         failures           ErrorTTL (the error is served, not a value)
//
// And these events move it:
//
//	event                               from -> to
//	a miss at the owner                 absent -> loading -> owned (or failed)
//	a miss elsewhere                    absent -> loading (a fetch) -> hot copy, or fallback copy
//	                                    when the owner cannot be reached
//	a write at the owner (Set, Remove)  any -> owned (or absent); a load in flight loses its guard
//	the owner's drop after a write      hot copy, fallback copy, heir's copy -> absent
//	a ring change moves the key away    owned -> handed off -> absent when the window ends
//	a ring change makes this node owner hot copy -> absent; heir's copy -> owned;
//	                                    absent -> owned when the old owner hands it over (Adopt)
//	a tenure change (Config.Tenure)     owned -> unservable (its stamp is the old term)
//	a purge (round 1, HoldPurge)        hot, fallback, heir's copy, handed off -> absent
//	a purge (round 2, ApplyPurge)       any -> absent; loads in flight lose their guard
//	eviction, expiry                    any -> absent (expiry: after its stale windows)
//
// A store happens only under a guard taken when the load, fetch or write
// began (guard.go): the key's write epoch (a write bumped it), the
// ring counter (a ring change bumped it) and, for a value taken from
// another node, the purge generation. An owner's load that a write voided
// answers with what the write left (it waits for the write to end), never
// with the origin's value in place of the written one or of the previous
// owner's. A value handed over (Adopt, pull) adds
// one rule: it is not taken for a key that a node other than the one
// handing it over wrote since the last ring change (takeOverGuard), since
// that node hands a key over only after its last write of it.
//
// Files follow the paths: group.go reads, many.go batches of reads,
// write.go writes (and PeerView, the group as its peers reach it), load.go
// origin loads and peer fetches, flight.go one of each per key (single
// flight, on the node's runners), admit.go the queue of loads, guard.go
// what may be stored, handoff.go ring changes, hot.go hot copies, copies.go
// heirs' copies, node.go the Node and its purges, cache.go the vocabulary
// (Value, the interfaces asked of peers, the configs, Stats). The
// byte-bounded store is package internal/store, which keeps no policy:
// what its entries' Tag, Ref and Mark mean (Group.main) and when a value
// may be stored (guard.admits) are this package's.
//
// A failed origin load is not a value, but it is remembered for ErrorTTL:
// callers in between get the same error, and a failing origin is asked once
// per key and interval by the whole cluster (only the owner loads). A value
// over MaxValueBytes is refused the same way, from every origin and in
// every write.
//
// # Purges
//
// Group.Purge and Group.PurgePrefix drop a group's values, or those of its
// keys under a prefix, on every node: through the PeerPicker when it is a
// Purger (the transport's Pool, which records the purge in etcd and reaches
// every node), else on this node. Once a purge returns, no node serves a
// value from before it, a load or fetch that was in flight included; a
// write acknowledged after it returned is kept. A purge goes in two rounds
// (Node.HoldPurge, then ApplyPurge): first every node drops what it holds
// for other nodes (hot and fallback copies, hand-offs, heirs' copies), then
// owners drop their own values. So once an owner served a value loaded
// after the purge, no node serves a copy from before it: reads of a key
// never go back in time, during a purge as after it. Between HoldPurge and
// EndPurge a group keeps no value it takes from another node, since that
// node may not have applied the purge yet; and a node whose Config.Current
// reports false, having possibly missed a purge, serves nothing from its
// caches.
//
// # Copies on heirs
//
// With GroupConfig.Copies N > 1 and a PeerPicker that is a CopyPlacer, each
// value this node owns is also kept on the key's N-1 heirs, the nodes that
// would own it if the ones before them left, so that a crash of its owner
// costs the origin nothing: a copy goes out after every store in the main
// cache, and before a write is acknowledged; an heir keeps the newest copy
// by the owner's stamp, never serves it while the owner is in its ring,
// hands it to a node whose fetch from the owner failed, and moves it to its
// main cache at the ring change that makes it the owner. Copies share
// MaxBytes with the node's own values, a copy evicted before a value of
// the same age. copies.go has the whole life of a copy.
//
// # Hot keys
//
// A value fetched from its owner is kept in the hot cache, for HotTTL at
// most, while the budget has room for it without evicting anything: a copy
// that displaces nothing costs nothing but memory no entry uses, and it
// saves the next request a network hop. Otherwise a copy displaces the
// least recently used copy, or owned key (below), only if its key is
// popular: every Get of a peer-owned key that misses both caches
// counts one request for the key in a count-min sketch (4 x 8,192 one-byte
// counters, conservative update) whose counts are halved every HotWindow,
// and the key must count at least HotAfter. With the defaults (HotAfter 3,
// HotWindow 10s), a key is then kept on its third miss within a window, or
// in the second of two windows with two misses each; a key that misses once
// per window or less never displaces another, so a scan of cold keys
// cannot flush the hot ones. Popularity is measured, unlike groupcache's
// random 1 in 10.
//
// Main and hot share one budget, MaxBytes. Nothing is set aside for
// copies: the main cache uses all that they do not, so a node with no peers,
// or with few copies, spends the whole budget on its own keys. A copy takes
// room from owned keys (the least recently used) only for a popular key, and
// copies never take more than HotBytes from them. Beyond that, copies may use
// the room the main cache leaves free, until its keys need it: as the main
// cache grows it takes that room back, evicting the least recently used
// copies, never an owned key. Main and hot together stay within MaxBytes
// (momentarily over it by the entries being added). So a node whose own keys
// do not fill its budget keeps a copy of every key it is asked for, as
// groupcache's hot cache does within its cacheBytes.
//
// # Concurrency
//
// Node and Group are safe for concurrent use. Concurrent misses of one key
// cause one origin load (or one peer fetch) per node; it runs on its own
// goroutine under context.WithoutCancel and LoadTimeout, so a caller that
// gives up (its context ends, and it returns at once) does not end the load
// for the others. (When the first caller's context can never end, such as
// context.Background, the load runs on that caller's goroutine instead.)
// A panic in a Getter becomes an error matching ErrLoad for every waiter and
// the next Get loads again. No lock is held while a Getter or a Peer is
// called. Remove and Set make a load in progress for the key
// uncacheable, so that a stale value cannot overwrite them.
//
// Across the cluster, one origin load per key and miss: a non-owner waits
// for the owner's load for as long as the owner shows it is alive (the
// transport's job), and loads the key itself only when the owner is
// unreachable or silent.
package cache

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/internal/inflight"
)

// defaultHandoffWindow is Config.HandoffWindow's default: long enough for
// the keys that moved to be asked for once at a modest request rate.
const defaultHandoffWindow = time.Minute

// Node owns a set of groups and the peer picker they share. Several Nodes
// can live in one process. A Node is safe for concurrent use.
type Node struct {
	peers  PeerPicker
	tenure func() (uint64, bool)
	// isCurrent is Config.Current (see current).
	isCurrent func() bool
	handoff   time.Duration // Config.HandoffWindow with its default
	log       *slog.Logger
	retired   atomic.Bool      // see Retire
	handing   atomic.Bool      // the hand-off may have begun: see AwaitWrites
	closed    atomic.Bool      // see Close
	loads     inflight.Counter // the groups' loads and fetches in progress
	runners   chan runTask     // the idle runners of the groups' loads (startRun)
	idleStop  chan struct{}    // closed by Close: idle runners end
	stopOnce  sync.Once
	writes    inflight.Counter // the writes applied here as an owner in progress (see AwaitWrites)

	mu     sync.RWMutex
	groups map[string]*Group // guarded by mu
}

// New returns a Node with no groups. If cfg.Peers is a RingNotifier, the
// Node registers with it.
func New(cfg Config) *Node {
	n := &Node{peers: cfg.Peers, tenure: cfg.Tenure, isCurrent: cfg.Current, handoff: cfg.HandoffWindow, log: cfg.Logger,
		groups: make(map[string]*Group), runners: make(chan runTask), idleStop: make(chan struct{})}
	if n.handoff == 0 {
		n.handoff = defaultHandoffWindow
	}
	if n.peers == nil {
		n.peers = NoPeers{}
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	if rn, ok := n.peers.(RingNotifier); ok {
		rn.NotifyRing(n.RingChanged)
	}
	return n
}

// Retire makes the node refuse to apply writes as an owner (ErrNotOwner)
// from now on, for a node that is leaving: once it hands its values to their
// next owners, a write it applied would be lost with it, and a write that
// raced the hand-off could be undone by it. The writes in progress go on:
// AwaitWrites waits for them. Reads are served as before. Call Retire, then
// AwaitWrites, before taking the values to hand over.
func (n *Node) Retire() { n.retired.Store(true) }

// AwaitWrites returns once the writes this node was applying as an owner
// when it retired have ended, or ctx's error if ctx ends first. Call it
// after Retire and before taking the values to hand over: such a write
// drops the key's copies on the other nodes, and were its drop to reach the
// key's next owner after the value handed over, it would remove that
// value there, the newest acknowledged one included. A write that ended
// before AwaitWrites returned is in what the node hands over, and was
// acknowledged; one still in progress when ctx ended (a peer that does not
// answer its drop) is not acknowledged (ErrNotOwner), though it may land.
func (n *Node) AwaitWrites(ctx context.Context) error {
	err := n.writes.Wait(ctx)
	n.handing.Store(true)
	return err
}

// Close waits for the node's loads and fetches in progress, the detached
// ones included (a load goes on after its callers gave up, up to the group's
// LoadTimeout), and stops the hand-off windows' timers, dropping the values
// they keep. It returns ctx's error if ctx ends first; the loads still
// running then end by their own LoadTimeout. Call it after the servers that
// use the node have stopped: the node still answers calls after Close, but
// a ring change no longer opens a hand-off window and Close does not wait
// for loads that start after it returned. Close is safe to call more than once.
func (n *Node) Close(ctx context.Context) error {
	n.closed.Store(true)
	n.stopRunners()
	for _, g := range n.Groups() {
		g.closeHandoff()
	}
	return n.loads.Wait(ctx)
}

// stopRunners ends the idle runners of the node's loads, and each that
// goes idle from now on (startRun).
func (n *Node) stopRunners() { n.stopOnce.Do(func() { close(n.idleStop) }) }

// RingChanged drops, in every group, what the node may no longer serve
// after a change of the ring: main-cache entries of keys it no longer owns,
// and hot copies of keys it now owns. It is called by the PeerPicker when it
// is a RingNotifier; a PeerPicker that is not must call it after each change.
func (n *Node) RingChanged() {
	for _, g := range n.Groups() {
		g.ringChanged()
	}
}

// NewGroup validates cfg and adds a group to the node. It returns an error
// matching ErrConfig for an invalid cfg and ErrGroupExists for a name
// already in use.
func (n *Node) NewGroup(cfg GroupConfig) (*Group, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.groups[cfg.Name]; ok {
		return nil, fmt.Errorf("%w: %q", ErrGroupExists, cfg.Name)
	}
	g := newGroup(cfg, n, n.log.With("group", cfg.Name))
	n.groups[cfg.Name] = g
	return g, nil
}

// Group returns the named group.
func (n *Node) Group(name string) (*Group, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	g, ok := n.groups[name]
	return g, ok
}

// Groups returns the node's groups sorted by name.
func (n *Node) Groups() []*Group {
	n.mu.RLock()
	gs := make([]*Group, 0, len(n.groups))
	for _, g := range n.groups {
		gs = append(gs, g)
	}
	n.mu.RUnlock()
	slices.SortFunc(gs, func(a, b *Group) int { return cmp.Compare(a.Name(), b.Name()) })
	return gs
}

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

// MaxPurgeLease bounds how long a Purger waits for a node it cannot reach
// before its Purge returns (transport.Config.PurgeLease is at most this):
// whoever answers a purge for a client gives it that long, and some more.
const MaxPurgeLease = 5 * time.Minute

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
		n += g.main.RemoveIf(match)
	}
	g.fetches.forgetIf(match)
	n += g.hot.RemoveIf(match)
	n += g.handoff.RemoveIf(match)
	n += g.copies.RemoveIf(match)
	g.st.purged.Add(int64(n))
	return n
}

// current reports whether the node may serve from its caches: false while
// it may have missed a purge (Config.Current).
func (n *Node) current() bool { return n.isCurrent == nil || n.isCurrent() }
