package consistenthash

import (
	"math"
	"slices"
	"testing"
)

// TestArcsByHand checks rings small enough to work out on paper: with
// atoiHash, replica 0 of node "4" sits at hash 4 ("04").
func TestArcsByHand(t *testing.T) {
	t.Parallel()
	m := New(1, atoiHash)
	mustAdd(t, m, "2", "4", "6")
	want := []Arc{
		{Start: 7, Size: space - 4, Owner: "2"}, // (6, 2], through 0
		{Start: 3, Size: 2, Owner: "4"},         // (2, 4]
		{Start: 5, Size: 2, Owner: "6"},         // (4, 6]
	}
	if got := m.Arcs(); !slices.Equal(got, want) {
		t.Errorf("Map.Arcs() = %+v, want %+v", got, want)
	}

	r := NewRanges(4, atoiHash)
	for node, pos := range map[string][]uint32{"a": {0, 100}, "b": {50}} {
		if err := r.Assign(node, pos); err != nil {
			t.Fatal(err)
		}
	}
	// a owns [0, 50) and [100, 2^32): one arc across 0, from 100 to 49.
	want = []Arc{{Start: 100, Size: space - 50, Owner: "a"}, {Start: 50, Size: 50, Owner: "b"}}
	if got := r.Arcs(); !slices.Equal(got, want) {
		t.Errorf("Ranges.Arcs() = %+v, want %+v", got, want)
	}

	single := New(1, atoiHash)
	mustAdd(t, single, "9")
	if got := single.Arcs(); len(got) != 1 || got[0].Size != space || got[0].Owner != "9" || !got[0].Contains(0) {
		t.Errorf("one member: Arcs() = %+v, want the whole circle", got)
	}
	if New(1, nil).Arcs() != nil || (*Map)(nil).Arcs() != nil || (*Ranges)(nil).Arcs() != nil {
		t.Error("an empty ring has arcs")
	}
}

// TestArcsProperties checks, on rings with and without colliding points,
// that the arcs tile the circle in order, alternate owners, add up to
// Shares, and contain every key that Get gives their owner.
func TestArcsProperties(t *testing.T) {
	t.Parallel()
	keys := testKeys(5000)
	for _, c := range []struct {
		name  string
		hash  Hash
		nodes int
	}{
		{"xxhash/1", XXHash, 1},
		{"xxhash/7", XXHash, 7},
		{"weak/8", weakHash, 8}, // hundreds of collisions
		{"crc32/20", CRC32, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := New(50, c.hash)
			mustAdd(t, m, addrs(c.nodes)...)
			if err := m.AddWeighted(addrs(c.nodes)[0], 3); err != nil {
				t.Fatal(err)
			}
			checkArcs(t, m.Arcs(), m.Shares(), m.Get, m.KeyHash, keys)

			r := NewRanges(8, c.hash)
			for _, n := range addrs(c.nodes) {
				if err := r.Join(n); err != nil {
					t.Fatal(err)
				}
			}
			checkArcs(t, r.Arcs(), r.Shares(), r.Get, r.KeyHash, keys)
		})
	}
}

func checkArcs(t *testing.T, arcs []Arc, shares map[string]float64, get func(string) string, keyHash func(string) uint32, keys []string) {
	t.Helper()
	if len(arcs) == 0 {
		t.Fatal("no arcs")
	}
	if !arcs[0].Contains(0) {
		t.Errorf("the first arc %+v does not hold hash 0", arcs[0])
	}
	var total uint64
	sums := map[string]uint64{}
	for i, a := range arcs {
		total += a.Size
		sums[a.Owner] += a.Size
		next := arcs[(i+1)%len(arcs)]
		if len(arcs) > 1 && next.Owner == a.Owner {
			t.Errorf("arcs %d and %d both belong to %s: not merged", i, (i+1)%len(arcs), a.Owner)
		}
		if len(arcs) > 1 && uint32(uint64(a.Start)+a.Size) != next.Start {
			t.Errorf("arc %d %+v does not end where arc %d %+v starts", i, a, (i+1)%len(arcs), next)
		}
	}
	if total != space {
		t.Errorf("arcs cover %d hashes, want 2^32", total)
	}
	for owner, share := range shares {
		if got := float64(sums[owner]) / space; math.Abs(got-share) > 1e-12 {
			t.Errorf("%s: arcs add up to %v, Shares says %v", owner, got, share)
		}
	}
	for _, k := range keys {
		h := keyHash(k)
		i := slices.IndexFunc(arcs, func(a Arc) bool { return a.Contains(h) })
		if i < 0 || arcs[i].Owner != get(k) {
			t.Fatalf("key %q at %d: in arc %d, owner %s", k, h, i, get(k))
		}
	}
}

func TestMapWeight(t *testing.T) {
	t.Parallel()
	m := New(10, XXHash)
	mustAdd(t, m, "a")
	if err := m.AddWeighted("b", 4); err != nil {
		t.Fatal(err)
	}
	if m.Weight("a") != 1 || m.Weight("b") != 4 || m.Weight("c") != 0 || (*Map)(nil).Weight("a") != 0 {
		t.Errorf("weights a=%d b=%d c=%d", m.Weight("a"), m.Weight("b"), m.Weight("c"))
	}
}
