package peers

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// change is one event under the members prefix: a put of a decoded member or the deletion of
// a member's key (a value that does not decode counts as a deletion).
type change struct {
	member  Member // when !deleted
	id      string
	deleted bool
}

// update is what the watcher hands to the applier: one watch response, or a full list when
// reset is set (the list replaces everything seen before).
type update struct {
	reset   bool
	changes []change
}

// membership holds the member set as seen in etcd and the set last applied to the Setter,
// with the rules that move the second towards the first: additions at once, removals after
// a hold-down, mass removals after a further confirmation delay, graceful leaves at once.
// The node's own entry is never removed: while the registry runs, it is putting its key back,
// and a node that dropped itself would route its own keys away while still serving them.
// It is not safe for concurrent use, but for current: the applier goroutine owns it.
type membership struct {
	self              string
	holdDown, confirm time.Duration

	seen    map[string]Member    // by ID: what etcd holds now, leaving members excluded
	applied map[string]Member    // by ID: what the Setter was given
	gone    map[string]time.Time // applied IDs missing from seen, since when
	left    map[string]bool      // IDs that announced a graceful leave

	// weighted and ranged say what the Setter receives besides the peer URLs: weights (a
	// WeightedSetter) or positions (a RangesSetter, with a Placer).
	weighted, ranged bool
	latest           atomic.Pointer[view] // the last snapshot, for current
}

// view is the applied member set in the forms the Setter and State use. A view is never
// changed once made, so any goroutine may read the latest one (current).
type view struct {
	members, pending []Member
	peers            []string
	weights          map[string]int
	positions        map[string][]uint32
	changed          time.Time // when what the Setter receives last changed
}

// snapshot makes the applied set, at now, the latest view v, and returns it with the view it
// replaces (nil for the first) and whether what the Setter receives differs between the two:
// the peer URLs, or for a weighted Setter the weights, or for a ranged one the positions.
func (m *membership) snapshot(now time.Time) (prev, v *view, changed bool) {
	ms := m.members()
	v = &view{members: ms, pending: m.pending(), peers: peerURLs(ms), weights: peerWeights(ms), positions: peerPositions(ms)}
	prev = m.latest.Load()
	changed = prev == nil || !slices.Equal(prev.peers, v.peers) ||
		m.weighted && !maps.Equal(prev.weights, v.weights) ||
		m.ranged && !samePositions(prev.positions, v.positions)
	if changed {
		v.changed = now
	} else {
		v.changed = prev.changed
	}
	m.latest.Store(v)
	return prev, v, changed
}

// current returns the latest view, nil before the first snapshot. Unlike the other methods it
// is safe to call from any goroutine.
func (m *membership) current() *view { return m.latest.Load() }

func newMembership(self string, holdDown, confirm time.Duration) *membership {
	return &membership{
		self:     self,
		holdDown: holdDown,
		confirm:  confirm,
		seen:     map[string]Member{},
		applied:  map[string]Member{},
		gone:     map[string]time.Time{},
		left:     map[string]bool{},
	}
}

// observe records what etcd says, in order. It never touches the applied set: settle does.
func (m *membership) observe(u update) {
	if u.reset {
		clear(m.seen)
		clear(m.left)
	}
	for _, c := range u.changes {
		switch {
		case c.deleted:
			delete(m.seen, c.id)
		case c.member.Leaving:
			delete(m.seen, c.id)
			m.left[c.id] = true
		default:
			m.seen[c.id] = c.member
			delete(m.left, c.id)
		}
	}
}

// settle moves the applied set towards the seen set as far as the rules allow at now. It
// reports whether the applied set changed, and when settle should run again to apply a
// held-back removal (zero if none is pending).
func (m *membership) settle(now time.Time) (changed bool, wake time.Time) {
	for id, s := range m.seen {
		delete(m.gone, id)
		if a, ok := m.applied[id]; !ok || !sameMember(a, s) {
			m.applied[id] = s
			changed = true
		}
	}
	for id := range m.left {
		if _, ok := m.applied[id]; !ok {
			delete(m.left, id)
		}
	}

	earliest := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	var graceful, due []string
	absent := 0 // applied members missing without a graceful leave, held down or due
	for id := range m.applied {
		if _, ok := m.seen[id]; ok || id == m.self {
			continue
		}
		if m.left[id] {
			graceful = append(graceful, id)
			continue
		}
		absent++
		since, ok := m.gone[id]
		if !ok {
			since = now
			m.gone[id] = now
		}
		if now.Sub(since) >= m.holdDown {
			due = append(due, id)
		} else {
			earliest(since.Add(m.holdDown))
		}
	}
	// Half of the members or more vanishing together (counted after graceful leaves) is more
	// likely an etcd problem than a real loss: apply only the removals that have also waited
	// out the confirmation delay. All absent members count, not only those whose hold-down
	// is over: leases cut off from etcd together expire up to TTL/3 apart (the keepalive
	// period), so their hold-downs end one by one, and counting only the due ones would let
	// half of the ring go, one member at a time, with no confirmation.
	if remaining := len(m.applied) - len(graceful); len(due) > 0 && 2*absent >= remaining {
		confirmed := due[:0]
		for _, id := range due {
			if t := m.gone[id].Add(m.holdDown + m.confirm); now.Before(t) {
				earliest(t)
			} else {
				confirmed = append(confirmed, id)
			}
		}
		due = confirmed
	}
	remove := append(graceful, due...)
	if len(remove) == 0 {
		return changed, wake
	}
	if len(remove) == len(m.applied) {
		// An empty ring serves nothing: etcd saying "nobody" is treated as "unknown" and the
		// last member set stays until someone is seen again.
		return changed, wake
	}
	for _, id := range remove {
		delete(m.applied, id)
		delete(m.gone, id)
		delete(m.left, id)
	}
	return true, wake
}

// members returns the applied members sorted by ID.
func (m *membership) members() []Member { return sortedMembers(m.applied) }

// pending returns the applied members that etcd no longer holds and that wait out the
// hold-down or the confirmation delay, sorted by ID.
func (m *membership) pending() []Member {
	p := map[string]Member{}
	for id := range m.gone {
		p[id] = m.applied[id]
	}
	return sortedMembers(p)
}

func (m *membership) has(id string) bool {
	_, ok := m.seen[id]
	return ok
}

// sameMember compares members field by field, with Started compared as an instant.
func sameMember(a, b Member) bool {
	return a.ID == b.ID && a.PeerURL == b.PeerURL && a.Weight == b.Weight && a.Version == b.Version &&
		a.Started.Equal(b.Started) && a.Leaving == b.Leaving && slices.Equal(a.Positions, b.Positions) && a.Ring == b.Ring
}

func sortedMembers(ms map[string]Member) []Member {
	return slices.SortedFunc(maps.Values(ms), func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
}

// follow feeds updates from in into m and publishes the applied set after each update and
// each expiry of a hold-down, until ctx ends. Apart from New, before it starts follow, it is
// the only caller of publish, so Setter calls never overlap. missing is called when etcd no longer holds m.self's key although this
// node believes it is registered (the key was deleted by hand, or the lease expired while
// etcd was out of reach): the registration loop then puts it again.
func follow(ctx context.Context, m *membership, in <-chan update, publish func(prev, v *view, changed bool), missing func()) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-in:
			m.observe(u)
			// A key marked leaving is this node's own leave (Leave, Close):
			// putting it back would undo it.
			if !m.has(m.self) && !m.left[m.self] {
				missing()
			}
		case <-timer.C:
		}
		now := time.Now()
		_, wake := m.settle(now)
		publish(m.snapshot(now))
		if wake.IsZero() {
			timer.Stop()
		} else {
			timer.Reset(wake.Sub(now))
		}
	}
}
