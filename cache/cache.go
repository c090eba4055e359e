package cache

import (
	"context"
	"log/slog"
	"time"
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
	// In a Value returned by Get or GetLocal, Expires is when this node stops
	// serving it (zero: never): the transport passes it on, so that a copy
	// kept by another node never outlives the owner's.
	Expires time.Time
	// NoStore asks the group to return the value without caching it
	// (an origin's "Cache-Control: no-store").
	NoStore bool
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

// Peer is another node of the cluster, as seen by this one.
type Peer interface {
	// Fetch asks the peer for key's value. The peer serves it from its
	// caches or loads it itself; it never forwards the request again.
	//
	// Fetch reports the peer's answer with the group's sentinels: an error
	// matching ErrNotFound (the origin has no such key), ErrLoad (the peer's
	// origin load failed; with context.DeadlineExceeded too if it timed out)
	// or ErrBadKey is final, and Get returns it as it is. Any other error
	// means the peer could not answer (unreachable, timeout, unknown group,
	// bad response), and Get falls back to loading the key itself.
	Fetch(ctx context.Context, group, key string) (Value, error)
	// Store sets key's value at the peer (its owner).
	Store(ctx context.Context, group, key string, v Value) error
	// Invalidate drops key from the peer's main and hot caches.
	Invalidate(ctx context.Context, group, key string) error
}

// PeerPicker chooses the owner of a key.
type PeerPicker interface {
	// PickPeer returns the peer that owns key, and false when this node
	// owns it (or has no peers).
	PickPeer(key string) (Peer, bool)
	// Peers returns every peer but this node, for cluster-wide invalidation.
	// It includes every peer that PickPeer can return.
	Peers() []Peer
}

// NoPeers is the PeerPicker of a single node: it owns every key.
type NoPeers struct{}

// PickPeer reports that this node owns key.
func (NoPeers) PickPeer(string) (Peer, bool) { return nil, false }

// Peers returns no peers.
func (NoPeers) Peers() []Peer { return nil }

// Config configures a Node.
type Config struct {
	// Peers picks key owners. If nil, NoPeers: this node owns every key.
	Peers PeerPicker
	// Logger receives boundary events (peer errors, panics). If nil, discard.
	Logger *slog.Logger
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
	// HotBytes is the part of MaxBytes given to the hot cache (popular keys
	// owned by peers). If zero, MaxBytes/8. Negative: no hot cache.
	HotBytes int64
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
	// GetLocal keeps a value it loads for a key this node does not own for
	// FallbackTTL as well.
	FallbackTTL time.Duration

	// HotAfter is how many misses of a key owned by a peer, counted with
	// decay (see HotWindow), make the fetched value go into the hot cache.
	// If zero, 3; 1 keeps every fetched value. At most 255.
	HotAfter int
	// HotWindow is the decay period of the hot-key counts: every HotWindow
	// all counts are halved. If zero, 10s.
	HotWindow time.Duration
	// HotTTL bounds how long a copy of a value owned by a peer is served
	// from the hot cache (never longer than the value's own Expires), so
	// that a Set at the owner reaches every node within HotTTL. If zero, 1m.
	HotTTL time.Duration
}
