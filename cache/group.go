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

// epochStripes is how many removal counters a group keeps. A Remove or Set
// of one key bumps the counter of its stripe, and a load in progress for any
// key of that stripe is then not cached (it is still returned): more stripes,
// fewer innocent loads skipped.
const epochStripes = 64

// Group is a named cache with one origin. A Group is safe for concurrent use.
type Group struct {
	cfg   GroupConfig
	peers PeerPicker
	log   *slog.Logger

	main *lru    // keys this node owns
	hot  *lru    // copies of keys owned by peers; stores nothing if cfg.HotBytes < 0
	freq *sketch // miss counts of peer-owned keys; nil without a hot cache

	// loads are origin loads and never call a peer; fetches ask the owning
	// peer. Keeping them apart is what makes the one-hop rule deadlock-free:
	// GetLocal joins only loads, so two nodes that each think the other owns
	// a key cannot end up waiting on each other's fetch.
	loads   flight
	fetches flight

	seed   maphash.Seed
	epochs [epochStripes]atomic.Uint64

	peerWarned atomic.Int64 // Unix nanoseconds of the last failed-fetch log line

	st counters
}

func newGroup(cfg GroupConfig, peers PeerPicker, log *slog.Logger) *Group {
	hotBytes := max(cfg.HotBytes, 0)
	g := &Group{
		cfg:   cfg,
		peers: peers,
		log:   log,
		main:  newLRU(cfg.MaxBytes - hotBytes),
		hot:   newLRU(hotBytes),
		seed:  maphash.MakeSeed(),
	}
	if hotBytes > 0 {
		g.freq = newSketch(cfg.HotWindow)
	}
	onPanic := func(key string, r any, stack []byte) {
		g.log.Error("cache: load panicked", "key", key, "panic", r, "stack", string(stack))
	}
	g.loads.onPanic = onPanic
	g.fetches.onPanic = onPanic
	return g
}

// Name returns the group's name.
func (g *Group) Name() string { return g.cfg.Name }

// Config returns the group's configuration with defaults applied.
func (g *Group) Config() GroupConfig { return g.cfg }

// Get returns key's value: from the main or hot cache, from the owning peer,
// or, if this node owns key, from the origin (once per node for concurrent
// callers).
//
// Each caller returns when its ctx ends; a load or fetch it started goes on,
// detached from ctx and bounded by LoadTimeout, for the other callers and the
// cache. Errors: ErrBadKey for an empty key; an error matching ErrNotFound
// when the origin has no such key; an error matching ErrLoad (and
// context.DeadlineExceeded for a timeout) when the origin failed or
// panicked; ctx.Err() when ctx ended first. Errors are never cached.
//
// If the owner cannot be reached, this node loads the key from the origin
// itself and serves that value from its hot cache for FallbackTTL only.
// A value larger than MaxValueBytes, or marked NoStore, is returned but not
// cached: the origin is the source of truth and refusing a read would turn a
// large value into an outage for its key, while the limit only has to
// protect the cache's memory.
func (g *Group) Get(ctx context.Context, key string) (Value, error) {
	g.st.gets.Add(1)
	if key == "" {
		return g.result(Value{}, ErrBadKey)
	}
	if v, err, ok := g.lookup(key, true); ok {
		return v, err
	}
	if err := ctx.Err(); err != nil {
		return g.result(Value{}, err)
	}
	if peer, remote := g.pick(key); remote {
		return g.result(g.fetch(ctx, key, peer))
	}
	return g.result(g.load(ctx, key))
}

// GetLocal is Get without asking any peer: the transport calls it for a
// request that came from a peer (the one-hop rule). If this node does not
// own key by its own ring, a loaded value is kept briefly in the hot cache
// only.
//
// It serves from the main and hot caches, or loads from the origin, sharing
// the load with concurrent Get and GetLocal calls for key on this node. Its
// errors are Get's.
func (g *Group) GetLocal(ctx context.Context, key string) (Value, error) {
	g.st.gets.Add(1)
	g.st.peerGets.Add(1)
	if key == "" {
		return g.result(Value{}, ErrBadKey)
	}
	if v, err, ok := g.lookup(key, true); ok {
		return v, err
	}
	if err := ctx.Err(); err != nil {
		return g.result(Value{}, err)
	}
	return g.result(g.load(ctx, key))
}

// Set stores v as key's value at key's owner (this node or a peer).
//
// It returns ErrBadKey for an empty key and ErrTooLarge for a value over
// MaxValueBytes before contacting anyone. When a peer owns key, this node
// drops its own copy; hot copies on other nodes are served until they expire
// (HotTTL at most) or until Remove. A v with NoStore removes key's value at
// the owner instead of storing it.
func (g *Group) Set(ctx context.Context, key string, v Value) error {
	if err := g.checkSet(key, v); err != nil {
		return err
	}
	peer, remote := g.pick(key)
	if !remote {
		return g.SetLocal(key, v)
	}
	if err := peer.Store(ctx, g.cfg.Name, key, v); err != nil {
		return fmt.Errorf("cache: set %q at %s: %w", key, peerName(peer), err)
	}
	g.invalidate(key)
	return nil
}

// SetLocal stores v in this node's main cache: the transport calls it for a
// Store that came from a peer.
//
// v.Expires, or else the group's TTL, sets its expiry. A load of key in
// progress is not cached when it completes, so it cannot overwrite v. A v
// with NoStore, or one that has already expired, drops key's value and
// stores nothing. Errors: ErrBadKey, ErrTooLarge.
func (g *Group) SetLocal(key string, v Value) error {
	if err := g.checkSet(key, v); err != nil {
		return err
	}
	g.invalidate(key)
	now := time.Now()
	if v.Expires.IsZero() && g.cfg.TTL > 0 {
		v.Expires = now.Add(g.cfg.TTL)
	}
	g.keep(g.main, key, v, now, nil, 0)
	return nil
}

// Remove drops key from this node and from every peer (the owner's main
// cache and every hot copy).
//
// The owner is invalidated first, then this node and the other peers (in
// parallel), so that no node can refill its hot copy from the owner's old
// value. That includes this node: 1: Remove drops the local copy, 2: Get
// misses, fetches the owner's old value and keeps it hot, 1: the owner drops
// key, Remove returns, and 2's stale copy outlives the Remove. Remove tries
// every peer and returns their errors joined; it returns ErrBadKey for an
// empty key.
func (g *Group) Remove(ctx context.Context, key string) error {
	if key == "" {
		return ErrBadKey
	}
	var errs []error
	owner, remote := g.pick(key)
	if remote {
		if err := owner.Invalidate(ctx, g.cfg.Name, key); err != nil {
			errs = append(errs, fmt.Errorf("cache: remove %q at owner %s: %w", key, peerName(owner), err))
		}
	}
	g.RemoveLocal(key)
	peers := g.peers.Peers()
	perrs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		if remote && samePeer(p, owner) {
			continue
		}
		wg.Go(func() {
			if err := p.Invalidate(ctx, g.cfg.Name, key); err != nil {
				perrs[i] = fmt.Errorf("cache: remove %q at %s: %w", key, peerName(p), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(append(errs, perrs...)...)
}

// RemoveLocal drops key from this node's caches: the transport calls it for
// an Invalidate that came from a peer. A load or fetch of key in progress is
// not cached when it completes, and callers that arrive after RemoveLocal
// start a new one rather than joining it.
func (g *Group) RemoveLocal(key string) {
	g.invalidate(key)
}

// invalidate bumps key's epoch, forgets its flights and drops its entries,
// in that order (see lru.add for why the order makes a racing load harmless).
func (g *Group) invalidate(key string) {
	g.epoch(key).Add(1)
	g.loads.forget(key, nil)
	g.fetches.forget(key, nil)
	g.main.remove(key)
	g.hot.remove(key)
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

func (g *Group) checkSet(key string, v Value) error {
	if key == "" {
		return ErrBadKey
	}
	if n := int64(len(v.Data)); n > g.cfg.MaxValueBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, n, g.cfg.MaxValueBytes)
	}
	return nil
}

// lookup serves key from the main cache, then the hot cache. ok is false on
// a miss. count says whether the hit is a caller's (counted in Stats) or the
// second look inside a flight (not counted).
func (g *Group) lookup(key string, count bool) (v Value, err error, ok bool) {
	e, ok := g.main.get(key)
	hits := &g.st.mainHits
	if !ok {
		if e, ok = g.hot.get(key); !ok {
			return Value{}, nil, false
		}
		hits = &g.st.hotHits
	}
	if e.notFound {
		if count {
			g.st.notFounds.Add(1)
		}
		return Value{}, ErrNotFound, true
	}
	if count {
		hits.Add(1)
	}
	return e.v, nil, true
}

// result counts a Get's outcome and returns it.
func (g *Group) result(v Value, err error) (Value, error) {
	switch {
	case err == nil:
	case errors.Is(err, ErrNotFound):
		g.st.notFounds.Add(1)
	default:
		g.st.errors.Add(1)
	}
	return v, err
}

// await waits for c on ctx and counts a caller that shared another's call.
func (g *Group) await(ctx context.Context, c *call, leader bool) (Value, error) {
	select {
	case <-c.done:
		if !leader {
			g.st.deduped.Add(1)
		}
		return c.val, c.err
	case <-ctx.Done():
		return Value{}, ctx.Err()
	}
}

// load returns key's value from the origin, sharing one load among the
// concurrent callers on this node.
func (g *Group) load(ctx context.Context, key string) (Value, error) {
	c, leader := g.loads.do(ctx, key, func() (Value, error) { return g.loadOrigin(ctx, key) })
	return g.await(ctx, c, leader)
}

// loadOrigin runs on a flight's goroutine: it calls the Getter under
// context.WithoutCancel(ctx) and LoadTimeout, and caches the result in the
// main cache if this node owns key, else in the hot cache for FallbackTTL.
func (g *Group) loadOrigin(ctx context.Context, key string) (Value, error) {
	// Read the epoch before anything else: a Remove from here on makes the
	// result uncacheable.
	guard := g.epoch(key)
	want := guard.Load()
	// Look again: 1: Get misses, 2: Get misses, 1: load, cache, flight ends,
	// 2: starts a flight, finds 1's value here instead of loading again.
	if v, err, ok := g.lookup(key, false); ok {
		return v, err
	}
	_, remote := g.pick(key)
	dest := g.main
	if remote {
		dest = g.hot
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.LoadTimeout)
	defer cancel()
	g.st.localLoads.Add(1)
	v, err := g.cfg.Getter.Get(lctx, key)
	now := time.Now()
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			return Value{}, fmt.Errorf("%w: group %q key %q: %w", ErrLoad, g.cfg.Name, key, err)
		}
		if g.cfg.NotFoundTTL > 0 {
			exp := now.Add(g.cfg.NotFoundTTL)
			if remote {
				exp = earliest(exp, now.Add(g.cfg.FallbackTTL))
			}
			dest.add(key, entry{v: Value{Expires: exp}, size: entrySize(key, Value{}), notFound: true}, guard, want)
		}
		return Value{}, err
	}
	if v.Expires.IsZero() && g.cfg.TTL > 0 {
		v.Expires = now.Add(g.cfg.TTL)
	}
	if remote {
		v.Expires = earliest(v.Expires, now.Add(g.cfg.FallbackTTL))
	}
	g.keep(dest, key, v, now, guard, want)
	return v, nil
}

// fetch returns key's value from its owner, sharing one fetch among the
// concurrent callers on this node. It counts the miss for hot promotion.
func (g *Group) fetch(ctx context.Context, key string, peer Peer) (Value, error) {
	if g.freq != nil {
		g.freq.add(key)
	}
	c, leader := g.fetches.do(ctx, key, func() (Value, error) { return g.fetchPeer(ctx, key, peer) })
	return g.await(ctx, c, leader)
}

// fetchPeer runs on a flight's goroutine: it asks peer, keeps the value in
// the hot cache if the key is popular (the rule is in doc.go), and loads the
// key locally if the peer cannot answer.
func (g *Group) fetchPeer(ctx context.Context, key string, peer Peer) (Value, error) {
	guard := g.epoch(key)
	want := guard.Load()
	if v, err, ok := g.lookup(key, false); ok {
		return v, err
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.LoadTimeout)
	v, err := peer.Fetch(fctx, g.cfg.Name, key)
	cancel()
	switch {
	case err == nil:
		g.st.peerLoads.Add(1)
		if g.freq != nil && g.freq.estimate(key) >= g.cfg.HotAfter {
			now := time.Now()
			hv := v
			hv.Expires = earliest(v.Expires, now.Add(g.cfg.HotTTL))
			if g.keep(g.hot, key, hv, now, guard, want) {
				g.st.hotPromotions.Add(1)
			}
		}
		return v, nil
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrLoad), errors.Is(err, ErrBadKey):
		// The owner answered: its origin has no such key, or failed. Loading
		// here too would only double the load on a failing origin.
		return Value{}, err
	}
	g.st.peerErrors.Add(1)
	// A dead owner fails every fetch for its keys until the ring drops it:
	// one line a second says as much as thousands (Stats counts them all).
	if now, last := time.Now().UnixNano(), g.peerWarned.Load(); now-last >= int64(time.Second) &&
		g.peerWarned.CompareAndSwap(last, now) {
		g.log.Warn("cache: peer fetch failed, loading locally", "key", key, "peer", peerName(peer), "err", err)
	}
	// The fallback shares the node's origin load for key (with GetLocal
	// callers, say); that load never calls a peer, so this cannot cycle. It
	// is bounded by LoadTimeout, and our callers wait on their own contexts,
	// so it may run right here (a ctx without Done).
	ctx = context.WithoutCancel(ctx)
	c, _ := g.loads.do(ctx, key, func() (Value, error) { return g.loadOrigin(ctx, key) })
	<-c.done
	return c.val, c.err
}

// keep stores v in dest unless it is NoStore, too large or already expired,
// and reports whether it did.
func (g *Group) keep(dest *lru, key string, v Value, now time.Time, guard *atomic.Uint64, want uint64) bool {
	if v.NoStore {
		return false
	}
	if int64(len(v.Data)) > g.cfg.MaxValueBytes {
		g.st.tooLarge.Add(1)
		return false
	}
	if !v.Expires.IsZero() && !now.Before(v.Expires) {
		return false
	}
	return dest.add(key, entry{v: v, size: entrySize(key, v)}, guard, want)
}

// earliest returns the earlier of a and b, where zero means never.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// peerName names p for logs and errors.
func peerName(p Peer) string {
	if s, ok := p.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", p)
}

// samePeer reports whether a and b are the same peer. Peers are compared
// with ==, which panics for an uncomparable dynamic type: such peers are
// treated as different (at worst a peer is invalidated twice).
func samePeer(a, b Peer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}
