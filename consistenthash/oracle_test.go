package consistenthash

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// reference is the ring by its definition, with no lookup table, merge or cache: replica i
// of node n (i < weight × replicas) sits at fn(strconv.Itoa(i) + n); a key belongs to the
// smallest point at or after fn(key), wrapping to the smallest point of all; a point that
// several nodes claim belongs to the smallest name. GetN walks the distinct owners clockwise.
type reference struct {
	fn     Hash
	points []uint32          // ascending, distinct
	owner  map[uint32]string // winner of each point
}

func newReference(fn Hash, replicas int, weights map[string]int) reference {
	r := reference{fn: fn, owner: map[uint32]string{}}
	for n, w := range weights {
		for i := range w * replicas {
			p := fn([]byte(strconv.Itoa(i) + n))
			if o, ok := r.owner[p]; !ok || n < o {
				r.owner[p] = n
			}
		}
	}
	for p := range r.owner {
		r.points = append(r.points, p)
	}
	slices.Sort(r.points)
	return r
}

func (r reference) getN(key string, n int) []string {
	if len(r.points) == 0 {
		return nil
	}
	h := r.fn([]byte(key))
	start := len(r.points)
	for i, p := range r.points {
		if p >= h {
			start = i
			break
		}
	}
	var out []string
	for i := range r.points {
		o := r.owner[r.points[(start+i)%len(r.points)]]
		if len(out) < n && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// checkAgainstReference fails unless m.Get and m.GetN agree with the reference for keys.
func checkAgainstReference(t testing.TB, m *Map, fn Hash, replicas int, weights map[string]int, keys []string) {
	t.Helper()
	ref := newReference(fn, replicas, weights)
	for _, k := range keys {
		want := ref.getN(k, len(weights)+1)
		got := m.GetN(k, len(weights)+1)
		if !slices.Equal(got, want) {
			t.Fatalf("GetN(%q) = %q, by definition %q (weights %v)", k, got, want, weights)
		}
		if o := m.Get(k); len(want) > 0 && o != want[0] || len(want) == 0 && o != "" {
			t.Fatalf("Get(%q) = %q, by definition %q", k, o, want)
		}
	}
}

// TestMatchesDefinition compares Get and GetN with the definition of the ring on rings with
// weights, with a 10-bit hash (collisions on most rings) and with xxhash, reached through
// random sequences of Add, AddWeighted and Remove.
func TestMatchesDefinition(t *testing.T) {
	t.Parallel()
	keys := append(testKeys(500), "", "0", "1", "x")
	for _, fn := range []struct {
		name string
		h    Hash
	}{{"weak", weakHash}, {"xxhash", XXHash}} {
		t.Run(fn.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(5, 6))
			for range 40 {
				replicas := 1 + rng.IntN(12)
				m := New(replicas, fn.h)
				weights := map[string]int{}
				for range 30 {
					n := addrs(8)[rng.IntN(8)]
					switch op := rng.IntN(3); {
					case op == 0:
						mustAdd(t, m, n)
						if _, ok := weights[n]; !ok {
							weights[n] = 1
						}
					case op == 1:
						w := 1 + rng.IntN(4)
						if err := m.AddWeighted(n, w); err != nil {
							t.Fatal(err)
						}
						weights[n] = w
					default:
						m.Remove(n)
						delete(weights, n)
					}
					checkAgainstReference(t, m, fn.h, replicas, weights, keys)
				}
			}
		})
	}
}

// tableHash places the strings it knows at fixed points, so that a test can put points and
// keys exactly at 0 and 2^32-1; others hash with crc32.
func tableHash(table map[string]uint32) Hash {
	return func(data []byte) uint32 {
		if v, ok := table[string(data)]; ok {
			return v
		}
		return CRC32(data)
	}
}

// TestEdgesOfTheCircle puts points and keys at 0, 1, 2^31, 2^32-2 and 2^32-1 and checks the
// owners, the wrap-around, GetN and Shares, for Map and for Ranges, with one point and two.
func TestEdgesOfTheCircle(t *testing.T) {
	t.Parallel()
	const top = math.MaxUint32
	fn := tableHash(map[string]uint32{
		"0lo": 0, "0hi": top, "0mid": 1 << 31, "0lo2": 0, // replica 0 of each node
		"k0": 0, "k1": 1, "kmid": 1 << 31, "kmid+1": 1<<31 + 1, "ktop-1": top - 1, "ktop": top,
		"1234567891": 42, // versionProbe
	})
	tests := []struct {
		nodes []string
		want  map[string]string // key -> owner
		getN  []string          // GetN("ktop", 3)
	}{
		{[]string{"lo"}, map[string]string{"k0": "lo", "k1": "lo", "ktop": "lo"}, []string{"lo"}},
		{[]string{"hi"}, map[string]string{"k0": "hi", "kmid": "hi", "ktop": "hi"}, []string{"hi"}},
		{[]string{"lo", "hi"}, map[string]string{"k0": "lo", "k1": "hi", "ktop-1": "hi", "ktop": "hi"}, []string{"hi", "lo"}},
		{[]string{"mid", "hi"}, map[string]string{"k0": "mid", "kmid": "mid", "kmid+1": "hi", "ktop": "hi"}, []string{"hi", "mid"}},
		{[]string{"lo", "mid", "hi"}, map[string]string{"k0": "lo", "k1": "mid", "kmid+1": "hi", "ktop": "hi"}, []string{"hi", "lo", "mid"}},
		{[]string{"lo2", "lo", "hi"}, map[string]string{"k0": "lo", "k1": "hi", "ktop": "hi"}, []string{"hi", "lo"}},
	}
	for _, tt := range tests {
		m := New(1, fn)
		mustAdd(t, m, tt.nodes...)
		for k, want := range tt.want {
			if got := m.Get(k); got != want {
				t.Errorf("Map%v: Get(%s) = %q, want %q", tt.nodes, k, got, want)
			}
		}
		if got := m.GetN("ktop", 3); !slices.Equal(got, tt.getN) {
			t.Errorf("Map%v: GetN(ktop, 3) = %q, want %q", tt.nodes, got, tt.getN)
		}
		var sum float64
		for _, s := range m.Shares() {
			sum += s
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Errorf("Map%v: shares %v sum to %v", tt.nodes, m.Shares(), sum)
		}
	}
	// The point at 0 owns only the arc (2^32-1, 0]: one point of the circle.
	m := New(1, fn)
	mustAdd(t, m, "lo", "hi")
	if got := m.Shares()["lo"]; got != 1.0/(1<<32) {
		t.Errorf("share of the point at 0 after a point at 2^32-1 = %v, want 2^-32", got)
	}
	// The losing node of a collision at 0 takes over the point when the winner goes.
	m = New(1, fn)
	mustAdd(t, m, "lo", "lo2", "hi")
	m.Remove("lo")
	if got := m.Get("k0"); got != "lo2" {
		t.Errorf("after Remove(lo), Get(k0) = %q, want lo2", got)
	}

	// Ranges: an arc starts at its position; the last arc wraps past 2^32-1 to 0.
	r := NewRanges(1, fn)
	if err := r.Assign("top", []uint32{top}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k0", "k1", "kmid", "ktop-1", "ktop"} {
		if got := r.Get(k); got != "top" {
			t.Errorf("Ranges{top}: Get(%s) = %q", k, got)
		}
	}
	if err := r.Assign("zero", []uint32{0}); err != nil {
		t.Fatal(err)
	}
	if err := r.Assign("mid", []uint32{1 << 31}); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"k0": "zero", "k1": "zero", "kmid": "mid", "kmid+1": "mid", "ktop-1": "mid", "ktop": "top"} {
		if got := r.Get(k); got != want {
			t.Errorf("Ranges{zero, mid, top}: Get(%s) = %q, want %q", k, got, want)
		}
	}
	if got := r.GetN("ktop", 3); !slices.Equal(got, []string{"top", "zero", "mid"}) {
		t.Errorf("Ranges: GetN(ktop, 3) = %q, want [top zero mid]", got)
	}
	if got := r.Shares()["top"]; got != 1.0/(1<<32) {
		t.Errorf("Ranges: share of the arc at 2^32-1 = %v, want 2^-32", got)
	}
}

// TestVersionGolden pins Version for a few rings. The version travels between nodes that may
// run different builds, so it must never change by accident (for example by a switch to a
// per-process seeded hash): a change here is a wire change, to be made on purpose.
func TestVersionGolden(t *testing.T) {
	t.Parallel()
	crc := New(0, nil)
	mustAdd(t, crc, "http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080")
	xx := New(160, XXHash)
	mustAdd(t, xx, "a", "b")
	if err := xx.AddWeighted("c", 3); err != nil {
		t.Fatal(err)
	}
	rg := NewRanges(16, XXHash)
	joinAll(t, rg, "a", "b", "c")
	for _, tt := range []struct {
		name string
		got  uint64
		want uint64
	}{
		{"empty map", New(0, nil).Version(), 0x5b562093190359af},
		{"crc32 3 urls", crc.Version(), 0x251f43b3d0f0d49b},
		{"xxhash weighted", xx.Version(), 0xd80f88a2808c35fa},
		{"ranges", rg.Version(), 0x52cd8eff74297f07},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: Version() = %#016x, pinned %#016x", tt.name, tt.got, tt.want)
		}
	}
}
