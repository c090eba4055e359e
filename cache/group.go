package cache

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// epochStripes is how many write counters a group keeps. A write of one key
// bumps the counter of its stripe, and a load in progress for any key of
// that stripe is then not cached (it is still returned): more stripes, fewer
// innocent loads skipped. 1,024 make that one load in a thousand concurrent
// with a write, for 8 KiB per group.
const epochStripes = 1024

// Group is a named cache with one origin. A Group is safe for concurrent use.
type Group struct {
	cfg   GroupConfig
	peers PeerPicker
	log   *slog.Logger

	main *lru // keys this node owns
	hot  *lru // copies of keys owned by peers; stores nothing if cfg.HotBytes < 0
	// lendMu serializes changes of the hot cache's bound, which is its own
	// part plus the room the main cache leaves free (lend, reclaim).
	lendMu sync.Mutex
	freq   *sketch // miss counts of peer-owned keys; nil without a hot cache

	// loads are origin loads and never call a peer; fetches ask the owning
	// peer. Keeping them apart is what makes the one-hop rule deadlock-free:
	// getLocal joins only loads, so two nodes that each think the other owns
	// a key cannot end up waiting on each other's fetch.
	loads   flight
	fetches flight

	seed   maphash.Seed
	epochs [epochStripes]atomic.Uint64
	// ring counts the ring changes this group has seen; a load that began
	// under another ring is not stored (see Node.ringChanged).
	ring atomic.Uint64
	// tenure is the Node's Config.Tenure, or nil.
	tenure func() (uint64, bool)
	node   *Node

	// handoff holds, for HandoffWindow after a ring change, the main-cache
	// entries of keys this node no longer owns, for their new owners to
	// take. Its bytes come out of the main cache's budget.
	handoff      *lru
	handoffMu    sync.Mutex   // serializes ring changes and the window's end
	handoffUntil atomic.Int64 // Unix nanoseconds; 0: no window
	handoffTimer *time.Timer  // guarded by handoffMu
	// written holds the keys written (or dropped) here since the last ring
	// change: no value from before the change may be taken over for them.
	// Past maxWritten keys it gives up, and snap decides instead: the write
	// epochs as they were at the change, so that a key whose stripe moved
	// since counts as written.
	writtenMu sync.Mutex
	written   map[string]struct{} // guarded by writtenMu; nil: overflowed
	snap      [epochStripes]atomic.Uint64
	// pulls counts, by previous owner (a Peer), what this window's pulls
	// from it found (*pullCount, replaced at each ring change).
	pulls sync.Map

	failed failures  // origin loads that just failed
	gate   *loadGate // bounds concurrent origin loads; nil: no bound

	// writing holds, by key, the writes this node applies as the key's
	// owner that have not stored their value yet (beginWrite).
	writingN  atomic.Int32
	writingMu sync.Mutex
	writing   map[string]*writes // guarded by writingMu

	purges inPurges // the purges in progress (purge.go)

	// Copies of values owned by other nodes, for which this node is an
	// heir, and what is needed to keep them (copies.go).
	placer     CopyPlacer // nil: g.peers places no copies
	copies     *lru
	copyMu     sync.Mutex           // serializes KeepCopy
	copyStamps map[string]copyStamp // guarded by copyMu
	copySeq    atomic.Uint64
	copying    map[string]*copying // guarded by writingMu

	peerWarned atomic.Int64 // Unix nanoseconds of the last failed-fetch log line
	shedWarned atomic.Int64 // Unix nanoseconds of the last shed-load log line

	st counters
}

func newGroup(cfg GroupConfig, n *Node, log *slog.Logger) *Group {
	hotBytes := max(cfg.HotBytes, 0)
	g := &Group{
		cfg:     cfg,
		peers:   n.peers,
		tenure:  n.tenure,
		node:    n,
		log:     log,
		main:    newLRU(cfg.MaxBytes - copiesPart(cfg)),
		hot:     newLRU(hotBytes),
		copies:  newLRU(copiesPart(cfg)),
		handoff: newLRU(cfg.MaxBytes),
		seed:    maphash.MakeSeed(),
		gate:    newLoadGate(cfg),
	}
	// One budget: the hot cache's part counts against the main cache's
	// only as far as copies use it (lend).
	g.main.share, g.main.sharePart = g.hot, hotBytes
	g.main.slru = cfg.Policy == PolicySLRU
	g.hot.slru = g.main.slru
	if hotBytes > 0 {
		g.freq = newSketch(cfg.HotWindow)
	}
	g.main.staleGrace = max(cfg.StaleWhileRevalidate, cfg.StaleIfError)
	g.placer, _ = n.peers.(CopyPlacer)
	g.copySeq.Store(uint64(time.Now().UnixNano()))
	g.handoff.staleGrace = g.main.staleGrace
	g.written = map[string]struct{}{}
	onPanic := func(key string, r any, stack []byte) {
		g.log.Error("cache: load panicked", "key", key, "panic", r, "stack", string(stack))
	}
	g.loads.onPanic = func(key string, r any, stack []byte) {
		onPanic(key, r, stack)
		// A Getter that panics on a key fails like any other failure, and
		// is remembered like one.
		if cfg.ErrorTTL > 0 {
			g.failed.put(key, fmt.Errorf("%w: group %q key %q: panic: %v", ErrLoad, cfg.Name, key, r), time.Now().Add(cfg.ErrorTTL))
		}
	}
	g.fetches.onPanic = onPanic
	g.loads.running, g.fetches.running = &n.loads, &n.loads
	return g
}

// Name returns the group's name.
func (g *Group) Name() string { return g.cfg.Name }

// Config returns the group's configuration with defaults applied.
func (g *Group) Config() GroupConfig { return g.cfg }

// Get returns key's value: from the main cache if this node owns key, else
// from the hot cache or the owning peer; on a miss at the owner, from the
// origin, once per key for the whole cluster (non-owners wait for the
// owner's load as long as the owner shows it is alive).
//
// Each caller returns when its ctx ends; a load or fetch it started goes on,
// detached from ctx and bounded by LoadTimeout, for the other callers and the
// cache. Errors: ErrBadKey for an empty key; an error matching ErrNotFound
// when the origin has no such key; an error matching ErrLoad (and
// context.DeadlineExceeded for a timeout, ErrTooLarge for a value over
// MaxValueBytes) when the origin failed or panicked; ctx.Err() when ctx
// ended first. A failed load is remembered for ErrorTTL.
//
// If the owner cannot be reached, this node loads the key from the origin
// itself and serves that value from its hot cache for FallbackTTL, or until
// the owner is in contact again, whichever comes first.
func (g *Group) Get(ctx context.Context, key string) (Value, error) {
	g.st.gets.Add(1)
	if key == "" {
		g.count(ErrBadKey)
		return Value{}, ErrBadKey
	}
	owner, remote := g.pick(key)
	v, err := g.serve(ctx, key, owner, remote, true, nil)
	if err != nil {
		g.count(err)
	}
	return v, err
}

// getLocal is Get without asking any peer: the transport calls it for a
// request that came from a peer (the one-hop rule). If this node does not
// own key by its own ring, a loaded value is kept briefly in the hot cache
// only.
//
// It serves from this node's caches, or loads from the origin, sharing the
// load with concurrent Get and getLocal calls for key on this node. If beat
// is not nil and the call has to wait for a load, beat is called on the
// caller's goroutine at once and then every interval until the load ends:
// the transport tells the requesting peer with it that the owner is alive
// and loading. Its errors are Get's.
func (g *Group) getLocal(ctx context.Context, key string, interval time.Duration, beat func()) (Value, error) {
	g.st.gets.Add(1)
	g.st.peerGets.Add(1)
	if key == "" {
		g.count(ErrBadKey)
		return Value{}, ErrBadKey
	}
	_, remote := g.pick(key)
	if remote && g.node.retired.Load() {
		// A peer still counts this leaving node the owner: its values went
		// to their next owners, where a write may have replaced them since,
		// so neither they nor a load here may answer. The peer asks again
		// once its ring has dropped this node (fetchPeer).
		err := fmt.Errorf("%w: %q: this node is leaving", ErrNotOwner, key)
		g.count(err)
		return Value{}, err
	}
	var hb *heartbeat
	if beat != nil {
		hb = &heartbeat{interval: interval, beat: beat}
	}
	v, err := g.serve(ctx, key, nil, remote, false, hb)
	if err != nil {
		g.count(err)
	}
	if remote && err == nil {
		v = copyForPeer(v, time.Now().UnixNano(), g.cfg.FallbackTTL)
	}
	return v, err
}

// copyForPeer is v, a copy this node holds of a key it does not own,
// stored at loaded (Unix nanoseconds) and served for bound from then, as
// it goes to a peer: a copy the peer keeps of it must not outlive this
// node's, so its Expires is the earlier of the value's own and the copy's
// bound. (Clients are told the value's own expiry, whichever copy serves.)
func copyForPeer(v Value, loaded int64, bound time.Duration) Value {
	v.Expires = earliest(v.Expires, time.Unix(0, loaded).Add(bound))
	return v
}

// serve is Get and getLocal after the key's owner is known: owner is nil
// for getLocal, which loads rather than asks the owner (fetch is false). A
// value past its expiry is served within its stale windows: within
// stale-while-revalidate at once, while one background load refreshes it;
// within stale-if-error only when the load fails.
func (g *Group) serve(ctx context.Context, key string, owner Peer, remote, fetch bool, hb *heartbeat) (Value, error) {
	if !remote {
		ring := g.ring.Load()
		if err := g.awaitWrite(ctx, key, hb); err != nil {
			return Value{}, err
		}
		// A write can take a second (a node it waited for); a ring change
		// meanwhile may have moved key away, with its value: ask the new
		// owner rather than load the origin's value in place of a write.
		// A peer's request (no fetch) is told to ask again (fetchPeer).
		if g.ring.Load() != ring {
			if owner, remote = g.pick(key); remote && !fetch {
				return Value{}, fmt.Errorf("%w: %q: the ring changed while a write of it was applied here", ErrNotOwner, key)
			}
		}
	}
	var clk clock
	var e entry
	var stale *entry
	if g.look(key, remote, &clk, &e) {
		if v, err, done := g.answer(key, &e, remote, &clk); done {
			return v, err
		}
		stale = &e
	}
	if err := ctx.Err(); err != nil {
		return Value{}, err
	}
	var v Value
	var err error
	if remote && owner != nil {
		v, err = g.fetch(ctx, key, owner)
	} else {
		v, err = g.load(ctx, key, hb)
	}
	if err != nil && stale != nil && ctx.Err() == nil && !errors.Is(err, ErrNotFound) &&
		time.Now().Before(stale.v.Expires.Add(g.sie(stale.v))) {
		g.st.staleServed.Add(1)
		return staleValue(stale, time.Now()), nil
	}
	return v, err
}

// answer serves e, which look found for key, when that needs no load: e is
// fresh, or stale within its stale-while-revalidate window (it starts the
// revalidation). done is false when e is too stale. It reads clk only for
// a value that expires.
func (g *Group) answer(key string, e *entry, remote bool, clk *clock) (v Value, err error, done bool) {
	if e.v.Expires.IsZero() {
		v, err = g.hit(e, remote)
		return v, err, true
	}
	now := clk.now()
	if now.Before(e.v.Expires) {
		v, err = g.hit(e, remote)
		return v, err, true
	}
	if now.Before(e.v.Expires.Add(g.swr(e.v))) {
		g.revalidate(key)
		g.st.staleServed.Add(1)
		return staleValue(e, now), nil, true
	}
	return Value{}, nil, false
}

// swr and sie return a value's stale windows: its own, else the group's.
func (g *Group) swr(v Value) time.Duration {
	if v.StaleWhileRevalidate > 0 {
		return v.StaleWhileRevalidate
	}
	return g.cfg.StaleWhileRevalidate
}

func (g *Group) sie(v Value) time.Duration {
	if v.StaleIfError > 0 {
		return v.StaleIfError
	}
	return g.cfg.StaleIfError
}

// staleValue returns e's value marked stale, with its age at now.
func staleValue(e *entry, now time.Time) Value {
	v := e.v
	v.Stale = true
	if e.loaded != 0 {
		v.Age = now.Sub(time.Unix(0, e.loaded))
	}
	return v
}

// revalidate starts a background load of key unless one runs: the caller
// has been served a stale value and does not wait for it.
func (g *Group) revalidate(key string) {
	// A ctx that can end makes the flight run the load on its own
	// goroutine; the load itself runs detached from it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g.loads.do(ctx, key, func() (Value, error) { return g.loadOrigin(ctx, key) })
}

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
	g.invalidate(key)
	res, err := peer.Store(ctx, g.cfg.Name, key, v)
	g.forwarded(key, ring)
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
// the write was applied (nothing is stored then).
func (g *Group) setLocal(ctx context.Context, key string, v Value) (WriteResult, error) {
	if err := g.checkSet(key, v); err != nil {
		return WriteResult{}, err
	}
	gd, term, err := g.ownerGuard(key)
	if err != nil {
		return WriteResult{}, err
	}
	// The old value stays until the new one replaces it, so that a Get
	// meanwhile reads one or the other and never loads the origin's; loads
	// in flight are voided (the epoch) and one that begins now cannot store
	// over the write (lru.add: an entry newer than the load).
	g.fence(key)
	// Every copy goes before the new value is served anywhere: were it
	// stored first, a node could serve its old copy after another had
	// served the new value (a read going back in time).
	g.beginWrite(key)
	defer g.endWrite(key)
	g.awaitCopies(ctx, key) // no copy sent before the write lands after its drop
	res := WriteResult{Unreached: g.peers.DropCopies(ctx, g.cfg.Name, key)}
	if err := ctx.Err(); err != nil {
		return WriteResult{}, err // not applied: a copy may not have been dropped
	}
	now := time.Now()
	if v.Expires.IsZero() && g.cfg.TTL > 0 {
		v.Expires = now.Add(g.cfg.TTL)
	}
	if !g.storable(v, now) {
		// A removal, as removeLocal's; the hand-off cache too, where a ring
		// change meanwhile may have moved the old value.
		g.main.remove(key)
		g.handoff.remove(key)
	} else if !g.main.add(key, g.mainEntry(key, v, term, now), gd) {
		// Not applied (the ring changed): the old value, wherever the
		// change left it, is still the key's.
		return WriteResult{}, fmt.Errorf("%w: the ring changed during the write of %q", ErrNotOwner, key)
	} else {
		g.reclaim()
		// Acknowledged once every heir that answers holds it (copies.go).
		// One that takes no copy now lost its old one with the drop, or,
		// if the drop did not reach it either, is named in Unreached.
		g.sendCopy(ctx, key)
	}
	if err := g.retiredDuring(key); err != nil {
		return WriteResult{}, err
	}
	return res, nil
}

// retiredDuring returns ErrNotOwner if the node retired (Node.Retire) while
// it applied a write of key that began before: the values it hands over
// may have been taken before the write landed, and its next owner would
// then serve the value the write replaced. Not acknowledged, the write is
// one whose outcome the client does not know, as after a timeout. Retire
// comes before the hand-off, and this check after the write's last step,
// so a write that passes it is in what the node hands over.
func (g *Group) retiredDuring(key string) error {
	if g.node.retired.Load() {
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
	g.invalidate(key)
	res, err := owner.Remove(ctx, g.cfg.Name, key)
	g.forwarded(key, ring)
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
	if _, _, err := g.ownerGuard(key); err != nil {
		return WriteResult{}, err
	}
	// The value goes here first, unlike setLocal's: reads of key here wait
	// for the write anyway, and a ring change while the copies are dropped
	// would otherwise move the removed value to the hand-off cache, for the
	// key's next owner to take after the removal was acknowledged.
	g.invalidate(key)
	g.beginWrite(key)
	defer g.endWrite(key)
	g.awaitCopies(ctx, key)
	res := WriteResult{Unreached: g.peers.DropCopies(ctx, g.cfg.Name, key)}
	if err := ctx.Err(); err != nil {
		return WriteResult{}, err
	}
	g.handoff.remove(key)
	if err := g.retiredDuring(key); err != nil {
		return WriteResult{}, err
	}
	return res, nil
}

// forwarded is the second drop of a write that this node sent to key's
// owner, begun under ring. If the ring changed meanwhile, the drop voids
// what began before it (the epoch) but records no write here: this node
// applied none, and were it to own key now, a recorded write would make it
// refuse the written value that the old owner hands over (Adopt, pull) and
// load the origin's in its place. So the stripe's epoch moves with its
// snapshot, unless the written set has overflowed and the stripes are all
// that records the writes here.
func (g *Group) forwarded(key string, ring uint64) {
	if g.ring.Load() == ring {
		g.invalidate(key)
		return
	}
	i := maphash.String(g.seed, key) % epochStripes
	g.writtenMu.Lock()
	e := g.epochs[i].Add(1)
	if g.written != nil {
		g.snap[i].Store(e)
	}
	g.writtenMu.Unlock()
	g.loads.forget(key, nil)
	g.fetches.forget(key, nil)
	g.failed.forget(key)
	g.hot.remove(key)
	g.handoff.remove(key)
}

// writes are the writes of one key in progress at its owner.
type writes struct {
	n    int
	done chan struct{} // closed when the last ends
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

// dropLocal drops this node's copies of key (main, hot and an heir's) and nothing
// else: the transport calls it for a Drop that came from the key's owner
// after a write. A load or fetch of key in progress is not cached when it
// completes, and callers that arrive after dropLocal start a new one rather
// than joining it.
func (g *Group) dropLocal(key string) {
	g.invalidate(key)
	// Only the owner drops an heir's copy: a write through this node
	// invalidates its own caches (Set) but must leave the copy, which the
	// owner replaces with the written value.
	g.copies.remove(key)
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
// and drops its entries, in that order (see lru.add for why the order makes
// a racing load harmless).
func (g *Group) invalidate(key string) {
	g.fence(key)
	g.main.remove(key)
}

// fence is invalidate but for the main cache's entry, which a write
// replaces rather than drops first.
func (g *Group) fence(key string) {
	g.noteWrite(key)
	g.epoch(key).Add(1)
	g.loads.forget(key, nil)
	g.fetches.forget(key, nil)
	g.failed.forget(key)
	g.hot.remove(key)
	g.handoff.remove(key)
}

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
	g.written = map[string]struct{}{}
	g.writtenMu.Unlock()
	remote := func(key string) bool { _, r := g.pick(key); return r }
	moved := g.main.takeIf(remote)
	// A hot copy is served under its owner's contact lease: once another
	// node owns the key, writes go there, and the old owner's lease says
	// nothing of them. So copies of keys that moved between two other nodes
	// go too, with those of keys this node now owns.
	prev, _ := g.peers.(Handoffer)
	g.hot.removeIf(func(key string) bool {
		if !remote(key) {
			return true
		}
		if prev != nil {
			_, movedAway := prev.PreviousOwner(key)
			return movedAway
		}
		return false
	})
	g.handoff.removeIf(func(key string) bool { return !remote(key) })
	term, current := g.term()
	g.settleCopies(guard{ring: &g.ring, wantRing: g.ring.Load()}, term, current)
	window := g.node.handoff
	if window <= 0 || g.node.closed.Load() {
		return
	}
	for _, m := range moved {
		if !m.e.notFound {
			g.handoff.add(m.key, m.e, guard{})
		}
	}
	held, _ := g.handoff.usage()
	held += g.handoff.deadBytes()
	g.main.setMax(g.mainMax() - held)
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
	g.handoff.clear()
	g.main.setMax(g.mainMax()) // more room: lent at the next copy
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

// unwrittenSinceRingChange reports whether no write of key's stripe has
// been applied here since the last ring change, so that a value from before
// the change may still be taken over for it.
func (g *Group) unwrittenSinceRingChange(key string) bool {
	g.writtenMu.Lock()
	defer g.writtenMu.Unlock()
	if g.written != nil {
		_, w := g.written[key]
		return !w
	}
	i := maphash.String(g.seed, key) % epochStripes
	return g.epochs[i].Load() == g.snap[i].Load()
}

// maxWritten bounds the keys a group remembers as written since the last
// ring change; past it, whole epoch stripes count as written.
const maxWritten = 1 << 16

// noteWrite records that key was written or dropped here.
func (g *Group) noteWrite(key string) {
	g.writtenMu.Lock()
	if g.written != nil {
		if len(g.written) >= maxWritten {
			g.written = nil
		} else {
			g.written[key] = struct{}{}
		}
	}
	g.writtenMu.Unlock()
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
	e, ok := g.handoff.get(key, new(clock))
	if !ok || e.notFound {
		return Value{}, false
	}
	g.st.handoffsGiven.Add(1)
	return e.v, true
}

// Adopt stores v for key, handed over by the node that owned key before it
// left, unless this node holds a value of key already or key was written
// here since the last ring change (a write wins over any hand-off). The
// transport calls it after checking that this node is key's next owner.
// It reports whether v was stored.
//
// A ring change while v is stored voids the store (its guard), as it voids
// a load; then, if this node still owns key by the new ring, Adopt tries
// again under it, since no one else will offer v again. A hand-off that
// raced this node's own ring change (a joiner told of itself last) would
// otherwise be lost, and the key loaded from the origin.
func (g *Group) Adopt(key string, v Value) bool {
	for {
		if key == "" || !g.unwrittenSinceRingChange(key) || g.purges.active() {
			return false
		}
		term, ok := g.term()
		if !ok || !g.storable(v, time.Now()) {
			return false
		}
		i := maphash.String(g.seed, key) % epochStripes
		ring := g.ring.Load()
		gd := guard{epoch: &g.epochs[i], wantEpoch: g.snap[i].Load(), ring: &g.ring, wantRing: ring}
		if g.main.addIfAbsent(key, g.mainEntry(key, v, term, time.Now()), gd) {
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

// Newest returns up to n of the main cache's values, most recently used
// first, for a node that hands its values over before it leaves.
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
func values(l *lru, n int) []KeyValue {
	es := l.newest(n)
	out := make([]KeyValue, 0, len(es))
	for _, e := range es {
		if !e.e.notFound {
			out = append(out, KeyValue{Key: e.key, Value: e.e.v})
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
// of a ring change and if key was not written here since: a key that moved
// to this node costs its previous owner a lookup instead of the origin a
// load. It runs on key's load flight, so there is one hand-off fetch per
// key.
func (g *Group) pull(ctx context.Context, key string) (Value, bool) {
	if !g.inHandoff() || !g.unwrittenSinceRingChange(key) {
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

// maxFruitlessPulls is how many pulls from one previous owner, none of
// which found a value, make the rest of the window stop asking it: it
// holds nothing to hand over (it started with this node, as every node of
// a cluster started or restarted at once does, or lost its cache), and
// each pull would cost a miss a round trip for nothing. An owner that
// handed over one value is asked to the window's end. A warm owner that
// holds a tenth of the keys asked goes unasked only once in about 850
// windows (0.9^64).
const maxFruitlessPulls = 64

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

// pick returns key's owner, or remote == false if this node owns it. A
// picker that names a nil peer is taken to mean this node, not a crash.
func (g *Group) pick(key string) (owner Peer, remote bool) {
	owner, remote = g.peers.PickPeer(key)
	return owner, remote && owner != nil
}

func (g *Group) epoch(key string) *atomic.Uint64 {
	return &g.epochs[maphash.String(g.seed, key)%epochStripes]
}

// loadGuard returns the guard of a load or fetch of key beginning now.
func (g *Group) loadGuard(key string) guard {
	e := g.epoch(key)
	return guard{epoch: e, wantEpoch: e.Load(), ring: &g.ring, wantRing: g.ring.Load()}
}

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

// look sets *e to key's entry from the main cache if this node owns it
// (remote is false), else from the hot cache, and reports false on a miss
// (*e is then undefined). An entry is found only while what it was stored
// under still holds: the node's tenure for a main entry, the owner's
// contact lease for a hot copy. It may be past its expiry, within its grace
// (stale). It decodes into the caller's entry, as lru.getInto does.
func (g *Group) look(key string, remote bool, clk *clock, e *entry) bool {
	if !g.node.current() {
		return false
	}
	if !remote {
		if !g.main.getInto(key, clk, e) {
			return false
		}
		term, held := g.term()
		return held && e.stamp == term
	}
	return g.hot.getInto(key, clk, e) && leaseHolds(e, clk) && g.copyHolds(e, clk)
}

// copyHolds reports whether a hot copy is within its own bound, HotTTL (or
// FallbackTTL for a value loaded here because its owner could not be
// reached) from when it was stored; its Expires is the value's own.
func (g *Group) copyHolds(e *entry, clk *clock) bool {
	return e.loaded == 0 || clk.now().UnixNano()-e.loaded < int64(g.copyBound(e))
}

func (g *Group) copyBound(e *entry) time.Duration {
	if e.fallback {
		return g.cfg.FallbackTTL
	}
	return g.cfg.HotTTL
}

// hit counts a caller's hit of e and returns what it holds.
func (g *Group) hit(e *entry, remote bool) (Value, error) {
	if e.notFound {
		return Value{}, ErrNotFound // count counts it
	}
	if remote {
		g.st.hotHits.Add(1)
	} else {
		g.st.mainHits.Add(1)
	}
	return e.v, nil
}

// lookup returns key's fresh value as look finds it, without counting: the
// second look inside a flight, and hand-offs. ok is false on a miss and for
// a stale entry.
func (g *Group) lookup(key string, remote bool) (v Value, err error, ok bool) {
	var clk clock
	var e entry
	if !g.look(key, remote, &clk, &e) || !e.v.Expires.IsZero() && !clk.now().Before(e.v.Expires) {
		return Value{}, nil, false
	}
	if e.notFound {
		return Value{}, ErrNotFound, true
	}
	return e.v, nil, true
}

// count counts a Get's failure, err (nil counts nothing).
func (g *Group) count(err error) {
	switch {
	case err == nil:
	case errors.Is(err, ErrNotFound):
		g.st.notFounds.Add(1)
	case errors.Is(err, ErrTooLarge):
		// Counted as TooLarge where it was refused, not as a failure.
	default:
		g.st.errors.Add(1)
	}
}

// heartbeat is getLocal's beat: called while a caller waits for a load.
type heartbeat struct {
	interval time.Duration
	beat     func()
}

// await waits for c on ctx and counts a caller that shared another's call.
// With hb, it beats at once and then every hb.interval while it waits.
func (g *Group) await(ctx context.Context, c *call, leader bool, hb *heartbeat) (Value, error) {
	var tick <-chan time.Time
	if hb != nil {
		select {
		case <-c.done:
		default:
			hb.beat()
			t := time.NewTicker(hb.interval)
			defer t.Stop()
			tick = t.C
		}
	}
	for {
		select {
		case <-c.done:
			if !leader {
				g.st.deduped.Add(1)
			}
			return c.val, c.err
		case <-tick:
			hb.beat()
		case <-ctx.Done():
			return Value{}, ctx.Err()
		}
	}
}

// load returns key's value from the origin, sharing one load among the
// concurrent callers on this node. A failure remembered within ErrorTTL is
// returned without a load.
func (g *Group) load(ctx context.Context, key string, hb *heartbeat) (Value, error) {
	if err, ok := g.failed.get(key, time.Now()); ok {
		return Value{}, err
	}
	c, leader := g.loads.do(ctx, key, func() (Value, error) { return g.loadOrigin(ctx, key) })
	return g.await(ctx, c, leader, hb)
}

// loadOrigin runs on a flight's goroutine: it calls the Getter under
// context.WithoutCancel(ctx) and LoadTimeout, and caches the result in the
// main cache if this node owns key, else in the hot cache as a fallback
// copy for FallbackTTL.
func (g *Group) loadOrigin(ctx context.Context, key string) (Value, error) {
	// Read the guard before anything else: a write or a ring change from
	// here on makes the result uncacheable, and so does a write stored
	// before the result is (lru.add: began). A fetch's guard needs no
	// began: the hot cache's copies carry no time stored.
	gd := g.loadGuard(key)
	gd.began = time.Now().UnixNano()
	owner, remote := g.pick(key)
	// Look again: 1: Get misses, 2: Get misses, 1: load, cache, flight ends,
	// 2: starts a flight, finds 1's value here instead of loading again.
	if v, err, ok := g.lookup(key, remote); ok {
		return v, err
	}
	if err, ok := g.failed.get(key, time.Now()); ok {
		return Value{}, err
	}
	// Where the result goes, decided now: the main cache under this node's
	// term, or a fallback copy under the owner's contact epoch as it is
	// now, so that the copy dies once the owner is in contact again.
	dest, stored := g.main, entry{}
	held := true
	if remote {
		dest, stored.fallback = g.hot, true
		if l, ok := owner.(Leaser); ok {
			stored.src = l
			stored.stamp, _ = l.Contact(time.Now())
		}
	} else {
		stored.stamp, held = g.term()
	}
	if pgd, ok := g.takeGuard(gd); !remote && held && ok {
		if v, ok := g.pull(ctx, key); ok {
			now := time.Now()
			if g.storable(v, now) {
				stored = g.mainEntry(key, v, stored.stamp, now)
				if dest.add(key, stored, pgd) {
					g.copyOut(key)
				}
			}
			if !pgd.holds() {
				v.NoStore = true // as for a load, below
			}
			return v, nil
		}
	}
	if remote && held {
		// The owner could not be reached: an heir of key may hold it.
		if v, ok := g.fromHeirs(ctx, key); ok {
			now := time.Now()
			if g.storable(v, now) {
				stored.v, stored.size, stored.loaded = v, entrySize(key, v), now.UnixNano()
				dest.add(key, stored, gd)
				g.reclaim()
			}
			if !gd.holds() {
				v.NoStore = true
			}
			return v, nil
		}
	}
	// The slot is taken after every way to answer without the origin: a
	// shed load costs the origin nothing. The wait is the load's, not a
	// caller's: one caller leaving does not shed it for the others.
	release, err := g.gate.acquire(context.WithoutCancel(ctx), g.cfg.Name, CallerOf(ctx))
	if err != nil {
		// Shedding comes in bursts: one line a second (Stats counts all).
		if now, last := time.Now().UnixNano(), g.shedWarned.Load(); now-last >= int64(time.Second) &&
			g.shedWarned.CompareAndSwap(last, now) {
			running, waiting := g.gate.usage()
			g.log.Warn("cache: origin load shed", "group", g.cfg.Name, "key", key, "running", running, "waiting", waiting,
				"shed_total", g.gate.shed.Load(), "err", err)
		}
		return Value{}, err
	}
	defer release()
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.LoadTimeout)
	defer cancel()
	g.st.localLoads.Add(1)
	v, err := g.cfg.Getter.Get(lctx, key)
	now := time.Now()
	if err == nil && int64(len(v.Data)) > g.cfg.MaxValueBytes {
		g.st.tooLarge.Add(1)
		err = fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(v.Data), g.cfg.MaxValueBytes)
	}
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			if errors.Is(err, ErrTooLarge) && int64(len(v.Data)) <= g.cfg.MaxValueBytes {
				g.st.tooLarge.Add(1) // the origin refused it itself (it reads no more than the limit)
			}
			err = fmt.Errorf("%w: group %q key %q: %w", ErrLoad, g.cfg.Name, key, err)
			if g.cfg.ErrorTTL > 0 && gd.holds() {
				g.failed.put(key, err, now.Add(g.cfg.ErrorTTL))
			}
			return Value{}, err
		}
		if g.cfg.NotFoundTTL > 0 && held {
			exp := now.Add(g.cfg.NotFoundTTL)
			if remote {
				exp = earliest(exp, now.Add(g.cfg.FallbackTTL))
			}
			stored.v, stored.size, stored.notFound = Value{Expires: exp}, entrySize(key, Value{}), true
			dest.add(key, stored, gd)
			g.reclaim()
		}
		return Value{}, err
	}
	if v.Expires.IsZero() && g.cfg.TTL > 0 {
		v.Expires = now.Add(g.cfg.TTL)
	}
	if held && g.storable(v, now) {
		if remote {
			// Served for FallbackTTL at most (look), with the value's own
			// expiry, which is what clients are told.
			stored.v, stored.size, stored.loaded = v, entrySize(key, v), now.UnixNano()
		} else {
			stored = g.mainEntry(key, v, stored.stamp, now)
		}
		if dest.add(key, stored, gd) && !remote {
			g.copyOut(key)
		}
		g.reclaim()
	}
	if !gd.holds() {
		// A write (its fence or its end) or a ring change overlapped the
		// load: its value may be older than what the node serves now, so
		// nobody may keep a copy. (Reads at the owner wait for a write in
		// progress, awaitWrite, so no load starts there during one.)
		v.NoStore = true
	}
	return v, nil
}

// fetch returns key's value from its owner, sharing one fetch among the
// concurrent callers on this node. It counts the miss for hot promotion.
func (g *Group) fetch(ctx context.Context, key string, peer Peer) (Value, error) {
	if g.freq != nil {
		g.freq.add(key)
	}
	c, leader := g.fetches.do(ctx, key, func() (Value, error) { return g.fetchPeer(ctx, key, peer) })
	return g.await(ctx, c, leader, nil)
}

// fetchPeer runs on a flight's goroutine: it asks peer, keeps the value in
// the hot cache if the key is popular (the rule is in doc.go), and loads the
// key locally if the peer cannot answer.
func (g *Group) fetchPeer(ctx context.Context, key string, peer Peer) (Value, error) {
	ring := g.ring.Load()
	gd, keep := g.takeGuard(g.loadGuard(key))
	if v, err, ok := g.lookup(key, true); ok {
		return v, err
	}
	// The owner's load may take up to LoadTimeout; the peer client ends the
	// fetch much sooner if the owner stops showing that it is alive.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.LoadTimeout+time.Second)
	var v Value
	var err error
	leased := true
	if fl, ok := peer.(FetchLeaser); ok {
		v, leased, err = fl.FetchLeased(fctx, g.cfg.Name, key)
	} else {
		v, err = peer.Fetch(fctx, g.cfg.Name, key)
	}
	cancel()
	switch {
	case err == nil:
		g.st.peerLoads.Add(1)
		if keep && leased {
			g.keepHot(key, v, peer, gd)
		}
		return v, nil
	case errors.Is(err, ErrNotOwner):
		// The peer does not own key by its own ring (it is leaving): ask
		// whoever owns it by this node's ring, once that has changed too
		// (it may have before this fetch began). A load here would serve
		// the origin's value in place of a write.
		next, remote := g.pick(key)
		if remote && next.String() == peer.String() && g.awaitRing(ring, ownerMoveWait) {
			next, remote = g.pick(key)
		}
		switch {
		case !remote:
			c, _ := g.loads.do(context.WithoutCancel(ctx), key, func() (Value, error) { return g.loadOrigin(context.WithoutCancel(ctx), key) })
			<-c.done
			return c.val, c.err
		case next.String() != peer.String():
			return g.fetchPeer(ctx, key, next)
		}
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrLoad), errors.Is(err, ErrBadKey),
		errors.Is(err, ErrOverloaded):
		// The owner answered: its origin has no such key, or failed, or is
		// too busy to load it now. Loading here too would only add to the
		// load on an origin that is failing or busy.
		return Value{}, err
	}
	g.st.peerErrors.Add(1)
	// A dead owner fails every fetch for its keys until the ring drops it:
	// one line a second says as much as thousands (Stats counts them all).
	if now, last := time.Now().UnixNano(), g.peerWarned.Load(); now-last >= int64(time.Second) &&
		g.peerWarned.CompareAndSwap(last, now) {
		g.log.Warn("cache: peer fetch failed, loading locally", "key", key, "peer", peer.String(), "err", err)
	}
	// The fallback shares the node's origin load for key (with getLocal
	// callers, say); that load never calls a peer, so this cannot cycle. It
	// is bounded by LoadTimeout, and our callers wait on their own contexts,
	// so it may run right here (a ctx without Done).
	if err, ok := g.failed.get(key, time.Now()); ok {
		return Value{}, err
	}
	ctx = context.WithoutCancel(ctx)
	c, _ := g.loads.do(ctx, key, func() (Value, error) { return g.loadOrigin(ctx, key) })
	<-c.done
	return c.val, c.err
}

// ownerMoveWait bounds how long a fetch that a leaving owner refused waits
// for this node's ring to drop that owner: a membership change reaches
// every ring within milliseconds; past it the fetch falls back to a load.
const ownerMoveWait = time.Second

// awaitRing waits until the group's ring counter is past ring, at most d,
// and reports whether it is.
func (g *Group) awaitRing(ring uint64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for g.ring.Load() == ring {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// keepHot keeps v, just fetched from peer, in the hot cache if the rule in
// doc.go admits it: while the hot cache has room for it without evicting
// another copy, always; once it is full, only if key is popular (at least
// HotAfter recent misses), since the copy then displaces the least recently
// used one.
func (g *Group) keepHot(key string, v Value, peer Peer, gd guard) {
	if g.freq == nil {
		return // no hot cache
	}
	now := time.Now()
	hv := v
	// The epoch is read after the fetch, which renewed the lease: a write
	// at the owner after it answered either reaches this node (and fails
	// gd) or revokes the lease (and moves the epoch). The copy keeps the
	// value's own expiry, which clients are told; it is served for HotTTL
	// from loaded at most (look).
	e := entry{v: hv, size: entrySize(key, hv), loaded: now.UnixNano()}
	g.lendMu.Lock()
	defer g.lendMu.Unlock()
	g.lend()
	// A copy that displaces nothing (no other copy, no owned key) is kept;
	// one that would is kept only if its key is popular.
	if (!g.hot.fits(key, e.size) || g.main.unused() < e.size) && g.freq.estimate(key) < g.cfg.HotAfter {
		return
	}
	if l, ok := peer.(Leaser); ok {
		e.src = l
		e.stamp, _ = l.Contact(now)
	}
	if g.storable(hv, now) && g.hot.add(key, e, gd) {
		g.st.hotPromotions.Add(1)
		g.main.trim() // a copy within the hot cache's part takes the room of owned keys
	}
}

// lend bounds the hot cache by its own part (HotBytes) plus the room the
// main cache leaves free. Main and hot share one budget, MaxBytes: the
// main cache may use all that copies do not (its bound counts the hot
// cache's bytes up to HotBytes, lru.lent), a popular copy may take room
// from owned keys up to HotBytes, and copies may use more while owned
// keys leave it free, until those need it. So a node with no peers, or
// with few copies, spends its whole budget on its own keys, and main and
// hot together stay within MaxBytes. It evicts the least recently used
// copies when the bound shrinks. With lendMu held.
func (g *Group) lend() {
	g.hot.setMax(max(g.cfg.HotBytes, 0) + g.main.room())
}

// reclaim takes back, after the main cache grew or its bound shrank, the
// room lent to the hot cache that the main cache now holds, evicting
// copies. Between the two, main and hot may exceed MaxBytes by the entries
// just added. It always takes lendMu: a copy whose bound was set from the
// room before this growth is then stored before reclaim recomputes it, or
// after, under the new bound; a flag that skipped the lock while nothing
// was lent would miss the copy that was lending at that moment. It runs
// where the main cache grows (a load, a write, an adoption), never on a
// hit.
func (g *Group) reclaim() {
	if g.freq == nil {
		return // no hot cache
	}
	g.lendMu.Lock()
	g.lend()
	g.lendMu.Unlock()
}

// mainEntry returns the main-cache entry of v for key, stored at now under
// term.
func (g *Group) mainEntry(key string, v Value, term uint64, now time.Time) entry {
	return entry{v: v, size: entrySize(key, v), stamp: term, loaded: now.UnixNano()}
}

// storable reports whether v may be cached at now: not NoStore, not too
// large, not expired.
func (g *Group) storable(v Value, now time.Time) bool {
	if v.NoStore {
		return false
	}
	if int64(len(v.Data)) > g.cfg.MaxValueBytes {
		g.st.tooLarge.Add(1)
		return false
	}
	return v.Expires.IsZero() || now.Before(v.Expires)
}

// earliest returns the earlier of a and b, where zero means never.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
