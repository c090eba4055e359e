package cache

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
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
	writes    inflight.Counter // the writes applied here as an owner in progress (see AwaitWrites)

	mu     sync.RWMutex
	groups map[string]*Group // guarded by mu
}

// New returns a Node with no groups. If cfg.Peers is a RingNotifier, the
// Node registers with it.
func New(cfg Config) *Node {
	n := &Node{peers: cfg.Peers, tenure: cfg.Tenure, isCurrent: cfg.Current, handoff: cfg.HandoffWindow, log: cfg.Logger, groups: make(map[string]*Group)}
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
	for _, g := range n.Groups() {
		g.closeHandoff()
	}
	return n.loads.Wait(ctx)
}

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
