package cache

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/cache/internal/store"
)

// Value is what a Getter returns and what a group caches and serves.
// The cache never modifies Data; callers must not modify it either (a cached
// value's Data is shared by every caller that reads it).
type Value struct {
	// Data is the value's bytes.
	Data []byte
	// ContentType is kept for the HTTP API; empty means unknown.
	ContentType string
	// Expires is when the value stops being served. Zero: the group's TTL
	// applies (and no expiry when the group has none). A non-zero Expires
	// from a Getter or Set wins over the TTL, later or earlier.
	//
	// In a Value returned by Get, Expires is the value's own expiry,
	// whichever copy served it (a hot copy is served for HotTTL at most,
	// a fallback copy for FallbackTTL, but clients are told when the value
	// itself expires). In one returned by PeerView.Get from a copy of a key
	// this node does not own, it is the earlier of that and the copy's own
	// bound, so that a copy the asking node keeps never outlives this one.
	Expires time.Time
	// StaleWhileRevalidate and StaleIfError, from a Getter, override the
	// group's windows for this value (RFC 5861; an HTTP origin takes them
	// from its upstream's Cache-Control). Zero: the group's.
	StaleWhileRevalidate, StaleIfError time.Duration
	// Age, with Stale, is how long ago the value was loaded or written.
	Age time.Duration
	// NoStore asks the group to return the value without caching it
	// (an origin's "Cache-Control: no-store").
	NoStore bool
	// Stale, in a Value returned by Get or PeerView.Get, says that it is past
	// its expiry, served within a stale window.
	Stale bool
	// Checksum is Checksum(Data), set by the cache when it stores the
	// value, so that every read of a cached value gets it without hashing
	// Data again (the transport's ETag is built from it). It is ignored on
	// input and recomputed, so that a Value copied from a Get and given new
	// Data cannot carry a stale one; zero in a value that was not stored
	// (compute it then, as for an empty Data, whose checksum is zero).
	Checksum uint64
}

// A Getter loads a key from the origin. It returns ErrNotFound (possibly
// wrapped) when the key does not exist there.
//
// A group calls it for one key at a time per node, for different keys
// concurrently, so it must be safe for concurrent use. Its ctx keeps the
// values of the caller that started the load but not that caller's
// cancellation: it ends after the group's LoadTimeout.
type Getter interface {
	Get(ctx context.Context, key string) (Value, error)
}

// GetterFunc adapts a function to a Getter, as http.HandlerFunc does.
type GetterFunc func(ctx context.Context, key string) (Value, error)

// Get calls f(ctx, key).
func (f GetterFunc) Get(ctx context.Context, key string) (Value, error) { return f(ctx, key) }

// Peer is another node of the cluster, as seen by this one. A Peer names
// itself with String (its address, for logs and WriteResult); two Peers with
// the same String are the same node.
type Peer interface {
	// Fetch asks the peer for key's value. The peer serves it from its
	// caches or loads it itself; it never forwards the request again.
	//
	// Fetch reports the peer's answer with the group's sentinels: an error
	// matching ErrNotFound (the origin has no such key), ErrLoad (the peer's
	// origin load failed; with context.DeadlineExceeded too if it timed out,
	// ErrTooLarge if the value was over the limit) or ErrBadKey is final,
	// and Get returns it as it is. Any other error means the peer could not
	// answer (unreachable, silent, unknown group, bad response), and Get
	// falls back to loading the key itself.
	Fetch(ctx context.Context, group, key string) (Value, error)
	// Store applies a write of key's value at the peer, its owner: the
	// owner stores it and drops every other node's copy before it answers
	// (see PeerPicker.DropCopies). ErrNotOwner means the peer does not own
	// key by its own ring; the write was not applied.
	Store(ctx context.Context, group, key string, v Value) (WriteResult, error)
	// Remove applies a removal of key at the peer, its owner, which drops
	// it and every other node's copy before it answers. ErrNotOwner as for
	// Store.
	Remove(ctx context.Context, group, key string) (WriteResult, error)
	// Drop drops the peer's own copies of key (main and hot) and nothing
	// else: it is how an owner reaches the other nodes after a write.
	Drop(ctx context.Context, group, key string) error
	fmt.Stringer
}

// A FetchLeaser is a Peer whose fetches say whether the value came under
// the contact lease (Leaser) the answer renewed: a value the owner loaded
// after its answer began (a batch's, whose lease was granted with what the
// owner held) did not, and may be served but not kept as a copy, since the
// lease says nothing of a write during its load. The transport's peers are
// FetchLeasers; a Peer that is not has every value leased.
type FetchLeaser interface {
	FetchLeased(ctx context.Context, group, key string) (v Value, leased bool, err error)
}

// A Leaser is a Peer that grants this node a contact lease: the proof that
// this node would have been told of a write at that peer. Copies of values
// the peer owns are served from the hot cache only while the lease holds,
// and never after it lapsed, even once it is renewed: epoch changes at each
// lapse (and whenever the peer revoked the lease because it could not reach
// this node), and a copy is served only under the epoch it was stored in.
// A Peer that is no Leaser (a groupcache node) keeps the older rule: its
// copies live for HotTTL.
type Leaser interface {
	// Contact returns the lease's epoch and whether the lease holds at
	// now, a reading of time.Now.
	Contact(now time.Time) (epoch uint64, ok bool)
}

// PeerPicker chooses the owner of a key and reaches the other nodes.
type PeerPicker interface {
	// PickPeer returns the peer that owns key, and false when this node
	// owns it (or has no peers).
	PickPeer(key string) (Peer, bool)
	// DropCopies drops key's copies in group on every other node that may
	// hold one, for an owner that has just applied a write. A node that does
	// not answer is waited for until its contact lease with this node has
	// lapsed, so that it can no longer serve the old value; DropCopies
	// returns the names of such nodes (nil when every node was reached).
	DropCopies(ctx context.Context, group, key string) (unreached []string)
}

// A Handoffer is a PeerPicker that knows which node owned a key before the
// last ring change, so that a new owner can take the value from it instead
// of loading it from the origin (a warm hand-off). The Node asks only within
// Config.HandoffWindow of the change.
type Handoffer interface {
	// PreviousOwner returns the node that owned key by the ring before the
	// last change, and false when that is this node or the key's current
	// owner (nothing to take).
	PreviousOwner(key string) (Peer, bool)
}

// A HandoffFetcher is a Peer that can hand over a value it holds.
type HandoffFetcher interface {
	// FetchHandoff returns the peer's value of key from its caches only:
	// never from its origin, never forwarded. ErrNotFound: it holds none.
	FetchHandoff(ctx context.Context, group, key string) (Value, error)
}

// A RingNotifier is a PeerPicker that tells when the ring changes, so that
// a Node can drop the entries of keys it no longer owns. New registers with
// a PeerPicker that implements it.
type RingNotifier interface {
	// NotifyRing arranges for f to be called after every change of the
	// ring, once the new ring is in use, one call at a time.
	NotifyRing(f func())
}

// WriteResult is what a Set or Remove that the owner applied reports.
type WriteResult struct {
	// Unreached names the nodes that could not be told to drop their copy
	// (paused, partitioned). The owner waited until their contact leases
	// lapsed before answering, so they will not serve the old value; they
	// load the key again once they are back in contact.
	Unreached []string
}

// NoPeers is the PeerPicker of a single node: it owns every key.
type NoPeers struct{}

// PickPeer reports that this node owns key.
func (NoPeers) PickPeer(string) (Peer, bool) { return nil, false }

// DropCopies has no other node to reach.
func (NoPeers) DropCopies(context.Context, string, string) []string { return nil }

// Config configures a Node.
type Config struct {
	// Peers picks key owners. If nil, NoPeers: this node owns every key.
	Peers PeerPicker
	// Logger receives boundary events (peer errors, panics). If nil, discard.
	Logger *slog.Logger
	// Tenure, if not nil, says whether this node's claim to own its keys
	// holds now, and under which term. Main-cache entries are served only
	// while ok, and only under the term they were stored in: the term must
	// change whenever another node may have owned this node's keys
	// meanwhile, so that what it held before is never served again. With
	// etcd membership (transport.Node) the term changes when a peer dropped
	// this node from its ring, and ok is false while the node's lease may
	// have expired and its peers do not confirm it, or after it registered
	// again until they do. If nil, the claim always holds (static
	// membership).
	Tenure func() (term uint64, ok bool)
	// Current, if not nil, reports whether this node has applied every
	// purge that may have been made in the cluster (Group.Purge). While it
	// reports false nothing is served from this node's caches, nor handed
	// to another node: every read is a miss, loaded from the origin (once
	// per key, as ever), but for a key written in the cluster that the
	// node heard of, which it owns: that is answered ErrOwnerUnreachable,
	// since the written value may still be the one to serve. With etcd
	// membership (transport.Node) it is false once the node has not read
	// the purge log for a purge lease. If nil, always true.
	Current func() bool
	// HandoffWindow is how long after a ring change the node keeps the
	// values of keys it no longer owns, for their new owners to take, and
	// asks a key's previous owner before it loads a key it now owns from
	// the origin. The kept values share the main cache's budget. If zero,
	// one minute; negative: no hand-off (values of keys no longer owned are
	// dropped at once).
	HandoffWindow time.Duration
}

// GroupConfig configures a Group. Zero values select the documented defaults.
type GroupConfig struct {
	// Name is the group's name, required and unique within a Node.
	Name string
	// Getter loads missing keys from the origin. Required.
	Getter Getter
	// MaxBytes bounds the memory of the main and hot caches together,
	// counting keys, values and per-entry overhead. Required, > 0.
	MaxBytes int64
	// HotBytes is how much of MaxBytes copies of popular keys owned by
	// peers (the hot cache) may take from this node's own keys. If zero,
	// MaxBytes/8. Negative: no hot cache. It is not set aside: the main
	// cache uses whatever copies do not. Copies may also use the room the
	// main cache leaves free, and give it back as the main cache fills
	// (see the package doc).
	HotBytes int64
	// Copies is how many nodes hold each value: its owner and Copies-1
	// heirs, the nodes that would own the key next (see CopyPlacer), so
	// that a crash of the owner costs the origin nothing. Copies of other
	// nodes' values share MaxBytes with this node's own: under pressure a
	// copy is evicted before a value of its own of the same age. If zero, 1 (no
	// copies). At most MaxCopies. It needs a PeerPicker that is a
	// CopyPlacer (transport.Pool is); with any other, no copies are kept.
	Copies int
	// Policy picks the entries evicted when the budget is full: PolicySLRU
	// (the default) or PolicyLRU.
	Policy string
	// TTL is how long a loaded value is served. If zero, until evicted.
	TTL time.Duration
	// NotFoundTTL is how long an ErrNotFound from the origin is remembered.
	// If zero, not-found is not remembered.
	NotFoundTTL time.Duration
	// LoadTimeout bounds a deduplicated origin load, and a fetch from the
	// owning peer, which run detached from the callers' contexts. If zero,
	// 30s.
	LoadTimeout time.Duration
	// MaxValueBytes bounds a single value (Set, and values loaded from the
	// origin). If zero, 1 MiB.
	MaxValueBytes int64
	// FallbackTTL is how long a value loaded locally, because its owner
	// could not be reached, is served from the hot cache. If zero, 5s.
	// PeerView.Get keeps a value it loads for a key this node does not own for
	// FallbackTTL as well. Such copies are dropped as soon as the owner is
	// in contact again.
	FallbackTTL time.Duration
	// StaleWhileRevalidate is how long past its expiry a value this node
	// owns is still served while one background load, at the owner, brings
	// a fresh one (RFC 5861's stale-while-revalidate): callers never wait
	// for the refresh. If zero, an expired value is not served.
	StaleWhileRevalidate time.Duration
	// StaleIfError is how long past its expiry a value is served instead of
	// an error when the origin fails or times out (RFC 5861's
	// stale-if-error). If zero, the error is returned.
	StaleIfError time.Duration

	// ErrorTTL is how long a failed origin load (an error other than
	// ErrNotFound, a value over MaxValueBytes included) is remembered: the
	// callers in between get the same error, so that a failing origin sees
	// one load per key and ErrorTTL from the whole cluster (only the owner
	// loads). If zero, 1s; negative: errors are not remembered.
	ErrorTTL time.Duration

	// HotAfter is how many misses of a key owned by a peer, counted with
	// decay (see HotWindow), make the fetched value go into a full hot
	// cache, displacing the least recently used copy; while the hot cache
	// has room, every fetched value goes in. If zero, 3; 1 keeps every
	// fetched value. At most 255.
	HotAfter int
	// HotWindow is the decay period of the hot-key counts: every HotWindow
	// all counts are halved. If zero, 10s.
	HotWindow time.Duration
	// HotTTL bounds how long a copy of a value owned by a peer is served
	// from the hot cache (never longer than the value's own Expires), so
	// that a Set at the owner reaches every node within HotTTL. If zero, 1m.
	HotTTL time.Duration

	// MaxLoads bounds the origin loads this node runs for the group at
	// once, so that a burst of misses (a cold start, a scan, one client
	// walking random keys) reaches the origin as at most MaxLoads
	// concurrent requests per node. Loads beyond it wait in a queue; hits,
	// fetches from peers and callers that join a load in flight never do.
	// If zero, DefaultMaxLoads; negative: no bound.
	MaxLoads int
	// LoadQueue is how many loads may wait for a slot. When it is full, the
	// newest load of the caller (WithCaller) with the most loads waiting
	// fails with ErrOverloaded, so that one heavy caller cannot starve the
	// others; freed slots go to the callers in turn. If zero,
	// DefaultLoadQueue; negative: none wait (shed at once).
	LoadQueue int
	// LoadQueueWait bounds a load's wait in the queue; past it the load
	// fails with ErrOverloaded. If zero, DefaultLoadQueueWait.
	LoadQueueWait time.Duration
}

// Checksum returns a 64-bit checksum of data: its CRC-32C in the high half
// and its CRC-32 (IEEE) in the low half, which together act as one 64-bit
// CRC whose polynomial is the product of the two. Both have hardware paths
// (SSE4.2 and PCLMULQDQ on amd64, the CRC instructions on ARMv8), so 1 KiB
// costs about 100 ns. Two different values collide with probability 2^-64;
// a CRC is not collision resistant, so it identifies versions of a value,
// it does not authenticate them.
//
// The cache fills Value.Checksum with it when it stores a value, so that a
// reader that needs a validator (the transport's ETag) does not hash the
// bytes again on every read.
func Checksum(data []byte) uint64 { return store.Checksum(data) }

// Defaults for the zero fields of a GroupConfig.
const (
	DefaultLoadTimeout   = 30 * time.Second
	DefaultMaxValueBytes = 1 << 20
	DefaultFallbackTTL   = 5 * time.Second
	DefaultHotAfter      = 3
	DefaultHotWindow     = 10 * time.Second
	DefaultHotTTL        = time.Minute
	DefaultErrorTTL      = time.Second

	// MaxCopies bounds GroupConfig.Copies: each copy costs every write a
	// round trip to one more node, and every node MaxBytes/Copies of room
	// for its own keys.
	MaxCopies = 5

	// DefaultMaxLoads is a group's bound on concurrent origin loads per
	// node: a pool size a database takes without trouble, and at a 1 ms
	// origin far more loads a second than one node's two cores can serve.
	DefaultMaxLoads = 64
	// DefaultLoadQueue is how many loads may wait beyond MaxLoads: a cold
	// fill by thousands of connections at once waits rather than fails.
	DefaultLoadQueue = 4096
	// DefaultLoadQueueWait bounds a queued load's wait, well under a
	// client's usual timeout so that it learns to back off (503) in time.
	DefaultLoadQueueWait = 5 * time.Second
)

// Validate reports whether NewGroup would accept c: nil, or a *ConfigError
// naming the first field at fault. Zero fields are valid where they select a
// documented default. NewGroup applies the same rules; it never clamps a
// value out of range.
func (c GroupConfig) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Group: c.Name, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Name == "":
		return bad("Name", "required")
	case c.Getter == nil:
		return bad("Getter", "required")
	case c.MaxBytes <= 0:
		return bad("MaxBytes", "%d: must be > 0", c.MaxBytes)
	case c.HotBytes >= c.MaxBytes:
		return bad("HotBytes", "%d: must be less than MaxBytes (%d)", c.HotBytes, c.MaxBytes)
	case c.MaxValueBytes < 0:
		return bad("MaxValueBytes", "%d: must not be negative", c.MaxValueBytes)
	case c.HotAfter < 0 || c.HotAfter > 255:
		return bad("HotAfter", "%d: want 0 to 255", c.HotAfter)
	case c.Copies < 0 || c.Copies > MaxCopies:
		return bad("Copies", "%d: want 1 to %d", c.Copies, MaxCopies)
	case c.Policy != "" && c.Policy != PolicySLRU && c.Policy != PolicyLRU:
		return bad("Policy", "%q: want %q or %q", c.Policy, PolicySLRU, PolicyLRU)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"TTL", c.TTL}, {"NotFoundTTL", c.NotFoundTTL}, {"LoadTimeout", c.LoadTimeout},
		{"FallbackTTL", c.FallbackTTL}, {"HotWindow", c.HotWindow}, {"HotTTL", c.HotTTL},
		{"StaleWhileRevalidate", c.StaleWhileRevalidate}, {"StaleIfError", c.StaleIfError},
		{"LoadQueueWait", c.LoadQueueWait},
	} {
		if d.v < 0 {
			return bad(d.field, "%v: must not be negative", d.v)
		}
	}
	return nil
}

// withDefaults validates c and returns it with the documented defaults in
// place of its zero fields.
func (c GroupConfig) withDefaults() (GroupConfig, error) {
	if err := c.Validate(); err != nil {
		return GroupConfig{}, err
	}
	c.HotBytes = cmp.Or(c.HotBytes, c.MaxBytes/8)
	c.Policy = cmp.Or(c.Policy, PolicySLRU)
	c.Copies = cmp.Or(c.Copies, 1)
	c.LoadTimeout = cmp.Or(c.LoadTimeout, DefaultLoadTimeout)
	c.MaxValueBytes = cmp.Or(c.MaxValueBytes, DefaultMaxValueBytes)
	c.FallbackTTL = cmp.Or(c.FallbackTTL, DefaultFallbackTTL)
	c.HotAfter = cmp.Or(c.HotAfter, DefaultHotAfter)
	c.HotWindow = cmp.Or(c.HotWindow, DefaultHotWindow)
	c.HotTTL = cmp.Or(c.HotTTL, DefaultHotTTL)
	c.ErrorTTL = cmp.Or(c.ErrorTTL, DefaultErrorTTL)
	c.MaxLoads = cmp.Or(c.MaxLoads, DefaultMaxLoads)
	c.LoadQueue = cmp.Or(c.LoadQueue, DefaultLoadQueue)
	c.LoadQueueWait = cmp.Or(c.LoadQueueWait, DefaultLoadQueueWait)
	return c, nil
}

// Stats are a group's counters, read with Group.Stats. Counters only grow;
// the Bytes and Items fields are the caches' current usage.
type Stats struct {
	Gets          int64 // Get and PeerView.Get calls
	PeerGets      int64 // PeerView.Get calls: requests that came from peers (also in Gets)
	MainHits      int64 // served from the main cache
	HotHits       int64 // served from the hot cache
	PeerLoads     int64 // values fetched from the owning peer
	PeerErrors    int64 // failed fetches from a peer (a local fallback follows)
	LocalLoads    int64 // origin loads by this node (Getter calls)
	LoadsDeduped  int64 // callers that shared another caller's load or fetch
	NotFounds     int64 // origin said not found (including remembered ones)
	Errors        int64 // Get calls that returned an error other than not-found
	Evictions     int64 // entries evicted for space (main, hot and copies)
	HotPromotions int64 // values fetched from a peer and kept in the hot cache
	TooLarge      int64 // values refused because they exceed MaxValueBytes
	HandoffsTaken int64 // values of keys that moved here taken from their previous owner (fetched or adopted) instead of loaded
	HandoffsGiven int64 // values of keys that moved away handed to their new owner
	StaleServed   int64 // values served past their expiry (stale-while-revalidate or stale-if-error)
	Purged        int64 // entries dropped by purges (Purge, PurgePrefix), every cache of this node
	LoadsRunning  int64 // origin loads running now (at most MaxLoads)
	LoadsWaiting  int64 // origin loads waiting for a slot now (at most LoadQueue)
	LoadsQueued   int64 // origin loads that had to wait for a slot, granted or not
	LoadsShed     int64 // origin loads refused with ErrOverloaded
	MainBytes     int64 // bytes in the main cache: keys, values and per-entry overhead
	MainItems     int64 // entries in the main cache (remembered not-founds included)
	HotBytes      int64 // bytes in the hot cache
	HotItems      int64 // entries in the hot cache
	// Copies (GroupConfig.Copies > 1): values of other nodes' keys held
	// here as an heir, and how copies moved.
	CopyBytes      int64 // bytes of copies held here (sharing MaxBytes with MainBytes)
	CopyItems      int64 // copies held here
	CopiesSent     int64 // copies of this node's values an heir took, after a load, hand-off or write
	CopiesKept     int64 // copies taken from owners
	CopiesPromoted int64 // copies that became this node's own values when it took their keys over
	CopiesServed   int64 // copies read, here or from another heir, while a key's owner could not be reached
	CopiesRepaired int64 // copies sent after ring changes to bring keys back to Copies nodes
	BytesRepaired  int64 // value bytes of those
	// DeadBytes is the bytes of both caches' pages that no entry holds
	// until a compaction drops them (about 1/36 of the budget at most).
	// They count against MaxBytes with MainBytes and HotBytes.
	DeadBytes int64
}

// counters are a group's live counters; Stats is their snapshot.
type counters struct {
	gets, peerGets, mainHits, hotHits atomic.Int64
	peerLoads, peerErrors, localLoads atomic.Int64
	deduped, notFounds, errors        atomic.Int64
	hotPromotions, tooLarge           atomic.Int64
	handoffsTaken, handoffsGiven      atomic.Int64
	staleServed, purged               atomic.Int64
	copiesSent, copiesKept            atomic.Int64
	copiesPromoted, copiesServed      atomic.Int64
	copiesRepaired, bytesRepaired     atomic.Int64
}

// Stats returns a snapshot of the group's counters. The fields are read one
// by one, so a snapshot taken under load need not add up exactly.
func (g *Group) Stats() Stats {
	s := Stats{
		Gets:          g.st.gets.Load(),
		PeerGets:      g.st.peerGets.Load(),
		MainHits:      g.st.mainHits.Load(),
		HotHits:       g.st.hotHits.Load(),
		PeerLoads:     g.st.peerLoads.Load(),
		PeerErrors:    g.st.peerErrors.Load(),
		LocalLoads:    g.st.localLoads.Load(),
		LoadsDeduped:  g.st.deduped.Load(),
		NotFounds:     g.st.notFounds.Load(),
		Errors:        g.st.errors.Load(),
		Evictions:     g.main.Evictions() + g.hot.Evictions() + g.copies.Evictions(),
		HotPromotions: g.st.hotPromotions.Load(),
		TooLarge:      g.st.tooLarge.Load(),
		HandoffsTaken: g.st.handoffsTaken.Load(),
		HandoffsGiven: g.st.handoffsGiven.Load(),
		StaleServed:   g.st.staleServed.Load(),
		Purged:        g.st.purged.Load(),

		CopiesSent:     g.st.copiesSent.Load(),
		CopiesKept:     g.st.copiesKept.Load(),
		CopiesPromoted: g.st.copiesPromoted.Load(),
		CopiesServed:   g.st.copiesServed.Load(),
		CopiesRepaired: g.st.copiesRepaired.Load(),
		BytesRepaired:  g.st.bytesRepaired.Load(),
	}
	running, waiting := g.gate.usage()
	s.LoadsRunning, s.LoadsWaiting = int64(running), int64(waiting)
	if g.gate != nil {
		s.LoadsQueued, s.LoadsShed = g.gate.queued.Load(), g.gate.shed.Load()
	}
	s.MainBytes, s.MainItems = g.main.Usage()
	s.HotBytes, s.HotItems = g.hot.Usage()
	s.CopyBytes, s.CopyItems = g.copies.Usage()
	s.DeadBytes = g.main.DeadBytes() + g.hot.DeadBytes() + g.copies.DeadBytes()
	return s
}

// Eviction policies (GroupConfig.Policy).
const (
	// PolicySLRU, the default, is a segmented LRU: an entry read again
	// while cached is protected from entries read once
	// (internal/store/slru.go describes both).
	PolicySLRU = "slru"
	// PolicyLRU evicts the least recently used entry, as a CLOCK does:
	// to within one lap of the cache. On the traces measured it did
	// better than PolicySLRU only at the smallest cache of one (0.3%
	// fewer misses); a workload that favours recency alone may prefer it.
	PolicyLRU = "lru"
)

// EntryBytes is what an entry costs against GroupConfig.MaxBytes: its key,
// value and content type bytes and a fixed overhead (the sizing rule,
// deploy/README.md). A budget of C entries is C times it; a group holds at
// least 0.97 C of them, the rest going to its pages' dead bytes.
func EntryBytes(key string, v Value) int64 { return entrySize(key, v) }

func entrySize(key string, v Value) int64 { return store.EntrySize(key, store.Value(v)) }
