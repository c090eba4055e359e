// Package transport carries ringcache between nodes and to clients over HTTP.
//
// A Node is the assembly to embed: NewNode builds the Pool, the cache.Node
// that asks it for key owners and both route sets from one NodeConfig, so
// the peer handler always serves the node built on its Pool and one
// MaxKeyBytes bounds both routes. A membership (peers.New, peers.Static)
// feeds the Node's ring through its Set methods, and Node.Shutdown stops it
// in the order that loses nothing: not ready, leave the ring and hand the
// values over, finish the requests in flight, wait for detached loads.
//
// A Pool is a node's view of the cluster: a consistent-hash ring of peer
// base URLs, held in an atomic.Pointer and replaced whole by Pool.Set or
// SetWeighted (hashed replicas, consistenthash.Map) or by Pool.SetRanges
// (explicit arcs whose positions the members store in etcd,
// consistenthash.Ranges). It implements cache.PeerPicker, so a cache.Node
// built with it asks a key's owner for missing keys. The peer client shares
// one pool of keep-alive HTTP/1.1 connections sized for concurrency and
// runs each exchange on the caller's goroutine (net/http's Transport, which
// hands requests and responses between goroutines, serves https peers
// only: with 64 concurrent fetches the plain client cost 13% less CPU per
// 1 KiB fetch and 19% less per 64 KiB one, though a third more for a
// serial 1 KiB fetch, in BenchmarkPeerFetch). It
// tells a slow owner from a silent one: an owner that is loading a key
// sends 102 Processing every Config.PeerTimeout/3, and a request that gets
// no byte for PeerTimeout fails (connecting is bounded by
// Config.DialTimeout). A peer that could not be dialled or fell silent is
// suspected, a circuit breaker: requests for its keys fail at once, so the
// cache loads them locally, until a background probe (one lease ping at a
// time) gets an answer. So a paused node costs PeerTimeout once rather
// than per request. The client
// returns typed errors (*PeerError): wrapping
// cache.ErrNotFound or cache.ErrLoad when the owner answered that its origin
// has no such key or failed, which the cache reports as they are, and
// anything else when the owner could not be reached or refused this node, on
// which the cache loads the key locally instead.
//
// Fetches are coalesced: while a fetch to a peer is in flight, the next
// fetches from this node to it for one group wait for it and go together in
// one POST <BasePath>_fetch/<group> (at most 64 keys; Config.DisableCoalescing
// turns this off). The peer answers at once each key its caches hold,
// exactly as it would answer a GET that hits there (a value with its expiry
// and content type, or a remembered not-found), then loads the others,
// once each, and streams each key's answer as its load ends, with a beat
// every PeerTimeout/3 meanwhile: each caller is answered as its key
// arrives, so one slow key never holds up the others, and a key answered
// "miss" (a value too large for a batch) is fetched alone with the GET
// below. A peer that does
// not know the route (a groupcache node, an older ringcache node) is asked
// one key at a time, and so is, for 10 s, a peer whose batch failed. With
// 64 concurrent callers this cut the CPU of a 1 KiB fetch to a sixth
// (BenchmarkPeerFetch, client=direct against direct-single).
//
// Group.GetMany asks each owner once for all of its keys (the peer is a
// cache.ManyFetcher): the same POST, marked X-Ringcache-Load-Misses, which
// the owner answers from its caches at once and then by loading the rest,
// streaming each key's frame as its load ends, with a beat every
// PeerTimeout/3 meanwhile (fetchmany.go).
//
// The peer protocol is github.com/golang/groupcache's: GET
// <BasePath><group>/<key> answered by a groupcachepb.GetResponse, so a
// groupcache process and ringcache nodes that share the ring settings serve
// each other. What groupcache lacks rides in X-Ringcache-* headers and extra
// methods on the same path (PUT writes, DELETE removes, both applied by the
// key's owner, which answers 421 for a key it does not own; DELETE with
// X-Ringcache-Scope: copy drops one node's copies). After a write the owner
// drops the key's copy on every node (Pool.DropCopies); copies are served
// only under contact leases (tenure.go), so a node the owner could not reach
// cannot serve the old value past its lease, and the owner waits that long
// before it answers. A request that
// arrives on the peer route is served by cache.PeerView.Get and never
// forwarded again (the one-hop rule), so nodes that briefly disagree about
// the ring cannot bounce a request between them.
//
// Peers authenticate each other in two layers, each optional and both
// recommended. With Config.Secrets, every peer request carries an
// HMAC-SHA256 over its method, the receiving node's URL, the escaped path,
// a date, a random nonce, the body's SHA-256 and the headers the receiver
// acts on; the peer handler refuses (401), before it touches a group, a
// request that is unsigned, signed with no secret it holds, dated outside
// the window, or whose nonce it has seen (a replay). Pool.SetSecrets rotates
// the secrets without a restart. With Config.TLS (a PeerTLS), peers dial
// each other over TLS 1.3 and present certificates from the cluster's CA,
// which the peer listener requires (PeerTLS.ServerConfig, RequireClientCert):
// that adds confidentiality and integrity of values and responses, which the
// signature alone does not give.
//
// The rooms around this package: transport/api is the public API
// (api.Handler: GET, HEAD, PUT, DELETE /cache/{group}/{key...} and batches,
// its bearer tokens, its per-client bounds on misses, and api.StatusOf,
// which maps every error to its status code in one place; the peer route
// answers with the same codes, plus its own 401 and 421 and the markers
// its client reads). The Node mounts it beside the peer routes, which it
// keeps apart (Node.PublicHandler, Node.PeerHandler) so that the two can
// listen on different addresses. transport/fast serves the public API on
// fasthttp and is imported only by the daemon; the daemon's listener caps,
// server timeouts and reloadable certificate are in internal/listen.
//
// In this package: node.go assembles a node; pool.go and poolinfo.go hold
// the ring; peer.go, client.go, coalesce.go and fetchmany.go are the peer
// client, peerhandler.go the peer route, protocol.go the wire (paths,
// signatures, the client's errors); peerauth.go signs requests and checks
// them (secrets, nonces, mutual TLS); tenure.go says when a node may serve
// (contact leases, tenure); handoff.go moves values with their keys
// (drains, offers after a ring change, copies, repair); purge.go takes
// purges to every node; config.go is Config.
//
// Node, Pool, the peers it hands out and the peer handler are safe for
// concurrent use.
package transport
