package cache

import (
	"context"
	"sync"
	"time"

	"github.com/ringcache/ringcache/cache/internal/store"
)

// Copies (GroupConfig.Copies > 1) keep each value this node owns on the
// next Copies-1 nodes that would own its key if the nodes before them left:
// its heirs (CopyPlacer). When the owner crashes, the ring hands the key to
// its first heir, which already holds the value, so a crash costs the
// origin nothing that a surviving heir held.
//
// The life of a copy:
//
//   - The owner sends it after every store in its main cache: in the
//     background after an origin load or a hand-off, before it acknowledges
//     a write (Set). Each copy carries a stamp from the owner's sequence,
//     taken after the store and before the owner reads back what its main
//     cache holds, so that the copy with the highest stamp carries the
//     owner's latest value: an heir keeps a copy only if it holds none of
//     the key with a higher stamp from the same owner.
//   - A write drops every other node's copies (PeerPicker.DropCopies)
//     before it stores, and waits first for the background sends of key in
//     flight, so that no copy sent before the write lands after its drop.
//     A DELETE drops the heirs' copies too. A PUT, through a PeerPicker
//     that is a Replacer, leaves them, for its own copy to replace: were
//     the owner to crash between the drop and the new copy, the heir that
//     takes the key over would hold neither value, and load the origin's
//     in place of the one acknowledged before the PUT.
//   - An heir never serves a copy while the key's owner is in its ring.
//     It hands it over (Handoff) to a node whose fetch from the owner
//     failed, and promotes it to its main cache at the ring change that
//     makes it the owner: a crash (after the lease and hold-down), or a
//     graceful leave.
//   - At every ring change an heir drops the copies of keys it is no longer
//     an heir of; the owners send theirs to their new heirs (RepairCopies,
//     run by the transport at a bounded rate).
//
// Copies share MaxBytes with the node's own values (store.Pair): under
// pressure the older of the two candidates is evicted, a copy before a
// value of the node's own stored at the same time, and a value of its own
// read again (protected by the eviction policy) outranks every copy.
// Copies are never read where they are kept, so they hold less than the
// (N-1)/N that N-1 copies for each own value would suggest: 0.21 of a
// full group at copies=2 and 0.33 at copies=3 under random reads
// (BenchmarkCopiesShare).

// A CopyPlacer is a PeerPicker that places copies of keys.
type CopyPlacer interface {
	// Heirs returns, for key, the first n-1 nodes after key's owner in
	// the order they would own it if the ones before them left, as Peers
	// (this node left out), and whether this node is one of them.
	Heirs(key string, n int) (heirs []Peer, self bool)
}

// A Replacer is a PeerPicker whose drops can say that the write replaces
// key's value (a PUT): a node then drops its hot copy and keeps its copy as
// an heir, which the write's own copy replaces (Group.dropLocal).
type Replacer interface {
	DropCopiesReplaced(ctx context.Context, group, key string) (unreached []string)
}

// A CopyKeeper is a Peer that keeps the copies an owner sends it.
type CopyKeeper interface {
	// KeepCopies sends copies of values of group that this node owns to
	// the peer, and returns how many it kept.
	KeepCopies(ctx context.Context, group string, copies []Copy) (kept int, err error)
}

// Copy is one value an owner sends to an heir of its key.
type Copy struct {
	Key   string
	Value Value
	// Stamp orders the copies of one owner: the higher, the newer.
	Stamp uint64
}

// copying are the background sends of one key in flight at its owner.
type copying = writes

// replicates reports whether the group keeps copies on other nodes.
func (g *Group) replicates() bool { return g.cfg.Copies > 1 && g.placer != nil }

// copiesBytes is the bound of a group's copies store: none without
// copies; with them, MaxBytes, shared with the main cache (store.Pair).
func copiesBytes(cfg GroupConfig) int64 {
	if cfg.Copies <= 1 {
		return 0
	}
	return cfg.MaxBytes
}

// nextStamp returns a stamp higher than every one this node gave before,
// across restarts too as long as the clock does not go back: the sequence
// starts at the Unix nanoseconds of the group's creation.
func (g *Group) nextStamp() uint64 { return g.copySeq.Add(1) }

// mainValue returns what the main cache holds for key, for a copy: ok is
// false when it holds no value (a not-found is not copied).
func (g *Group) mainValue(key string) (Value, bool) {
	e, ok := g.main.Get(key, new(store.Clock))
	if !ok || e.NotFound || e.V.NoStore {
		return Value{}, false
	}
	return Value(e.V), true
}

// copyOut sends key's value, as the main cache holds it now, to key's
// heirs in the background, unless a write of key is in progress (it sends
// its own). The sends are registered before that check, and a write waits
// for them (awaitCopies) before it drops the heirs' copies.
func (g *Group) copyOut(key string) {
	if !g.replicates() {
		return
	}
	g.writingMu.Lock()
	if g.writing[key] != nil {
		g.writingMu.Unlock()
		return
	}
	if g.copying == nil {
		g.copying = map[string]*copying{}
	}
	c := g.copying[key]
	if c == nil {
		c = &copying{done: make(chan struct{})}
		g.copying[key] = c
	}
	c.n++
	g.writingMu.Unlock()
	go func() {
		defer g.copyDone(key)
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.LoadTimeout)
		defer cancel()
		g.sendCopy(ctx, key, false)
	}()
}

func (g *Group) copyDone(key string) {
	g.writingMu.Lock()
	c := g.copying[key]
	if c.n--; c.n == 0 {
		delete(g.copying, key)
		close(c.done)
	}
	g.writingMu.Unlock()
}

// awaitCopies waits until no background send of key is in flight. A write
// calls it after beginWrite, so no new one starts meanwhile.
func (g *Group) awaitCopies(ctx context.Context, key string) {
	if !g.replicates() {
		return
	}
	g.writingMu.Lock()
	c := g.copying[key]
	g.writingMu.Unlock()
	if c == nil {
		return
	}
	select {
	case <-c.done:
	case <-ctx.Done():
	}
}

// sendCopy sends key's value, as the main cache holds it after a stamp is
// taken, to every heir of key, in parallel, and returns the heirs that did
// not take it. Nothing is sent when the main cache holds no value of key.
func (g *Group) sendCopy(ctx context.Context, key string, replacing bool) (unreached []string) {
	if !g.replicates() {
		return nil
	}
	heirs, _ := g.placer.Heirs(key, g.cfg.Copies)
	if len(heirs) == 0 {
		return nil
	}
	stamp := g.nextStamp()
	v, ok := g.mainValue(key)
	if !ok {
		if replacing { // evicted already: the heirs' old copies go
			for _, h := range heirs {
				h.Drop(ctx, g.cfg.Name, key)
			}
		}
		return nil
	}
	cp := []Copy{{Key: key, Value: v, Stamp: stamp}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, h := range heirs {
		k, ok := h.(CopyKeeper)
		if !ok {
			continue
		}
		wg.Go(func() {
			kept, err := k.KeepCopies(ctx, g.cfg.Name, cp)
			if err == nil && kept > 0 {
				g.st.copiesSent.Add(1)
				return
			}
			if replacing {
				// The write's drop left this heir its copy for this one to
				// replace; it did not take this one, so its old copy goes.
				h.Drop(ctx, g.cfg.Name, key)
			}
			if err != nil {
				mu.Lock()
				unreached = append(unreached, h.String())
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return unreached
}

// KeepCopy stores v as a copy of key, sent by from, key's owner, with
// stamp: unless this node holds a copy of key from the same owner with a
// higher stamp, or the ring changed while it stored. The transport calls
// it after checking that from owns key and this node is one of its heirs,
// by this node's ring. It reports whether this node holds v or a newer
// copy of key from the same owner: a copy that arrives after a newer one
// (two writes of key at the owner, whose sends crossed) is refused but
// reported kept, since the owner drops the copies of an heir that did not
// keep its own (sendCopy), which would drop the newer one.
func (g *Group) KeepCopy(key string, v Value, from string, stamp uint64) bool {
	if g.cfg.Copies <= 1 || key == "" || !g.storable(v, time.Now()) || g.purges.active() {
		return false
	}
	gd := guard{ring: &g.ring, wantRing: g.ring.Load()}
	g.copyMu.Lock()
	defer g.copyMu.Unlock()
	// A copy older than one kept before is refused even if that one was
	// dropped since (by a write, which sends its own): it is older than
	// something the owner already sent. This node holds that one, or
	// nothing older than v.
	if old, ok := g.copyStamps[key]; ok && old.from == from && old.stamp > stamp {
		return true
	}
	if !g.copies.Add(key, store.Entry{V: store.Value(v), Size: entrySize(key, v), Tag: stamp, Loaded: time.Now().UnixNano()}, gd.admits) {
		return false
	}
	if g.copyStamps == nil || len(g.copyStamps) > maxCopyStamps {
		g.copyStamps = map[string]copyStamp{}
	}
	g.copyStamps[key] = copyStamp{from: from, stamp: stamp}
	g.st.copiesKept.Add(1)
	g.reclaim() // the copy may take room the hot cache borrowed
	return true
}

// copyStamp is the owner and stamp of the newest copy kept of a key.
type copyStamp struct {
	from  string
	stamp uint64
}

// maxCopyStamps bounds the stamps remembered; past it they are forgotten
// at once (a late, older copy may then replace a newer one until the next
// send, which a write's own send follows).
const maxCopyStamps = 1 << 20

// heldCopy returns this node's copy of key, for a node whose fetch from
// the key's owner failed (Handoff).
func (g *Group) heldCopy(key string) (Value, bool) {
	if g.cfg.Copies <= 1 {
		return Value{}, false
	}
	e, ok := g.copies.Get(key, new(store.Clock))
	if !ok || e.NotFound {
		return Value{}, false
	}
	return Value(e.V), true
}

// settleCopies runs in ringChanged, after the main cache's sweep: copies
// of keys this node now owns go to its main cache (unless it holds a value
// there), and copies of keys it is no longer an heir of are dropped. gd is
// the new ring's guard, term this node's.
func (g *Group) settleCopies(gd guard, term uint64, held bool) {
	if g.cfg.Copies <= 1 {
		return
	}
	owned := g.copies.TakeIf(func(key string) bool { _, r := g.pick(key); return !r })
	now := time.Now()
	for _, m := range owned {
		if held && g.storable(Value(m.E.V), now) && g.main.AddIfAbsent(m.Key, g.mainEntry(m.Key, Value(m.E.V), term, now), gd.admits) {
			g.st.copiesPromoted.Add(1)
		}
	}
	if g.placer == nil {
		g.copies.Clear()
		return
	}
	g.copies.RemoveIf(func(key string) bool {
		_, self := g.placer.Heirs(key, g.cfg.Copies)
		return !self
	})
}

// RepairCopies sends copies of up to n of the values this node owns, most
// recently used first, to each one's heirs, through send, which the
// transport batches by heir and paces. One stamp covers them all, taken
// before the values are read: a write that lands after the read sends its
// own copy with a higher stamp.
//
// send reports whether it sent c (false: heir holds it already).
func (g *Group) RepairCopies(n int, send func(heir Peer, c Copy) bool) {
	if !g.replicates() || !g.node.current() {
		return
	}
	stamp := g.nextStamp()
	for _, kv := range values(g.main, n) {
		heirs, _ := g.placer.Heirs(kv.Key, g.cfg.Copies)
		for _, h := range heirs {
			if !send(h, Copy{Key: kv.Key, Value: kv.Value, Stamp: stamp}) {
				continue
			}
			g.st.copiesRepaired.Add(1)
			g.st.bytesRepaired.Add(int64(len(kv.Value.Data)))
		}
	}
}

// fromHeirs returns a copy of key, whose owner could not be reached, from
// this node's copies or from the first heir of key that holds one. It
// never loads: an heir answers from its caches only (Handoff).
func (g *Group) fromHeirs(ctx context.Context, key string) (Value, bool) {
	if !g.replicates() {
		return Value{}, false
	}
	if v, ok := g.heldCopy(key); ok {
		g.st.copiesServed.Add(1)
		return v, true
	}
	heirs, _ := g.placer.Heirs(key, g.cfg.Copies)
	for _, h := range heirs {
		f, ok := h.(HandoffFetcher)
		if !ok {
			continue
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.LoadTimeout)
		v, err := f.FetchHandoff(fctx, g.cfg.Name, key)
		cancel()
		if err == nil {
			g.st.copiesServed.Add(1)
			return v, true
		}
	}
	return Value{}, false
}
