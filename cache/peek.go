package cache

import "time"

// Cached reports whether a Get for key would be answered from this node's
// caches as Get looks them up (the main cache for a key this node owns, the
// hot cache for a peer's): a fresh value or remembered not-found, or a stale
// value within its stale-while-revalidate window. Such a Get waits for no
// peer and no origin. Cached counts nothing in Stats and changes no entry.
// The answer can be out of date by the time the caller acts on it (the
// entry may be evicted or expire right after): callers use it to decide how
// to admit a request, not what to serve.
func (g *Group) Cached(key string) bool {
	_, remote := g.pick(key)
	e, ok := g.look(key, remote)
	if !ok {
		return false
	}
	return e.v.Expires.IsZero() || time.Now().Before(e.v.Expires.Add(g.swr(e.v)))
}

// GetCached is Get for a key that this node's caches answer, as Cached
// tells them: it returns the value, counted in Stats as Get counts it, and
// true. For a key they do not answer, or a remembered not-found, it returns
// false and counts nothing: the caller then calls Get, which loads, asks the
// owner or reports the not-found. So it never waits for a peer or the
// origin, and one lookup serves a hit where Cached and then Get take two.
func (g *Group) GetCached(key string) (Value, bool) {
	if key == "" {
		return Value{}, false
	}
	_, remote := g.pick(key)
	e, ok := g.look(key, remote)
	if !ok || e.notFound {
		return Value{}, false
	}
	v, _, done := g.answer(key, e, remote)
	if done {
		g.st.gets.Add(1)
	}
	return v, done
}
