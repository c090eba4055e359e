package consistenthash

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// DefaultReplicas is the number of points per node (per unit of weight) that
// New uses when given replicas < 1.
const DefaultReplicas = 50

// MaxPoints is the most points one node may have on a ring: weight ×
// replicas for a Map, the number of positions for Ranges.
const MaxPoints = 1 << 20

// versionProbe is hashed into every Version so that two rings with the same
// members but different Hash functions report different versions. It is
// all digits so that toy hashes that parse numbers (as groupcache's test
// does) accept it too.
var versionProbe = []byte("1234567891")

// Map is a consistent-hash ring of hashed replica points (Karger et al. 1997):
// replica i of node n sits at hash(strconv.Itoa(i) + n), and a key belongs to
// the node of the first point clockwise from hash(key).
//
// The ring is a pure function of its members, their weights, the replica
// count and the Hash: the order of Add, AddWeighted and Remove calls never
// matters, even when two points collide (the node whose name sorts first
// wins the point).
//
// Add, AddWeighted and Remove modify the Map and must not run concurrently
// with anything else. All other methods only read, and any number of
// goroutines may call them at once without a lock once the Map is no longer
// modified. To change the membership of a shared Map, Clone it, modify the
// clone and publish it (for example with atomic.Pointer[Map].Store); readers
// of the old Map are unaffected.
//
// The read methods accept a nil *Map and treat it as an empty ring.
type Map struct {
	hash     Hash
	replicas int
	weights  map[string]int // member -> weight

	// entries holds every point of every member, collision losers
	// included, sorted by (hash, node). Keeping the losers is what lets
	// Remove hand a contested point to the next contender without
	// rehashing anyone.
	entries []entry

	// points and owners are the lookup ring: distinct hashes in ascending
	// order and, at the same index, the node that owns each one.
	points []uint32
	owners []string
	lookup lookup   // over points
	nodes  []string // sorted member names

	version uint64
}

type entry struct {
	hash uint32
	node string
}

func compareEntries(a, b entry) int {
	if c := cmp.Compare(a.hash, b.hash); c != 0 {
		return c
	}
	return strings.Compare(a.node, b.node)
}

// New returns an empty ring with replicas points per node (per unit of
// weight), placed by fn. replicas < 1 selects DefaultReplicas (50); a nil fn
// selects CRC32, which makes the ring groupcache-compatible.
func New(replicas int, fn Hash) *Map {
	if replicas < 1 {
		replicas = DefaultReplicas
	}
	if fn == nil {
		fn = CRC32
	}
	m := &Map{hash: fn, replicas: replicas, weights: map[string]int{}}
	m.rebuild()
	return m
}

// Add adds nodes with weight 1. A node that is already a member keeps its
// current weight: adding it again changes nothing. An empty name fails the
// whole call with ErrEmptyNode and adds nothing.
func (m *Map) Add(nodes ...string) error {
	for _, n := range nodes {
		if n == "" {
			return ErrEmptyNode
		}
	}
	if m.replicas > MaxPoints {
		return fmt.Errorf("%w: %d replicas > %d", ErrTooManyPoints, m.replicas, MaxPoints)
	}
	fresh := slices.Clone(nodes)
	slices.Sort(fresh)
	fresh = slices.DeleteFunc(slices.Compact(fresh), func(n string) bool {
		_, ok := m.weights[n]
		return ok
	})
	if len(fresh) == 0 {
		return nil
	}
	for _, n := range fresh {
		m.weights[n] = 1
	}
	m.entries = mergeEntries(m.entries, m.newEntries(fresh, m.replicas))
	m.rebuild()
	return nil
}

// AddWeighted adds node with weight times the replica count of points, for
// nodes of unequal capacity, or sets the weight of a node that is already a
// member (the node keeps its first points and gains or loses the ones
// above, so only keys between it and others move). weight < 1 returns
// ErrBadWeight, weight × replicas > MaxPoints ErrTooManyPoints; on error the
// ring is unchanged. Weight 1 is the same as Add.
func (m *Map) AddWeighted(node string, weight int) error {
	if node == "" {
		return ErrEmptyNode
	}
	if weight < 1 {
		return fmt.Errorf("%w: %d for %q", ErrBadWeight, weight, node)
	}
	if weight > MaxPoints/m.replicas {
		return fmt.Errorf("%w: weight %d × %d replicas for %q > %d", ErrTooManyPoints, weight, m.replicas, node, MaxPoints)
	}
	if w, ok := m.weights[node]; ok {
		if w == weight {
			return nil
		}
		m.entries = slices.DeleteFunc(slices.Clone(m.entries), func(e entry) bool { return e.node == node })
	}
	m.weights[node] = weight
	m.entries = mergeEntries(m.entries, m.newEntries([]string{node}, weight*m.replicas))
	m.rebuild()
	return nil
}

// Remove removes nodes from the ring; names that are not members are
// ignored. Only keys of the removed nodes move.
func (m *Map) Remove(nodes ...string) {
	gone := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if _, ok := m.weights[n]; ok {
			gone[n] = true
			delete(m.weights, n)
		}
	}
	if len(gone) == 0 {
		return
	}
	kept := make([]entry, 0, len(m.entries))
	for _, e := range m.entries {
		if !gone[e.node] {
			kept = append(kept, e)
		}
	}
	m.entries = kept
	m.rebuild()
}

// Clone returns a copy of m that can be modified while m is being read.
func (m *Map) Clone() *Map {
	c := *m
	c.weights = maps.Clone(m.weights)
	c.entries = slices.Clone(m.entries)
	// points, owners and nodes are never written in place (rebuild makes
	// new slices), so the clone may share them.
	return &c
}

// newEntries returns the points of replicas [0, count) of each of nodes
// (sorted and distinct), sorted by (hash, node).
func (m *Map) newEntries(nodes []string, count int) []entry {
	keys := make([]uint64, 0, len(nodes)*count)
	// One buffer for all replica names instead of strconv.Itoa(i)+node per
	// point: building a ring is then hashing, not allocating.
	buf := make([]byte, 0, 64)
	for rank, n := range nodes {
		for i := range count {
			buf = strconv.AppendInt(buf[:0], int64(i), 10)
			buf = append(buf, n...)
			keys = append(keys, uint64(m.hash(buf))<<32|uint64(rank))
		}
	}
	// (hash, rank of the name) packed in one integer sorts in (hash,
	// name) order with a plain integer sort, several times faster than
	// sorting structs with a comparison function.
	slices.Sort(keys)
	out := make([]entry, len(keys))
	for i, k := range keys {
		out[i] = entry{hash: uint32(k >> 32), node: nodes[uint32(k)]}
	}
	return out
}

// mergeEntries merges two sorted entry lists into a new one.
func mergeEntries(a, b []entry) []entry {
	if len(a) == 0 {
		return b
	}
	out := make([]entry, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if compareEntries(a[i], b[j]) <= 0 {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// rebuild derives the lookup ring, the sorted member list and the version
// from entries and weights.
func (m *Map) rebuild() {
	points := make([]uint32, 0, len(m.entries))
	owners := make([]string, 0, len(m.entries))
	for i, e := range m.entries {
		// Entries are sorted by (hash, node), so the first entry of a
		// run of equal hashes has the smallest node name: that node wins
		// the point whatever order the nodes arrived in.
		if i > 0 && m.entries[i-1].hash == e.hash {
			continue
		}
		points = append(points, e.hash)
		owners = append(owners, e.node)
	}
	m.points, m.owners = points, owners
	m.lookup = newLookup(points)
	m.nodes = slices.Sorted(maps.Keys(m.weights))

	v := newVersionHash("map")
	v.uint(uint64(m.replicas))
	v.uint(uint64(m.hash(versionProbe)))
	for _, n := range m.nodes {
		v.string(n)
		v.uint(uint64(m.weights[n]))
	}
	m.version = v.h.Sum64()
}

// versionHash accumulates a ring's Version: FNV-1a over a kind tag, then
// big-endian integers and length-prefixed names, so that the same ring
// hashes alike in every process.
type versionHash struct {
	h   hash.Hash64
	num [8]byte
}

func newVersionHash(kind string) *versionHash {
	v := &versionHash{h: fnv.New64a()}
	v.h.Write([]byte(kind))
	return v
}

func (v *versionHash) uint(x uint64) {
	binary.BigEndian.PutUint64(v.num[:], x)
	v.h.Write(v.num[:])
}

func (v *versionHash) string(s string) {
	v.uint(uint64(len(s)))
	v.h.Write([]byte(s))
}

// Get returns the node that owns key, or "" if the ring is empty. It does
// not allocate.
func (m *Map) Get(key string) string {
	if m == nil || len(m.points) == 0 {
		return ""
	}
	return m.owners[m.search(key)]
}

// search returns the index of the first point at or after hash(key),
// wrapping to 0 past the last point. The ring must not be empty.
func (m *Map) search(key string) int {
	// The key's bytes are passed without a copy; the Hash contract forbids
	// modifying or retaining them.
	i := m.lookup.ceil(m.hash(unsafe.Slice(unsafe.StringData(key), len(key))))
	if i == len(m.points) {
		return 0 // past the last point: the ring wraps to the first
	}
	return i
}

// GetN returns up to n distinct nodes for key: the owner first, then the
// next distinct nodes clockwise. It is the fallback and replica order for
// key. It returns nil for n < 1 or an empty ring and every node once when n
// exceeds the member count.
func (m *Map) GetN(key string, n int) []string {
	if m == nil || len(m.points) == 0 || n < 1 {
		return nil
	}
	return walkN(m.owners, m.search(key), min(n, len(m.nodes)))
}

// Heirs returns up to n distinct nodes for key: the owner first, then the
// nodes that would own key, in turn, if the ones before them left. On a
// Map that is GetN: a key goes to the next distinct node clockwise.
func (m *Map) Heirs(key string, n int) []string { return m.GetN(key, n) }

// walkN collects n distinct owners starting at index start, clockwise.
func walkN(owners []string, start, n int) []string {
	out := make([]string, 0, n)
	var seen map[string]bool
	if n > 16 {
		seen = make(map[string]bool, n)
	}
	for i := 0; i < len(owners) && len(out) < n; i++ {
		o := owners[(start+i)%len(owners)]
		if seen != nil {
			if seen[o] {
				continue
			}
			seen[o] = true
		} else if slices.Contains(out, o) {
			continue
		}
		out = append(out, o)
	}
	return out
}

// Nodes returns the members in ascending order, as a new slice.
func (m *Map) Nodes() []string {
	if m == nil {
		return nil
	}
	return slices.Clone(m.nodes)
}

// IsEmpty reports whether the ring has no members.
func (m *Map) IsEmpty() bool {
	return m == nil || len(m.nodes) == 0
}

// Version returns the ring version: a 64-bit FNV-1a hash of the sorted
// members with their weights, the replica count and the Hash's value on a
// fixed probe. Two rings with the same members, weights, replicas and Hash
// have the same version, in any process, so nodes can compare versions to
// check that they route keys alike. The empty ring also has a version.
func (m *Map) Version() uint64 {
	if m == nil {
		return 0
	}
	return m.version
}

// Shares returns each member's fraction of the 2^32 hash space: the total
// length of the arcs that end at its points. The fractions sum to 1 on a
// non-empty ring; a member that lost all its points to collisions has 0.
// It is the expected fraction of uniformly hashed keys the member owns.
func (m *Map) Shares() map[string]float64 {
	if m == nil {
		return map[string]float64{}
	}
	out := make(map[string]float64, len(m.nodes))
	for _, n := range m.nodes {
		out[n] = 0
	}
	// A point owns the arc (previous point, point]; the first point also
	// owns the wrap-around part after the last point.
	for i, p := range m.points {
		prev := m.points[(i+len(m.points)-1)%len(m.points)]
		out[m.owners[i]] += float64(arcSize(prev, p)) / space
	}
	return out
}

// arcSize returns the number of hash values clockwise from from to to, which
// is the whole circle (2^32) when they are equal: a ring's only point owns
// every hash.
func arcSize(from, to uint32) uint64 {
	if from == to {
		return space
	}
	return uint64(to - from)
}

// String describes the ring for logs: member count, points and version.
func (m *Map) String() string {
	if m == nil {
		return "consistenthash.Map(nil)"
	}
	return fmt.Sprintf("consistenthash.Map(nodes=%d points=%d replicas=%d version=%016x)", len(m.nodes), len(m.points), m.replicas, m.version)
}
