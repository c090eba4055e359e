package transport

import (
	"testing"
	"time"
)

// TestMemberTokens checks how a node reads its peers' word about it
// (tenure.go): a peer that keeps its token kept the node; one that gives
// another token, or no longer counts it in, dropped it; a peer that
// restarted and had the node in its first ring did not; and a peer whose
// first token came after the time asked about has a history not known.
func TestMemberTokens(t *testing.T) {
	t.Parallel()
	p, err := NewPool(Config{Self: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Set("http://127.0.0.1:2"); err != nil {
		t.Fatal(err)
	}
	pe := p.state.Load().peers["http://127.0.0.1:2"]
	start := time.Now()
	at := func(d time.Duration) time.Time { return start.Add(d) }
	p.resetDrops()

	p.noteMember(pe, false, "", at(0))
	if _, dropped := p.droppedBy(); dropped {
		t.Fatal("a peer that never counted the node in dropped it")
	}
	p.noteMember(pe, true, "boot1-3", at(1)) // the baseline
	if ok, unknown := p.confirmedSince(at(1).UnixNano()); ok || !unknown {
		t.Fatalf("confirmedSince(the baseline's own time) = %v, %v; want an unknown history", ok, unknown)
	}
	if ok, unknown := p.confirmedSince(at(2).UnixNano()); ok || unknown {
		t.Fatalf("confirmedSince(after the baseline, no answer since) = %v, %v; want not yet", ok, unknown)
	}
	p.noteMember(pe, true, "boot1-3", at(3))
	if ok, unknown := p.confirmedSince(at(2).UnixNano()); !ok || unknown {
		t.Fatalf("confirmedSince after the same token = %v, %v; want confirmed", ok, unknown)
	}
	p.noteMember(pe, true, "boot2-1", at(4)) // restarted, with the node in its first ring
	if _, dropped := p.droppedBy(); dropped {
		t.Fatal("a restarted peer whose first ring held the node dropped it")
	}
	p.noteMember(pe, true, "boot2-5", at(5)) // took it back at its fifth ring
	if by, dropped := p.droppedBy(); !dropped || by != pe.url {
		t.Fatalf("droppedBy() = %q, %v after a new token; want %s", by, dropped, pe.url)
	}
	p.resetDrops()
	if _, dropped := p.droppedBy(); dropped {
		t.Fatal("a drop outlived resetDrops")
	}
	p.noteMember(pe, true, "boot2-5", at(6))
	p.noteMember(pe, false, "", at(7))
	if _, dropped := p.droppedBy(); !dropped {
		t.Fatal("a peer that counted the node in and no longer does did not drop it")
	}
}

// TestPoolTokens checks the tokens a pool gives its members: a member keeps
// its token across ring changes that keep it, gets a new one when it is
// taken back, and the members of the first ring have first-ring tokens.
func TestPoolTokens(t *testing.T) {
	t.Parallel()
	p, err := NewPool(Config{Self: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, b := "http://127.0.0.1:2", "http://127.0.0.1:3"
	p.Set(a)
	first := p.state.Load().since[a]
	if !firstRing(first) {
		t.Fatalf("token %q of a member of the first ring: not a first-ring token", first)
	}
	p.Set(a, b)
	if got := p.state.Load().since[a]; got != first {
		t.Fatalf("token %q after a change that kept the member, want %q", got, first)
	}
	p.Set(b)
	p.Set(a, b)
	if got := p.state.Load().since[a]; got == first || firstRing(got) {
		t.Fatalf("token %q after the member was dropped and taken back; want a new one", got)
	}
}
