package cache

import (
	"context"
	"time"
)

// PeerView is a group as this node serves it to its peers: reads that never
// ask another node (the one-hop rule) and writes applied here as the key's
// owner. Only a transport needs it, for requests that came from a peer; a
// program uses Group.Get, Set and Remove, which find the key's owner
// themselves. Calling PeerView on keys that did not come from a peer breaks
// no invariant (each write is checked against this node's ring), but it
// skips the owner lookup that keeps one load per key cluster-wide.
type PeerView struct{ g *Group }

// PeerView returns the group's view for a transport.
func (g *Group) PeerView() PeerView { return PeerView{g} }

// Get is Get without asking any peer: if this node does not own key by its
// own ring, a loaded value is kept briefly in the hot cache only. It serves
// from this node's caches, or loads from the origin, sharing the load with
// concurrent Get calls for key on this node. If beat is not nil and the call
// has to wait for a load, beat is called on the caller's goroutine at once
// and then every interval until the load ends: the transport tells the
// requesting peer with it that the owner is alive and loading. from is
// the requesting node's base URL ("" if unknown): a node that asks for a
// key this node's ring says it owns itself has dropped the key (it is
// leaving, or its ring changed first), and this node waits for its own
// ring to follow, for a moment, before it answers. Its errors are
// Group.Get's.
func (p PeerView) Get(ctx context.Context, key, from string, interval time.Duration, beat func()) (Value, error) {
	return p.g.getLocal(ctx, key, from, interval, beat)
}

// GetCached is Get for a key this node's caches answer (Group.GetCached)
// with a value of at most maxBytes: ok is false, and nothing is counted,
// when answering would need a load or the value is larger. It never waits,
// so a transport can answer many keys of one request at once and leave the
// rest to Get.
func (p PeerView) GetCached(key string, maxBytes int) (v Value, ok bool, err error) {
	return p.g.getCached(key, true, maxBytes)
}

// Set applies a write of key as its owner, for a Store that came from a
// peer: it stores v in the main cache, then drops key's copies on every
// other node (PeerPicker.DropCopies). v.Expires, or else the group's TTL,
// sets its expiry; a v with NoStore, or one that has already expired,
// removes key's value instead. Errors: ErrBadKey, ErrTooLarge, and
// ErrNotOwner when this node does not own key by its ring, or the ring
// changed while the write was applied (nothing is stored then).
func (p PeerView) Set(ctx context.Context, key string, v Value) (WriteResult, error) {
	return p.g.setLocal(ctx, key, v)
}

// Remove applies a removal of key as its owner, for a Remove that came from
// a peer: it drops key here, then on every other node. Errors: ErrBadKey,
// and ErrNotOwner when this node does not own key (nothing is dropped then).
func (p PeerView) Remove(ctx context.Context, key string) (WriteResult, error) {
	return p.g.removeLocal(ctx, key)
}

// Drop drops this node's copies of key and nothing else, for a Drop that
// came from the key's owner, from (its base URL, "" if unknown), after a
// write: from's own hand-over of key may be taken after it, another's not.
// replaced says the write was a PUT, whose copy replaces this node's as an
// heir (Replacer): the heir's copy stays until it does.
func (p PeerView) Drop(key, from string, replaced bool) { p.g.dropLocal(key, from, replaced) }
