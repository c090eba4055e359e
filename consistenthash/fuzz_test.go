package consistenthash

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"sort"
	"testing"
)

// fuzzNodes splits data at '|' into distinct non-empty node names.
func fuzzNodes(data []byte) []string {
	var out []string
	for f := range bytes.SplitSeq(data, []byte("|")) {
		if len(f) > 0 && !slices.Contains(out, string(f)) {
			out = append(out, string(f))
		}
	}
	return out
}

// FuzzPureFunctionOfNodes checks that the ring depends only on its node set:
// the names in the given order, in reverse, and through a detour of extra
// nodes and removals give the same ring, point for point. weak selects a
// 10-bit hash so that point collisions are common.
func FuzzPureFunctionOfNodes(f *testing.F) {
	f.Add([]byte("a|b|c"), uint8(3), false)
	f.Add([]byte("12.0.0.1:80|2.0.0.1:80"), uint8(50), false)
	f.Add([]byte("1|11|111|1111"), uint8(20), true)
	f.Add([]byte("node-1|node-2|node-3|node-10|node-20"), uint8(0), true)
	f.Add([]byte("x||y|x"), uint8(7), false)
	f.Fuzz(func(t *testing.T, data []byte, replicas uint8, weak bool) {
		nodes := fuzzNodes(data)
		if len(nodes) > 64 {
			nodes = nodes[:64]
		}
		fn := CRC32
		if weak {
			fn = weakHash
		}
		r := int(replicas % 64)
		ref := New(r, fn)
		mustAdd(t, ref, nodes...)

		rev := New(r, fn)
		for _, n := range slices.Backward(nodes) {
			mustAdd(t, rev, n)
		}
		sameRing(t, ref, rev)

		// Names built from the members' own bytes collide with them
		// ("1"+"12.0.0.1:80" = "11"+"2.0.0.1:80").
		var extra []string
		for _, n := range nodes {
			if len(n) > 1 && !slices.Contains(nodes, n[1:]) {
				extra = append(extra, n[1:])
			}
		}
		path := New(r, fn)
		mustAdd(t, path, extra...)
		half := len(nodes) / 2
		mustAdd(t, path, nodes[half:]...)
		if half > 0 {
			if err := path.AddWeighted(nodes[0], 3); err != nil {
				t.Fatal(err)
			}
			mustAdd(t, path, nodes[:half]...)
			if err := path.AddWeighted(nodes[0], 1); err != nil {
				t.Fatal(err)
			}
		}
		path.Remove(extra...)
		sameRing(t, ref, path)

		// Every key's owner is a member, and GetN starts with it.
		for _, k := range nodes {
			o := ref.Get(k)
			if len(nodes) > 0 && !slices.Contains(nodes, o) {
				t.Fatalf("Get(%q) = %q, not a member", k, o)
			}
			if g := ref.GetN(k, 2); len(nodes) > 0 && g[0] != o {
				t.Fatalf("GetN(%q)[0] = %q, Get = %q", k, g[0], o)
			}
		}
	})
}

// FuzzRanges drives Join and Leave from the input and checks the
// invariants after each step, and that only the changed node's keys move.
func FuzzRanges(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0x81, 4, 5, 0x82}, uint8(16))
	f.Add([]byte{0, 0x80, 0, 1}, uint8(1))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0x83, 0x85, 11}, uint8(3))
	f.Fuzz(func(t *testing.T, ops []byte, positions uint8) {
		if len(ops) > 40 {
			ops = ops[:40]
		}
		r := NewRanges(int(positions%32), XXHash)
		keys := testKeys(300)
		for _, op := range ops {
			node := string(rune('a' + op&0x3f))
			before := make([]string, len(keys))
			for i, k := range keys {
				before[i] = r.Get(k)
			}
			next := r.Clone()
			if op&0x80 == 0 {
				if err := next.Join(node); err != nil {
					t.Fatalf("Join(%q): %v", node, err)
				}
			} else {
				next.Leave(node)
			}
			checkRanges(t, next)
			for i, k := range keys {
				got := next.Get(k)
				if got != before[i] && got != node && before[i] != node {
					t.Fatalf("op %#x on %q moved %q from %q to %q", op, node, k, before[i], got)
				}
			}
			r = next
		}
	})
}

// FuzzLookup checks the bucket table against a plain binary search for any sorted point set
// (4 bytes per point) and any probe, the edges 0 and 2^32-1 included.
func FuzzLookup(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, uint32(0xffffffff))
	f.Add([]byte{0, 0, 0, 1}, uint32(0))
	f.Add([]byte{0x80, 0, 0, 0, 0x80, 0, 0, 1, 0x80, 0, 0, 2}, uint32(0x80000001))
	f.Fuzz(func(t *testing.T, data []byte, probe uint32) {
		var points []uint32
		for i := 0; i+4 <= len(data); i += 4 {
			points = append(points, binary.BigEndian.Uint32(data[i:]))
		}
		slices.Sort(points)
		points = slices.Compact(points)
		if len(points) == 0 {
			return
		}
		l := newLookup(points)
		for _, h := range []uint32{probe, 0, math.MaxUint32, points[0], points[len(points)-1], probe - 1, probe + 1} {
			want := sort.Search(len(points), func(i int) bool { return points[i] >= h })
			if got := l.ceil(h); got != want {
				t.Fatalf("%d points: ceil(%#x) = %d, want %d", len(points), h, got, want)
			}
		}
	})
}

// FuzzMatchesDefinition builds a ring from fuzzed names, weights and replica counts with
// the 10-bit weak hash (points collide often) and compares Get and GetN with the ring's
// definition (see reference).
func FuzzMatchesDefinition(f *testing.F) {
	f.Add([]byte("a|b|c"), []byte{1, 2, 3}, uint8(5), "key")
	f.Add([]byte("12.0.0.1:80|2.0.0.1:80"), []byte{1, 1}, uint8(50), "112.0.0.1:80")
	f.Add([]byte("n1|n2|n3|n4|n5|n6|n7|n8"), []byte{4, 1, 3}, uint8(30), "")
	f.Fuzz(func(t *testing.T, data, weights []byte, replicas uint8, key string) {
		nodes := fuzzNodes(data)
		if len(nodes) > 16 {
			nodes = nodes[:16]
		}
		r := 1 + int(replicas%40)
		m := New(r, weakHash)
		want := map[string]int{}
		for i, n := range nodes {
			w := 1
			if i < len(weights) {
				w = 1 + int(weights[i]%4)
			}
			if err := m.AddWeighted(n, w); err != nil {
				t.Fatal(err)
			}
			want[n] = w
		}
		checkAgainstReference(t, m, weakHash, r, want, append(nodes, key, key+"x", "k1", "k2", "k3"))
	})
}
