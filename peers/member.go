package peers

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/ringcache/ringcache/transport"
)

// MaxWeight is the largest Weight a member may announce. A weight scales the member's share of
// the ring, so an unbounded value read from etcd could make every node build a huge ring.
const MaxWeight = 1000

// Member describes one node: the JSON value it puts under its key in etcd.
type Member struct {
	// ID is the node's ID, also the last segment of its key.
	ID string `json:"id"`
	// PeerURL is the base URL that other nodes use to fetch keys this node owns.
	PeerURL string `json:"peer_url"`
	// Weight is the node's relative share of the ring, from 1 to MaxWeight.
	Weight int `json:"weight"`
	// Version is the ringcache version the node runs, for operators; it is not compared.
	Version string `json:"version,omitempty"`
	// Started is when the node's registry was created.
	Started time.Time `json:"started"`
	// Leaving is set by a graceful Close just before it revokes the lease, so that the other
	// nodes drop this member at once instead of waiting out the hold-down meant for crashes.
	Leaving bool `json:"leaving,omitempty"`
	// Positions are the node's positions on a ring of explicit arcs, ascending, when the
	// cluster places nodes that way (Config.Placer); empty otherwise.
	Positions []uint32 `json:"positions,omitempty"`
	// Ring, on a member that left gracefully (Leaving), is a fingerprint of the other members'
	// positions when it left: a node that registers again under the same ID takes Positions
	// back while the others still hold exactly those (see Registry.Close).
	Ring uint64 `json:"ring,omitempty"`
}

// encode returns the JSON value stored in etcd. It fails only for a Started time outside
// years 0 to 9999.
func (m Member) encode() (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadMember, err)
	}
	return string(b), nil
}

// decodeMember parses the value stored under the key of member id. A weight of zero, written
// by a node that left it out, reads as 1.
func decodeMember(id string, value []byte) (Member, error) {
	var m Member
	if err := json.Unmarshal(value, &m); err != nil {
		return Member{}, fmt.Errorf("%w: key %q: %v", ErrBadMember, id, err)
	}
	if m.ID != id {
		return Member{}, fmt.Errorf("%w: key %q holds id %q", ErrBadMember, id, m.ID)
	}
	if err := checkPeerURL(m.PeerURL); err != nil {
		return Member{}, fmt.Errorf("%w: key %q: %w", ErrBadMember, id, err)
	}
	if m.Weight == 0 {
		m.Weight = 1
	}
	if m.Weight < 0 || m.Weight > MaxWeight {
		return Member{}, fmt.Errorf("%w: key %q: weight %d outside 1..%d", ErrBadMember, id, m.Weight, MaxWeight)
	}
	if len(m.Positions) > MaxPositions {
		return Member{}, fmt.Errorf("%w: key %q: %d positions > %d", ErrBadMember, id, len(m.Positions), MaxPositions)
	}
	if !slices.IsSorted(m.Positions) || len(slices.Compact(slices.Clone(m.Positions))) != len(m.Positions) {
		return Member{}, fmt.Errorf("%w: key %q: positions not strictly ascending", ErrBadMember, id)
	}
	return m, nil
}

// checkPeerURL is transport's rule for a member's base URL (transport.CheckPeerURL): the
// transport appends request paths to it, and one rule decides for both.
func checkPeerURL(s string) error { return transport.CheckPeerURL(s) }

// checkID accepts 1 to 128 characters from [A-Za-z0-9._:-]: enough for host names, pod names
// and addresses, and never a "/" that would put the key outside its prefix level.
func checkID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// peerWeights maps the peer URL of each of ms to its weight: what a WeightedSetter receives.
// Two members announcing one URL (a misconfiguration) give it the larger weight, so that the
// result does not depend on their order.
func peerWeights(ms []Member) map[string]int {
	w := make(map[string]int, len(ms))
	for _, m := range ms {
		w[m.PeerURL] = max(w[m.PeerURL], m.Weight)
	}
	return w
}

// peerURLs returns the sorted, deduplicated peer URLs of ms: what a Setter receives.
func peerURLs(ms []Member) []string {
	urls := make([]string, 0, len(ms))
	for _, m := range ms {
		urls = append(urls, m.PeerURL)
	}
	slices.Sort(urls)
	return slices.Compact(urls)
}
