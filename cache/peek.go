package cache

import "math"

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
	var clk clock
	var e entry
	if !g.look(key, remote, &clk, &e) {
		return false
	}
	return e.v.Expires.IsZero() || clk.now().Before(e.v.Expires.Add(g.swr(e.v)))
}

// GetCached is Get for a key that this node's caches answer, as Cached
// tells them: ok is true, and v and err are what Get would return (err is
// ErrNotFound for a remembered not-found), counted in Stats as Get counts
// them. For a key they do not answer, ok is false and nothing is counted:
// the caller then calls Get, which loads or asks the owner. So it never
// waits for a peer or the origin, and one lookup serves a hit where Cached
// and then Get take two.
func (g *Group) GetCached(key string) (v Value, ok bool, err error) {
	return g.getCached(key, false, math.MaxInt)
}

// getCached is GetCached for values of up to maxBytes; peer counts the
// answer as a request that came from a peer too (PeerView.GetCached).
func (g *Group) getCached(key string, peer bool, maxBytes int) (v Value, ok bool, err error) {
	if key == "" {
		return Value{}, false, nil
	}
	_, remote := g.pick(key)
	if !remote && g.beingWritten(key) {
		return Value{}, false, nil // the slow path waits for the write
	}
	var clk clock
	var e entry
	if !g.look(key, remote, &clk, &e) {
		return Value{}, false, nil
	}
	if len(e.v.Data) > maxBytes {
		return Value{}, false, nil
	}
	v, err, ok = g.answer(key, &e, remote, &clk)
	if !ok {
		return Value{}, false, nil
	}
	g.st.gets.Add(1)
	if peer {
		g.st.peerGets.Add(1)
	}
	if err != nil {
		g.count(err) // the not-found
	}
	if peer && remote {
		v = copyForPeer(v, e.loaded, g.copyBound(&e))
	}
	return v, true, err
}
