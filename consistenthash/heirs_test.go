package consistenthash

import (
	"fmt"
	"slices"
	"testing"
)

// TestHeirs checks Heirs against its definition on both rings: the i-th
// heir of a key is the key's owner once the i nodes before it have left.
func TestHeirs(t *testing.T) {
	t.Parallel()
	m := New(50, XXHash)
	r := NewRanges(16, XXHash)
	var nodes []string
	for i := range 12 {
		node := fmt.Sprintf("http://10.0.0.%d:8080", i)
		nodes = append(nodes, node)
		mustAdd(t, m, node)
		if err := r.Join(node); err != nil {
			t.Fatal(err)
		}
	}
	rings := []struct {
		name    string
		heirs   func(string, int) []string
		without func([]string) func(string) string
	}{
		{"Map", m.Heirs, func(gone []string) func(string) string {
			c := m.Clone()
			c.Remove(gone...)
			return c.Get
		}},
		{"Ranges", r.Heirs, func(gone []string) func(string) string {
			c := r.Clone()
			c.Leave(gone...)
			return c.Get
		}},
	}
	for _, ring := range rings {
		for _, k := range testKeys(300) {
			got := ring.heirs(k, 4)
			if len(got) != 4 {
				t.Fatalf("%s: Heirs(%q, 4) = %q, want 4 nodes", ring.name, k, got)
			}
			for i := range got {
				if want := ring.without(got[:i])(k); got[i] != want {
					t.Fatalf("%s: Heirs(%q, 4) = %q: without %q the owner is %s, not %s", ring.name, k, got, got[:i], want, got[i])
				}
			}
			if all := ring.heirs(k, 100); len(all) != len(nodes) || !slices.Equal(slices.Sorted(slices.Values(all)), slices.Sorted(slices.Values(nodes))) {
				t.Fatalf("%s: Heirs(%q, 100) = %q, want every node once", ring.name, k, all)
			}
		}
		if got := ring.heirs("k", 0); got != nil {
			t.Errorf("%s: Heirs(k, 0) = %q", ring.name, got)
		}
	}
}
