package cache

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync/atomic"
	"time"

	glru "github.com/hashicorp/golang-lru/v2"
)

// Set writes v as key's value at key's owner (this node or a peer), which
// stores it and drops every copy on the other nodes before Set returns: once
// Set returns nil, no node serves the old value (see WriteResult for nodes
// that could not be reached). It returns ErrBadKey for an empty key and
// ErrTooLarge for a value over MaxValueBytes before contacting anyone, and an
// error (ErrNotOwner while a membership change settles) when the owner did
// not apply the write. A v with NoStore removes key's value instead.
func (g *Group) Set(ctx context.Context, key string, v Value) (WriteResult, error) {
	if err := g.checkSet(key, v); err != nil {
		return WriteResult{}, err
	}
	peer, remote := g.pick(key)
	if !remote {
		return g.setLocal(ctx, key, v)
	}
	// Drop the local copy before and after: a Get between the two may
	// fetch the owner's old value (1: drop, 2: Get fetches old, 1: owner
	// stores, 2: keeps old hot), and the second drop removes it.
	ring := g.ring.Load()
	g.invalidate(key, peer.String())
	res, err := peer.Store(ctx, g.cfg.Name, key, v)
	g.forwarded(key, ring, peer.String())
	if err != nil {
		return res, fmt.Errorf("cache: set %q at %s: %w", key, peer, err)
	}
	return res, nil
}

// setLocal applies a write of key as its owner: the transport calls it for
// a Store that came from a peer, and Set for keys this node owns. It stores
// v in the main cache, then drops key's copies on every other node
// (PeerPicker.DropCopies). v.Expires, or else the group's TTL, sets its
// expiry; a v with NoStore, or one that has already expired, removes key's
// value instead. A load of key in progress is not cached when it completes,
// so it cannot overwrite v. Errors: ErrBadKey, ErrTooLarge, and ErrNotOwner
// when this node does not own key by its ring, or the ring changed while
// the write was applied and moved key away (nothing is stored then).
//
// A ring change that leaves key here (another node left or joined) voids
// the attempt's store too, since its drops went to the nodes of the ring
// before; the write is then applied again, drops included, under the new
// ring, up to three times, rather than answered "owner changing" for a key
// whose owner did not change.
func (g *Group) setLocal(ctx context.Context, key string, v Value) (WriteResult, error) {
	for attempt := 1; ; attempt++ {
		res, err := g.setOnce(ctx, key, v)
		if !errors.Is(err, errRingMoved) || attempt == 3 {
			return res, err
		}
		if _, remote := g.pick(key); remote || ctx.Err() != nil {
			return res, err
		}
	}
}

// errRingMoved is the error of a write whose store a ring change voided.
var errRingMoved = fmt.Errorf("%w: the ring changed during the write", ErrNotOwner)

// setOnce is one attempt of setLocal.
func (g *Group) setOnce(ctx context.Context, key string, v Value) (WriteResult, error) {
	if err := g.checkSet(key, v); err != nil {
		return WriteResult{}, err
	}
	g.node.writes.Add() // before ownerGuard reads retired (AwaitWrites)
	defer g.node.writes.Done()
	done, err := g.takeTurn(ctx, key)
	if err != nil {
		return WriteResult{}, err
	}
	defer done()
	gd, term, err := g.ownerGuard(key)
	if err != nil {
		return WriteResult{}, err
	}
	// The old value stays until the new one replaces it, so that a Get
	// meanwhile reads one or the other and never loads the origin's; loads
	// in flight are voided (the epoch) and one that begins now cannot store
	// over the write (guard.admits: an entry newer than the load). The write
	// begins before the fence: a read that came between them would load
	// under the fenced epoch, refused the previous owner's value by the
	// fence (takeOverGuard), and store the origin's before the write ends.
	// Every copy goes before the new value is served anywhere: were it
	// stored first, a node could serve its old copy after another had
	// served the new value (a read going back in time).
	g.beginWrite(key)
	defer g.endWrite(key)
	g.fence(key, "")
	g.awaitCopies(ctx, key) // no copy sent before the write lands after its drop
	now := time.Now()
	var res WriteResult
	r, replacing := g.peers.(Replacer)
	if replacing = replacing && g.replicates() && g.storable(v, now); replacing {
		res.Unreached = r.DropCopiesReplaced(ctx, g.cfg.Name, key) // the heirs keep theirs for sendCopy
	} else {
		res.Unreached = g.peers.DropCopies(ctx, g.cfg.Name, key)
	}
	if err := ctx.Err(); err != nil {
		return WriteResult{}, err // not applied: a copy may not have been dropped
	}
	if v.Expires.IsZero() && g.cfg.TTL > 0 {
		v.Expires = now.Add(g.cfg.TTL)
	}
	if !g.storable(v, now) {
		// A removal, as removeLocal's; the hand-off cache too, where a ring
		// change meanwhile may have moved the old value.
		g.main.Remove(key)
		g.handoff.Remove(key)
	} else if !g.main.Add(key, g.mainEntry(key, v, term, now), gd.admits) {
		// Not applied (the ring changed): the old value, wherever the
		// change left it, is still the key's.
		return WriteResult{}, fmt.Errorf("%w of %q", errRingMoved, key)
	} else {
		g.reclaim()
		// Acknowledged once every heir that answers holds it (copies.go).
		// One that takes no copy loses its old one (sendCopy drops it), or,
		// if neither reaches it, is named in Unreached. The value is
		// applied here now, and may be served: its copies go out even if
		// the caller leaves. Were they cut short with the caller's context,
		// an heir that took the copy could be told to drop it (sendCopy
		// saw no answer), and hold neither it nor the value acknowledged
		// before it when this node then crashed.
		g.sendCopy(context.WithoutCancel(ctx), key, replacing)
	}
	if err := g.retiredDuring(key); err != nil {
		return WriteResult{}, err
	}
	return res, nil
}

// retiredDuring returns ErrNotOwner if the node began handing its values
// over (Node.AwaitWrites gave up waiting) while it applied a write of key:
// the values it hands over may have been taken before the write landed,
// and its next owner would then serve the value the write replaced. Not
// acknowledged, the write is one whose outcome the client does not know,
// as after a timeout. The hand-off begins after AwaitWrites, and this check
// comes after the write's last step, so a write that passes it is in what
// the node hands over.
func (g *Group) retiredDuring(key string) error {
	if g.node.handing.Load() {
		return fmt.Errorf("%w: %q: this node began leaving during the write", ErrNotOwner, key)
	}
	return nil
}

// Remove drops key at its owner (this node or a peer), which drops every
// copy on the other nodes before Remove returns, as Set does. It returns
// ErrBadKey for an empty key, and an error when the owner did not apply the
// removal (it was unreachable, or ErrNotOwner).
func (g *Group) Remove(ctx context.Context, key string) (WriteResult, error) {
	if key == "" {
		return WriteResult{}, ErrBadKey
	}
	owner, remote := g.pick(key)
	if !remote {
		return g.removeLocal(ctx, key)
	}
	ring := g.ring.Load()
	g.invalidate(key, owner.String())
	res, err := owner.Remove(ctx, g.cfg.Name, key)
	g.forwarded(key, ring, owner.String())
	if err != nil {
		return res, fmt.Errorf("cache: remove %q at %s: %w", key, owner, err)
	}
	return res, nil
}

// removeLocal applies a removal of key as its owner: the transport calls it
// for a Remove that came from a peer. It drops key here, then on every other
// node (PeerPicker.DropCopies). Errors: ErrBadKey, and ErrNotOwner when this
// node does not own key (nothing is dropped then).
func (g *Group) removeLocal(ctx context.Context, key string) (WriteResult, error) {
	if key == "" {
		return WriteResult{}, ErrBadKey
	}
	g.node.writes.Add() // before ownerGuard reads retired (AwaitWrites)
	defer g.node.writes.Done()
	done, err := g.takeTurn(ctx, key)
	if err != nil {
		return WriteResult{}, err
	}
	defer done()
	if _, _, err := g.ownerGuard(key); err != nil {
		return WriteResult{}, err
	}
	// The value goes here first, unlike setLocal's: reads of key here wait
	// for the write anyway, and a ring change while the copies are dropped
	// would otherwise move the removed value to the hand-off cache, for the
	// key's next owner to take after the removal was acknowledged.
	g.beginWrite(key) // first, as setOnce's
	defer g.endWrite(key)
	g.invalidate(key, "")
	g.awaitCopies(ctx, key)
	res := WriteResult{Unreached: g.peers.DropCopies(ctx, g.cfg.Name, key)}
	if err := ctx.Err(); err != nil {
		return WriteResult{}, err
	}
	g.handoff.Remove(key)
	if err := g.retiredDuring(key); err != nil {
		return WriteResult{}, err
	}
	return res, nil
}

// forwarded is the second drop of a write that this node sent to owner,
// begun under ring. If the ring changed meanwhile, it voids what began
// before it (the epoch) but leaves the main cache's entry: were this node
// to own key now, that entry may be the written value, which the old owner
// handed over (Adopt, pull) after the write.
func (g *Group) forwarded(key string, ring uint64, owner string) {
	if g.ring.Load() == ring {
		g.invalidate(key, owner)
		return
	}
	g.fence(key, owner)
}

// writes are the writes of one key in progress at its owner.
type writes struct {
	n    int
	done chan struct{} // closed when the last ends
}

// takeTurn waits until no other write of key is being applied here, as its
// owner, and returns the function that ends this one's turn; or ctx's
// error if ctx ends first. A group that keeps copies applies the writes of
// one key one at a time, each to the end of its drops and copies: two at
// once would race their drops and copies to the heirs (a DELETE's drop
// landing after the PUT that followed it had sent its copy, say), and an
// heir could be left without the value its owner stored last, which a
// crash of the owner would lose. Without copies the drops only remove
// other nodes' hot copies, in any order, and writes of a key go at once:
// one at a time, concurrent PUTs of one key take about twice as long each
// at copies=2 (1.9-2.2 times, BenchmarkWrites), those of distinct keys no
// longer.
func (g *Group) takeTurn(ctx context.Context, key string) (done func(), err error) {
	if !g.replicates() {
		return func() {}, nil
	}
	for {
		g.turnsMu.Lock()
		busy, ok := g.turns[key]
		if !ok {
			if g.turns == nil {
				g.turns = map[string]chan struct{}{}
			}
			mine := make(chan struct{})
			g.turns[key] = mine
			g.turnsMu.Unlock()
			return func() {
				g.turnsMu.Lock()
				delete(g.turns, key)
				g.turnsMu.Unlock()
				close(mine)
			}, nil
		}
		g.turnsMu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// beginWrite marks key as being written by this node, its owner, until
// endWrite. Meanwhile reads of key here wait for the write (awaitWrite):
// the value the write replaces is not served once the write began, so that
// no node can take a copy of it while the write drops the copies, and no
// caller can join a fetch answered with it after the write is done.
func (g *Group) beginWrite(key string) {
	g.writingMu.Lock()
	if g.writing == nil {
		g.writing = map[string]*writes{}
	}
	w := g.writing[key]
	if w == nil {
		w = &writes{done: make(chan struct{})}
		g.writing[key] = w
	}
	w.n++
	g.writingN.Add(1)
	g.writingMu.Unlock()
}

func (g *Group) endWrite(key string) {
	// A load that overlapped the write may carry what the write replaced:
	// its guard fails, so that it is neither stored nor copied (loadOrigin),
	// and no caller after the write joins it (a stale-while-revalidate
	// refresh can begin after the fence, which forgot the loads before).
	g.epoch(key).Add(1)
	g.loads.forget(key, nil)
	g.fetches.forget(key, nil)
	g.writingMu.Lock()
	w := g.writing[key]
	if w.n--; w.n == 0 {
		delete(g.writing, key)
		close(w.done)
	}
	g.writingN.Add(-1)
	g.writingMu.Unlock()
}

// writeDone returns a channel closed when the writes of key in progress
// here end, or nil if there are none.
func (g *Group) writeDone(key string) <-chan struct{} {
	if g.writingN.Load() == 0 {
		return nil
	}
	g.writingMu.Lock()
	defer g.writingMu.Unlock()
	if w := g.writing[key]; w != nil {
		return w.done
	}
	return nil
}

// beingWritten reports whether key is between beginWrite and endWrite.
func (g *Group) beingWritten(key string) bool { return g.writeDone(key) != nil }

// awaitWrite waits until no write of key is in progress here, beating with
// hb meanwhile (a peer's request must not look hung), or until ctx ends.
// A write takes one round of drops to the other nodes: milliseconds, or
// about PeerTimeout + the copy lease when one of them cannot be reached.
func (g *Group) awaitWrite(ctx context.Context, key string, hb *heartbeat) error {
	done := g.writeDone(key)
	if done == nil {
		return nil
	}
	var tick <-chan time.Time
	if hb != nil {
		hb.beat()
		t := time.NewTicker(hb.interval)
		defer t.Stop()
		tick = t.C
	}
	for done != nil {
		select {
		case <-done:
			done = g.writeDone(key) // a write that began meanwhile
		case <-tick:
			hb.beat()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// dropLocal drops this node's copies of key (main, hot and, unless the
// write replaced the value, an heir's) and nothing else: the transport
// calls it for a Drop that came from the key's owner, from, after a write.
// A load or fetch of key in progress is not cached when it completes, and
// callers that arrive after dropLocal start a new one rather than joining
// it.
func (g *Group) dropLocal(key, from string, replaced bool) {
	g.invalidate(key, from)
	// Only the owner drops an heir's copy: a write through this node
	// invalidates its own caches (Set) but must leave the copy, which the
	// owner replaces with the written value. A PUT leaves it too, for its
	// own copy to replace (see copies.go).
	if !replaced {
		g.copies.Remove(key)
	}
}

// ownerGuard checks that this node owns key and may act as its owner, and
// returns the guard and term a write stores under.
func (g *Group) ownerGuard(key string) (guard, uint64, error) {
	gd := guard{ring: &g.ring, wantRing: g.ring.Load()}
	if _, remote := g.pick(key); remote {
		return gd, 0, fmt.Errorf("%w: %q", ErrNotOwner, key)
	}
	if g.node.retired.Load() {
		return gd, 0, fmt.Errorf("%w: %q: this node is leaving", ErrNotOwner, key)
	}
	term, ok := g.term()
	if !ok {
		return gd, 0, fmt.Errorf("%w: %q: this node's registration may have lapsed", ErrNotOwner, key)
	}
	return gd, term, nil
}

// term returns the node's tenure (Config.Tenure).
func (g *Group) term() (uint64, bool) {
	if g.tenure == nil {
		return 0, true
	}
	return g.tenure()
}

// invalidate bumps key's epoch, forgets its flights and remembered failure
// and drops its entries, in that order (guard says why the order makes a
// racing load harmless). by is the node that applied the write, "" for
// this node (noteWrite).
func (g *Group) invalidate(key, by string) {
	g.fence(key, by)
	g.main.Remove(key)
}

// fence is invalidate but for the main cache's entry, which a write
// replaces rather than drops first.
func (g *Group) fence(key, by string) {
	g.noteWrite(key, by)
	g.everWritten.add(g.keyHash(key))
	g.epoch(key).Add(1)
	g.loads.forget(key, nil)
	g.fetches.forget(key, nil)
	g.failed.forget(key)
	g.hot.Remove(key)
	g.handoff.Remove(key)
}

// noteWrite records that a write of key was applied since the last ring
// change: by this node as key's owner (by is ""), or by the owner by (a
// drop it sent, or a write this node forwarded to it). Writes by two
// owners count as this node's: no hand-over is newer than both.
func (g *Group) noteWrite(key, by string) {
	g.writtenMu.Lock()
	if g.written != nil {
		if prev, ok := g.written[key]; ok && prev != by {
			g.written[key] = ""
		} else if len(g.written) >= maxWritten {
			g.written = nil
		} else {
			g.written[key] = by
		}
	}
	g.writtenMu.Unlock()
}

func (g *Group) epoch(key string) *atomic.Uint64 {
	return &g.epochs[g.keyHash(key)%epochStripes]
}

func (g *Group) keyHash(key string) uint64 { return maphash.String(g.seed, key) }

// maxEverWritten bounds the keys a group remembers exactly as written
// (writtenKeys): 32,768 hashes, 3.1 MiB of heap when full (measured), per
// group, outside MaxBytes.
const maxEverWritten = 1 << 15

// writtenKeys remembers the keys written in the cluster that this node
// heard of: a write it applied or forwarded to the owner, or a drop an
// owner sent after one. Such a key's value at its owner is newer than the
// origin's, so a node that cannot reach the owner does not load it from
// the origin as a fallback copy (ErrOwnerUnreachable): that would serve a
// value older than an acknowledged write. It holds key hashes (a collision
// only refuses a fallback) and never forgets one it cannot hold: a hash
// pushed out of the recent ones marks its epoch stripe, and every key of a
// marked stripe counts as written. It is safe for concurrent use.
type writtenKeys struct {
	recent *glru.Cache[uint64, struct{}]
	spilt  [epochStripes]atomic.Bool
	// any is set by the first add: until then an owner's miss skips the
	// lookup of exact and its lock (loadOrigin).
	any atomic.Bool
}

func newWrittenKeys() *writtenKeys {
	w := &writtenKeys{}
	w.recent, _ = glru.NewWithEvict(maxEverWritten, func(h uint64, _ struct{}) { w.spilt[h%epochStripes].Store(true) })
	return w
}

func (w *writtenKeys) add(h uint64) {
	if !w.any.Load() {
		w.any.Store(true)
	}
	w.recent.Add(h, struct{}{})
}

func (w *writtenKeys) has(h uint64) bool {
	return w.spilt[h%epochStripes].Load() || w.recent.Contains(h)
}

// exact is has without the spilt stripes: only the keys remembered as such.
func (w *writtenKeys) exact(h uint64) bool { return w.recent.Contains(h) }

func (g *Group) checkSet(key string, v Value) error {
	if key == "" {
		return ErrBadKey
	}
	if n := int64(len(v.Data)); n > g.cfg.MaxValueBytes {
		g.st.tooLarge.Add(1)
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, n, g.cfg.MaxValueBytes)
	}
	return nil
}

// PeerView is a group as this node serves it to its peers: reads that never
// ask another node (the one-hop rule) and writes applied here as the key's
// owner. Only a transport needs it, for requests that came from a peer; a
// program uses Group.Get, Set and Remove, which find the key's owner
// themselves. Calling PeerView on keys that did not come from a peer breaks
// no invariant (each write is checked against this node's ring), but it
// skips the owner lookup that keeps one load per key cluster-wide.
type PeerView struct{ g *Group }

// PeerView returns the group's view for a transport.
func (g *Group) PeerView() PeerView { return PeerView{g} }

// Get is Get without asking any peer: if this node does not own key by its
// own ring, a loaded value is kept briefly in the hot cache only. It serves
// from this node's caches, or loads from the origin, sharing the load with
// concurrent Get calls for key on this node. If beat is not nil and the call
// has to wait for a load, beat is called on the caller's goroutine at once
// and then every interval until the load ends: the transport tells the
// requesting peer with it that the owner is alive and loading. from is
// the requesting node's base URL ("" if unknown): a node that asks for a
// key this node's ring says it owns itself has dropped the key (it is
// leaving, or its ring changed first), and this node waits for its own
// ring to follow, for a moment, before it answers. Its errors are
// Group.Get's.
func (p PeerView) Get(ctx context.Context, key, from string, interval time.Duration, beat func()) (Value, error) {
	return p.g.getLocal(ctx, key, from, interval, beat)
}

// GetCached is Get for a key this node's caches answer (Group.GetCached)
// with a value of at most maxBytes: ok is false, and nothing is counted,
// when answering would need a load or the value is larger. It never waits,
// so a transport can answer many keys of one request at once and leave the
// rest to Get.
func (p PeerView) GetCached(key string, maxBytes int) (v Value, ok bool, err error) {
	return p.g.getCached(key, true, maxBytes)
}

// Set applies a write of key as its owner, for a Store that came from a
// peer: it stores v in the main cache, then drops key's copies on every
// other node (PeerPicker.DropCopies). v.Expires, or else the group's TTL,
// sets its expiry; a v with NoStore, or one that has already expired,
// removes key's value instead. Errors: ErrBadKey, ErrTooLarge, and
// ErrNotOwner when this node does not own key by its ring, or the ring
// changed while the write was applied (nothing is stored then).
func (p PeerView) Set(ctx context.Context, key string, v Value) (WriteResult, error) {
	return p.g.setLocal(ctx, key, v)
}

// Remove applies a removal of key as its owner, for a Remove that came from
// a peer: it drops key here, then on every other node. Errors: ErrBadKey,
// and ErrNotOwner when this node does not own key (nothing is dropped then).
func (p PeerView) Remove(ctx context.Context, key string) (WriteResult, error) {
	return p.g.removeLocal(ctx, key)
}

// Drop drops this node's copies of key and nothing else, for a Drop that
// came from the key's owner, from (its base URL, "" if unknown), after a
// write: from's own hand-over of key may be taken after it, another's not.
// replaced says the write was a PUT, whose copy replaces this node's as an
// heir (Replacer): the heir's copy stays until it does.
func (p PeerView) Drop(key, from string, replaced bool) { p.g.dropLocal(key, from, replaced) }
