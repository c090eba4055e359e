package consistenthash

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strings"
	"unsafe"
)

// DefaultPositions is the number of positions per node that NewRanges uses
// when given positions < 1.
const DefaultPositions = 16

// space is the size of the ring's hash space, 2^32.
const space = 1 << 32

// Ranges is a ring of explicit arcs: each node
// owns the arcs that start at its positions and run clockwise to the next
// position, and a key belongs to the arc that contains hash(key).
//
// Unlike Map, placement is not a function of the member names but of the
// join history, which is why positions are explicit values: Positions and
// Assign let a cluster store them (for example in etcd) and rebuild the same
// ring everywhere. Join gives a new node up to positions-per-node positions
// that split the arcs of the nodes with the largest shares so that every
// share approaches 1/(n+1); Leave hands each of the leaving node's arcs to
// its predecessor. Only keys of the joining or leaving node move.
//
// The concurrency contract is Map's: Join, Leave and Assign modify the ring
// and must not run concurrently with anything else; the other methods only
// read and need no lock once the ring is no longer modified. Clone, modify
// and publish to change a shared ring. The read methods accept a nil
// *Ranges and treat it as an empty ring.
type Ranges struct {
	hash    Hash
	perNode int
	members map[string][]uint32 // node -> its positions, ascending

	// starts and owners are the lookup ring: all positions in ascending
	// order and, at the same index, the node that owns the arc starting
	// there.
	starts  []uint32
	owners  []string
	lookup  lookup // over starts
	nodes   []string
	version uint64
}

// NewRanges returns an empty ring whose joining nodes take positions
// positions each (positions < 1 selects DefaultPositions, 16) and whose keys
// are placed by fn (nil selects CRC32; XXHash is recommended).
func NewRanges(positions int, fn Hash) *Ranges {
	if positions < 1 {
		positions = DefaultPositions
	}
	if fn == nil {
		fn = CRC32
	}
	r := &Ranges{hash: fn, perNode: positions, members: map[string][]uint32{}}
	r.rebuild()
	return r
}

// Join adds node. On an empty ring the node takes evenly spaced positions,
// the first at 0. Otherwise it takes 1/(n+1) of the space from the nodes
// with the largest shares, levelling them down, through at most
// positions-per-node cuts of their widest arcs. Joining a member changes
// nothing. An empty name returns ErrEmptyNode; ErrRingFull means no arc is
// wide enough to split.
func (r *Ranges) Join(node string) error {
	if node == "" {
		return ErrEmptyNode
	}
	if r.perNode > MaxPoints {
		return fmt.Errorf("%w: %d positions > %d", ErrTooManyPoints, r.perNode, MaxPoints)
	}
	if _, ok := r.members[node]; ok {
		return nil
	}
	var pos []uint32
	if len(r.starts) == 0 {
		step := uint64(space) / uint64(r.perNode)
		for i := range r.perNode {
			pos = append(pos, uint32(uint64(i)*step))
		}
	} else {
		pos = r.cuts()
		if len(pos) == 0 {
			return fmt.Errorf("%w: joining %q", ErrRingFull, node)
		}
	}
	slices.Sort(pos)
	r.members[node] = pos
	r.rebuild()
	return nil
}

// arc is one arc of the ring: it starts at start and is size points long.
type arc struct {
	start uint32
	size  uint64
}

// donor is a node that gives part of its share to a joining node.
type donor struct {
	node  string
	share uint64
	give  uint64 // what levelling asks of it
	take  uint64 // what its cuts can give, at most give unless others fall short
	arcs  []arc  // its arcs wide enough to split, widest first
	cuts  int
}

// cuts chooses the positions of a node joining a non-empty ring.
func (r *Ranges) cuts() []uint32 {
	byNode := map[string]*donor{}
	for i, s := range r.starts {
		size := arcSize(s, r.starts[(i+1)%len(r.starts)])
		d := byNode[r.owners[i]]
		if d == nil {
			d = &donor{node: r.owners[i]}
			byNode[r.owners[i]] = d
		}
		d.share += size
		if size >= 2 {
			d.arcs = append(d.arcs, arc{start: s, size: size})
		}
	}
	ds := slices.SortedFunc(maps.Values(byNode), func(a, b *donor) int {
		if c := cmp.Compare(b.share, a.share); c != 0 {
			return c
		}
		return strings.Compare(a.node, b.node)
	})
	ds = slices.DeleteFunc(ds, func(d *donor) bool { return len(d.arcs) == 0 })
	if len(ds) == 0 {
		return nil
	}
	// Every cut takes from one arc, so at most perNode nodes can give.
	ds = ds[:min(len(ds), r.perNode)]
	target := uint64(space) / uint64(len(r.nodes)+1)

	// Water level: the donors give down to a level L with
	// sum(share - L) = target over the donors above L, so that the
	// largest shares end equal.
	var sum uint64
	var level uint64
	k := 0
	for k < len(ds) {
		sum += ds[k].share
		k++
		if sum < target {
			continue
		}
		level = (sum - target) / uint64(k)
		if k == len(ds) || level >= ds[k].share {
			break
		}
	}
	ds = ds[:k]
	if sum < target { // fewer splittable arcs than the target needs
		level = 0
	}
	// level is rounded down, so the donors give at most k points more than
	// the target: the joining node's share is 1/(n+1) to within k/2^32.
	for _, d := range ds {
		if d.share > level {
			d.give = d.share - level
		}
	}

	// Each donor gets one cut on its widest arc. Further cuts go first to
	// donors whose cut arcs cannot hold what they should give, then to the
	// donor with the most to give per cut, as long as it has arcs left.
	total := 0
	for _, d := range ds {
		slices.SortFunc(d.arcs, func(a, b arc) int {
			if c := cmp.Compare(b.size, a.size); c != 0 {
				return c
			}
			return cmp.Compare(a.start, b.start)
		})
		d.cuts = 1
		total++
	}
	for total < r.perNode {
		var best *donor
		var bestNeed uint64
		for _, d := range ds {
			if d.cuts >= len(d.arcs) {
				continue
			}
			need := d.give - min(d.give, d.capacity())
			switch {
			case best == nil, need > bestNeed:
				best, bestNeed = d, need
			case need == bestNeed && need == 0 && d.give*uint64(best.cuts) > best.give*uint64(d.cuts):
				// Compare give/cuts without division.
				best = d
			}
		}
		if best == nil {
			break
		}
		best.cuts++
		total++
	}

	// Out of cuts, a donor may be unable to give its part; donors with
	// room left, largest share first, give the rest.
	var taken uint64
	for _, d := range ds {
		d.take = min(d.give, d.capacity())
		taken += d.take
	}
	for _, d := range ds {
		if taken >= target {
			break
		}
		extra := min(target-taken, d.capacity()-d.take)
		d.take += extra
		taken += extra
	}

	// Within a donor, take from its cut arcs in proportion to their size;
	// a position at arc end - t hands the last t points of the arc to the
	// joining node. Each arc keeps at least its first point.
	var pos []uint32
	for _, d := range ds {
		arcs := d.arcs[:d.cuts]
		var width uint64
		for _, a := range arcs {
			width += a.size
		}
		for _, a := range arcs {
			// take <= capacity < width, so the 128-bit quotient of
			// take*size/width fits in 64 bits and Div64 cannot panic.
			hi, lo := bits.Mul64(d.take, a.size)
			t, _ := bits.Div64(hi, lo, width)
			t = max(1, min(t, a.size-1))
			pos = append(pos, uint32((uint64(a.start)+a.size-t)&(space-1)))
		}
	}
	return pos
}

// capacity is the most the donor can give through its current cuts: the
// width of its cut arcs less the one point each arc keeps.
func (d *donor) capacity() uint64 {
	var c uint64
	for _, a := range d.arcs[:d.cuts] {
		c += a.size - 1
	}
	return c
}

// Leave removes nodes; each arc of a leaving node joins the arc before it.
// Names that are not members are ignored.
func (r *Ranges) Leave(nodes ...string) {
	changed := false
	for _, n := range nodes {
		if _, ok := r.members[n]; ok {
			delete(r.members, n)
			changed = true
		}
	}
	if changed {
		r.rebuild()
	}
}

// Assign sets node's positions explicitly, replacing any it had: the way to
// rebuild a ring from stored positions. It fails, changing nothing, with
// ErrEmptyNode, ErrNoPositions, ErrTooManyPoints, or ErrPositionTaken if a
// position repeats or belongs to another node.
func (r *Ranges) Assign(node string, positions []uint32) error {
	if node == "" {
		return ErrEmptyNode
	}
	if len(positions) == 0 {
		return fmt.Errorf("%w: for %q", ErrNoPositions, node)
	}
	if len(positions) > MaxPoints {
		return fmt.Errorf("%w: %d positions for %q > %d", ErrTooManyPoints, len(positions), node, MaxPoints)
	}
	pos := slices.Clone(positions)
	slices.Sort(pos)
	for i := 1; i < len(pos); i++ {
		if pos[i] == pos[i-1] {
			return fmt.Errorf("%w: %d twice for %q", ErrPositionTaken, pos[i], node)
		}
	}
	for _, p := range pos {
		if i, ok := slices.BinarySearch(r.starts, p); ok && r.owners[i] != node {
			return fmt.Errorf("%w: %d for %q is owned by %q", ErrPositionTaken, p, node, r.owners[i])
		}
	}
	r.members[node] = pos
	r.rebuild()
	return nil
}

// Positions returns node's positions in ascending order, as a new slice,
// and whether node is a member.
func (r *Ranges) Positions(node string) ([]uint32, bool) {
	if r == nil {
		return nil, false
	}
	p, ok := r.members[node]
	return slices.Clone(p), ok
}

// Clone returns a copy of r that can be modified while r is being read.
func (r *Ranges) Clone() *Ranges {
	c := *r
	// Position slices are replaced, never written in place, so the copy
	// may share them; so may starts, owners and nodes.
	c.members = maps.Clone(r.members)
	return &c
}

func (r *Ranges) rebuild() {
	r.nodes = slices.Sorted(maps.Keys(r.members))
	type start struct {
		pos  uint32
		node string
	}
	var all []start
	for _, n := range r.nodes {
		for _, p := range r.members[n] {
			all = append(all, start{p, n})
		}
	}
	slices.SortFunc(all, func(a, b start) int { return cmp.Compare(a.pos, b.pos) })
	r.starts = make([]uint32, len(all))
	r.owners = make([]string, len(all))
	for i, s := range all {
		r.starts[i], r.owners[i] = s.pos, s.node
	}
	r.lookup = newLookup(r.starts)

	v := newVersionHash("ranges")
	v.uint(uint64(r.hash(versionProbe)))
	for _, n := range r.nodes {
		v.string(n)
		v.uint(uint64(len(r.members[n])))
		for _, p := range r.members[n] {
			v.uint(uint64(p))
		}
	}
	r.version = v.h.Sum64()
}

// index returns the index of the arc that contains hash(key): the last
// start at or before it, or the last arc (which wraps past 2^32) if hash(key)
// is before the first start. The ring must not be empty.
func (r *Ranges) index(key string) int {
	h := r.hash(unsafe.Slice(unsafe.StringData(key), len(key)))
	next := len(r.starts) // index of the first start > h
	if h < math.MaxUint32 {
		next = r.lookup.ceil(h + 1)
	}
	if next == 0 {
		return len(r.starts) - 1
	}
	return next - 1
}

// Get returns the node that owns key, or "" if the ring is empty. It does
// not allocate.
func (r *Ranges) Get(key string) string {
	if r == nil || len(r.starts) == 0 {
		return ""
	}
	return r.owners[r.index(key)]
}

// GetN returns up to n distinct nodes for key: the owner first, then the
// owners of the following arcs clockwise. It returns nil for n < 1 or an
// empty ring.
func (r *Ranges) GetN(key string, n int) []string {
	if r == nil || len(r.starts) == 0 || n < 1 {
		return nil
	}
	return walkN(r.owners, r.index(key), min(n, len(r.nodes)))
}

// Heirs returns up to n distinct nodes for key: the owner first, then the
// nodes that would own key, in turn, if the ones before them left. An arc
// whose owner leaves joins the arc before it, so they are the owners of
// the arcs before key's, counterclockwise. It returns nil for n < 1 or an
// empty ring.
func (r *Ranges) Heirs(key string, n int) []string {
	if r == nil || len(r.starts) == 0 || n < 1 {
		return nil
	}
	n = min(n, len(r.nodes))
	out := make([]string, 0, n)
	i := r.index(key)
	for range len(r.owners) {
		if o := r.owners[i]; !slices.Contains(out, o) {
			if out = append(out, o); len(out) == n {
				break
			}
		}
		if i--; i < 0 {
			i = len(r.owners) - 1
		}
	}
	return out
}

// Nodes returns the members in ascending order, as a new slice.
func (r *Ranges) Nodes() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.nodes)
}

// IsEmpty reports whether the ring has no members.
func (r *Ranges) IsEmpty() bool {
	return r == nil || len(r.nodes) == 0
}

// Version returns a 64-bit FNV-1a hash of the sorted members with their
// positions and the Hash's value on a fixed probe: equal rings have equal
// versions in any process.
func (r *Ranges) Version() uint64 {
	if r == nil {
		return 0
	}
	return r.version
}

// Shares returns each member's fraction of the 2^32 hash space, the total
// size of its arcs. The fractions sum to 1 on a non-empty ring.
func (r *Ranges) Shares() map[string]float64 {
	out := make(map[string]float64)
	if r == nil {
		return out
	}
	for i, s := range r.starts {
		size := arcSize(s, r.starts[(i+1)%len(r.starts)])
		out[r.owners[i]] += float64(size) / space
	}
	return out
}

// String describes the ring for logs: member count, arcs and version.
func (r *Ranges) String() string {
	if r == nil {
		return "consistenthash.Ranges(nil)"
	}
	return fmt.Sprintf("consistenthash.Ranges(nodes=%d arcs=%d version=%016x)", len(r.nodes), len(r.starts), r.version)
}

// RangesFrom builds the ring that members' stored positions describe, for
// a cluster whose nodes each rebuild it from one store: the same members
// and positions give the same ring, Version included, in every process.
// positions and fn are NewRanges' (they matter to later Joins and to key
// placement). A position that two members claim, which a store written by
// independent joins can hold in a rare race, goes to the member whose name
// sorts first; a member left without positions is not on the ring. Only an
// empty name (ErrEmptyNode) or a member with more than MaxPoints positions
// (ErrTooManyPoints) is an error.
func RangesFrom(positions int, fn Hash, members map[string][]uint32) (*Ranges, error) {
	r := NewRanges(positions, fn)
	taken := make(map[uint32]bool)
	for _, n := range slices.Sorted(maps.Keys(members)) {
		if n == "" {
			return nil, ErrEmptyNode
		}
		if len(members[n]) > MaxPoints {
			return nil, fmt.Errorf("%w: %d positions for %q > %d", ErrTooManyPoints, len(members[n]), n, MaxPoints)
		}
		var own []uint32
		for _, p := range members[n] {
			if !taken[p] {
				taken[p] = true
				own = append(own, p)
			}
		}
		if len(own) > 0 {
			slices.Sort(own)
			r.members[n] = own
		}
	}
	r.rebuild()
	return r, nil
}

// JoinPositions returns the positions node takes when it joins the ring
// that members describe (as RangesFrom builds it, with positions per node):
// what a cluster that stores positions writes for a joining node. A node
// that is already on that ring keeps its positions.
func JoinPositions(positions int, members map[string][]uint32, node string) ([]uint32, error) {
	r, err := RangesFrom(positions, nil, members)
	if err != nil {
		return nil, err
	}
	if err := r.Join(node); err != nil {
		return nil, err
	}
	p, _ := r.Positions(node)
	return p, nil
}

// NodeArcs returns the arcs node owns, in ascending order of Start: one per
// position, each ending at the next position on the ring (not merged with a
// neighbour of the same owner, unlike Arcs). It returns nil for a node that
// is not a member.
func (r *Ranges) NodeArcs(node string) []Arc {
	if r == nil {
		return nil
	}
	var out []Arc
	for _, p := range r.members[node] {
		i, _ := slices.BinarySearch(r.starts, p)
		out = append(out, Arc{Start: p, Size: arcSize(p, r.starts[(i+1)%len(r.starts)]), Owner: node})
	}
	return out
}
