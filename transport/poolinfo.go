package transport

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/consistenthash"
)

// RingInfo is one consistent view of a Pool's ring for an operator's page:
// every field comes from the same membership.
type RingInfo struct {
	Self    string
	Version uint64
	Members []MemberInfo         // sorted by URL, this node included
	Arcs    []consistenthash.Arc // consistenthash.Map.Arcs
}

// MemberInfo is what a Pool knows of one member.
type MemberInfo struct {
	URL    string
	Self   bool
	Weight int
	Share  float64 // of the hash space
	// Suspected is set while the member's circuit is open: this node
	// could not reach it lately and skips it (see Suspected).
	Suspected bool
	// SeenVersion is the ring version the member last sent with a peer
	// request or response. SeenAt is when it was heard from, at the
	// latest: it may have been heard from since (see Info). SeenAt is zero
	// when nothing has been heard from it. SeenStale is set when this
	// node's ring has changed since that report, which then says nothing
	// about the current ring. For this node: its own version, now.
	SeenVersion uint64
	SeenAt      time.Time
	SeenStale   bool
}

// seenVersion is what was last heard from one peer.
type seenVersion struct {
	theirs atomic.Uint64 // the peer's ring version
	ours   atomic.Uint64 // this node's ring version when it was heard
	at     atomic.Int64  // Unix nanoseconds; see noteVersion
	// looked is set by Info: the next report reads the clock into at.
	looked atomic.Bool
}

// peerVersions holds each member's last reported ring version, by base
// URL. It is touched on every peer request and response, so it is a
// sync.Map of atomics that a request only reads once the peer has an
// entry, until a look (Info, ProbeVersions) asks for a new time.
type peerVersions struct {
	m       sync.Map    // string -> *seenVersion
	probing atomic.Bool // a ProbeVersions is running
}

// noteVersion records header, a peer's X-Ringcache-Ring-Version, as the
// version peer last reported. Only members of st are recorded: a request
// without a secret may claim any name, and the map must stay bounded.
//
// The clock is read only for the first report after a look or a change of
// either version: on this machine kind a clock read costs as much as the
// rest of the bookkeeping, and a page needs the time of a report no more
// precisely than between two of its looks. So at is always the time of a
// real report, never later than the latest one.
func (p *Pool) noteVersion(st *poolState, peer, header string) {
	if header == "" {
		return
	}
	if _, ok := st.peers[peer]; !ok {
		return
	}
	ours := st.ring.Version()
	theirs := ours
	if header != st.versionHeader[0] {
		var err error
		if theirs, err = strconv.ParseUint(header, 16, 64); err != nil {
			return
		}
	}
	e, ok := p.versions.m.Load(peer)
	if !ok {
		e, _ = p.versions.m.LoadOrStore(peer, new(seenVersion))
	}
	s := e.(*seenVersion)
	stamp := s.at.Load() == 0 || s.looked.Load()
	if s.theirs.Load() != theirs {
		s.theirs.Store(theirs)
		stamp = true
	}
	if s.ours.Load() != ours {
		s.ours.Store(ours)
		stamp = true
	}
	if stamp {
		// 1: a look sets looked, 2: a report stores at, 1: the look reads
		// the old at: the look errs on the old side, which only makes the
		// page ask the peer again.
		s.at.Store(p.now().UnixNano())
		s.looked.Store(false)
	}
}

// look returns what was last heard from member m and asks the next report
// for a fresh time.
func (p *Pool) look(m string, current uint64) (mi MemberInfo, ok bool) {
	e, ok := p.versions.m.Load(m)
	if !ok {
		return MemberInfo{}, false
	}
	s := e.(*seenVersion)
	if !s.looked.Load() {
		s.looked.Store(true)
	}
	mi.SeenVersion, mi.SeenAt = s.theirs.Load(), time.Unix(0, s.at.Load())
	mi.SeenStale = s.ours.Load() != current
	return mi, true
}

// Info returns the ring, its arcs and each member's share, weight, last
// reported version and whether it is suspected. Entries of peers that have
// left the ring are dropped here.
func (p *Pool) Info() RingInfo {
	st := p.state.Load()
	now := p.now()
	suspected := p.Suspected()
	shares := st.ring.Shares()
	info := RingInfo{Self: p.cfg.Self, Version: st.ring.Version(), Arcs: st.ring.Arcs()}
	for _, m := range st.members {
		mi := MemberInfo{URL: m, Self: m == p.cfg.Self, Weight: ringWeight(st.ring, m), Share: shares[m]}
		if mi.Self {
			mi.SeenVersion, mi.SeenAt = info.Version, now
		} else {
			mi.Suspected = slices.Contains(suspected, m)
			if seen, ok := p.look(m, info.Version); ok {
				mi.SeenVersion, mi.SeenAt, mi.SeenStale = seen.SeenVersion, seen.SeenAt, seen.SeenStale
			}
		}
		info.Members = append(info.Members, mi)
	}
	p.versions.m.Range(func(k, _ any) bool {
		if _, ok := st.peers[k.(string)]; !ok {
			p.versions.m.Delete(k)
		}
		return true
	})
	return info
}

// Locate returns key's owner, where key falls on the circle (its place
// among Info's Arcs) and the version of the ring that says so.
func (p *Pool) Locate(key string) (owner string, hash uint32, version uint64) {
	st := p.state.Load()
	return st.ring.Get(key), st.ring.KeyHash(key), st.ring.Version()
}

// ProbeVersions asks every peer that has not been heard from within fresh,
// or not since this node's ring last changed, for its ring version, so that a status page can tell whether the nodes
// agree on an idle cluster too. A probe is a signed GET of the base path
// itself, which the peer route answers with its version and an error
// status before it looks at any group; it goes around the peer clients, so
// it moves no metric and no circuit. Suspected peers are skipped. It
// returns when every probe has answered or failed, within ctx and
// Config.PeerTimeout. A call while another runs returns at once: however
// many pages poll, a peer has at most one probe in flight from this node.
func (p *Pool) ProbeVersions(ctx context.Context, fresh time.Duration) {
	if !p.versions.probing.CompareAndSwap(false, true) {
		return
	}
	defer p.versions.probing.Store(false)
	st := p.state.Load()
	now := p.now()
	suspected := p.Suspected()
	var wg sync.WaitGroup
	for _, m := range st.members {
		pe, ok := st.peers[m]
		if !ok || slices.Contains(suspected, m) {
			continue
		}
		if seen, ok := p.look(m, st.ring.Version()); ok && !seen.SeenStale && now.Sub(seen.SeenAt) < fresh {
			continue
		}
		wg.Go(func() { p.probeVersion(ctx, st, pe) })
	}
	wg.Wait()
}

func (p *Pool) probeVersion(ctx context.Context, st *poolState, pe *peer) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PeerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pe.url+p.cfg.BasePath, nil)
	if err != nil {
		return
	}
	req.Header[hdrPeer] = p.selfHeader
	req.Header[hdrRingVersion] = st.versionHeader
	p.auth.sign(req, pe.url, nil, p.now())
	res, err := p.client.Do(req)
	if err != nil {
		return // the page shows how long ago the peer was last heard from
	}
	// Drain the short error body so that the connection is reused.
	io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
	res.Body.Close()
	p.noteVersion(p.state.Load(), pe.url, res.Header.Get(hdrRingVersion))
}

// Agreement sums up Info's members: how many reported this node's ring
// version within fresh of now, how many reported another one, and how many
// have not been heard from within fresh or since this node's ring changed.
// This node counts as agreeing.
func (r RingInfo) Agreement(now time.Time, fresh time.Duration) (agree, differ, unknown int) {
	for _, m := range r.Members {
		switch {
		case m.SeenAt.IsZero() || m.SeenStale || now.Sub(m.SeenAt) > fresh:
			unknown++
		case m.SeenVersion == r.Version:
			agree++
		default:
			differ++
		}
	}
	return agree, differ, unknown
}

// ringWeight returns a member's weight: a ring of explicit arcs has none
// (every member takes an equal share), so 1 for its members.
func ringWeight(r ring, m string) int {
	if w, ok := r.(interface{ Weight(string) int }); ok {
		return w.Weight(m)
	}
	if slices.Contains(r.Nodes(), m) {
		return 1
	}
	return 0
}

// Suspected returns the base URLs of the members whose circuit breaker is
// open (they could not be dialled or fell silent, and have not answered a
// probe since), sorted.
func (p *Pool) Suspected() []string {
	var out []string
	for _, pe := range p.state.Load().peers {
		if pe.suspect.Load() {
			out = append(out, pe.url)
		}
	}
	slices.Sort(out)
	return out
}

// Members returns the base URLs of the ring's members, this node included,
// sorted.
func (p *Pool) Members() []string {
	return slices.Clone(p.state.Load().members)
}

// Owner returns the base URL of the member that owns key.
func (p *Pool) Owner(key string) string {
	return p.state.Load().ring.Get(key)
}

// Version returns the ring's version (consistenthash.Map.Version), sent to
// peers in the X-Ringcache-Ring-Version header.
func (p *Pool) Version() uint64 {
	return p.state.Load().ring.Version()
}

// Shares returns each member's share of the hash space, summing to 1.
func (p *Pool) Shares() map[string]float64 {
	return p.state.Load().ring.Shares()
}

// Purges returns the purges this node applied, oldest first (at most the
// last 1,024), for status pages.
func (p *Pool) Purges() []cache.Purge {
	p.purges.mu.Lock()
	defer p.purges.mu.Unlock()
	return slices.Clone(p.purges.applied)
}

// PurgeCounts returns how many purges this node applied, by group and
// scope ("group" or "prefix"), for metrics.
func (p *Pool) PurgeCounts() map[[2]string]int64 {
	p.purges.mu.Lock()
	defer p.purges.mu.Unlock()
	out := make(map[[2]string]int64, len(p.purges.counts))
	for k, v := range p.purges.counts {
		out[k] = v
	}
	return out
}

// PurgesCurrent reports whether this node serves from its caches: false
// while it may have missed a purge (see Config.PurgeLease).
func (p *Pool) PurgesCurrent() bool { return p.purges.currentFast() }

// Config returns the pool's configuration with defaults applied.
func (p *Pool) Config() Config { return p.cfg }

// Peers returns every member but this node. The slice is the caller's.
func (p *Pool) Peers() []cache.Peer {
	return slices.Clone(p.state.Load().others)
}

// SetRanges replaces the membership with the peers that are positions' keys
// plus this node, on a ring of explicit arcs (consistenthash.Ranges): each
// member owns the arcs that start at its positions. Every node that receives
// the same positions builds the same ring, as consistenthash.RangesFrom
// builds it, with Config.Hash placing the keys (Replicas is not used). A
// member without positions, this node included when positions does not name
// it, owns nothing but stays a member. A URL given in two spellings holds
// the positions of both. It returns ErrBadPeer for a bad URL and an error
// wrapping consistenthash.ErrTooManyPoints for an oversized list; on error
// the membership is unchanged. It satisfies peers.RangesSetter.
func (p *Pool) SetRanges(positions map[string][]uint32) error {
	byURL := map[string][]uint32{p.cfg.Self: nil}
	for s, pos := range positions {
		u, err := normalizePeer(s)
		if err != nil {
			return err
		}
		byURL[u] = append(byURL[u], pos...)
	}
	ring, err := consistenthash.RangesFrom(0, p.cfg.Hash, byURL)
	if err != nil {
		return fmt.Errorf("transport: build ring: %w", err)
	}
	p.install(ring, slices.Sorted(maps.Keys(byURL)))
	return nil
}

// Arcs returns the arcs each member owns on a ring of explicit arcs
// (SetRanges), by base URL, or nil when the ring is hashed. A member that
// owns nothing has no entry.
func (p *Pool) Arcs() map[string][]consistenthash.Arc {
	r, ok := p.state.Load().ring.(*consistenthash.Ranges)
	if !ok {
		return nil
	}
	out := make(map[string][]consistenthash.Arc)
	for _, n := range r.Nodes() {
		out[n] = r.NodeArcs(n)
	}
	return out
}
