package consistenthash

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// atoiHash reads the data as a decimal number so that a test can place
// points by hand, as groupcache's own test does.
func atoiHash(data []byte) uint32 {
	i, err := strconv.Atoi(string(data))
	if err != nil {
		panic(err)
	}
	return uint32(i)
}

// weakHash keeps 10 bits of a well-mixed hash, so that a few hundred points
// collide often: the collision paths run in every property test. Not 10 bits
// of crc32: crc32 is linear, and replica names of equal length differ in a
// few bytes at fixed places, so its low bits spread them with almost no
// collisions (8 addresses × 50 replicas: 0 instead of about 78).
func weakHash(data []byte) uint32 { return XXHash(data) & 0x3ff }

func addrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250+1)
	}
	return out
}

func testKeys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "key-" + strconv.Itoa(i)
	}
	return out
}

func mustAdd(t testing.TB, m *Map, nodes ...string) {
	t.Helper()
	if err := m.Add(nodes...); err != nil {
		t.Fatalf("Add(%v): %v", nodes, err)
	}
}

// sameRing fails unless a and b are the same ring, point for point.
func sameRing(t testing.TB, a, b *Map) {
	t.Helper()
	if !slices.Equal(a.points, b.points) || !slices.Equal(a.owners, b.owners) {
		t.Fatalf("rings differ:\n a: %d points %v\n b: %d points %v", len(a.points), a.nodes, len(b.points), b.nodes)
	}
	if !slices.Equal(a.nodes, b.nodes) || a.Version() != b.Version() {
		t.Fatalf("members or versions differ: %v %x vs %v %x", a.nodes, a.Version(), b.nodes, b.Version())
	}
}

func TestGetByHand(t *testing.T) {
	t.Parallel()
	m := New(3, atoiHash)
	// Points: 2, 4, 6, 12, 14, 16, 22, 24, 26.
	mustAdd(t, m, "6", "4", "2")
	tests := []struct{ key, want string }{
		{"2", "2"}, {"11", "2"}, {"23", "4"}, {"27", "2"}, {"0", "2"}, {"5", "6"},
	}
	for _, tt := range tests {
		if got := m.Get(tt.key); got != tt.want {
			t.Errorf("Get(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
	// Adds 8, 18, 28: 27 now belongs to 8.
	mustAdd(t, m, "8")
	if got := m.Get("27"); got != "8" {
		t.Errorf("after Add(8), Get(27) = %q, want 8", got)
	}
	m.Remove("8")
	if got := m.Get("27"); got != "2" {
		t.Errorf("after Remove(8), Get(27) = %q, want 2", got)
	}
	if got := m.GetN("23", 5); !slices.Equal(got, []string{"4", "6", "2"}) {
		t.Errorf("GetN(23, 5) = %v, want [4 6 2]", got)
	}
}

func TestEdges(t *testing.T) {
	t.Parallel()
	t.Run("default replicas", func(t *testing.T) {
		for _, r := range []int{0, -1} {
			m := New(r, nil)
			mustAdd(t, m, "a")
			if len(m.entries) != DefaultReplicas {
				t.Errorf("New(%d) made %d points per node, want %d", r, len(m.entries), DefaultReplicas)
			}
		}
	})
	t.Run("empty ring", func(t *testing.T) {
		for _, m := range []*Map{New(10, nil), nil} {
			if got := m.Get("k"); got != "" {
				t.Errorf("Get on empty = %q", got)
			}
			if got := m.GetN("k", 3); got != nil {
				t.Errorf("GetN on empty = %v", got)
			}
			if !m.IsEmpty() || len(m.Nodes()) != 0 || len(m.Shares()) != 0 {
				t.Errorf("empty ring: IsEmpty=%v Nodes=%v Shares=%v", m.IsEmpty(), m.Nodes(), m.Shares())
			}
		}
	})
	t.Run("add present node", func(t *testing.T) {
		m := New(20, nil)
		mustAdd(t, m, "a", "b")
		before := m.Clone()
		mustAdd(t, m, "a", "b", "a")
		sameRing(t, before, m)
		if err := m.AddWeighted("a", 1); err != nil {
			t.Fatal(err)
		}
		sameRing(t, before, m)
	})
	t.Run("empty name", func(t *testing.T) {
		m := New(20, nil)
		mustAdd(t, m, "a")
		before := m.Clone()
		if err := m.Add("b", "", "c"); !errors.Is(err, ErrEmptyNode) {
			t.Fatalf("Add with empty name: %v, want ErrEmptyNode", err)
		}
		if err := m.AddWeighted("", 2); !errors.Is(err, ErrEmptyNode) {
			t.Fatalf("AddWeighted with empty name: %v, want ErrEmptyNode", err)
		}
		sameRing(t, before, m)
	})
	t.Run("bad weights", func(t *testing.T) {
		m := New(100, nil)
		for _, tt := range []struct {
			weight int
			want   error
		}{{0, ErrBadWeight}, {-3, ErrBadWeight}, {MaxPoints/100 + 1, ErrTooManyPoints}, {math.MaxInt, ErrTooManyPoints}} {
			if err := m.AddWeighted("a", tt.weight); !errors.Is(err, tt.want) {
				t.Errorf("AddWeighted(a, %d) = %v, want %v", tt.weight, err, tt.want)
			}
		}
		if !m.IsEmpty() {
			t.Errorf("failed AddWeighted added %v", m.Nodes())
		}
		if err := New(MaxPoints+1, nil).Add("a"); !errors.Is(err, ErrTooManyPoints) {
			t.Errorf("Add with %d replicas = %v, want ErrTooManyPoints", MaxPoints+1, err)
		}
	})
	t.Run("remove absent", func(t *testing.T) {
		m := New(20, nil)
		mustAdd(t, m, "a")
		before := m.Clone()
		m.Remove("zzz", "")
		sameRing(t, before, m)
	})
}

func TestNodesAndShares(t *testing.T) {
	t.Parallel()
	m := New(160, XXHash)
	mustAdd(t, m, "c", "a", "b")
	if got := m.Nodes(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Nodes() = %v", got)
	}
	sh := m.Shares()
	var sum float64
	for n, s := range sh {
		sum += s
		if s < 0.2 || s > 0.45 {
			t.Errorf("share of %s = %.3f, far from 1/3", n, s)
		}
	}
	if math.Abs(sum-1) > 1e-9 || len(sh) != 3 {
		t.Errorf("shares %v sum to %v", sh, sum)
	}
	one := New(1, nil)
	mustAdd(t, one, "solo")
	if got := one.Shares()["solo"]; got != 1 {
		t.Errorf("single point share = %v, want 1", got)
	}
}

// The share of each node estimated from keys must match Shares: that ties
// Shares to what Get does.
func TestSharesMatchGet(t *testing.T) {
	t.Parallel()
	m := New(50, XXHash)
	mustAdd(t, m, addrs(5)...)
	const n = 200000
	counts := map[string]int{}
	for _, k := range testKeys(n) {
		counts[m.Get(k)]++
	}
	for node, s := range m.Shares() {
		got := float64(counts[node]) / n
		if math.Abs(got-s) > 0.01 {
			t.Errorf("%s: %.4f of keys, Shares says %.4f", node, got, s)
		}
	}
}

func TestWeighted(t *testing.T) {
	t.Parallel()
	m := New(160, XXHash)
	mustAdd(t, m, "small")
	if err := m.AddWeighted("big", 3); err != nil {
		t.Fatal(err)
	}
	var big int
	for _, e := range m.entries {
		if e.node == "big" {
			big++
		}
	}
	if big != 480 {
		t.Errorf("weight 3 × 160 replicas gave %d points, want 480", big)
	}
	sh := m.Shares()
	if r := sh["big"] / sh["small"]; r < 2.4 || r > 3.6 {
		t.Errorf("share ratio big/small = %.2f, want about 3", r)
	}
	// Re-weighting is also order-independent: it equals a fresh ring.
	if err := m.AddWeighted("big", 2); err != nil {
		t.Fatal(err)
	}
	fresh := New(160, XXHash)
	if err := fresh.AddWeighted("big", 2); err != nil {
		t.Fatal(err)
	}
	mustAdd(t, fresh, "small")
	sameRing(t, fresh, m)
}

func TestVersion(t *testing.T) {
	t.Parallel()
	build := func(replicas int, fn Hash, nodes ...string) *Map {
		m := New(replicas, fn)
		mustAdd(t, m, nodes...)
		return m
	}
	base := build(50, nil, "a", "b", "c")
	if v := build(50, nil, "c", "a", "b").Version(); v != base.Version() {
		t.Errorf("same nodes, other order: version %x vs %x", v, base.Version())
	}
	if v := build(0, CRC32, "b", "c", "a").Version(); v != base.Version() {
		t.Errorf("defaults spelled out: version %x vs %x", v, base.Version())
	}
	weighted := build(50, nil, "a", "b", "c")
	if err := weighted.AddWeighted("c", 2); err != nil {
		t.Fatal(err)
	}
	for name, other := range map[string]*Map{
		"fewer nodes":    build(50, nil, "a", "b"),
		"more nodes":     build(50, nil, "a", "b", "c", "d"),
		"other replicas": build(51, nil, "a", "b", "c"),
		"other hash":     build(50, XXHash, "a", "b", "c"),
		"other weight":   weighted,
		"empty":          New(50, nil),
	} {
		if other.Version() == base.Version() {
			t.Errorf("%s: same version %x", name, base.Version())
		}
	}
}

// TestPureFunctionOfNodes: any order and any path of Add and Remove that
// ends at the same node set gives the same ring, with a hash that collides
// often and with names that collide ("1"+"12.0.0.1:80" = "11"+"2.0.0.1:80").
func TestPureFunctionOfNodes(t *testing.T) {
	t.Parallel()
	for _, fn := range []struct {
		name string
		h    Hash
	}{{"weak", weakHash}, {"crc32", CRC32}, {"xxhash", XXHash}} {
		t.Run(fn.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, 2))
			for trial := range 50 {
				nodes := append(addrs(1+rng.IntN(20)), "12.0.0.1:80", "2.0.0.1:80")
				ref := New(20, fn.h)
				mustAdd(t, ref, nodes...)

				shuffled := New(20, fn.h)
				for _, i := range rng.Perm(len(nodes)) {
					mustAdd(t, shuffled, nodes[i])
				}
				sameRing(t, ref, shuffled)

				// Detour: add extra nodes, remove some real ones, put
				// them back, remove the extras.
				path := New(20, fn.h)
				extra := []string{"x-" + strconv.Itoa(trial), "12.0.0.1:8", "2.0.0.1:8"}
				mustAdd(t, path, extra...)
				mustAdd(t, path, nodes...)
				gone := nodes[:rng.IntN(len(nodes))]
				path.Remove(gone...)
				mustAdd(t, path, gone...)
				path.Remove(extra...)
				sameRing(t, ref, path)
			}
		})
	}
}

func TestNameCollisionTieBreak(t *testing.T) {
	t.Parallel()
	// Replica 1 of "12.0.0.1:80" and replica 11 of "2.0.0.1:80" are the
	// same string, so every hash puts them on the same point.
	const a, b = "12.0.0.1:80", "2.0.0.1:80"
	key := "112.0.0.1:80" // hashes exactly onto the contested point
	for _, order := range [][]string{{a, b}, {b, a}} {
		m := New(50, nil)
		mustAdd(t, m, order...)
		if got := m.Get(key); got != a {
			t.Errorf("order %v: Get(%q) = %q, want %q (smaller name wins)", order, key, got, a)
		}
		m.Remove(a)
		if got := m.Get(key); got != b {
			t.Errorf("order %v: after Remove(%q), Get = %q, want %q", order, a, got, b)
		}
	}
}

// TestMinimalMovement: removing a node moves only its keys; adding one moves
// keys only to it.
func TestMinimalMovement(t *testing.T) {
	t.Parallel()
	keys := testKeys(20000)
	for _, fn := range []struct {
		name string
		h    Hash
	}{{"weak", weakHash}, {"crc32", CRC32}, {"xxhash", XXHash}} {
		t.Run(fn.name, func(t *testing.T) {
			t.Parallel()
			nodes := addrs(12)
			m := New(50, fn.h)
			mustAdd(t, m, nodes...)
			before := make([]string, len(keys))
			for i, k := range keys {
				before[i] = m.Get(k)
			}
			for _, victim := range nodes[:4] {
				less := m.Clone()
				less.Remove(victim)
				for i, k := range keys {
					if got := less.Get(k); before[i] != victim && got != before[i] {
						t.Fatalf("remove %s moved %q from %s to %s", victim, k, before[i], got)
					} else if got == victim {
						t.Fatalf("remove %s: %q still maps to it", victim, k)
					}
				}
			}
			more := m.Clone()
			mustAdd(t, more, "newcomer")
			moved := 0
			for i, k := range keys {
				if got := more.Get(k); got != before[i] {
					if got != "newcomer" {
						t.Fatalf("add moved %q from %s to %s", k, before[i], got)
					}
					moved++
				}
			}
			if moved == 0 {
				t.Errorf("adding a 13th node moved no keys")
			}
		})
	}
}

func TestGetN(t *testing.T) {
	t.Parallel()
	m := New(50, XXHash)
	nodes := addrs(30)
	mustAdd(t, m, nodes...)
	for _, k := range testKeys(500) {
		for _, n := range []int{1, 3, 17, 30, 31, 100} {
			got := m.GetN(k, n)
			if len(got) != min(n, 30) {
				t.Fatalf("GetN(%q, %d) has %d nodes", k, n, len(got))
			}
			if got[0] != m.Get(k) {
				t.Fatalf("GetN(%q, %d)[0] = %s, Get = %s", k, n, got[0], m.Get(k))
			}
			set := map[string]bool{}
			for _, g := range got {
				set[g] = true
			}
			if len(set) != len(got) {
				t.Fatalf("GetN(%q, %d) repeats a node: %v", k, n, got)
			}
			// The second choice is where the key goes if the owner
			// leaves: GetN is the fallback order.
			if n == 3 {
				less := m.Clone()
				less.Remove(got[0])
				if o := less.Get(k); o != got[1] {
					t.Fatalf("GetN(%q)[1] = %s, but without the owner Get = %s", k, got[1], o)
				}
			}
		}
		if got := m.GetN(k, 0); got != nil {
			t.Fatalf("GetN(%q, 0) = %v", k, got)
		}
	}
	all := m.GetN("x", 1000)
	slices.Sort(all)
	if !slices.Equal(all, m.Nodes()) {
		t.Errorf("GetN(x, 1000) = %v, want all nodes", all)
	}
}

func TestCloneIsIndependent(t *testing.T) {
	t.Parallel()
	m := New(20, nil)
	mustAdd(t, m, "a", "b")
	v := m.Version()
	c := m.Clone()
	mustAdd(t, c, "c")
	if err := c.AddWeighted("a", 3); err != nil {
		t.Fatal(err)
	}
	c.Remove("b")
	if m.Version() != v || !slices.Equal(m.Nodes(), []string{"a", "b"}) || len(m.entries) != 40 {
		t.Errorf("modifying a clone changed the original: %v", m)
	}
}

func TestGetDoesNotAllocate(t *testing.T) {
	for _, name := range HashNames() {
		fn, _ := HashByName(name)
		m := New(160, fn)
		mustAdd(t, m, addrs(100)...)
		if n := testing.AllocsPerRun(1000, func() { m.Get("some-key-1234") }); n != 0 {
			t.Errorf("Get with %s allocates %v times", name, n)
		}
	}
}

// TestConcurrentReaders runs the documented contract under -race: readers
// load the current ring with no lock while a writer clones, modifies and
// swaps in new rings.
func TestConcurrentReaders(t *testing.T) {
	t.Parallel()
	var cur atomic.Pointer[Map]
	m := New(50, XXHash)
	mustAdd(t, m, addrs(10)...)
	cur.Store(m)
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for r := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				ring := cur.Load()
				key := fmt.Sprintf("k%d-%d", r, i)
				owner := ring.Get(key)
				if !slices.Contains(ring.Nodes(), owner) {
					errs <- fmt.Sprintf("Get(%q) = %q, not a member of %v", key, owner, ring.Nodes())
					return
				}
			}
		})
	}
	for i := range 200 {
		next := cur.Load().Clone()
		if i%2 == 0 {
			mustAdd(t, next, "extra-"+strconv.Itoa(i))
		} else {
			next.Remove("extra-" + strconv.Itoa(i-1))
		}
		cur.Store(next)
	}
	close(done)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if got := cur.Load().Nodes(); !slices.Equal(got, m.Nodes()) {
		t.Errorf("final members %v, want %v", got, m.Nodes())
	}
}
