package cache

import (
	"hash/maphash"
	"sync/atomic"
)

// The guards: what decides whether a value may be stored, and, below, the
// checks that decide whether a stored one may be served. Each answers one
// question, and no two the same one:
//
//	mechanism                  question                                         where
//	write epoch (epochs)       did a write of the key begin or end since        guard, stored
//	                           the load, fetch or hand-over began?
//	ring counter (ring)        did the ring change since?                       guard, stored
//	began vs Entry.Loaded      was a newer value stored since the load began?   guard.admits
//	purge generation           did a purge begin since a value was taken        takeGuard
//	                           from another node?
//	written (snap past         was the key written since the last ring          takeOverGuard
//	maxWritten keys)           change, and by which owner? (hand-overs)
//	everWritten                was the key ever written, as this node heard?    load, fetch: no
//	                           (no origin value in place of a written one)      origin fallback
//	term (Tag, main)           does the node's registration still hold?         look: served
//	contact epoch (Tag, hot)   is the owner in contact as when copied?          look: served
//	fallback mark (Mark, hot)  was it loaded because the owner was away?        look: served
//	hand-off window            may kept values go to their new owners?          Handoff, pull
//	failures                   did the origin just fail for the key?            loadOrigin
//
// The guard of a load, fetch, write or hand-over is read when it begins and
// checked under the store's lock when it stores (store.Store.Add asks
// guard.admits). The package doc's "life of an entry" says which event
// breaks which.

// guard is what a load read before it began: the key's write epoch, the
// group's ring generation and the time. A load whose guard no longer holds
// when it completes raced with a write of its key or a ring change, and its
// result is not stored; nor is it stored over an entry stored after the
// load began (a write that landed between the load's look and its store:
// the epoch alone cannot tell, when the load began after the write's epoch
// bump and before its store). The zero guard always holds.
type guard struct {
	epoch, ring         *atomic.Uint64
	wantEpoch, wantRing uint64
	began               int64 // Unix nanoseconds; 0: replace whatever is there
	// purge, if not nil, is the group's purge generation, for a value
	// taken from another node: one taken while a purge was in progress
	// may come from a node that had not applied it (Node.HoldPurge).
	purge     *atomic.Uint64
	wantPurge uint64
}

// admits reports whether a value stored under g may replace an entry
// stored at replaced (Unix nanoseconds; 0: none): g holds, and the entry
// was not stored after the load began. The store calls it under its lock
// (store.Store.Add).
func (g guard) admits(replaced int64) bool {
	return g.holds() && (g.began == 0 || replaced <= g.began)
}

func (g guard) holds() bool {
	return (g.epoch == nil || g.epoch.Load() == g.wantEpoch) && (g.ring == nil || g.ring.Load() == g.wantRing) &&
		(g.purge == nil || g.purge.Load() == g.wantPurge)
}

// loadGuard returns the guard of a load or fetch of key beginning now.
func (g *Group) loadGuard(key string) guard {
	e := g.epoch(key)
	return guard{epoch: e, wantEpoch: e.Load(), ring: &g.ring, wantRing: g.ring.Load()}
}

// takeGuard returns gd, for a value taken from another node beginning
// now, with the purge generation; ok is false while a purge is in
// progress (nothing taken from another node is kept then).
func (g *Group) takeGuard(gd guard) (_ guard, ok bool) {
	gd.purge, gd.wantPurge = &g.purges.gen, g.purges.gen.Load()
	return gd, !g.purges.active()
}

// takeOverGuard returns the guard under which a value of key that the node
// from hands over (Adopt, pull) may be stored, and false if none may: when
// a write of key was applied since the last ring change by another node
// than from, or by this one. A write applied by from comes before its
// hand-over (a node hands its values over only once it no longer applies
// writes of them: Node.Retire, or its ring moved them away), so the value
// is the newest. The guard fails on any later write of key, and on a ring
// change.
func (g *Group) takeOverGuard(key, from string) (guard, bool) {
	i := maphash.String(g.seed, key) % epochStripes
	g.writtenMu.Lock()
	defer g.writtenMu.Unlock()
	gd := guard{epoch: &g.epochs[i], ring: &g.ring, wantRing: g.ring.Load()}
	if g.written == nil {
		gd.wantEpoch = g.snap[i].Load()
		return gd, g.epochs[i].Load() == gd.wantEpoch
	}
	if by, ok := g.written[key]; ok && (by == "" || by != from) {
		return guard{}, false
	}
	gd.wantEpoch = g.epochs[i].Load()
	return gd, true
}
