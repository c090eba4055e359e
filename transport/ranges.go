package transport

import (
	"fmt"
	"maps"
	"slices"

	"github.com/ringcache/ringcache/consistenthash"
)

// SetRanges replaces the membership with the peers that are positions' keys
// plus this node, on a ring of explicit arcs (consistenthash.Ranges): each
// member owns the arcs that start at its positions. Every node that receives
// the same positions builds the same ring, as consistenthash.RangesFrom
// builds it, with Config.Hash placing the keys (Replicas is not used). A
// member without positions, this node included when positions does not name
// it, owns nothing but stays a member. A URL given in two spellings holds
// the positions of both. It returns ErrBadPeer for a bad URL and an error
// wrapping consistenthash.ErrTooManyPoints for an oversized list; on error
// the membership is unchanged. It satisfies peers.RangesSetter.
func (p *Pool) SetRanges(positions map[string][]uint32) error {
	byURL := map[string][]uint32{p.cfg.Self: nil}
	for s, pos := range positions {
		u, err := normalizePeer(s)
		if err != nil {
			return err
		}
		byURL[u] = append(byURL[u], pos...)
	}
	ring, err := consistenthash.RangesFrom(0, p.cfg.Hash, byURL)
	if err != nil {
		return fmt.Errorf("transport: build ring: %w", err)
	}
	p.install(ring, slices.Sorted(maps.Keys(byURL)))
	return nil
}

// Arcs returns the arcs each member owns on a ring of explicit arcs
// (SetRanges), by base URL, or nil when the ring is hashed. A member that
// owns nothing has no entry.
func (p *Pool) Arcs() map[string][]consistenthash.Arc {
	r, ok := p.state.Load().ring.(*consistenthash.Ranges)
	if !ok {
		return nil
	}
	out := make(map[string][]consistenthash.Arc)
	for _, n := range r.Nodes() {
		out[n] = r.NodeArcs(n)
	}
	return out
}
