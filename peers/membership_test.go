package peers

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func member(id string) Member {
	return Member{ID: id, PeerURL: peerURL(id), Weight: 1, Started: time.Unix(1700000000, 0).UTC()}
}

func put(ids ...string) update {
	var u update
	for _, id := range ids {
		u.changes = append(u.changes, change{id: id, member: member(id)})
	}
	return u
}

func del(ids ...string) update {
	var u update
	for _, id := range ids {
		u.changes = append(u.changes, change{id: id, deleted: true})
	}
	return u
}

func leave(id string) update {
	m := member(id)
	m.Leaving = true
	return update{changes: []change{{id: id, member: m}}}
}

func list(ids ...string) update {
	u := put(ids...)
	u.reset = true
	return u
}

func ids(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// TestMembershipRules drives observe and settle with explicit times: each step feeds an
// update at an offset from t0 (or none), settles, and checks the applied IDs and the wake-up.
func TestMembershipRules(t *testing.T) {
	t.Parallel()
	const hold, confirm = 2 * time.Second, 10 * time.Second
	type step struct {
		at       time.Duration
		u        *update
		want     []string
		wantWake time.Duration // -1: no wake-up pending
	}
	u := func(x update) *update { return &x }
	tests := []struct {
		name  string
		self  string // the node's own ID; "" for none
		steps []step
	}{
		{"join is applied at once", "", []step{
			{0, u(list("a", "b", "c")), []string{"a", "b", "c"}, -1},
			{time.Second, u(put("d")), []string{"a", "b", "c", "d"}, -1},
		}},
		{"removal waits out the hold-down", "", []step{
			{0, u(list("a", "b", "c")), []string{"a", "b", "c"}, -1},
			{time.Second, u(del("c")), []string{"a", "b", "c"}, time.Second + hold},
			{time.Second + hold - 1, nil, []string{"a", "b", "c"}, time.Second + hold},
			{time.Second + hold, nil, []string{"a", "b"}, -1},
		}},
		{"key put again within the hold-down does not flap", "", []step{
			{0, u(list("a", "b", "c")), []string{"a", "b", "c"}, -1},
			{0, u(del("c")), []string{"a", "b", "c"}, hold},
			{hold - 1, u(put("c")), []string{"a", "b", "c"}, -1},
			{10 * hold, nil, []string{"a", "b", "c"}, -1},
		}},
		{"hold-down restarts after a put", "", []step{
			{0, u(list("a", "b", "c")), []string{"a", "b", "c"}, -1},
			{0, u(del("c")), []string{"a", "b", "c"}, hold},
			{time.Second, u(put("c")), []string{"a", "b", "c"}, -1},
			{time.Second, u(del("c")), []string{"a", "b", "c"}, time.Second + hold},
			{hold, nil, []string{"a", "b", "c"}, time.Second + hold},
			{time.Second + hold, nil, []string{"a", "b"}, -1},
		}},
		{"removing half waits for confirmation", "", []step{
			{0, u(list("a", "b", "c", "d")), []string{"a", "b", "c", "d"}, -1},
			{0, u(del("c", "d")), []string{"a", "b", "c", "d"}, hold},
			{hold, nil, []string{"a", "b", "c", "d"}, hold + confirm},
			{hold + confirm - 1, nil, []string{"a", "b", "c", "d"}, hold + confirm},
			{hold + confirm, nil, []string{"a", "b"}, -1},
		}},
		// Leases of half of the cluster expire a little apart (keepalives run every TTL/3,
		// so expiries spread over more than a second): the first hold-down to end must
		// not see a single removal, but the whole absent half.
		{"half vanishing a little apart waits for confirmation", "", []step{
			{0, u(list("a", "b", "c", "d")), []string{"a", "b", "c", "d"}, -1},
			{0, u(del("c")), []string{"a", "b", "c", "d"}, hold},
			{time.Second, u(del("d")), []string{"a", "b", "c", "d"}, hold},
			{hold, nil, []string{"a", "b", "c", "d"}, time.Second + hold},
			{time.Second + hold, nil, []string{"a", "b", "c", "d"}, hold + confirm},
			{hold + confirm, nil, []string{"a", "b", "d"}, time.Second + hold + confirm},
			{time.Second + hold + confirm, nil, []string{"a", "b"}, -1},
		}},
		{"a crash while others blink waits, then applies once they are back", "", []step{
			{0, u(list("a", "b", "c", "d", "e", "f")), []string{"a", "b", "c", "d", "e", "f"}, -1},
			{0, u(del("f")), []string{"a", "b", "c", "d", "e", "f"}, hold},
			{time.Second, u(del("d", "e")), []string{"a", "b", "c", "d", "e", "f"}, hold},
			{hold, nil, []string{"a", "b", "c", "d", "e", "f"}, time.Second + hold},
			{hold + 1, u(put("d", "e")), []string{"a", "b", "c", "d", "e"}, -1},
		}},
		{"removing less than half does not wait for confirmation", "", []step{
			{0, u(list("a", "b", "c", "d", "e")), []string{"a", "b", "c", "d", "e"}, -1},
			{0, u(del("d", "e")), []string{"a", "b", "c", "d", "e"}, hold},
			{hold, nil, []string{"a", "b", "c"}, -1},
		}},
		{"mass removal cancelled by the keys coming back", "", []step{
			{0, u(list("a", "b", "c", "d")), []string{"a", "b", "c", "d"}, -1},
			{0, u(del("b", "c", "d")), []string{"a", "b", "c", "d"}, hold},
			{hold + 1, u(put("b", "c", "d")), []string{"a", "b", "c", "d"}, -1},
			{hold + confirm + 1, nil, []string{"a", "b", "c", "d"}, -1},
		}},
		{"graceful leave is applied at once", "", []step{
			{0, u(list("a", "b")), []string{"a", "b"}, -1},
			{time.Second, u(leave("b")), []string{"a"}, -1},
		}},
		{"graceful leave then deletion", "", []step{
			{0, u(list("a", "b", "c")), []string{"a", "b", "c"}, -1},
			{0, u(leave("c")), []string{"a", "b"}, -1},
			{0, u(del("c")), []string{"a", "b"}, -1},
		}},
		{"a node rejoining after a leave is added", "", []step{
			{0, u(list("a", "b")), []string{"a", "b"}, -1},
			{0, u(leave("b")), []string{"a"}, -1},
			{time.Second, u(put("b")), []string{"a", "b"}, -1},
		}},
		{"the set never becomes empty", "", []step{
			{0, u(list("a", "b")), []string{"a", "b"}, -1},
			{0, u(list()), []string{"a", "b"}, hold},
			{hold + confirm, nil, []string{"a", "b"}, -1},
			{hold + confirm + 1, u(put("c")), []string{"c"}, -1},
		}},
		{"a list replaces what was seen", "", []step{
			{0, u(list("a", "b", "c")), []string{"a", "b", "c"}, -1},
			{0, u(list("a", "b", "d")), []string{"a", "b", "c", "d"}, hold},
			{hold, nil, []string{"a", "b", "d"}, -1},
		}},
		{"own key is never removed", "a", []step{
			{0, u(list("a", "b", "c")), []string{"a", "b", "c"}, -1},
			{0, u(del("a", "c")), []string{"a", "b", "c"}, hold},
			{hold, nil, []string{"a", "b"}, -1},
			{100 * hold, nil, []string{"a", "b"}, -1},
		}},
		{"one update with put then delete", "", []step{
			{0, u(list("a", "b")), []string{"a", "b"}, -1},
			{0, &update{changes: []change{{id: "c", member: member("c")}, {id: "c", deleted: true}}}, []string{"a", "b"}, -1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Unix(1800000000, 0)
			m := newMembership(tt.self, hold, confirm)
			for i, s := range tt.steps {
				if s.u != nil {
					m.observe(*s.u)
				}
				_, wake := m.settle(t0.Add(s.at))
				if got := ids(m.members()); !slices.Equal(got, s.want) {
					t.Fatalf("step %d at %v: applied %q, want %q", i, s.at, got, s.want)
				}
				var gotWake time.Duration = -1
				if !wake.IsZero() {
					gotWake = wake.Sub(t0)
				}
				if gotWake != s.wantWake {
					t.Fatalf("step %d at %v: wake at %v, want %v", i, s.at, gotWake, s.wantWake)
				}
			}
		})
	}
}

// TestMembershipChangedMember checks that a member that announces a new URL or weight under
// the same ID is updated at once, with no hold-down.
func TestMembershipChangedMember(t *testing.T) {
	t.Parallel()
	now := time.Unix(1800000000, 0)
	m := newMembership("", time.Second, time.Second)
	m.observe(list("a", "b"))
	m.settle(now)
	moved := member("b")
	moved.PeerURL = "http://b.elsewhere:7070"
	moved.Weight = 3
	m.observe(update{changes: []change{{id: "b", member: moved}}})
	if changed, _ := m.settle(now); !changed {
		t.Fatal("settle reported no change")
	}
	if got := m.members()[1]; !sameMember(got, moved) {
		t.Fatalf("b = %+v, want %+v", got, moved)
	}
}

// TestSnapshotChain: each snapshot returns the view it replaces and becomes current, so that
// the membership alone holds what State reports; an unchanged set keeps its change time.
func TestSnapshotChain(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1800000000, 0)
	m := newMembership("a", time.Second, time.Second)
	if m.current() != nil {
		t.Fatal("current before any snapshot")
	}
	m.observe(list("a", "b"))
	m.settle(t0)
	prev, v1, changed := m.snapshot(t0)
	if prev != nil || !changed || m.current() != v1 || !slices.Equal(ids(v1.members), []string{"a", "b"}) {
		t.Fatalf("first snapshot: prev %v, changed %v, members %q", prev, changed, ids(v1.members))
	}
	prev, v2, changed := m.snapshot(t0.Add(time.Second))
	if prev != v1 || changed || m.current() != v2 || !v2.changed.Equal(t0) {
		t.Fatalf("unchanged snapshot: prev %p (want %p), changed %v, at %v", prev, v1, changed, v2.changed)
	}
	m.observe(put("c"))
	m.settle(t0.Add(2 * time.Second))
	prev, v3, changed := m.snapshot(t0.Add(2 * time.Second))
	if prev != v2 || !changed || m.current() != v3 || !slices.Equal(ids(v3.members), []string{"a", "b", "c"}) {
		t.Fatalf("after a join: changed %v, members %q", changed, ids(v3.members))
	}
}

// TestFollowTiming runs the applier loop with its real timers under synctest: removals land
// exactly at the end of the hold-down or the confirmation delay, flaps never reach the Setter,
// and a missing own key is reported.
func TestFollowTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hold, confirm = 2 * time.Second, 10 * time.Second
		var (
			mu      sync.Mutex
			calls   []setCall
			missing int
		)
		publish := func(_, v *view, changed bool) {
			mu.Lock()
			defer mu.Unlock()
			if changed {
				calls = append(calls, setCall{at: v.changed, peers: v.peers})
			}
		}
		expect := func(wantCalls int, want []string, wantAt time.Time) {
			t.Helper()
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			if len(calls) != wantCalls {
				t.Fatalf("%d sets, want %d: %v", len(calls), wantCalls, calls)
			}
			last := calls[len(calls)-1]
			if !slices.Equal(last.peers, want) || !last.at.Equal(wantAt) {
				t.Fatalf("last set %q at %v, want %q at %v", last.peers, last.at, want, wantAt)
			}
		}

		ctx, cancel := context.WithCancel(t.Context())
		in := make(chan update)
		done := make(chan struct{})
		go func() {
			defer close(done)
			follow(ctx, newMembership("a", hold, confirm), in, publish, func() {
				mu.Lock()
				missing++
				mu.Unlock()
			})
		}()

		t0 := time.Now()
		in <- list("a", "b", "c", "d", "e")
		expect(1, urls("a", "b", "c", "d", "e"), t0)

		in <- del("e")
		time.Sleep(hold - time.Nanosecond)
		expect(1, urls("a", "b", "c", "d", "e"), t0)
		time.Sleep(time.Nanosecond)
		expect(2, urls("a", "b", "c", "d"), t0.Add(hold))

		// A lease that expires and is put again within the hold-down never reaches the Setter.
		in <- del("d")
		time.Sleep(hold / 2)
		in <- put("d")
		time.Sleep(10 * hold)
		expect(2, urls("a", "b", "c", "d"), t0.Add(hold))

		// Half of the ring at once waits for the hold-down and then the confirmation.
		t1 := time.Now()
		in <- del("c", "d")
		time.Sleep(hold + confirm - time.Nanosecond)
		expect(2, urls("a", "b", "c", "d"), t0.Add(hold))
		time.Sleep(time.Nanosecond)
		expect(3, urls("a", "b"), t1.Add(hold+confirm))

		// A graceful leave is applied at once, and the node's own key going missing is
		// reported so that the registration loop puts it again.
		t2 := time.Now()
		in <- leave("b")
		expect(4, urls("a"), t2)
		in <- del("a")
		synctest.Wait()
		mu.Lock()
		if missing != 1 {
			t.Errorf("missing reported %d times, want 1", missing)
		}
		mu.Unlock()

		cancel()
		<-done
	})
}
