package consistenthash

import (
	"fmt"
	"testing"

	gcring "github.com/golang/groupcache/consistenthash"
)

// crossCollisions counts points claimed by more than one node: the only
// place where groupcache and this ring may disagree.
func crossCollisions(m *Map) int {
	n := 0
	for i := 1; i < len(m.entries); i++ {
		if m.entries[i].hash == m.entries[i-1].hash && m.entries[i].node != m.entries[i-1].node {
			n++
		}
	}
	return n
}

// TestGroupcacheCompatible: with default settings (50 replicas, crc32) a
// Map and groupcache's consistenthash.Map built from the same names pick the
// same owner for every key.
func TestGroupcacheCompatible(t *testing.T) {
	t.Parallel()
	keys := testKeys(100000)
	tests := []struct {
		name     string
		replicas int // 0: our default, compared with groupcache at 50
		nodes    []string
	}{
		{"defaults/3 addrs", 0, addrs(3)},
		{"defaults/10 urls", 0, []string{
			"http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080", "http://10.0.0.4:8080",
			"http://10.0.0.5:8080", "http://10.0.0.6:8080", "http://10.0.0.7:8080", "http://10.0.0.8:8080",
			"http://10.0.0.9:8080", "http://10.0.0.10:8080",
		}},
		{"defaults/100 addrs", 0, addrs(100)},
		{"160 replicas/30 addrs", 160, addrs(30)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ours := New(tt.replicas, nil)
			mustAdd(t, ours, tt.nodes...)
			if c := crossCollisions(ours); c != 0 {
				t.Fatalf("test nodes have %d cross-node collisions; pick names without", c)
			}
			gcReplicas := tt.replicas
			if gcReplicas == 0 {
				gcReplicas = DefaultReplicas
			}
			theirs := gcring.New(gcReplicas, nil)
			theirs.Add(tt.nodes...)
			for _, k := range keys {
				if o, g := ours.Get(k), theirs.Get(k); o != g {
					t.Fatalf("Get(%q): ours %s, groupcache %s", k, o, g)
				}
			}
		})
	}
}

// TestGroupcacheCollisionDiffers documents the one deliberate difference:
// groupcache gives a contested point to the node added last, so its ring
// depends on Add order; ours gives it to the smaller name in every order.
func TestGroupcacheCollisionDiffers(t *testing.T) {
	t.Parallel()
	const a, b = "12.0.0.1:80", "2.0.0.1:80"
	const key = "112.0.0.1:80" // the contested point itself
	for _, tt := range []struct {
		order  []string
		gcWant string
	}{{[]string{a, b}, b}, {[]string{b, a}, a}} {
		theirs := gcring.New(50, nil)
		theirs.Add(tt.order...)
		ours := New(0, nil)
		mustAdd(t, ours, tt.order...)
		if got := theirs.Get(key); got != tt.gcWant {
			t.Errorf("groupcache order %v: Get = %s, want %s (last added)", tt.order, got, tt.gcWant)
		}
		if got := ours.Get(key); got != a {
			t.Errorf("ours order %v: Get = %s, want %s", tt.order, got, a)
		}
		// Replicas 1-4 of a are replicas 11, 21, 31, 41 of b: four
		// contested points. On every other point the two rings agree.
		if c := crossCollisions(ours); c != 4 {
			t.Fatalf("%d contested points, want 4", c)
		}
		contested := map[uint32]bool{}
		for i := 1; i < len(ours.entries); i++ {
			if ours.entries[i].hash == ours.entries[i-1].hash {
				contested[ours.entries[i].hash] = true
			}
		}
		agree := 0
		for i := range 10000 {
			k := fmt.Sprint("k", i)
			if contested[ours.points[ours.search(k)]] {
				continue
			}
			if o, g := ours.Get(k), theirs.Get(k); o != g {
				t.Fatalf("Get(%q) away from the collisions: ours %s, groupcache %s", k, o, g)
			}
			agree++
		}
		if agree < 9000 {
			t.Errorf("only %d of 10000 keys away from the contested points", agree)
		}
	}
}
