package cache

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/cache/internal/store"
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

	// The byte-bounded stores (store.Store). What an entry's caller
	// fields mean here: Tag is the term the value was stored under (main,
	// handoff), the owner's contact epoch (hot) or the owner's stamp of
	// the copy (copies); Ref is the Leaser a hot copy is served under;
	// Mark marks a fallback copy (hot), loaded here because its owner
	// could not be reached.
	main *store.Store // keys this node owns
	hot  *store.Store // copies of keys owned by peers; stores nothing if cfg.HotBytes < 0
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
	handoff      *store.Store
	handoffMu    sync.Mutex   // serializes ring changes and the window's end
	handoffUntil atomic.Int64 // Unix nanoseconds; 0: no window
	handoffTimer *time.Timer  // guarded by handoffMu
	// written holds the keys written (or dropped) here since the last ring
	// change, each with the owner that applied the write ("" for this node,
	// noteWrite): a value handed over for such a key is taken only from
	// that owner, whose hand-over comes after its writes (takeOverGuard).
	// Past maxWritten keys it gives up, and snap decides instead: the write
	// epochs as they were at the change, so that a key whose stripe moved
	// since counts as written.
	writtenMu sync.Mutex
	written   map[string]string // guarded by writtenMu; nil: overflowed
	// everWritten holds the keys written that this node heard of, across
	// ring changes: no fallback copy of those (writtenKeys).
	everWritten *writtenKeys
	snap        [epochStripes]atomic.Uint64
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
	// turns holds, by key, the write this node applies as the key's owner
	// now: one at a time (takeTurn).
	turnsMu sync.Mutex
	turns   map[string]chan struct{} // guarded by turnsMu

	purges inPurges // the purges in progress (node.go)

	// Copies of values owned by other nodes, for which this node is an
	// heir, and what is needed to keep them (copies.go).
	placer     CopyPlacer // nil: g.peers places no copies
	copies     *store.Store
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
		main:    store.New(cfg.MaxBytes),
		hot:     store.New(hotBytes),
		copies:  store.New(copiesBytes(cfg)),
		handoff: store.New(cfg.MaxBytes),
		seed:    maphash.MakeSeed(),
		gate:    newLoadGate(cfg),
	}
	// One budget: the hot cache's part counts against the main cache's
	// only as far as copies use it (lend).
	if cfg.Copies > 1 {
		store.Pair(g.main, g.copies)
	}
	g.main.Share(g.hot, hotBytes)
	g.main.SetSLRU(cfg.Policy == PolicySLRU)
	g.hot.SetSLRU(cfg.Policy == PolicySLRU)
	if hotBytes > 0 {
		g.freq = newSketch(cfg.HotWindow)
	}
	grace := max(cfg.StaleWhileRevalidate, cfg.StaleIfError)
	g.main.SetStaleGrace(grace)
	g.placer, _ = n.peers.(CopyPlacer)
	g.copySeq.Store(uint64(time.Now().UnixNano()))
	g.handoff.SetStaleGrace(grace)
	g.written = map[string]string{}
	g.everWritten = newWrittenKeys()
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
	g.loads.runners, g.fetches.runners = n.runners, n.runners
	g.loads.idleStop, g.fetches.idleStop = n.idleStop, n.idleStop
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
func (g *Group) getLocal(ctx context.Context, key, from string, interval time.Duration, beat func()) (Value, error) {
	g.st.gets.Add(1)
	g.st.peerGets.Add(1)
	if key == "" {
		g.count(ErrBadKey)
		return Value{}, ErrBadKey
	}
	var hb *heartbeat
	if beat != nil {
		hb = &heartbeat{interval: interval, beat: beat}
	}
	ring := g.ring.Load()
	owner, remote := g.pick(key)
	if remote && from != "" && owner.String() == from && g.awaitRing(ring, ownerMoveWait, hb) {
		// The asker owns key by this node's ring, so its own ring has moved
		// key away from it: it is leaving (and hands its values over), or
		// saw a change first. Neither a load here nor a hot copy may answer
		// for the key's new owner, which may be this node with the written
		// value on its way (Adopt, pull): answer by the ring that follows.
		_, remote = g.pick(key)
	}
	if remote && g.node.retired.Load() {
		// A peer still counts this leaving node the owner: its values went
		// to their next owners, where a write may have replaced them since,
		// so neither they nor a load here may answer. The peer asks again
		// once its ring has dropped this node (fetchPeer).
		err := fmt.Errorf("%w: %q: this node is leaving", ErrNotOwner, key)
		g.count(err)
		return Value{}, err
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
		// meanwhile may have moved key away, with its value, and so may
		// the node's leaving (Node.Retire: it picks by the ring without
		// itself then, with no ring change here): ask the new owner rather
		// than load the origin's value in place of a write. A peer's
		// request (no fetch) is told to ask again (fetchPeer).
		if g.ring.Load() != ring || g.node.retired.Load() {
			if owner, remote = g.pick(key); remote && !fetch {
				return Value{}, fmt.Errorf("%w: %q: the ring changed while a write of it was applied here", ErrNotOwner, key)
			}
		}
	}
	var clk store.Clock
	var e store.Entry
	var stale *store.Entry
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
		time.Now().Before(stale.V.Expires.Add(g.sie(Value(stale.V)))) {
		g.st.staleServed.Add(1)
		return staleValue(stale, time.Now()), nil
	}
	return v, err
}

// answer serves e, which look found for key, when that needs no load: e is
// fresh, or stale within its stale-while-revalidate window (it starts the
// revalidation). done is false when e is too stale. It reads clk only for
// a value that expires.
func (g *Group) answer(key string, e *store.Entry, remote bool, clk *store.Clock) (v Value, err error, done bool) {
	if e.V.Expires.IsZero() {
		v, err = g.hit(e, remote)
		return v, err, true
	}
	now := clk.Now()
	if now.Before(e.V.Expires) {
		v, err = g.hit(e, remote)
		return v, err, true
	}
	if now.Before(e.V.Expires.Add(g.swr(Value(e.V)))) {
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
func staleValue(e *store.Entry, now time.Time) Value {
	v := e.V
	v.Stale = true
	if e.Loaded != 0 {
		v.Age = now.Sub(time.Unix(0, e.Loaded))
	}
	return Value(v)
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

// maxWritten bounds the keys a group remembers as written since the last
// ring change; past it, whole epoch stripes count as written.
const maxWritten = 1 << 16

// maxFruitlessPulls is how many pulls from one previous owner, none of
// which found a value, make the rest of the window stop asking it: it
// holds nothing to hand over (it started with this node, as every node of
// a cluster started or restarted at once does, or lost its cache), and
// each pull would cost a miss a round trip for nothing. An owner that
// handed over one value is asked to the window's end. A warm owner that
// holds a tenth of the keys asked goes unasked only once in about 850
// windows (0.9^64).
const maxFruitlessPulls = 64

// pick returns key's owner, or remote == false if this node owns it. A
// picker that names a nil peer is taken to mean this node, not a crash.
func (g *Group) pick(key string) (owner Peer, remote bool) {
	owner, remote = g.peers.PickPeer(key)
	return owner, remote && owner != nil
}

// look sets *e to key's entry from the main cache if this node owns it
// (remote is false), else from the hot cache, and reports false on a miss
// (*e is then undefined). An entry is found only while what it was stored
// under still holds: the node's tenure for a main entry, the owner's
// contact lease for a hot copy. It may be past its expiry, within its grace
// (stale). It decodes into the caller's entry, as store.Store.GetInto does.
func (g *Group) look(key string, remote bool, clk *store.Clock, e *store.Entry) bool {
	if !g.node.current() {
		return false
	}
	if !remote {
		if !g.main.GetInto(key, clk, e) {
			return false
		}
		term, held := g.term()
		return held && e.Tag == term
	}
	return g.hot.GetInto(key, clk, e) && leaseHolds(e, clk) && g.copyHolds(e, clk)
}

// copyHolds reports whether a hot copy is within its own bound, HotTTL (or
// FallbackTTL for a value loaded here because its owner could not be
// reached) from when it was stored; its Expires is the value's own.
func (g *Group) copyHolds(e *store.Entry, clk *store.Clock) bool {
	return e.Loaded == 0 || clk.Now().UnixNano()-e.Loaded < int64(g.copyBound(e))
}

func (g *Group) copyBound(e *store.Entry) time.Duration {
	if e.Mark {
		return g.cfg.FallbackTTL
	}
	return g.cfg.HotTTL
}

// hit counts a caller's hit of e and returns what it holds.
func (g *Group) hit(e *store.Entry, remote bool) (Value, error) {
	if e.NotFound {
		return Value{}, ErrNotFound // count counts it
	}
	if remote {
		g.st.hotHits.Add(1)
	} else {
		g.st.mainHits.Add(1)
	}
	return Value(e.V), nil
}

// lookup returns key's fresh value as look finds it, without counting: the
// second look inside a flight, and hand-offs. ok is false on a miss and for
// a stale entry.
func (g *Group) lookup(key string, remote bool) (v Value, err error, ok bool) {
	var clk store.Clock
	var e store.Entry
	if !g.look(key, remote, &clk, &e) || !e.V.Expires.IsZero() && !clk.Now().Before(e.V.Expires) {
		return Value{}, nil, false
	}
	if e.NotFound {
		return Value{}, ErrNotFound, true
	}
	return Value(e.V), nil, true
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

// ownerMoveWait bounds how long a fetch that a leaving owner refused waits
// for this node's ring to drop that owner: a membership change reaches
// every ring within milliseconds; past it the fetch falls back to a load.
const ownerMoveWait = time.Second

// mainEntry returns the main-cache entry of v for key, stored at now under
// term.
func (g *Group) mainEntry(key string, v Value, term uint64, now time.Time) store.Entry {
	return store.Entry{V: store.Value(v), Size: entrySize(key, v), Tag: term, Loaded: now.UnixNano()}
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

// Cached reports whether a Get for key would be answered from this node's
// caches as Get looks them up (the main cache for a key this node owns, the
// hot cache for a peer's): a fresh value or remembered not-found, or a stale
// value within its stale-while-revalidate window. Such a Get waits for no
// peer and no origin. Cached counts nothing in Stats and changes no entry.
// The answer can be out of date by the time the caller acts on it (the
// entry may be evicted or expire right after): callers use it to decide how
// to admit a request, not what to serve.
func (g *Group) Cached(key string) bool {
	_, remote := g.pick(key)
	var clk store.Clock
	var e store.Entry
	if !g.look(key, remote, &clk, &e) {
		return false
	}
	return e.V.Expires.IsZero() || clk.Now().Before(e.V.Expires.Add(g.swr(Value(e.V))))
}

// GetCached is Get for a key that this node's caches answer, as Cached
// tells them: ok is true, and v and err are what Get would return (err is
// ErrNotFound for a remembered not-found), counted in Stats as Get counts
// them. For a key they do not answer, ok is false and nothing is counted:
// the caller then calls Get, which loads or asks the owner. So it never
// waits for a peer or the origin, and one lookup serves a hit where Cached
// and then Get take two.
func (g *Group) GetCached(key string) (v Value, ok bool, err error) {
	return g.getCached(key, false, math.MaxInt)
}

// getCached is GetCached for values of up to maxBytes; peer counts the
// answer as a request that came from a peer too (PeerView.GetCached).
func (g *Group) getCached(key string, peer bool, maxBytes int) (v Value, ok bool, err error) {
	if key == "" {
		return Value{}, false, nil
	}
	_, remote := g.pick(key)
	if !remote && g.beingWritten(key) {
		return Value{}, false, nil // the slow path waits for the write
	}
	var clk store.Clock
	var e store.Entry
	if !g.look(key, remote, &clk, &e) {
		return Value{}, false, nil
	}
	if len(e.V.Data) > maxBytes {
		return Value{}, false, nil
	}
	v, err, ok = g.answer(key, &e, remote, &clk)
	if !ok {
		return Value{}, false, nil
	}
	g.st.gets.Add(1)
	if peer {
		g.st.peerGets.Add(1)
	}
	if err != nil {
		g.count(err) // the not-found
	}
	if peer && remote {
		v = copyForPeer(v, e.Loaded, g.copyBound(&e))
	}
	return v, true, err
}
