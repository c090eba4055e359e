// Package transport carries ringcache between nodes and to clients over HTTP.
//
// A Pool is a node's view of the cluster: a consistent-hash ring
// (consistenthash.Map) of peer base URLs, held in an atomic.Pointer and
// replaced whole by Pool.Set. It implements cache.PeerPicker, so a cache.Node
// built with it asks a key's owner for missing keys. The peer client shares
// one pool of keep-alive HTTP/1.1 connections sized for concurrency and
// runs each exchange on the caller's goroutine (net/http's Transport, which
// hands requests and responses between goroutines, serves https peers
// only: the plain client costs about a quarter less CPU per fetch). It
// bounds every request by Config.PeerTimeout (and connecting by Config.DialTimeout, after which a
// peer that could not be dialled is skipped for as long, so a dead node costs
// one failed dial rather than one per request until the ring drops it), and
// returns typed errors (*PeerError): wrapping
// cache.ErrNotFound or cache.ErrLoad when the owner answered that its origin
// has no such key or failed, which the cache reports as they are, and
// anything else when the owner could not be reached or refused this node, on
// which the cache loads the key locally instead.
//
// The peer protocol is github.com/golang/groupcache's: GET
// <BasePath><group>/<key> answered by a groupcachepb.GetResponse, so a
// groupcache process and ringcache nodes that share the ring settings serve
// each other. What groupcache lacks rides in X-Ringcache-* headers and extra
// methods on the same path (PUT sets, DELETE invalidates). A request that
// arrives on the peer route is served by cache.Group.GetLocal and never
// forwarded again (the one-hop rule), so nodes that briefly disagree about
// the ring cannot bounce a request between them. With Config.Secret set,
// every peer request carries an HMAC-SHA256 over method, escaped path and a
// timestamp; the peer handler refuses anything else with 401 before it
// touches a group.
//
// Handler is the public API (GET, HEAD, PUT, DELETE /cache/{group}/{key...})
// and is separate from the peer handler (Pool.PeerHandler), so the two can
// listen on different addresses. StatusOf maps every error to its status
// code in one place. NewServer returns an http.Server with the timeouts and
// header limits a node exposed to a network needs.
//
// Pool, the peers it hands out, Handler and the peer handler are safe for
// concurrent use.
package transport
