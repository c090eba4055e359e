package cache

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/cache/internal/store"
)

// ringChanged sets aside what the node may no longer serve after a ring
// change: main-cache entries of keys it no longer owns move to the hand-off
// cache (or are dropped, without hand-off), where they are only handed to
// their new owners and never served again here (were this node to own such
// a key again later, a write made at the other owner in between would be
// lost); hot copies of keys it now owns are dropped. The ring generation is
// bumped first, so that a load that began under the old ring and completes
// after the sweep is not stored: 1: load of k begins (owner), 2: ring moves
// k away, sweep, 1: load stores k in main, 3: ring moves k back, 1 serves
// its pre-move value.
func (g *Group) ringChanged() {
	g.handoffMu.Lock()
	defer g.handoffMu.Unlock()
	g.ring.Add(1)
	g.pulls.Clear() // counts of the last window, for members that may have left
	g.writtenMu.Lock()
	for i := range g.epochs {
		g.snap[i].Store(g.epochs[i].Load())
	}
	g.written = map[string]string{}
	g.writtenMu.Unlock()
	remote := func(key string) bool { _, r := g.pick(key); return r }
	moved := g.main.TakeIf(remote)
	// A hot copy is served under its owner's contact lease: once another
	// node owns the key, writes go there, and the old owner's lease says
	// nothing of them. So copies of keys that moved between two other nodes
	// go too, with those of keys this node now owns.
	prev, _ := g.peers.(Handoffer)
	g.hot.RemoveIf(func(key string) bool {
		if !remote(key) {
			return true
		}
		if prev != nil {
			_, movedAway := prev.PreviousOwner(key)
			return movedAway
		}
		return false
	})
	g.handoff.RemoveIf(func(key string) bool { return !remote(key) })
	term, current := g.term()
	g.settleCopies(guard{ring: &g.ring, wantRing: g.ring.Load()}, term, current)
	window := g.node.handoff
	if window <= 0 || g.node.closed.Load() {
		return
	}
	for _, m := range moved {
		if !m.E.NotFound {
			g.handoff.Add(m.Key, m.E, nil)
		}
	}
	held, _ := g.handoff.Usage()
	held += g.handoff.DeadBytes()
	g.main.SetMax(g.cfg.MaxBytes - held)
	g.reclaim()
	g.handoffUntil.Store(time.Now().Add(window).UnixNano())
	if g.handoffTimer != nil {
		g.handoffTimer.Stop()
	}
	g.handoffTimer = time.AfterFunc(window, g.endHandoff)
}

// endHandoff ends the hand-off window: the kept values are dropped and the
// main cache has its whole budget again.
func (g *Group) endHandoff() {
	g.handoffMu.Lock()
	defer g.handoffMu.Unlock()
	if time.Now().UnixNano() < g.handoffUntil.Load() {
		return // a later ring change started a new window
	}
	g.handoffUntil.Store(0)
	g.handoff.Clear()
	g.main.SetMax(g.cfg.MaxBytes) // more room: lent at the next copy
}

// closeHandoff stops the hand-off window's timer and ends the window now,
// for Node.Close.
func (g *Group) closeHandoff() {
	g.handoffMu.Lock()
	if g.handoffTimer != nil {
		g.handoffTimer.Stop()
		g.handoffTimer = nil
	}
	g.handoffUntil.Store(0)
	g.handoffMu.Unlock()
	g.endHandoff()
}

// inHandoff reports whether a hand-off window is open.
func (g *Group) inHandoff() bool {
	return time.Now().UnixNano() < g.handoffUntil.Load()
}

// Handoff returns this node's value of key for a node that took over key
// (the transport calls it for a hand-off request): from the main cache if
// this node still owns key by its ring, else from the values it kept after
// losing key, within the hand-off window. It never loads and never asks a
// peer.
func (g *Group) Handoff(key string) (Value, bool) {
	// A node that leaves picks the next owners for every key (transport
	// does, once the node is retired) while it still holds the values they
	// ask it for: its main
	// cache answers whatever the ring says. Any other node answers from its
	// main cache only for keys it owns; a value there for a key it does not
	// own (adopted from a leaving node) is not the newest.
	_, remote := g.pick(key)
	if !remote || g.node.retired.Load() {
		if v, err, ok := g.lookup(key, false); ok && err == nil {
			return v, true
		}
	}
	if remote && g.node.current() {
		// An heir's copy, for a node whose fetch from the owner failed.
		if v, ok := g.heldCopy(key); ok {
			g.st.handoffsGiven.Add(1)
			return v, true
		}
	}
	if !remote || !g.inHandoff() || !g.node.current() {
		return Value{}, false
	}
	e, ok := g.handoff.Get(key, new(store.Clock))
	if !ok || e.NotFound {
		return Value{}, false
	}
	g.st.handoffsGiven.Add(1)
	return Value(e.V), true
}

// Adopt stores v for key, handed over by from, the node that owned key
// before (it left, or its ring moved key away), unless this node holds a
// value of key already or a write of key by another node than from was
// applied since the last ring change (takeOverGuard: a write wins over any
// older hand-off). The transport calls it after checking that this node is
// key's next owner. It reports whether v was stored.
//
// A ring change while v is stored voids the store (its guard), as it voids
// a load; then, if this node still owns key by the new ring, Adopt tries
// again under it, since no one else will offer v again. A hand-off that
// raced this node's own ring change (a joiner told of itself last) would
// otherwise be lost, and the key loaded from the origin.
func (g *Group) Adopt(key string, v Value, from string) bool {
	for {
		gd, ok := g.takeOverGuard(key, from)
		if key == "" || !ok || g.purges.active() {
			return false
		}
		term, ok := g.term()
		if !ok || !g.storable(v, time.Now()) {
			return false
		}
		ring := gd.wantRing
		if g.main.AddIfAbsent(key, g.mainEntry(key, v, term, time.Now()), gd.admits) {
			g.reclaim()
			g.st.handoffsTaken.Add(1)
			g.copyOut(key)
			return true
		}
		if _, remote := g.pick(key); g.ring.Load() == ring || remote {
			return false
		}
	}
}

// Newest returns up to n of the main cache's values, the one eviction
// would reach last first (about the most recently used), for a node that hands its values over before it leaves.
func (g *Group) Newest(n int) []KeyValue {
	if !g.node.current() {
		return nil // it may hold values a purge it missed dropped
	}
	return values(g.main, n)
}

// Kept returns up to n of the values this node kept, within the hand-off
// window, for keys it no longer owns, most recently used first: for a node
// that pushes them to their new owners.
func (g *Group) Kept(n int) []KeyValue {
	if !g.inHandoff() || !g.node.current() {
		return nil
	}
	return values(g.handoff, n)
}

// values returns up to n of l's values, most recently used first,
// remembered not-founds left out.
func values(l *store.Store, n int) []KeyValue {
	es := l.Newest(n)
	out := make([]KeyValue, 0, len(es))
	for _, e := range es {
		if !e.E.NotFound {
			out = append(out, KeyValue{Key: e.Key, Value: Value(e.E.V)})
		}
	}
	return out
}

// KeyValue is a key with its value.
type KeyValue struct {
	Key   string
	Value Value
}

// pull asks key's previous owner for its value, within the hand-off window
// of a ring change and if no other node wrote key since (takeOverGuard): a
// key that moved to this node costs its previous owner a lookup instead of
// the origin a load. It runs on key's load flight, so there is one hand-off fetch per
// key.
func (g *Group) pull(ctx context.Context, key string) (Value, bool) {
	if !g.inHandoff() {
		return Value{}, false
	}
	h, ok := g.peers.(Handoffer)
	if !ok {
		return Value{}, false
	}
	prev, ok := h.PreviousOwner(key)
	if !ok {
		return Value{}, false
	}
	if _, ok := g.takeOverGuard(key, prev.String()); !ok {
		return Value{}, false // written since by another node: loadOrigin's guard stores
	}
	f, ok := prev.(HandoffFetcher)
	if !ok {
		return Value{}, false
	}
	pc := g.pullCount(prev)
	if pc.found.Load() == 0 && pc.asked.Load() >= maxFruitlessPulls {
		return Value{}, false
	}
	pc.asked.Add(1)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.LoadTimeout)
	defer cancel()
	v, err := f.FetchHandoff(fctx, g.cfg.Name, key)
	if err != nil {
		return Value{}, false
	}
	pc.found.Add(1)
	g.st.handoffsTaken.Add(1)
	return v, true
}

// pullCount is what one window's pulls from one previous owner found.
type pullCount struct {
	ring         uint64 // the ring change it counts for (Group.ring)
	asked, found atomic.Int64
}

// pullCount returns prev's count for the current ring.
func (g *Group) pullCount(prev Peer) *pullCount {
	ring := g.ring.Load()
	if v, ok := g.pulls.Load(prev); ok && v.(*pullCount).ring == ring {
		return v.(*pullCount)
	}
	pc := &pullCount{ring: ring}
	for {
		v, loaded := g.pulls.LoadOrStore(prev, pc)
		if !loaded {
			return pc
		}
		if old := v.(*pullCount); old.ring >= ring {
			return old
		}
		if g.pulls.CompareAndSwap(prev, v, pc) {
			return pc
		}
	}
}
