package transport

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ringcache/ringcache/consistenthash"
)

// TestPoolSetRanges: a Pool given positions routes by the ring RangesFrom
// builds from them, in every process alike; it reports each member's arcs,
// keeps members without positions, and refuses bad input unchanged.
func TestPoolSetRanges(t *testing.T) {
	t.Parallel()
	urls := []string{"http://a:1", "http://b:1", "http://c:1"}
	ref := consistenthash.NewRanges(16, consistenthash.XXHash)
	stored := map[string][]uint32{}
	for _, u := range urls {
		if err := ref.Join(u); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range urls {
		stored[u], _ = ref.Positions(u)
	}

	var pools []*Pool
	for _, self := range urls {
		p, err := NewPool(Config{Self: self, Hash: consistenthash.XXHash})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		if p.Arcs() != nil {
			t.Fatal("a hashed ring reports arcs")
		}
		var rings atomic.Int64
		p.NotifyRing(func() { rings.Add(1) })
		in := map[string][]uint32{}
		for u, pos := range stored {
			in[u+"/"] = pos // another spelling of the same URL
		}
		if err := p.SetRanges(in); err != nil {
			t.Fatal(err)
		}
		if rings.Load() != 1 {
			t.Errorf("%s: NotifyRing callbacks ran %d times, want 1", self, rings.Load())
		}
		pools = append(pools, p)
	}
	for _, p := range pools {
		if p.Version() != ref.Version() {
			t.Errorf("%s: version %x, want %x", p.Config().Self, p.Version(), ref.Version())
		}
		if !slices.Equal(p.Members(), urls) {
			t.Errorf("members %v, want %v", p.Members(), urls)
		}
		for i := range 2000 {
			k := fmt.Sprintf("k%d", i)
			owner := ref.Get(k)
			if got := p.Owner(k); got != owner {
				t.Fatalf("Owner(%s) = %s, want %s", k, got, owner)
			}
			peer, remote := p.PickPeer(k)
			if remote != (owner != p.Config().Self) || remote && peer.String() != owner {
				t.Fatalf("%s: PickPeer(%s) = %v, %v; owner %s", p.Config().Self, k, peer, remote, owner)
			}
		}
		arcs := p.Arcs()
		for _, u := range urls {
			if a := arcs[u]; len(a) != 16 {
				t.Errorf("%s: %d arcs, want 16", u, len(a))
			}
		}
	}

	p := pools[0]
	v := p.Version()
	if err := p.SetRanges(map[string][]uint32{"10.0.0.1:80": {1}}); !errors.Is(err, ErrBadPeer) {
		t.Errorf("bad URL: %v, want ErrBadPeer", err)
	}
	big := make([]uint32, consistenthash.MaxPoints+1)
	if err := p.SetRanges(map[string][]uint32{"http://b:1": big}); !errors.Is(err, consistenthash.ErrTooManyPoints) {
		t.Errorf("oversized: %v, want ErrTooManyPoints", err)
	}
	if p.Version() != v {
		t.Error("a refused SetRanges changed the ring")
	}

	// Self without positions is a member that owns nothing.
	if err := p.SetRanges(map[string][]uint32{"http://b:1": stored["http://b:1"]}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Members(), []string{"http://a:1", "http://b:1"}) {
		t.Errorf("members %v", p.Members())
	}
	for i := range 100 {
		if o := p.Owner(fmt.Sprint(i)); o != "http://b:1" {
			t.Fatalf("key owned by %q with only b holding positions", o)
		}
	}
	if sh := p.Shares(); sh["http://b:1"] != 1 {
		t.Errorf("shares %v", sh)
	}
}
