package peers

import (
	"context"
	"fmt"

	"github.com/ringcache/ringcache/transport"
)

// Join registers node in etcd and connects the registration to it, in one
// call: the registry feeds node's ring (cfg.Setter is node), cfg.PeerURL is
// node.Self() unless set, and node.SetMembership makes the registration
// guard node's cache, part of its readiness and what its Shutdown leaves.
// It returns the registry (node.Shutdown closes it). A cfg.Setter other
// than node is a configuration error: build the Registry with New for
// another Setter.
func Join(ctx context.Context, node *transport.Node, cfg Config) (*Registry, error) {
	if cfg.Setter != nil && cfg.Setter != Setter(node) {
		return nil, fmt.Errorf("%w: Join sets Setter to the node; leave it nil", ErrConfig)
	}
	cfg.Setter = node
	if cfg.PeerURL == "" {
		cfg.PeerURL = node.Self()
	}
	reg, err := New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	node.SetMembership(reg)
	return reg, nil
}
