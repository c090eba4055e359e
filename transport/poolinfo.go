package transport

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/consistenthash"
)

// RingInfo is one consistent view of a Pool's ring for an operator's page:
// every field comes from the same membership.
type RingInfo struct {
	Self    string
	Version uint64
	// Since is when this node started routing with Version, as far as it
	// can tell: the first peer request or Info call that saw it. A version
	// a member reported before then says nothing about the current ring.
	Since   time.Time
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
	// request or response, and SeenAt when; SeenAt is zero when nothing
	// has been heard from it. For this node: its own version, now.
	SeenVersion uint64
	SeenAt      time.Time
}

// seenVersion is the ring version last heard from one peer.
type seenVersion struct {
	version atomic.Uint64
	at      atomic.Int64 // Unix nanoseconds
}

// peerVersions holds each member's last reported ring version, by base URL,
// and when this node's own ring version was first seen. It is written on
// every peer request and response, so it is a sync.Map of atomics that a
// request only loads once the peer has an entry.
type peerVersions struct {
	m    sync.Map // string -> *seenVersion
	ours atomic.Pointer[ringSince]
}

// ringSince is this node's ring version and when it was first seen.
type ringSince struct {
	version uint64
	since   int64 // Unix nanoseconds
}

// since returns when st's ring version was first seen, which is now if
// this is the first time.
func (v *peerVersions) since(st *poolState, now int64) int64 {
	for {
		cur := v.ours.Load()
		if cur != nil && cur.version == st.ring.Version() {
			return cur.since
		}
		// Two callers racing on a new version: one CAS wins and the other
		// rereads its value, so both return the same time.
		if v.ours.CompareAndSwap(cur, &ringSince{version: st.ring.Version(), since: now}) {
			return now
		}
	}
}

// seenGranularity is how stale SeenAt may be: refreshing it at most this
// often keeps every request from writing to a shared cache line.
const seenGranularity = 100 * time.Millisecond

// noteVersion records header, a peer's X-Ringcache-Ring-Version, as the
// version peer last reported. Only members of st are recorded: a request
// without a secret may claim any name, and the map must stay bounded.
func (p *Pool) noteVersion(st *poolState, peer, header string) {
	if header == "" {
		return
	}
	if _, ok := st.peers[peer]; !ok {
		return
	}
	v := st.ring.Version()
	if header != st.versionHeader[0] {
		var err error
		if v, err = strconv.ParseUint(header, 16, 64); err != nil {
			return
		}
	}
	e, ok := p.versions.m.Load(peer)
	if !ok {
		e, _ = p.versions.m.LoadOrStore(peer, new(seenVersion))
	}
	s := e.(*seenVersion)
	now := p.now().UnixNano()
	// A report that lands before the first sight of our own ring's version
	// would look stale: note the version first.
	since := p.versions.since(st, now)
	if s.version.Load() != v {
		s.version.Store(v)
		s.at.Store(now)
		return
	}
	if at := s.at.Load(); now-at >= int64(seenGranularity) || at < since {
		s.at.Store(now)
	}
}

// Info returns the ring, its arcs and each member's share, weight, last
// reported version and whether it is suspected. Entries of peers that have
// left the ring are dropped here.
func (p *Pool) Info() RingInfo {
	st := p.state.Load()
	now := p.now()
	shares := st.ring.Shares()
	info := RingInfo{Self: p.cfg.Self, Version: st.ring.Version(), Arcs: st.ring.Arcs(),
		Since: time.Unix(0, p.versions.since(st, now.UnixNano()))}
	for _, m := range st.members {
		mi := MemberInfo{URL: m, Self: m == p.cfg.Self, Weight: st.ring.Weight(m), Share: shares[m]}
		if mi.Self {
			mi.SeenVersion, mi.SeenAt = info.Version, now
		} else {
			mi.Suspected = st.peers[m].suspected(now)
			if e, ok := p.versions.m.Load(m); ok {
				s := e.(*seenVersion)
				mi.SeenVersion, mi.SeenAt = s.version.Load(), time.Unix(0, s.at.Load())
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

// Suspected returns the base URLs of the peers whose circuit is open: a
// dial to them failed lately, and requests skip them until it is retried.
func (p *Pool) Suspected() []string {
	st := p.state.Load()
	now := p.now()
	var out []string
	for _, m := range st.members {
		if pe, ok := st.peers[m]; ok && pe.suspected(now) {
			out = append(out, m)
		}
	}
	return out
}

// suspected reports whether requests skip pe at now.
func (pe *peer) suspected(now time.Time) bool {
	until := pe.downUntil.Load()
	return until != 0 && now.UnixNano() < until
}

// ProbeVersions asks every peer that has not been heard from within fresh,
// or not since this node's ring last changed, for its ring version, so that a status page can tell whether the nodes
// agree on an idle cluster too. A probe is a signed GET of the base path
// itself, which the peer route answers with its version and an error
// status before it looks at any group; it goes around the peer clients, so
// it moves no metric and no circuit. Suspected peers are skipped. It
// returns when every probe has answered or failed, within ctx and
// Config.PeerTimeout.
func (p *Pool) ProbeVersions(ctx context.Context, fresh time.Duration) {
	st := p.state.Load()
	now := p.now()
	since := p.versions.since(st, now.UnixNano())
	var wg sync.WaitGroup
	for _, m := range st.members {
		pe, ok := st.peers[m]
		if !ok || pe.suspected(now) {
			continue
		}
		if e, ok := p.versions.m.Load(m); ok {
			if at := e.(*seenVersion).at.Load(); at >= since && now.Sub(time.Unix(0, at)) < fresh {
				continue
			}
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
	if len(p.cfg.Secret) > 0 {
		unix := p.now().Unix()
		req.Header.Set(hdrDate, strconv.FormatInt(unix, 10))
		req.Header.Set(hdrSignature, signature(p.cfg.Secret, req.Method, req.URL.EscapedPath(), unix))
	}
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
// have not been heard from within fresh or since Since. This node counts as
// agreeing.
func (r RingInfo) Agreement(now time.Time, fresh time.Duration) (agree, differ, unknown int) {
	for _, m := range r.Members {
		switch {
		case m.SeenAt.IsZero() || m.SeenAt.Before(r.Since) || now.Sub(m.SeenAt) > fresh:
			unknown++
		case m.SeenVersion == r.Version:
			agree++
		default:
			differ++
		}
	}
	return agree, differ, unknown
}
