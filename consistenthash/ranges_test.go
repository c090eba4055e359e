package consistenthash

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func joinAll(t testing.TB, r *Ranges, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		if err := r.Join(n); err != nil {
			t.Fatalf("Join(%q): %v", n, err)
		}
	}
}

// maxOverMean returns the largest share divided by the mean share.
func maxOverMean(shares map[string]float64) float64 {
	var mx float64
	for _, s := range shares {
		mx = max(mx, s)
	}
	return mx * float64(len(shares))
}

// checkRanges verifies the invariants every Ranges keeps: positions unique
// and sorted, owners consistent with members, shares summing to 1.
func checkRanges(t testing.TB, r *Ranges) {
	t.Helper()
	if !slices.IsSorted(r.starts) || len(slices.Compact(slices.Clone(r.starts))) != len(r.starts) {
		t.Fatalf("starts not strictly ascending")
	}
	total := 0
	for n, pos := range r.members {
		if len(pos) == 0 {
			t.Fatalf("member %q has no positions", n)
		}
		for _, p := range pos {
			i, ok := slices.BinarySearch(r.starts, p)
			if !ok || r.owners[i] != n {
				t.Fatalf("position %d of %q not on the ring", p, n)
			}
		}
		total += len(pos)
	}
	if total != len(r.starts) {
		t.Fatalf("%d member positions, %d starts", total, len(r.starts))
	}
	var sum float64
	for _, s := range r.Shares() {
		sum += s
	}
	if len(r.starts) > 0 && math.Abs(sum-1) > 1e-9 {
		t.Fatalf("shares sum to %v", sum)
	}
}

// TestRangesBalance: with 16 positions per node, max/mean <= 1.10 at 3, 10
// and 100 nodes, the balance that makes explicit arcs worth their state. Placement is deterministic, so
// this is exact, not statistical.
func TestRangesBalance(t *testing.T) {
	t.Parallel()
	r := NewRanges(16, XXHash)
	for i, n := range addrs(100) {
		joinAll(t, r, n)
		checkRanges(t, r)
		if p, _ := r.Positions(n); len(p) != 16 {
			t.Fatalf("%s got %d positions, want 16", n, len(p))
		}
		if share, want := r.Shares()[n], 1/float64(i+1); math.Abs(share-want) > 1e-6 {
			t.Fatalf("%s joined with share %v, want 1/%d", n, share, i+1)
		}
		switch i + 1 {
		case 3, 10, 100:
			mm := maxOverMean(r.Shares())
			if mm > 1.10 {
				t.Errorf("%d nodes: max/mean %.4f > 1.10", i+1, mm)
			}
			t.Logf("%d nodes × 16 positions: max/mean %.4f", i+1, mm)
		}
	}
}

func TestRangesMovement(t *testing.T) {
	t.Parallel()
	keys := testKeys(20000)
	r := NewRanges(8, XXHash)
	joinAll(t, r, addrs(7)...)
	before := make([]string, len(keys))
	for i, k := range keys {
		before[i] = r.Get(k)
	}
	more := r.Clone()
	joinAll(t, more, "newcomer")
	moved := 0
	for i, k := range keys {
		if got := more.Get(k); got != before[i] {
			if got != "newcomer" {
				t.Fatalf("join moved %q from %s to %s", k, before[i], got)
			}
			moved++
		}
	}
	if f := float64(moved) / float64(len(keys)); math.Abs(f-1.0/8) > 0.02 {
		t.Errorf("join moved %.3f of keys, want about 1/8", f)
	}

	victim := addrs(7)[2]
	less := r.Clone()
	less.Leave(victim, "not-a-member")
	for i, k := range keys {
		got := less.Get(k)
		if before[i] != victim {
			if got != before[i] {
				t.Fatalf("leave moved %q from %s to %s", k, before[i], got)
			}
			continue
		}
		// The victim's arc went to its predecessor: the owner of the arc
		// that ends where the victim's began.
		idx := r.index(k)
		pred := r.owners[(idx+len(r.owners)-1)%len(r.owners)]
		if pred == victim || got != pred {
			// Adjacent arcs of the victim chain back further.
			j := idx
			for r.owners[j] == victim {
				j = (j + len(r.owners) - 1) % len(r.owners)
			}
			if got != r.owners[j] {
				t.Fatalf("leave gave %q to %s, want predecessor %s", k, got, r.owners[j])
			}
		}
	}
	checkRanges(t, less)
}

func TestRangesAssignRoundTrip(t *testing.T) {
	t.Parallel()
	r := NewRanges(16, XXHash)
	joinAll(t, r, addrs(10)...)
	r.Leave(addrs(10)[4])

	// Store every member's positions, as a cluster would in etcd, and
	// rebuild in another order.
	stored := map[string][]uint32{}
	for _, n := range r.Nodes() {
		p, ok := r.Positions(n)
		if !ok {
			t.Fatalf("Positions(%q) not found", n)
		}
		stored[n] = p
	}
	again := NewRanges(16, XXHash)
	nodes := r.Nodes()
	slices.Reverse(nodes)
	for _, n := range nodes {
		if err := again.Assign(n, stored[n]); err != nil {
			t.Fatal(err)
		}
	}
	if again.Version() != r.Version() {
		t.Fatalf("rebuilt ring version %x, want %x", again.Version(), r.Version())
	}
	for _, k := range testKeys(5000) {
		if a, b := again.Get(k), r.Get(k); a != b {
			t.Fatalf("Get(%q): rebuilt %s, original %s", k, a, b)
		}
	}
	checkRanges(t, again)
	if _, ok := r.Positions("nobody"); ok {
		t.Error("Positions of a non-member reported ok")
	}
}

func TestRangesErrors(t *testing.T) {
	t.Parallel()
	r := NewRanges(4, nil)
	if err := r.Join(""); !errors.Is(err, ErrEmptyNode) {
		t.Errorf("Join(\"\") = %v", err)
	}
	if err := r.Assign("", []uint32{1}); !errors.Is(err, ErrEmptyNode) {
		t.Errorf("Assign(\"\") = %v", err)
	}
	if err := r.Assign("a", nil); !errors.Is(err, ErrNoPositions) {
		t.Errorf("Assign(a, nil) = %v", err)
	}
	if err := r.Assign("a", []uint32{5, 9, 5}); !errors.Is(err, ErrPositionTaken) {
		t.Errorf("Assign with a repeated position = %v", err)
	}
	if err := r.Assign("a", []uint32{5, 9}); err != nil {
		t.Fatal(err)
	}
	v := r.Version()
	if err := r.Assign("b", []uint32{7, 9}); !errors.Is(err, ErrPositionTaken) {
		t.Errorf("Assign of a's position to b = %v", err)
	}
	if err := r.Assign("a", []uint32{9, 11}); err != nil { // a may move its own
		t.Errorf("Assign(a) again: %v", err)
	}
	if r.Version() == v {
		t.Error("reassigning positions kept the version")
	}
	if err := NewRanges(MaxPoints+1, nil).Join("a"); !errors.Is(err, ErrTooManyPoints) {
		t.Errorf("Join with %d positions = %v", MaxPoints+1, err)
	}
	// Two arcs of one point each cannot be split.
	full := NewRanges(2, nil)
	if err := full.Assign("a", []uint32{0, math.MaxUint32}); err != nil {
		t.Fatal(err)
	}
	if err := full.Assign("b", []uint32{1}); err != nil {
		t.Fatal(err)
	}
	checkRanges(t, full)
	if err := full.Join("c"); err != nil {
		t.Fatalf("Join with one wide arc left: %v", err)
	}
	tiny := NewRanges(1, nil)
	if err := tiny.Assign("a", []uint32{0}); err != nil {
		t.Fatal(err)
	}
	joinAll(t, tiny, "b")
	if got := tiny.Shares()["b"]; got != 0.5 {
		t.Errorf("second node of a 1-position ring has share %v, want 0.5", got)
	}
}

func TestRangesEmptyAndSmall(t *testing.T) { // not parallel: AllocsPerRun
	for _, r := range []*Ranges{NewRanges(0, nil), nil} {
		if r.Get("k") != "" || r.GetN("k", 2) != nil || !r.IsEmpty() || len(r.Nodes()) != 0 || len(r.Shares()) != 0 {
			t.Errorf("empty Ranges misbehaves")
		}
	}
	r := NewRanges(0, nil)
	joinAll(t, r, "a")
	if p, _ := r.Positions("a"); len(p) != DefaultPositions || p[0] != 0 {
		t.Errorf("first node positions %v, want %d evenly spaced from 0", p, DefaultPositions)
	}
	v := r.Version()
	joinAll(t, r, "a")
	if r.Version() != v {
		t.Error("joining a member changed the ring")
	}
	joinAll(t, r, "b", "c")
	if got := r.GetN("k", 5); len(got) != 3 || got[0] != r.Get("k") {
		t.Errorf("GetN(k, 5) = %v", got)
	}
	if n := testing.AllocsPerRun(1000, func() { r.Get("some-key-1234") }); n != 0 {
		t.Errorf("Ranges.Get allocates %v times", n)
	}
}
