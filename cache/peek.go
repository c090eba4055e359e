package cache

// Cached reports whether key's value (or a remembered not-found) is in this
// node's caches as Get would serve it (the main cache for a key this node
// owns, the hot cache for a peer's), so that a Get for it would be answered
// without asking a peer or the origin. It counts nothing in Stats and changes no
// entry. The answer can be stale by the time the caller acts on it (the
// entry may be evicted or expire right after): callers use it to decide
// how to admit a request, not what to serve.
func (g *Group) Cached(key string) bool {
	_, remote := g.pick(key)
	_, _, ok := g.lookup(key, remote, false)
	return ok
}
