// Package cache is ringcache's node: named groups of a read-through,
// byte-bounded cache, each with one origin (a Getter), sharing a PeerPicker
// that says which node of the cluster owns a key. It has no HTTP and no
// process-wide state: a Node owns its groups, so several nodes can run in
// one process.
//
// # Data path
//
// Group.Get looks in the main cache (keys this node owns), then in the hot
// cache (copies of popular keys that peers own). On a miss it asks the
// PeerPicker: if a peer owns the key, one fetch per key and node goes to that
// peer, and if the peer cannot be reached the node loads the key from the
// origin itself and serves it from the hot cache for FallbackTTL only; if
// this node owns the key, one origin load per key and node fills the main
// cache. GetLocal, which serves requests that came from peers, never asks a
// peer (the one-hop rule), and origin loads never wait on a fetch, so nodes
// whose rings disagree cannot deadlock. Both caches are LRUs bounded by bytes
// (key, value and a fixed per-entry overhead), with per-entry expiry checked
// on read.
//
// # Hot keys
//
// Every Get of a peer-owned key that misses both caches counts one request
// for the key in a count-min sketch (4 x 8,192 one-byte counters,
// conservative update) whose counts are halved every HotWindow. When a fetch
// from the owner completes and the key's count is at least HotAfter, the
// value is kept in the hot cache, for HotTTL at most. With the defaults
// (HotAfter 3, HotWindow 10s), a key is promoted on its third miss within a
// window, or in the second of two windows with two misses each; a key that
// misses once per window or less never is. Popularity is measured, unlike
// groupcache's random 1 in 10.
//
// # Concurrency
//
// Node and Group are safe for concurrent use. Concurrent misses of one key
// cause one origin load (or one peer fetch) per node; it runs on its own
// goroutine under context.WithoutCancel and LoadTimeout, so a caller that
// gives up (its context ends, and it returns at once) does not end the load
// for the others. (When the first caller's context can never end, such as
// context.Background, the load runs on that caller's goroutine instead.)
// A panic in a Getter becomes an error matching ErrLoad for every waiter and
// the next Get loads again. No lock is held while a Getter or a Peer is
// called. Remove and Set make a load in progress for the key
// uncacheable, so that a stale value cannot overwrite them.
package cache
