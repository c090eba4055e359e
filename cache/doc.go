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
// cache. PeerView.Get, which serves requests that came from peers, never asks a
// peer (the one-hop rule), and origin loads never wait on a fetch, so nodes
// whose rings disagree cannot deadlock. Both caches are bounded by bytes
// (key, value and a fixed per-entry overhead, and the dead bytes of their
// pages), with per-entry expiry checked on read, and evict by
// GroupConfig.Policy: by default a segmented LRU, in which a key read again
// while cached outlives keys read once (PolicySLRU). A hit takes a cache's
// lock only shared, and moves no entry: it marks its record read, and the
// writer that needs room reorders (slru.go). They hold entries without
// pointers (records in chunks, keys and values of up to 2 KiB in pages of
// bytes), so that the collector does not visit a million small entries on
// every cycle. A page is compacted once three quarters of it are dead, and
// the pages with the fewest live bytes once the dead bytes of a cache pass
// 1/32 of its budget, down to 1/64: a budget holds entries, not holes,
// whether the pages die piecemeal (random reads) or whole (a scan).
// They index entries by a seeded 64-bit hash of the key: of two keys with
// the same hash only one is cached at a time, as if the other had been
// evicted.
//
// # Writes and what a node may serve
//
// Set and Remove are applied by the key's owner (PeerView.Set, PeerView.Remove),
// which then drops the key's copy on every other node
// (PeerPicker.DropCopies) before the write returns, so that no node serves
// the value the write replaced. A hot copy is served only under its owner's
// contact lease (Leaser): never while the lease is lapsed, and never again
// once the lease has lapsed or was revoked, so a node the owner could not
// reach cannot serve an old value when it is reachable again. A main-cache
// entry is served only while the node's Tenure holds and under the term it
// was stored in, and a ring change drops the entries of keys the node no
// longer owns (loads that straddle it are not stored), so a node that lost
// and regained a key never serves what it held before. A written value
// lives in its owner's memory, and in its heirs' with Copies > 1: a ring
// change hands it to the key's next owner, as it hands loaded values; when
// its owner evicts it, or crashes without copies, the key is read through
// from the origin again. But no node reads a written key from the origin
// while the written value may still be served: a node that cannot reach the
// key's owner (and finds no heir's copy), or that owns it with its Tenure in
// doubt, answers ErrOwnerUnreachable for a key written in the cluster that
// it heard of (a write it applied or forwarded, or the owner's drop), where
// for other keys it loads the origin's value. Otherwise a read could return
// the origin's value and then the written one again.
//
// # The life of an entry
//
// On one node, a key's value is in one of these states. Each names the
// cache that holds it and what must still hold for the node to serve it:
//
//	state          held in            served while
//	absent         -                  (a Get loads or fetches it)
//	loading        a flight           (never stored if its guard broke)
//	owned          main cache         this node owns the key, its term holds, it is current
//	handed off     hand-off cache     never served; given to the key's new owner
//	hot copy       hot cache          the owner's contact lease holds, HotTTL
//	fallback copy  hot cache          the owner is out of contact, FallbackTTL
//	heir's copy    copies cache       never served while the owner is in the ring
//	failed         failures           ErrorTTL (the error is served, not a value)
//
// And these events move it:
//
//	event                               from -> to
//	a miss at the owner                 absent -> loading -> owned (or failed)
//	a miss elsewhere                    absent -> loading (a fetch) -> hot copy, or fallback copy
//	                                    when the owner cannot be reached
//	a write at the owner (Set, Remove)  any -> owned (or absent); a load in flight loses its guard
//	the owner's drop after a write      hot copy, fallback copy, heir's copy -> absent
//	a ring change moves the key away    owned -> handed off -> absent when the window ends
//	a ring change makes this node owner hot copy -> absent; heir's copy -> owned;
//	                                    absent -> owned when the old owner hands it over (Adopt)
//	a tenure change (Config.Tenure)     owned -> unservable (its stamp is the old term)
//	a purge (round 1, HoldPurge)        hot, fallback, heir's copy, handed off -> absent
//	a purge (round 2, ApplyPurge)       any -> absent; loads in flight lose their guard
//	eviction, expiry                    any -> absent (expiry: after its stale windows)
//
// A store happens only under a guard taken when the load, fetch or write
// began (guard, in lru.go): the key's write epoch (a write bumped it), the
// ring counter (a ring change bumped it) and, for a value taken from
// another node, the purge generation. A value handed over (Adopt, pull) adds
// one rule: it is not taken for a key that a node other than the one
// handing it over wrote since the last ring change (takeOverGuard), since
// that node hands a key over only after its last write of it. Files follow the paths: group.go reads, write.go
// writes, load.go origin loads and peer fetches, handoff.go ring changes,
// hot.go hot copies, copies.go heirs' copies, purge.go purges, lru.go and
// pages.go the byte-bounded store.
//
// A failed origin load is not a value, but it is remembered for ErrorTTL:
// callers in between get the same error, and a failing origin is asked once
// per key and interval by the whole cluster (only the owner loads). A value
// over MaxValueBytes is refused the same way, from every origin and in
// every write.
//
// # Purges
//
// Group.Purge and Group.PurgePrefix drop a group's values, or those of its
// keys under a prefix, on every node: through the PeerPicker when it is a
// Purger (the transport's Pool, which records the purge in etcd and reaches
// every node), else on this node. Once a purge returns, no node serves a
// value from before it, a load or fetch that was in flight included; a
// write acknowledged after it returned is kept. A purge goes in two rounds
// (Node.HoldPurge, then ApplyPurge): first every node drops what it holds
// for other nodes (hot and fallback copies, hand-offs, heirs' copies), then
// owners drop their own values. So once an owner served a value loaded
// after the purge, no node serves a copy from before it: reads of a key
// never go back in time, during a purge as after it. Between HoldPurge and
// EndPurge a group keeps no value it takes from another node, since that
// node may not have applied the purge yet; and a node whose Config.Current
// reports false, having possibly missed a purge, serves nothing from its
// caches.
//
// # Copies on heirs
//
// With GroupConfig.Copies N > 1 and a PeerPicker that is a CopyPlacer, each
// value this node owns is also kept on the key's N-1 heirs, the nodes that
// would own it if the ones before them left, so that a crash of its owner
// costs the origin nothing: a copy goes out after every store in the main
// cache, and before a write is acknowledged; an heir keeps the newest copy
// by the owner's stamp, never serves it while the owner is in its ring,
// hands it to a node whose fetch from the owner failed, and moves it to its
// main cache at the ring change that makes it the owner. Copies take
// (N-1)/N of MaxBytes. copies.go has the whole life of a copy.
//
// # Hot keys
//
// A value fetched from its owner is kept in the hot cache, for HotTTL at
// most, while the budget has room for it without evicting anything: a copy
// that displaces nothing costs nothing but memory no entry uses, and it
// saves the next request a network hop. Otherwise a copy displaces the
// least recently used copy, or owned key (below), only if its key is
// popular: every Get of a peer-owned key that misses both caches
// counts one request for the key in a count-min sketch (4 x 8,192 one-byte
// counters, conservative update) whose counts are halved every HotWindow,
// and the key must count at least HotAfter. With the defaults (HotAfter 3,
// HotWindow 10s), a key is then kept on its third miss within a window, or
// in the second of two windows with two misses each; a key that misses once
// per window or less never displaces another, so a scan of cold keys
// cannot flush the hot ones. Popularity is measured, unlike groupcache's
// random 1 in 10.
//
// Main and hot share one budget, MaxBytes. Nothing is set aside for
// copies: the main cache uses all that they do not, so a node with no peers,
// or with few copies, spends the whole budget on its own keys. A copy takes
// room from owned keys (the least recently used) only for a popular key, and
// copies never take more than HotBytes from them. Beyond that, copies may use
// the room the main cache leaves free, until its keys need it: as the main
// cache grows it takes that room back, evicting the least recently used
// copies, never an owned key. Main and hot together stay within MaxBytes
// (momentarily over it by the entries being added). So a node whose own keys
// do not fill its budget keeps a copy of every key it is asked for, as
// groupcache's hot cache does within its cacheBytes.
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
//
// Across the cluster, one origin load per key and miss: a non-owner waits
// for the owner's load for as long as the owner shows it is alive (the
// transport's job), and loads the key itself only when the owner is
// unreachable or silent.
package cache
