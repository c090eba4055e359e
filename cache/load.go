package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ringcache/ringcache/cache/internal/store"
)

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
	// before the result is (guard.admits: began). A fetch's guard needs no
	// began: the hot cache's copies carry no time stored.
	gd := g.loadGuard(key)
	for g.beingWritten(key) {
		// A write of key began here before the guard was read, so the
		// guard may hold its fenced epoch until the write ends: what the
		// write leaves is the answer, not the origin's value (nor, since
		// the write refuses it, the previous owner's: takeOverGuard).
		if err := g.awaitWrite(ctx, key, nil); err != nil {
			return Value{}, err
		}
		gd = g.loadGuard(key)
	}
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
	dest, stored := g.main, store.Entry{}
	held := true
	if remote {
		dest, stored.Mark = g.hot, true
		if l, ok := owner.(Leaser); ok {
			stored.Ref = l
			stored.Tag, _ = l.Contact(time.Now())
		}
	} else {
		stored.Tag, held = g.term()
		if doubt := g.ownDoubt(held); doubt != "" && g.everWritten.has(g.keyHash(key)) {
			// The written value may still be this node's to serve once the
			// doubt is settled: the origin's may be older (writtenKeys).
			return Value{}, fmt.Errorf("%w: %q: this node owns it but %s", ErrOwnerUnreachable, key, doubt)
		}
	}
	if pgd, ok := g.takeGuard(gd); !remote && held && ok && g.inHandoff() {
		if v, err, ok := g.takeOver(ctx, key, pgd, stored.Tag); ok {
			return v, err
		}
	}
	if remote && held {
		if v, ok := g.heirsCopy(ctx, key, stored, gd); ok {
			return v, nil
		}
	}
	if !remote && held && g.everWritten.any.Load() && g.everWritten.exact(g.keyHash(key)) {
		if err := g.dropLostWrite(ctx, key, gd); err != nil {
			return Value{}, err
		}
	}
	if remote && g.everWritten.has(g.keyHash(key)) {
		// A fallback copy from the origin would be older than the write.
		return Value{}, fmt.Errorf("%w: %q (owner %s)", ErrOwnerUnreachable, key, owner)
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
			stored.V, stored.Size, stored.NotFound = store.Value{Expires: exp}, store.EntrySize(key, store.Value{}), true
			dest.Add(key, stored, gd.admits)
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
			stored.V, stored.Size, stored.Loaded = store.Value(v), entrySize(key, v), now.UnixNano()
		} else {
			stored = g.mainEntry(key, v, stored.Tag, now)
		}
		if dest.Add(key, stored, gd.admits) {
			if !remote {
				g.copyOut(key)
			}
		} else if !remote {
			if nv, nerr, ok := g.newerThanLoad(ctx, key); ok {
				return nv, nerr
			}
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

// ownDoubt says why this node cannot tell now whether its main cache still
// holds what it should serve, or "" if it can: its registration lapsed and
// its peers have not confirmed it (held is false: Config.Tenure), or it
// may have missed a purge (Config.Current), which would make the origin's
// value right where no purge would leave a write's.
func (g *Group) ownDoubt(held bool) string {
	switch {
	case !held:
		return "cannot yet tell whether its cache still holds (its registration lapsed, and its peers have not confirmed it)"
	case !g.node.current():
		return "cannot tell whether a purge it has not read replaced it (the purge log is out of reach)"
	}
	return ""
}

// takeOver is loadOrigin's hand-off: it takes key's value from its
// previous owner (pull), if that owner holds it, and stores it in the main
// cache under pgd and term. It and heirsCopy are called only when they
// may answer (a hand-off window is open, the owner could not be reached),
// so that a miss pays neither their frames nor their checks.
func (g *Group) takeOver(ctx context.Context, key string, pgd guard, term uint64) (Value, error, bool) {
	v, ok := g.pull(ctx, key)
	if !ok {
		return Value{}, nil, false
	}
	if now := time.Now(); g.storable(v, now) {
		if g.main.Add(key, g.mainEntry(key, v, term, now), pgd.admits) {
			g.copyOut(key)
		} else if nv, nerr, ok := g.newerThanLoad(ctx, key); ok {
			return nv, nerr, true
		}
	}
	if !pgd.holds() {
		v.NoStore = true // as for a load (loadOrigin)
	}
	return v, nil, true
}

// heirsCopy is loadOrigin's answer when key's owner could not be reached:
// an heir of key may hold it (fromHeirs). The copy is kept in the hot
// cache as stored, a fallback copy, under gd.
func (g *Group) heirsCopy(ctx context.Context, key string, stored store.Entry, gd guard) (Value, bool) {
	v, ok := g.fromHeirs(ctx, key)
	if !ok {
		return Value{}, false
	}
	if now := time.Now(); g.storable(v, now) {
		stored.V, stored.Size, stored.Loaded = store.Value(v), entrySize(key, v), now.UnixNano()
		g.hot.Add(key, stored, gd.admits)
		g.reclaim()
	}
	if !gd.holds() {
		v.NoStore = true
	}
	return v, true
}

// newerThanLoad returns what the main cache holds for key, which this node
// owns, after a load's result was not stored there: a write, or a
// hand-over (Adopt) that arrived while the origin was asked, stored a value
// that replaces the load's result, and a read that shared the load returns
// that value rather than the origin's. A write still in progress here is
// waited for first: its fence refused the load the previous owner's value
// (takeOverGuard), so the origin's, older than that value, is no answer
// while the written one is not yet stored (setOnce drops copies first).
func (g *Group) newerThanLoad(ctx context.Context, key string) (Value, error, bool) {
	if err := g.awaitWrite(ctx, key, nil); err != nil {
		return Value{}, err, true
	}
	return g.lookup(key, false)
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
// the hot cache if the key is popular (the rule is in the package doc), and loads the
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
		if remote && next.String() == peer.String() && g.awaitRing(ring, ownerMoveWait, nil) {
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
		errors.Is(err, ErrOverloaded), errors.Is(err, ErrOwnerUnreachable):
		// The owner answered: its origin has no such key, or failed, or is
		// too busy to load it now, or the key's written value cannot be
		// read there now. Loading here too would only add to the load on
		// an origin that is failing or busy, or serve a value older than
		// the write.
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

// awaitRing waits until the group's ring counter is past ring, at most d,
// and reports whether it is. With hb, it beats at once and then every
// hb.interval while it waits, as await does.
func (g *Group) awaitRing(ring uint64, d time.Duration, hb *heartbeat) bool {
	now := time.Now()
	deadline, next := now.Add(d), now
	for g.ring.Load() == ring {
		if now.After(deadline) {
			return false
		}
		if hb != nil && !now.Before(next) {
			hb.beat()
			next = now.Add(hb.interval)
		}
		time.Sleep(5 * time.Millisecond)
		now = time.Now()
	}
	return true
}

// maxFailures bounds how many failed keys a group remembers. Past it, the
// expired ones go first, then arbitrary ones: forgetting a failure early
// only lets one more load through to the origin.
const maxFailures = 4096

// failures remembers the keys whose origin load just failed, with the error,
// so that a failing origin is asked once per key and ErrorTTL rather than on
// every request. A failures is safe for concurrent use.
type failures struct {
	mu   sync.Mutex
	keys map[string]failure // guarded by mu
}

type failure struct {
	err   error
	until time.Time
}

// get returns key's remembered error, if it has not expired by now.
func (f *failures) get(key string, now time.Time) (error, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.keys[key]
	if !ok {
		return nil, false
	}
	if !now.Before(e.until) {
		delete(f.keys, key)
		return nil, false
	}
	return e.err, true
}

// put remembers err for key until until.
func (f *failures) put(key string, err error, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil {
		f.keys = make(map[string]failure)
	}
	if len(f.keys) >= maxFailures {
		now := time.Now()
		for k, e := range f.keys {
			if !now.Before(e.until) {
				delete(f.keys, k)
			}
		}
		for k := range f.keys {
			if len(f.keys) < maxFailures {
				break
			}
			delete(f.keys, k)
		}
	}
	f.keys[key] = failure{err: err, until: until}
}

// forget drops key's remembered error: a write of the key makes the next
// read load again.
func (f *failures) forget(key string) {
	f.mu.Lock()
	delete(f.keys, key)
	f.mu.Unlock()
}

// forgetIf drops the remembered errors of the keys for which match returns
// true (a purge).
func (f *failures) forgetIf(match func(key string) bool) {
	f.mu.Lock()
	for key := range f.keys {
		if match(key) {
			delete(f.keys, key)
		}
	}
	f.mu.Unlock()
}

// dropLostWrite drops the other nodes' copies of key, whose written value
// was this node's and is gone (evicted or expired), before the load that
// began under gd serves the origin's older value here: else a read could
// return the written value after another returned the origin's. It is
// called only for the keys remembered exactly (writtenKeys.exact): the
// stripes would send a drop to every node for most misses of a group
// written a lot. The drop takes a write's turn, and is not sent if a write
// came since the load began: sent while a write of key sends its copies,
// or after, it could leave the heirs nothing of the value just written.
func (g *Group) dropLostWrite(ctx context.Context, key string, gd guard) error {
	done, err := g.takeTurn(ctx, key)
	if err != nil {
		return err
	}
	defer done()
	if gd.holds() {
		g.peers.DropCopies(ctx, g.cfg.Name, key)
	}
	return nil
}
