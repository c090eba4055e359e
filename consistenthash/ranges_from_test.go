package consistenthash

import (
	"errors"
	"slices"
	"testing"
)

// stored returns every member's positions, as a cluster would store them.
func stored(t testing.TB, r *Ranges) map[string][]uint32 {
	t.Helper()
	out := map[string][]uint32{}
	for _, n := range r.Nodes() {
		p, ok := r.Positions(n)
		if !ok {
			t.Fatalf("Positions(%q) not found", n)
		}
		out[n] = p
	}
	return out
}

// TestRangesFromJoinHistory: a ring rebuilt from stored positions is the
// ring the joins built, and JoinPositions gives what Join would have.
func TestRangesFromJoinHistory(t *testing.T) {
	t.Parallel()
	r := NewRanges(16, XXHash)
	nodes := addrs(12)
	for i, n := range nodes {
		before := stored(t, r)
		want, err := JoinPositions(16, before, n)
		if err != nil {
			t.Fatal(err)
		}
		joinAll(t, r, n)
		if got, _ := r.Positions(n); !slices.Equal(got, want) {
			t.Fatalf("%d: JoinPositions = %v, Join took %v", i, want, got)
		}
		if i == 6 {
			r.Leave(nodes[2]) // a leave in the history changes nothing below
		}
	}
	again, err := RangesFrom(16, XXHash, stored(t, r))
	if err != nil {
		t.Fatal(err)
	}
	checkRanges(t, again)
	if again.Version() != r.Version() {
		t.Fatalf("rebuilt version %x, want %x", again.Version(), r.Version())
	}
	for _, k := range testKeys(5000) {
		if a, b := again.Get(k), r.Get(k); a != b {
			t.Fatalf("Get(%q): rebuilt %s, original %s", k, a, b)
		}
	}
	// A member already on the ring keeps its positions.
	p, _ := r.Positions(nodes[5])
	if got, err := JoinPositions(16, stored(t, r), nodes[5]); err != nil || !slices.Equal(got, p) {
		t.Errorf("JoinPositions of a member = %v, %v; want its positions %v", got, err, p)
	}
}

// TestRangesFromConflicts: a position two members claim goes to the name
// that sorts first, the same way whatever the input's state; a member left
// without positions owns nothing.
func TestRangesFromConflicts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		members map[string][]uint32
		want    map[string][]uint32
	}{
		{"disjoint", map[string][]uint32{"a": {0, 100}, "b": {50}},
			map[string][]uint32{"a": {0, 100}, "b": {50}}},
		{"shared position to the smaller name", map[string][]uint32{"b": {7, 50}, "a": {50, 0}},
			map[string][]uint32{"a": {0, 50}, "b": {7}}},
		{"repeated in one list", map[string][]uint32{"a": {5, 5, 9}},
			map[string][]uint32{"a": {5, 9}}},
		{"nothing left", map[string][]uint32{"a": {1, 2}, "b": {2, 1}},
			map[string][]uint32{"a": {1, 2}}},
		{"empty list", map[string][]uint32{"a": {3}, "b": nil},
			map[string][]uint32{"a": {3}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, err := RangesFrom(4, nil, c.members)
			if err != nil {
				t.Fatal(err)
			}
			checkRanges(t, r)
			got := stored(t, r)
			if len(got) != len(c.want) {
				t.Fatalf("members %v, want %v", got, c.want)
			}
			for n, p := range c.want {
				if !slices.Equal(got[n], p) {
					t.Errorf("%s: positions %v, want %v", n, got[n], p)
				}
			}
		})
	}
	if _, err := RangesFrom(4, nil, map[string][]uint32{"": {1}}); !errors.Is(err, ErrEmptyNode) {
		t.Errorf("empty name: %v", err)
	}
	if _, err := RangesFrom(4, nil, map[string][]uint32{"a": make([]uint32, MaxPoints+1)}); !errors.Is(err, ErrTooManyPoints) {
		t.Errorf("too many positions: %v", err)
	}
}

// TestRangesArcs: the arcs of all members tile the ring, and each member's
// arcs add up to its share.
func TestRangesArcs(t *testing.T) {
	t.Parallel()
	r := NewRanges(16, XXHash)
	joinAll(t, r, addrs(5)...)
	var total uint64
	shares := r.Shares()
	for _, n := range r.Nodes() {
		arcs := r.NodeArcs(n)
		if p, _ := r.Positions(n); len(arcs) != len(p) {
			t.Fatalf("%s: %d arcs for %d positions", n, len(arcs), len(p))
		}
		var own uint64
		for _, a := range arcs {
			if i, ok := slices.BinarySearch(r.starts, a.Start); !ok || r.owners[i] != n {
				t.Errorf("%s: arc %+v does not start at one of its positions", n, a)
			}
			own += a.Size
		}
		if got := float64(own) / space; got != shares[n] {
			t.Errorf("%s: arcs add up to %v, share %v", n, got, shares[n])
		}
		total += own
	}
	if total != space {
		t.Errorf("arcs cover %d points, want 2^32", total)
	}
	if r.NodeArcs("nobody") != nil || (*Ranges)(nil).NodeArcs("a") != nil {
		t.Error("arcs of a non-member")
	}
	one := NewRanges(1, nil)
	joinAll(t, one, "a")
	if a := one.NodeArcs("a"); len(a) != 1 || a[0].Size != space {
		t.Errorf("one position: arcs %v, want the whole ring", a)
	}
}

// TestRangesJoinLeaveReversible: a node's cuts fall inside other members'
// arcs and leave their positions alone, so a join followed by the same
// node's leave restores the ring exactly, and the same join again takes the
// same positions: a node that leaves and comes back to an unchanged cluster
// gets its arcs back.
func TestRangesJoinLeaveReversible(t *testing.T) {
	t.Parallel()
	r := NewRanges(16, XXHash)
	joinAll(t, r, addrs(7)...)
	v := r.Version()
	joinAll(t, r, "x")
	first, _ := r.Positions("x")
	r.Leave("x")
	if r.Version() != v {
		t.Fatalf("join then leave: version %x, want %x", r.Version(), v)
	}
	joinAll(t, r, "x")
	if again, _ := r.Positions("x"); !slices.Equal(again, first) {
		t.Errorf("second join took %v, first %v", again, first)
	}
}
