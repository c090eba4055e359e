package cache

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// Node owns a set of groups and the peer picker they share. Several Nodes
// can live in one process. A Node is safe for concurrent use.
type Node struct {
	peers PeerPicker
	log   *slog.Logger

	mu     sync.RWMutex
	groups map[string]*Group // guarded by mu
}

// New returns a Node with no groups.
func New(cfg Config) *Node {
	n := &Node{peers: cfg.Peers, log: cfg.Logger, groups: make(map[string]*Group)}
	if n.peers == nil {
		n.peers = NoPeers{}
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	return n
}

// NewGroup validates cfg and adds a group to the node. It returns an error
// matching ErrBadConfig for an invalid cfg and ErrGroupExists for a name
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
	g := newGroup(cfg, n.peers, n.log.With("group", cfg.Name))
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
