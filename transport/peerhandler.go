package transport

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// PeerHandler returns the handler of the peer routes for node, which must be
// the cache.Node built with this Pool as its PeerPicker. Mount it at
// Config.BasePath (mux.Handle(cfg.BasePath, h)) or as the whole handler of a
// listener of its own. It serves, under <BasePath><group>/<key>:
//
//	GET     the value as a groupcachepb.GetResponse (groupcache's protocol),
//	        served by PeerView.Get: never forwarded to another peer. While
//	        an origin load runs, a ringcache requester is sent 102
//	        Processing every PeerTimeout/3, so that it can tell a slow
//	        origin from a hung owner.
//	PUT     a write of the body as the value, applied here as the key's
//	        owner (PeerView.Set); 204, or 421 if this node does not own
//	        the key by its ring
//	DELETE  a removal applied here as the key's owner (PeerView.Remove;
//	        204 or 421), or, with X-Ringcache-Scope: copy, the drop of this
//	        node's own copies that an owner sends after a write (204)
//
// and <BasePath>_lease, the contact-lease ping (tenure.go);
// <BasePath>_fetch/<group>, a POST of keys answered from this node's caches
// (coalesce.go); <BasePath>_adopt/<group>, values handed over by a leaving
// node (handoff.go); <BasePath>_purge, a POST of a purge to apply, and
// <BasePath>_purges, a GET of the purges applied since a revision
// (purge.go). Writes answer
// with X-Ringcache-Unreached naming the nodes that could not be told. A key
// the origin does not have is a 404 with the X-Ringcache-Not-Found header;
// an unknown group is a plain 404, as in groupcache. With Config.Secrets
// set, a request without a valid signature, or a replay of one, gets 401
// before anything else is looked at (a PUT whose body does not match its
// signed hash, once the body is read).
func (p *Pool) PeerHandler(node *cache.Node) http.Handler {
	p.purges.node.Store(node)
	return &peerHandler{pool: p, node: node}
}

type peerHandler struct {
	pool *Pool
	node *cache.Node
}

func (h *peerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cfg := &h.pool.cfg
	st := h.pool.state.Load()
	w.Header()[hdrRingVersion] = st.versionHeader
	path := r.URL.EscapedPath()
	signed := h.pool.auth.signed()
	if err := h.pool.auth.verify(r, h.pool.now()); err != nil {
		h.pool.auth.refused(cfg.Logger, r, err, h.pool.now())
		writePeerError(w, err)
		return
	}
	// Only after the signature check: an unauthenticated sender must not
	// be able to fill the log.
	h.pool.checkVersion(st, peerName(r), r.Header.Get(hdrRingVersion))
	h.pool.noteSender(st, r.Header.Get(hdrPeer), r.Header.Get(hdrMemberSince))
	if !strings.HasPrefix(path, cfg.BasePath) {
		writePeerError(w, fmt.Errorf("%w: %s", api.ErrNoRoute, path))
		return
	}
	batch := r.Method == http.MethodPost && strings.HasPrefix(path, cfg.BasePath+batchRoute)
	wantsLease := (r.Method == http.MethodGet || batch) && r.Header.Get(hdrLease) != ""
	grant := func() {
		if wantsLease {
			sender := r.Header.Get(hdrPeer)
			if g := h.pool.grantTo(sender, signed); g != "" {
				w.Header().Set(hdrLease, g)
			}
			// Whether this node counts the sender as a member: a node
			// whose etcd lease may have run out asks (Pool.MemberConfirmed).
			if since, member := h.pool.state.Load().since[sender]; member {
				w.Header()[hdrMember] = memberYes
				w.Header()[hdrMemberSince] = []string{since}
			} else {
				w.Header()[hdrMember] = memberNo
			}
		}
	}
	if path == cfg.BasePath+leaseRoute && r.Method == http.MethodGet {
		grant()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if batch {
		h.serveBatch(w, r, strings.TrimPrefix(path, cfg.BasePath+batchRoute), grant)
		return
	}
	if r.Method == http.MethodPost && path == cfg.BasePath+purgeRoute {
		h.servePurge(w, r)
		return
	}
	if r.Method == http.MethodGet && path == cfg.BasePath+purgesRoute {
		h.servePurges(w, r)
		return
	}
	if r.Method == http.MethodPost && strings.HasPrefix(path, cfg.BasePath+adoptRoute) {
		h.serveAdopt(w, r, strings.TrimPrefix(path, cfg.BasePath+adoptRoute))
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodPut, http.MethodDelete:
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		writePeerError(w, api.ErrMethodNotAllowed)
		return
	}
	group, key, err := parsePeerPath(path, cfg.BasePath, cfg.MaxKeyBytes)
	if err != nil {
		writePeerError(w, err)
		return
	}
	g, ok := h.node.Group(group)
	if !ok {
		writePeerError(w, fmt.Errorf("%w: %q", cache.ErrNoSuchGroup, group))
		return
	}
	ctx := r.Context()
	switch r.Method {
	case http.MethodGet:
		if r.Header.Get(hdrHandoff) != "" {
			v, ok := g.Handoff(key)
			if !ok {
				writePeerError(w, cache.ErrNotFound)
				return
			}
			writeGetResponse(w, v)
			return
		}
		grant()
		var beat func()
		if r.Header.Get(hdrPeer) != "" { // a ringcache requester reads 1xx; others need not see them
			beat = func() { w.WriteHeader(http.StatusProcessing) }
		}
		// The owner's load queue shares its slots between the clients the
		// requesting nodes serve; a groupcache peer names none and counts
		// as one client.
		v, err := g.PeerView().Get(cache.WithCaller(ctx, callerOf(r)), key, r.Header.Get(hdrPeer), cfg.PeerTimeout/3, beat)
		// Granted again at the answer: a revocation made while the load
		// ran must reach the requester with this value (tenure.go).
		grant()
		if err != nil {
			writePeerError(w, err)
			return
		}
		writeGetResponse(w, v)
	case http.MethodPut:
		v, err := api.ReadValue(w, r, g.Config().MaxValueBytes)
		if err == nil {
			if err = h.pool.auth.checkBody(r, v.Data); err != nil {
				h.pool.auth.refused(cfg.Logger, r, err, h.pool.now())
			}
		}
		if err != nil {
			writePeerError(w, err)
			return
		}
		v.ContentType = r.Header.Get(hdrContentType)
		if v.Expires, err = parseExpires(r.Header.Get(hdrExpires)); err != nil {
			writePeerError(w, fmt.Errorf("%w: %v", api.ErrBadRequest, err))
			return
		}
		v.NoStore = r.Header.Get(hdrNoStore) != ""
		h.applyWrite(w, r, func() (cache.WriteResult, error) { return g.PeerView().Set(ctx, key, v) })
	case http.MethodDelete:
		if r.Header.Get(hdrScope) == scopeCopy[0] {
			g.PeerView().Drop(key, r.Header.Get(hdrPeer), r.Header.Get(hdrHandoff) == replacedValue[0])
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.applyWrite(w, r, func() (cache.WriteResult, error) { return g.PeerView().Remove(ctx, key) })
	}
}

// applyWrite applies a write as the key's owner and answers it. The owner
// may wait up to a contact lease for a node it cannot reach; meanwhile a
// ringcache requester is sent 102 Processing every PeerTimeout/3, so that
// it can tell a waiting owner from a hung one.
func (h *peerHandler) applyWrite(w http.ResponseWriter, r *http.Request, apply func() (cache.WriteResult, error)) {
	if r.Header.Get(hdrPeer) == "" {
		res, err := apply()
		writeWriteResult(w, res, err)
		return
	}
	type result struct {
		res cache.WriteResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := apply()
		done <- result{res, err}
	}()
	tick := time.NewTicker(h.pool.cfg.PeerTimeout / 3)
	defer tick.Stop()
	for {
		select {
		case d := <-done:
			writeWriteResult(w, d.res, d.err)
			return
		case <-tick.C:
			w.WriteHeader(http.StatusProcessing)
		}
	}
}

// writeGetResponse writes v as groupcache's GetResponse with only its value
// set, written as the message's prefix then the value itself rather than
// marshalled into a copy (TestEncodeGetResponse checks the bytes against
// proto.Marshal).
func writeGetResponse(w http.ResponseWriter, v cache.Value) {
	prefix := getResponsePrefix(len(v.Data))
	setValueHeaders(w.Header(), v)
	w.Header().Set("Content-Type", protobufType)
	w.Header().Set("Content-Length", strconv.Itoa(len(prefix)+len(v.Data)))
	w.Write(prefix)
	w.Write(v.Data)
}

// writeWriteResult answers a write applied (or refused) as the key's owner.
func writeWriteResult(w http.ResponseWriter, res cache.WriteResult, err error) {
	if err != nil {
		writePeerError(w, err)
		return
	}
	if len(res.Unreached) > 0 {
		w.Header().Set(hdrUnreached, strings.Join(res.Unreached, ","))
	}
	w.WriteHeader(http.StatusNoContent)
}

// peerName names the sender of a peer request for logs: the base URL it
// claims in X-Ringcache-Peer, or else its address.
func peerName(r *http.Request) string {
	if p := r.Header.Get(hdrPeer); p != "" {
		return p
	}
	return r.RemoteAddr
}

// getResponseValueField is the field number of groupcachepb.GetResponse's
// value (bytes).
const getResponseValueField protowire.Number = 1

// getResponsePrefix returns the bytes of a groupcachepb.GetResponse that
// precede a value of n bytes: the tag of its value field (length-delimited)
// and the length.
func getResponsePrefix(n int) []byte {
	b := make([]byte, 0, 1+protowire.SizeVarint(uint64(n)))
	b = protowire.AppendTag(b, getResponseValueField, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

// peerStatus is the status of err on the peer route: as api.StatusOf
// says, but 401 for a request this node refuses as unsigned
// (ErrUnauthorized of its own) and 421 Misdirected Request for its own
// refusal of a write for a key it does not own.
func peerStatus(err error) int {
	switch {
	case errors.Is(err, ErrUnauthorized) && !isPeerError(err):
		return http.StatusUnauthorized
	case errors.Is(err, cache.ErrNotOwner) && !isPeerError(err):
		return http.StatusMisdirectedRequest
	}
	return api.StatusOf(err)
}

// writePeerError writes err on the peer route, with its peerStatus and
// the markers the peer client reads. A not-found from the origin carries
// X-Ringcache-Not-Found, which tells it from a 404 for an unknown group; a
// failure of the origin X-Ringcache-Load-Error (too-large when the value
// was over the limit); a shed load X-Ringcache-Overloaded; a written key
// whose owner is out of reach X-Ringcache-Written.
func writePeerError(w http.ResponseWriter, err error) {
	code := peerStatus(err)
	switch {
	case code == http.StatusMisdirectedRequest:
	case errors.Is(err, cache.ErrLoad) && errors.Is(err, cache.ErrTooLarge):
		w.Header().Set(hdrLoadError, loadTooLarge)
	case errors.Is(err, cache.ErrLoad):
		w.Header().Set(hdrLoadError, "1")
	case code == http.StatusNotFound && errors.Is(err, cache.ErrNotFound):
		w.Header().Set(hdrNotFound, "1")
	case errors.Is(err, cache.ErrOverloaded):
		w.Header().Set(hdrOverloaded, "1")
	case errors.Is(err, cache.ErrOwnerUnreachable):
		w.Header().Set(hdrWritten, "1")
	}
	api.WriteError(w, code, err)
}
