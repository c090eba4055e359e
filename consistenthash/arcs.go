package consistenthash

import "unsafe"

// Arc is a stretch of the hash circle that one member owns: the Size hash
// values Start, Start+1, ... clockwise, wrapping past 2^32-1 to 0. A key
// belongs to Owner when hash(key) lies in the arc.
type Arc struct {
	Start uint32 `json:"start"`
	Size  uint64 `json:"size"` // 1 to 2^32
	Owner string `json:"owner,omitempty"`
}

// Contains reports whether hash value h lies in a.
func (a Arc) Contains(h uint32) bool {
	return uint64(h-a.Start) < a.Size
}

// Arcs returns the ring as arcs in clockwise order, the first one holding
// hash 0. Neighbouring points of one member make one arc, so no two
// consecutive arcs (the last and the first included) have the same owner,
// and the sizes sum to 2^32 on a non-empty ring. A member's arcs add up to
// its Shares entry. It is what a picture of the ring draws; an empty ring
// has no arcs.
func (m *Map) Arcs() []Arc {
	if m == nil || len(m.points) == 0 {
		return nil
	}
	// A point owns (previous point, point]: the arc of points[0] starts
	// just after the last point and so holds hash 0.
	n := len(m.points)
	raw := make([]Arc, n)
	for i, p := range m.points {
		prev := m.points[(i+n-1)%n]
		raw[i] = Arc{Start: prev + 1, Size: arcSize(prev, p), Owner: m.owners[i]}
	}
	return mergeArcs(raw)
}

// Arcs returns the ring as arcs in clockwise order, the first one holding
// hash 0, with Map.Arcs's guarantees: consecutive arcs have different
// owners and the sizes sum to 2^32 on a non-empty ring.
func (r *Ranges) Arcs() []Arc {
	if r == nil || len(r.starts) == 0 {
		return nil
	}
	// Each start owns [start, next start); the last arc wraps past 2^32
	// and holds hash 0 unless a start sits at 0 itself.
	n := len(r.starts)
	raw := make([]Arc, 0, n)
	first := 0
	if r.starts[0] != 0 {
		first = n - 1
	}
	for j := range n {
		i := (first + j) % n
		raw = append(raw, Arc{Start: r.starts[i], Size: arcSize(r.starts[i], r.starts[(i+1)%n]), Owner: r.owners[i]})
	}
	return mergeArcs(raw)
}

// mergeArcs joins consecutive arcs of one owner, in place, and the last arc
// with the first when they share an owner. raw is in clockwise order and
// covers the circle.
func mergeArcs(raw []Arc) []Arc {
	out := raw[:1]
	for _, a := range raw[1:] {
		last := &out[len(out)-1]
		if a.Owner == last.Owner {
			last.Size += a.Size
			continue
		}
		out = append(out, a)
	}
	if len(out) > 1 && out[0].Owner == out[len(out)-1].Owner {
		// The wrap-around: the last arc runs on into the first, so the
		// merged arc starts where the last one did and still holds 0.
		tail := out[len(out)-1]
		out = out[:len(out)-1]
		out[0].Start = tail.Start
		out[0].Size += tail.Size
	}
	return out
}

// KeyHash returns where key falls on the circle: the hash that Get looks
// up. With Arcs it locates a key in a picture of the ring. A nil Map
// returns 0.
func (m *Map) KeyHash(key string) uint32 {
	if m == nil {
		return 0
	}
	return m.hash(unsafe.Slice(unsafe.StringData(key), len(key)))
}

// KeyHash returns where key falls on the circle: the hash that Get looks
// up. A nil Ranges returns 0.
func (r *Ranges) KeyHash(key string) uint32 {
	if r == nil {
		return 0
	}
	return r.hash(unsafe.Slice(unsafe.StringData(key), len(key)))
}

// Weight returns node's weight, or 0 when it is not a member.
func (m *Map) Weight(node string) int {
	if m == nil {
		return 0
	}
	return m.weights[node]
}
