package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/peers"
	"github.com/ringcache/ringcache/transport/ui"
)

// The operator's page's view of time.
const (
	// uiFresh is how recently a member must have reported its ring version
	// for the page to count it as agreeing or not.
	uiFresh = 30 * time.Second
	// uiProbeAfter is how long a peer may stay silent before a page view
	// asks it for its ring version, and uiProbeTimeout how long the view
	// waits for the answers.
	uiProbeAfter   = 5 * time.Second
	uiProbeTimeout = 500 * time.Millisecond
	// Rates are computed over the samples of the last uiRateWindow, from
	// one at least uiRateMin old; a sample is taken at most every
	// uiRateMin, however many pages poll.
	uiRateWindow = 10 * time.Second
	uiRateMin    = time.Second
	// uiEvents is the length of the membership timeline; uiHotKeysShown
	// the number of hot keys shown per group.
	uiEvents       = 100
	uiHotKeysShown = 10
)

// uiState is the node's side of the operator's page (ui.Source): it keeps
// the membership timeline, fed by every accepted member set and by the
// registry's state, and the counter samples that rates come from. It is
// safe for concurrent use.
type uiState struct {
	n *node

	mu       sync.Mutex
	started  bool            // record has seen the first member set
	members  []string        // the ring's members as record last saw them
	pending  map[string]bool // peer URLs the registry holds down, as follow last saw them
	vanished map[string]bool // of those, the ones whose removal has not been recorded yet
	events   []ui.Event      // oldest first, at most uiEvents
	samples  []uiSample      // oldest first, within uiRateWindow
	hot      map[string]uiHotKeys
}

// uiHotKeys is a group's hot keys as last read. Reading them walks the
// whole hot cache, so however many pages poll, a group's are read at most
// once per uiRateMin.
type uiHotKeys struct {
	at   time.Time
	keys []ui.HotKey
}

// uiSample is every group's counters at one time.
type uiSample struct {
	at    time.Time
	gets  map[string]int64
	loads map[string]int64
}

var _ ui.Source = (*uiState)(nil)

func newUIState(n *node) *uiState {
	return &uiState{n: n, pending: map[string]bool{}, vanished: map[string]bool{}, hot: map[string]uiHotKeys{}}
}

// add appends an event, dropping the oldest past uiEvents. u.mu must be held.
func (u *uiState) add(kind, member string, at time.Time) {
	u.events = append(u.events, ui.Event{Time: at, Kind: kind, Member: member})
	if len(u.events) > uiEvents {
		u.events = slices.Delete(u.events, 0, len(u.events)-uiEvents)
	}
}

// record notes an accepted member set: who joined, who left. A member that
// the registry held down before it went was removed (it vanished from etcd
// without a goodbye); any other went gracefully. The first set is the
// ring this node joined, recorded as its own join and each other member
// as present.
func (u *uiState) record(members []string) {
	now := time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.started {
		// The timeline starts with the ring this node found: its own
		// join, and each member already there.
		u.started = true
		u.members = slices.Clone(members)
		u.add(ui.EventJoined, u.n.self, now)
		for _, m := range members {
			if m != u.n.self {
				u.add(ui.EventPresent, m, now)
			}
		}
		return
	}
	for _, m := range members {
		if !slices.Contains(u.members, m) {
			u.add(ui.EventJoined, m, now)
			delete(u.vanished, m)
		}
	}
	for _, m := range u.members {
		if slices.Contains(members, m) {
			continue
		}
		if u.vanished[m] {
			u.add(ui.EventRemoved, m, now)
		} else {
			u.add(ui.EventLeft, m, now)
		}
		delete(u.vanished, m)
	}
	u.members = slices.Clone(members)
}

// follow watches the registry's state until it stops, recording members
// that vanish from etcd and are held down, and those that come back before
// their removal. The node's served group waits for it.
func (u *uiState) follow(reg *peers.Registry) {
	for {
		changed := reg.Changed()
		u.observe(reg.State())
		select {
		case <-changed:
		case <-reg.Done():
			return
		}
	}
}

// observe compares the registry's held-down members with the last look.
// A member leaves the pending list either back in the member set or
// removed; State's Pending and Peers come from one snapshot, so the two
// cannot be confused, and the removal itself is recorded by record,
// whichever of the two runs first.
func (u *uiState) observe(st peers.State) {
	now := time.Now()
	pending := make(map[string]bool, len(st.Pending))
	for _, m := range st.Pending {
		pending[strings.TrimSuffix(m.PeerURL, "/")] = true
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, m := range slices.Sorted(maps.Keys(pending)) {
		if !u.pending[m] {
			u.add(ui.EventVanished, m, now)
			u.vanished[m] = true
		}
	}
	for m := range u.pending {
		if pending[m] {
			continue
		}
		if slices.ContainsFunc(st.Peers, func(p string) bool { return strings.TrimSuffix(p, "/") == m }) {
			u.add(ui.EventBack, m, now)
			delete(u.vanished, m)
		}
	}
	u.pending = pending
}

// Snapshot gathers the page's state. It first asks the peers that have
// been silent for a while for their ring version (briefly), so that the
// page of an idle cluster still tells whether the nodes agree.
func (u *uiState) Snapshot(ctx context.Context) ui.Snapshot {
	n := u.n
	pctx, cancel := context.WithTimeout(ctx, uiProbeTimeout)
	n.pool.ProbeVersions(pctx, uiProbeAfter)
	cancel()

	now := time.Now()
	info := n.pool.Info()
	s := ui.Snapshot{
		Time:    now,
		Self:    n.self,
		NodeID:  n.nodeID,
		Version: fmt.Sprintf("%x", info.Version),
		Ready:   n.ready(),
	}
	ids := map[string]string{}
	pending := map[string]bool{}
	if n.reg != nil {
		st := n.reg.State()
		s.Etcd = &ui.Etcd{Connected: st.Connected, Registered: st.Registered}
		for _, m := range st.Members {
			ids[strings.TrimSuffix(m.PeerURL, "/")] = m.ID
		}
		for _, m := range st.Pending {
			pending[strings.TrimSuffix(m.PeerURL, "/")] = true
		}
	} else {
		ids[n.self] = n.nodeID
	}
	agree, differ, unknown := info.Agreement(now, uiFresh)
	s.Agreement = ui.Agreement{Agree: agree, Differ: differ, Unknown: unknown, Fresh: uiFresh}

	arcs := map[string][][2]uint64{}
	for _, a := range info.Arcs {
		arcs[a.Owner] = append(arcs[a.Owner], [2]uint64{uint64(a.Start), a.Size})
	}
	for _, m := range info.Members {
		um := ui.Member{URL: m.URL, ID: ids[m.URL], Self: m.Self, Weight: m.Weight, Share: m.Share, Arcs: arcs[m.URL]}
		switch {
		case pending[m.URL], m.Self && !n.isReady.Load():
			um.State = ui.StateLeaving
		case m.Suspected:
			um.State = ui.StateSuspected
		default:
			um.State = ui.StateReady
		}
		if !m.SeenAt.IsZero() {
			um.SeenVersion = fmt.Sprintf("%x", m.SeenVersion)
			um.SeenAgo = max(now.Sub(m.SeenAt).Seconds(), 0)
			um.SeenStale = m.SeenStale
		}
		s.Members = append(s.Members, um)
	}

	groups := n.groups()
	cur := uiSample{at: now, gets: map[string]int64{}, loads: map[string]int64{}}
	for _, g := range groups {
		st := g.Stats()
		cur.gets[g.Name()], cur.loads[g.Name()] = st.Gets, st.LocalLoads
		ug := ui.Group{
			Name: g.Name(), Gets: st.Gets, MainHits: st.MainHits, HotHits: st.HotHits,
			OriginLoads: st.LocalLoads, PeerLoads: st.PeerLoads, Evictions: st.Evictions,
			MainBytes: st.MainBytes, HotBytes: st.HotBytes, MainItems: st.MainItems, HotItems: st.HotItems,
			MaxBytes: g.Config().MaxBytes, HotMaxBytes: max(g.Config().HotBytes, 0),
			HotKeys: u.hotKeys(g, now),
		}
		s.Groups = append(s.Groups, ug)
	}
	slices.SortFunc(s.Groups, func(a, b ui.Group) int { return strings.Compare(a.Name, b.Name) })

	u.mu.Lock()
	defer u.mu.Unlock()
	if base, ok := u.rateBase(now); ok {
		dt := now.Sub(base.at).Seconds()
		for i := range s.Groups {
			g := &s.Groups[i]
			if b, ok := base.gets[g.Name]; ok {
				gets := float64(g.Gets-b) / dt
				loads := float64(g.OriginLoads-base.loads[g.Name]) / dt
				g.GetsPerSec, g.LoadsPerSec = &gets, &loads
			}
		}
	}
	if len(u.samples) == 0 || now.Sub(u.samples[len(u.samples)-1].at) >= uiRateMin {
		u.samples = append(u.samples, cur)
	}
	s.Timeline = slices.Clone(u.events)
	for _, p := range u.n.pool.Purges() {
		s.Timeline = append(s.Timeline, ui.Event{Time: p.At, Kind: ui.EventPurged, Member: p.By, Scope: p.Scope()})
	}
	slices.SortStableFunc(s.Timeline, func(a, b ui.Event) int { return b.Time.Compare(a.Time) }) // newest first
	s.Timeline = s.Timeline[:min(len(s.Timeline), uiEvents)]
	return s
}

// hotKeys returns g's hottest keys, read again if the last read is older
// than uiRateMin.
func (u *uiState) hotKeys(g *cache.Group, now time.Time) []ui.HotKey {
	u.mu.Lock()
	memo, ok := u.hot[g.Name()]
	u.mu.Unlock()
	if ok && now.Sub(memo.at) < uiRateMin {
		return memo.keys
	}
	keys := []ui.HotKey{}
	for _, h := range g.HotKeys(uiHotKeysShown) {
		keys = append(keys, ui.HotKey{Key: h.Key, Estimate: h.Estimate, Bytes: h.Bytes})
	}
	u.mu.Lock()
	u.hot[g.Name()] = uiHotKeys{at: now, keys: keys}
	u.mu.Unlock()
	return keys
}

// rateBase drops the samples older than uiRateWindow and returns the
// oldest remaining one, if it is at least uiRateMin old. u.mu must be held.
func (u *uiState) rateBase(now time.Time) (uiSample, bool) {
	i := 0
	for i < len(u.samples) && now.Sub(u.samples[i].at) > uiRateWindow {
		i++
	}
	u.samples = slices.Delete(u.samples, 0, i)
	if len(u.samples) == 0 || now.Sub(u.samples[0].at) < uiRateMin {
		return uiSample{}, false
	}
	return u.samples[0], true
}

// Locate answers the page's "where is this key?" box.
func (u *uiState) Locate(key string) ui.Location {
	owner, hash, version := u.n.pool.Locate(key)
	return ui.Location{Key: key, Owner: owner, Hash: hash, Version: fmt.Sprintf("%x", version)}
}
