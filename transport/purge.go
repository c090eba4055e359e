package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// PurgeLog is where a cluster records its purges, so that a node that was
// down, paused or cut off when one was made finds it; *peers.Registry
// implements it with etcd. A Node whose Membership is a PurgeLog uses it.
type PurgeLog interface {
	// RecordPurge records data and returns the log's revision after it
	// and the members (peer URLs) registered at that revision.
	RecordPurge(ctx context.Context, data []byte) (rev int64, members []string, err error)
	// PurgesSince calls each for every purge recorded after revision
	// after, oldest first, and returns the revision the log is complete
	// up to. A purge whose RecordPurge returned before the call is in it.
	PurgesSince(ctx context.Context, after int64, each func(rev int64, data []byte)) (current int64, err error)
}

const (
	purgeRoute  = "_purge"  // POST: apply the purge in the body (JSON cache.Purge)
	purgesRoute = "_purges" // GET ?after=rev: the purges applied since rev, for a node that cannot read the log

	// maxPurgesKept bounds the purges a node remembers (for listing, and
	// for the peers that catch up through it).
	maxPurgesKept = 1024
	// purgeRetention is peers.PurgeRetention: a node that has not read
	// the log for that long cannot know what it missed.
	purgeRetention = 24 * time.Hour
	// staticPurgeWait is how long a purge without a log waits for the
	// peers it cannot reach before it answers; staticPurgeRetry is how
	// long it goes on trying them in the background after that.
	staticPurgeWait  = 10 * time.Second
	staticPurgeRetry = 10 * time.Minute
)

// purges is a node's side of cluster-wide purges: the purges it applied,
// the log it reads them from, and whether it is current (it read the log,
// or a peer that had, within PurgeLease).
type purges struct {
	pool *Pool
	node atomic.Pointer[cache.Node] // set by PeerHandler
	log  atomic.Pointer[purgeLogBox]
	base time.Time // the origin of freshAt's readings (monotonic)
	// freshAt is when (since base, never 0 once set) the last read of the
	// log that this node applied began: every purge recorded before it is
	// applied here.
	freshAt atomic.Int64
	// fresh is current's answer for the caches' lookups, which ask it on
	// every read (cache.Config.Current): kept by a timer rather than a
	// clock read per lookup. It is set when freshAt advances (markFresh)
	// and cleared by the timer once PurgeLease less staleMargin has passed
	// since: a little early, never late.
	fresh      atomic.Bool
	freshMu    sync.Mutex  // serializes markFresh and expire
	freshTimer *time.Timer // guarded by freshMu

	mu      sync.Mutex
	round   map[string]uint8    // how far each purge of applied went here: purgeHeld, purgeDropped (guarded by mu)
	applied []cache.Purge       // oldest first, at most maxPurgesKept (guarded by mu)
	forgot  int64               // the highest Rev dropped from applied (guarded by mu)
	rev     int64               // the log is applied up to rev (guarded by mu)
	counts  map[[2]string]int64 // purges applied, by group and scope (guarded by mu)
	// departed holds the members that left the ring, with the time they
	// left: a purge waits for those that left within PurgeLease too, since
	// a node cut off from the others may serve clients still.
	departed map[string]time.Time // guarded by mu
}

type purgeLogBox struct{ log PurgeLog }

func newPurges(p *Pool) *purges {
	return &purges{pool: p, base: time.Now(), round: map[string]uint8{},
		counts: map[[2]string]int64{}, departed: map[string]time.Time{}}
}

func (ps *purges) since() int64 { return max(int64(time.Since(ps.base)), 1) }

func (ps *purges) purgeLog() PurgeLog {
	if b := ps.log.Load(); b != nil {
		return b.log
	}
	return nil
}

// current reports whether the node may serve from its caches: always
// without a log; with one, while it read the log within PurgeLease.
func (ps *purges) current() bool {
	if ps.log.Load() == nil {
		return true
	}
	f := ps.freshAt.Load()
	return f != 0 && time.Duration(ps.since()-f) < ps.pool.cfg.PurgeLease
}

// currentFast is current for the caches' lookups (cache.Config.Current):
// one atomic load, no clock. It turns false up to staleMargin before
// current does.
func (ps *purges) currentFast() bool { return ps.log.Load() == nil || ps.fresh.Load() }

// staleMargin is how much earlier than PurgeLease currentFast turns false.
func (ps *purges) staleMargin() time.Duration { return ps.pool.cfg.PurgeLease / 16 }

// markFresh advances freshAt to start, a since reading, and sets fresh
// until PurgeLease less staleMargin after it.
func (ps *purges) markFresh(start int64) {
	for {
		old := ps.freshAt.Load()
		if start <= old || ps.freshAt.CompareAndSwap(old, start) {
			break
		}
	}
	ps.expire()
}

// expire sets fresh from freshAt and the clock, and arms the timer for
// when it must turn false.
func (ps *purges) expire() {
	ps.freshMu.Lock()
	defer ps.freshMu.Unlock()
	left := ps.pool.cfg.PurgeLease - ps.staleMargin() - time.Duration(ps.since()-ps.freshAt.Load())
	ps.fresh.Store(left > 0)
	if left <= 0 {
		return
	}
	if ps.freshTimer == nil {
		ps.freshTimer = time.AfterFunc(left, ps.expire)
	} else {
		ps.freshTimer.Reset(left)
	}
}

// How far a purge went on a node (Pool.Purge): cache.Node.HoldPurge, ApplyPurge.
const purgeHeld, purgeDropped = 1, 2

// roundWait is how long after a purge was recorded every node has held it
// or stopped serving from its caches (its purge lease ran out since its
// last read of the log, which began before the record), with a margin for
// clocks that run apart.
func (ps *purges) roundWait() time.Duration {
	lease := ps.pool.cfg.PurgeLease
	return lease + lease/100 + 100*time.Millisecond
}

// hold is p's first round here (cache.Node.HoldPurge), unless this node is
// past it. Should the second round not come (the purge's maker died, or
// cannot reach this one), this node applies it by itself after roundWait,
// unless it forgot p since (maxPurgesKept newer purges): p was recorded
// before this node learnt of it, so by then no node serves a copy from
// before it. Either way the purge holds the group until its maker ends it
// (end), or for a few minutes.
func (ps *purges) hold(p cache.Purge) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.round[p.ID] >= purgeHeld {
		return
	}
	ps.note(p, purgeHeld)
	if node := ps.node.Load(); node != nil {
		node.HoldPurge(p)
	}
	time.AfterFunc(ps.roundWait(), func() {
		ps.mu.Lock()
		held := ps.round[p.ID] == purgeHeld
		ps.mu.Unlock()
		if held {
			ps.apply(p)
		}
	})
}

// apply applies p here, both rounds (cache.Node.ApplyPurge), unless it
// was applied before.
func (ps *purges) apply(p cache.Purge) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.round[p.ID] >= purgeDropped {
		return
	}
	ps.note(p, purgeDropped)
	n := 0
	if node := ps.node.Load(); node != nil {
		n = node.ApplyPurge(p)
	}
	ps.pool.cfg.Logger.Info("transport: purge applied", "scope", p.Scope(), "id", p.ID, "by", p.By, "rev", p.Rev, "dropped", n)
}

// note records that p went to round here: in the list of purges applied
// (and the counts) when it is new. ps.mu is held.
func (ps *purges) note(p cache.Purge, round uint8) {
	if _, ok := ps.round[p.ID]; ok {
		ps.round[p.ID] = round
		return
	}
	ps.round[p.ID] = round
	ps.applied = append(ps.applied, p)
	if len(ps.applied) > maxPurgesKept {
		old := ps.applied[0]
		ps.applied = slices.Delete(ps.applied, 0, 1)
		delete(ps.round, old.ID)
		ps.forgot = max(ps.forgot, old.Rev)
	}
	scope := "group"
	if p.Prefix != "" {
		scope = "prefix"
	}
	ps.counts[[2]string{p.Group, scope}]++
}

// end ends p's purge here (cache.Node.EndPurge).
func (ps *purges) end(p cache.Purge) {
	if node := ps.node.Load(); node != nil {
		node.EndPurge(p)
	}
}

// catchUp applies got, the purges of a read of the log that began at
// start (a since reading) and was complete up to rev. A node that was
// current holds them (the node that made each sends the second round, or
// hold applies it by itself); one that was not serves nothing from its
// caches, and applies them whole before it does again.
func (ps *purges) catchUp(start, rev int64, got []cache.Purge) {
	current := ps.current()
	if f := ps.freshAt.Load(); f != 0 && time.Duration(start-f) > purgeRetention {
		// The log no longer holds everything this node missed.
		ps.pool.cfg.Logger.Warn("transport: purge log unread for longer than it keeps purges; dropping every cached value")
		if node := ps.node.Load(); node != nil {
			for _, g := range node.Groups() {
				p := cache.Purge{ID: "retention", Group: g.Name()}
				node.ApplyPurge(p)
				node.EndPurge(p)
			}
		}
	}
	for _, p := range got {
		// Not ended here: the purge may still be under way elsewhere
		// (the record is written before the purge is sent), and this
		// node must not keep copies from nodes that have not applied it
		// yet. The node that made it ends it, or its hold runs out
		// (a few minutes without new hot copies of the group here).
		if current {
			ps.hold(p)
		} else {
			ps.apply(p)
		}
	}
	ps.mu.Lock()
	ps.rev = max(ps.rev, rev)
	ps.mu.Unlock()
	ps.markFresh(start)
}

// readLog reads the purges recorded since the last read and applies them.
func (ps *purges) readLog(ctx context.Context, log PurgeLog) error {
	start := ps.since()
	ps.mu.Lock()
	after := ps.rev
	ps.mu.Unlock()
	var got []cache.Purge
	rev, err := log.PurgesSince(ctx, after, func(rev int64, data []byte) {
		var p cache.Purge
		if err := json.Unmarshal(data, &p); err != nil || p.ID == "" || p.Group == "" {
			ps.pool.cfg.Logger.Warn("transport: purge record ignored", "rev", rev, "err", err)
			return
		}
		p.Rev = rev
		got = append(got, p)
	})
	if err != nil {
		return err
	}
	ps.catchUp(start, rev, got)
	return nil
}

// purgeReadEvery bounds how often a node reads the purge log: the age of
// its last read when etcd goes out of reach is taken from how long the
// caches may go on serving (PurgeLease), so the log is read often (a read
// of what was recorded since the last one: one small range request).
const purgeReadEvery = 5 * time.Second

// follow reads the log every PurgeLease/4, or purgeReadEvery if sooner,
// until ctx ends; when the log is out of reach, it catches up through a
// peer that read it, every second.
func (ps *purges) follow(ctx context.Context, log PurgeLog) {
	every := min(ps.pool.cfg.PurgeLease/4, purgeReadEvery)
	warned := false
	for {
		rctx, cancel := context.WithTimeout(ctx, every)
		err := ps.readLog(rctx, log)
		cancel()
		wait := every
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait = min(every, time.Second)
			if !ps.fromPeers(ctx) && !warned && !ps.current() {
				warned = true
				ps.pool.cfg.Logger.Warn("transport: purge log out of reach for the purge lease: serving from the origin until it is read again",
					"purge_lease", ps.pool.cfg.PurgeLease, "err", err)
			}
		} else if warned {
			warned = false
			ps.pool.cfg.Logger.Info("transport: purge log read again; serving from the caches")
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// purgesAnswer is a node's answer to GET _purges: the purges it applied
// since the asker's revision, if it can vouch that they are all of them.
type purgesAnswer struct {
	Rev int64 `json:"rev"`
	// Age is how long ago the answering node's last read of the log
	// began, in nanoseconds; -1 if it is not current itself.
	Age    int64         `json:"age"`
	Purges []cache.Purge `json:"purges"`
}

// fromPeers catches up through a peer whose read of the log is more
// recent than this node's: up to three peers, in random order.
func (ps *purges) fromPeers(ctx context.Context) bool {
	var others []*peer
	for _, pe := range ps.pool.state.Load().peers {
		others = append(others, pe)
	}
	rand.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	ps.mu.Lock()
	after := ps.rev
	ps.mu.Unlock()
	for i, pe := range others {
		if i == 3 {
			break
		}
		start := ps.since()
		var ans purgesAnswer
		err := pe.do(ctx, peerRequest{op: "purges", method: http.MethodGet, probe: true,
			path: ps.pool.cfg.BasePath + purgesRoute + "?after=" + strconv.FormatInt(after, 10),
			read: func(res *http.Response) error {
				return json.NewDecoder(io.LimitReader(res.Body, 16<<20)).Decode(&ans)
			}})
		if err != nil || ans.Age < 0 {
			continue
		}
		ps.catchUp(start-ans.Age, ans.Rev, ans.Purges)
		return true
	}
	return false
}

// answer is what this node tells a peer that catches up through it.
func (ps *purges) answer(after int64) purgesAnswer {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ans := purgesAnswer{Rev: ps.rev, Age: -1, Purges: []cache.Purge{}}
	if ps.log.Load() == nil || !ps.current() || after < ps.forgot {
		return ans // no log, or not current itself (current needs a read of the log)
	}
	ans.Age = ps.since() - ps.freshAt.Load()
	for _, p := range ps.applied {
		if p.Rev > after {
			ans.Purges = append(ans.Purges, p)
		}
	}
	return ans
}

// noteMembers records the members that left the ring (Pool.install).
func (ps *purges) noteMembers(old, members []string) {
	now := time.Now()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, m := range old {
		if !slices.Contains(members, m) {
			ps.departed[m] = now
		}
	}
	for m, t := range ps.departed {
		if slices.Contains(members, m) || now.Sub(t) > ps.pool.cfg.PurgeLease {
			delete(ps.departed, m)
		}
	}
}

// recentlyDeparted returns the members that left within PurgeLease.
func (ps *purges) recentlyDeparted() []string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []string
	for m, t := range ps.departed {
		if time.Since(t) <= ps.pool.cfg.PurgeLease {
			out = append(out, m)
		}
	}
	return out
}

// Purge takes p to every node (cache.Purger): with a purge log, it records
// p there first (or fails with cache.ErrPurgeNotRecorded, purging nothing), then
// applies it here and sends it to every member, those registered when it
// was recorded and those that left within PurgeLease included. It returns
// once each has applied it, or, for those that do not answer, once their
// purge lease has surely run out (they serve nothing from their caches
// until they read the log, which holds p): at most PurgeLease after p was
// recorded. Without a log it tries the unreachable members for 10s, names
// them in the result and goes on trying them in the background for 10
// minutes.
//
// A purge has three rounds (cache.Node.HoldPurge, ApplyPurge, EndPurge):
// every node drops what it holds for others and keeps nothing taken from
// another; once every node it could reach did, owners drop their values;
// then the hold ends. Were owners to drop theirs at once, a node not yet
// reached could serve its old copy after the owner served a new value.
func (p *Pool) Purge(ctx context.Context, pg cache.Purge) (cache.PurgeResult, error) {
	ps := p.purges
	if ps.node.Load() == nil {
		return cache.PurgeResult{}, fmt.Errorf("%w: the pool serves no node (PeerHandler)", ErrConfig)
	}
	pg.By = p.cfg.Self
	res := cache.PurgeResult{Confirmed: []string{}, Unconfirmed: []string{}}
	targets := p.Members()
	deadline := time.Now().Add(staticPurgeWait)
	log := ps.purgeLog()
	if log != nil {
		data, err := json.Marshal(pg)
		if err != nil {
			return res, err
		}
		rev, members, err := log.RecordPurge(ctx, data)
		if err != nil {
			return res, fmt.Errorf("%w: %v", cache.ErrPurgeNotRecorded, err)
		}
		// A node that did not see the record stops serving from its caches
		// within roundWait.
		deadline = time.Now().Add(ps.roundWait())
		pg.Rev = rev
		res.Recorded = true
		targets = append(append(targets, members...), ps.recentlyDeparted()...)
	}
	res.Purge = pg
	body, err := json.Marshal(pg)
	if err != nil {
		return res, err
	}
	ps.hold(pg)
	slices.Sort(targets)
	targets = slices.DeleteFunc(slices.Compact(targets), func(u string) bool { return u == p.cfg.Self })
	ok := p.sendPurge(ctx, body, targets, deadline, purgeHoldPhase)
	var confirmed []string
	for i, u := range targets {
		if ok[i] {
			confirmed = append(confirmed, u)
		}
	}
	// A node that held the purge applies it by itself roundWait after it
	// held it, should the second round miss it (purges.hold): the second
	// round waits no longer than that.
	ps.apply(pg)
	ok = p.sendPurge(ctx, body, confirmed, time.Now().Add(ps.roundWait()), "")
	for _, u := range targets {
		if i, found := slices.BinarySearch(confirmed, u); found && ok[i] {
			res.Confirmed = append(res.Confirmed, u)
		} else {
			res.Unconfirmed = append(res.Unconfirmed, u)
		}
	}
	// The third round is not waited for beyond a peer timeout or two: a
	// node it misses ends the purge by itself (cache.Node.EndPurge).
	ps.end(pg)
	p.sendPurge(ctx, body, confirmed, time.Now().Add(2*p.cfg.PeerTimeout), purgeEnd)
	if log == nil && len(res.Unconfirmed) > 0 {
		left := slices.Clone(res.Unconfirmed)
		p.goBackground(func(ctx context.Context) {
			ok := p.sendPurge(ctx, body, left, time.Now().Add(staticPurgeRetry), "")
			var reached []string
			for i, u := range left {
				if ok[i] {
					reached = append(reached, u)
				}
			}
			p.sendPurge(ctx, body, reached, time.Now().Add(2*p.cfg.PeerTimeout), purgeEnd)
		})
	}
	if log != nil && len(res.Unconfirmed) > 0 {
		// The answer is certain only once the unconfirmed nodes' leases
		// ran out: sendPurge returns at the deadline, or when ctx ends.
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("purge recorded and applied by %d nodes; gave up waiting for %d: %w", len(res.Confirmed)+1, len(res.Unconfirmed), err)
		}
	}
	return res, nil
}

// The phases of a purge's rounds (Pool.Purge), as a node sends them: the
// second round's is "" (the whole purge: what a node that missed the first
// applies too).
const (
	purgeHoldPhase = "hold"
	purgeEnd       = "end"
)

// sendPurge sends a purge's round (phase purgeHoldPhase, "" or purgeEnd) to
// each of targets until it is applied there or deadline passes (or ctx
// ends), and reports which applied it.
func (p *Pool) sendPurge(ctx context.Context, body []byte, targets []string, deadline time.Time, phase string) []bool {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	path := p.cfg.BasePath + purgeRoute
	if phase != "" {
		path += "?phase=" + phase
	}
	ok := make([]bool, len(targets))
	var wg sync.WaitGroup
	for i, u := range targets {
		pe := &peer{pool: p, url: u}
		if known, member := p.state.Load().peers[u]; member {
			pe = known
		}
		wg.Go(func() {
			wait := 100 * time.Millisecond
			for {
				err := pe.do(ctx, peerRequest{op: "purge", method: http.MethodPost, probe: true, write: true,
					path: path, body: body})
				if err == nil {
					ok[i] = true
					return
				}
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				wait = min(2*wait, 2*time.Second)
			}
		})
	}
	wg.Wait()
	return ok
}

// servePurge applies a purge sent by the node that took it.
func (h *peerHandler) servePurge(w http.ResponseWriter, r *http.Request) {
	body, err := h.readBody(w, r, 64<<10)
	if err != nil {
		writePeerError(w, err)
		return
	}
	var pg cache.Purge
	if err := json.Unmarshal(body, &pg); err != nil || pg.ID == "" || pg.Group == "" {
		writePeerError(w, fmt.Errorf("%w: bad purge", api.ErrBadRequest))
		return
	}
	switch r.URL.Query().Get("phase") {
	case purgeHoldPhase:
		h.pool.purges.hold(pg)
	case purgeEnd:
		h.pool.purges.end(pg)
	default:
		h.pool.purges.apply(pg)
	}
	w.WriteHeader(http.StatusNoContent)
}

// servePurges answers a node that catches up on purges through this one.
func (h *peerHandler) servePurges(w http.ResponseWriter, r *http.Request) {
	after, err := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	if err != nil {
		writePeerError(w, fmt.Errorf("%w: after: %v", api.ErrBadRequest, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(h.pool.purges.answer(after))
}

var _ cache.Purger = (*Pool)(nil)
