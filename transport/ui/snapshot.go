package ui

import (
	"context"
	"time"
)

// Source is what the page shows: a node's state, read on each request.
// Implementations must be safe for concurrent use.
type Source interface {
	// Snapshot returns the node's state now. ctx is the request's: a
	// Source may use it to bound work such as asking peers for their ring
	// versions.
	Snapshot(ctx context.Context) Snapshot
	// Locate returns where key falls on the ring and who owns it.
	Locate(key string) Location
}

// Snapshot is everything the page shows, at one moment. It is also the JSON
// the page polls.
type Snapshot struct {
	Time    time.Time `json:"time"`
	Self    string    `json:"self"`    // this node's peer URL
	NodeID  string    `json:"node_id"` // this node's ID
	Version string    `json:"version"` // the ring version, hex
	Ready   bool      `json:"ready"`
	// Etcd is this node's view of etcd; nil with static membership.
	Etcd      *Etcd     `json:"etcd,omitempty"`
	Agreement Agreement `json:"agreement"`
	Members   []Member  `json:"members"` // sorted by URL
	Groups    []Group   `json:"groups"`  // sorted by name
	Timeline  []Event   `json:"timeline"`
	// Key is the answer to the page's "where is this key?" box.
	Key *Location `json:"key,omitempty"`
	// Palette is the members' colours in order; filled in by the handler.
	// The page's script keeps a member's colour while it stays, giving
	// newcomers colours that no current member has.
	Palette []string `json:"palette"`
}

// Etcd is this node's connection to etcd.
type Etcd struct {
	Connected  bool `json:"connected"`
	Registered bool `json:"registered"`
}

// Agreement says whether the members route keys alike: how many reported
// this node's ring version within Fresh, how many another one, and how many
// were not heard from within Fresh (this node counts as agreeing).
type Agreement struct {
	Agree   int           `json:"agree"`
	Differ  int           `json:"differ"`
	Unknown int           `json:"unknown"`
	Fresh   time.Duration `json:"fresh_ns"`
	// Text is the verdict in words; filled in by the handler.
	Text string `json:"text"`
}

// All reports whether every member agrees.
func (a Agreement) All() bool { return a.Differ == 0 && a.Unknown == 0 }

// Member states.
const (
	StateReady     = "ready"
	StateLeaving   = "leaving"   // gone from etcd or stopping: leaves the ring soon
	StateSuspected = "suspected" // this node cannot reach it and skips it
)

// Member is one member of the ring.
type Member struct {
	URL    string  `json:"url"`
	ID     string  `json:"id,omitempty"` // from etcd; empty with static membership
	Self   bool    `json:"self,omitempty"`
	State  string  `json:"state"`
	Weight int     `json:"weight"`
	Share  float64 `json:"share"` // of the hash space, 0 to 1
	// SeenVersion is the ring version the member last reported (hex) and
	// SeenAgo how many seconds ago; SeenVersion is empty when nothing was
	// heard from it.
	SeenVersion string  `json:"seen_version,omitempty"`
	SeenAgo     float64 `json:"seen_ago_s"`
	// SeenStale is set when this node's ring changed after that report.
	SeenStale bool `json:"seen_stale,omitempty"`
	// Arcs are the member's arcs of the hash circle: pairs of start and
	// size, in hash values (size up to 2^32).
	Arcs [][2]uint64 `json:"arcs"`
	// Color and Path are how the page draws the member: filled in by the
	// handler from the member's position in Members and from Arcs.
	Color string `json:"color"`
	Path  string `json:"path"`
}

// Group is one cache group's numbers. Counters count since the process
// started, as /metrics does; the rates are over the last few seconds.
type Group struct {
	Name        string `json:"name"`
	Gets        int64  `json:"gets"`
	MainHits    int64  `json:"main_hits"`
	HotHits     int64  `json:"hot_hits"`
	OriginLoads int64  `json:"origin_loads"` // loads by this node's origin
	PeerLoads   int64  `json:"peer_loads"`   // values fetched from owners
	Evictions   int64  `json:"evictions"`
	MainBytes   int64  `json:"main_bytes"`
	HotBytes    int64  `json:"hot_bytes"`
	MaxBytes    int64  `json:"max_bytes"`     // main and hot together
	HotMaxBytes int64  `json:"hot_max_bytes"` // the hot cache's own part; it borrows the main cache's free room too
	MainItems   int64  `json:"main_items"`
	HotItems    int64  `json:"hot_items"`
	// GetsPerSec and LoadsPerSec (origin loads) are nil until two samples
	// a second apart exist.
	GetsPerSec  *float64 `json:"gets_per_s"`
	LoadsPerSec *float64 `json:"origin_loads_per_s"`
	HotKeys     []HotKey `json:"hot_keys"`
}

// MainHitRatio is the fraction of gets served from the main cache.
func (g Group) MainHitRatio() float64 { return ratio(g.MainHits, g.Gets) }

// HotHitRatio is the fraction of gets served from the hot cache.
func (g Group) HotHitRatio() float64 { return ratio(g.HotHits, g.Gets) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// HotKey is one of the hottest keys of a group's hot cache.
type HotKey struct {
	Key      string `json:"key"`
	Estimate int    `json:"estimate"` // recent misses, as the sketch counts them
	Bytes    int64  `json:"bytes"`
}

// Event kinds of the membership timeline.
const (
	EventJoined   = "joined"   // entered the ring
	EventPresent  = "present"  // in the ring when this node joined it
	EventLeft     = "left"     // left the ring gracefully
	EventVanished = "vanished" // its key left etcd without a goodbye; held down
	EventBack     = "back"     // a vanished member came back before removal
	EventRemoved  = "removed"  // dropped from the ring after the hold-down
	EventPurged   = "purged"   // a purge applied here; Member made it, Scope says what it dropped
)

// Event is one entry of the timeline: a membership change or a purge.
type Event struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`
	Member string    `json:"member"`          // peer URL
	Scope  string    `json:"scope,omitempty"` // a purge's: "group g" or "prefix p of group g"
}

// Location is where a key falls: its hash on the circle, its owner, and
// the version of the ring that says so.
type Location struct {
	Key     string `json:"key"`
	Owner   string `json:"owner"`
	Hash    uint32 `json:"hash"`
	Version string `json:"version"`
	// Angle is where the key's mark goes on the drawn circle, in degrees
	// clockwise from the top; filled in by the handler.
	Angle float64 `json:"angle"`
}
