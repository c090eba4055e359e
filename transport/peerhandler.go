package transport

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ringcache/ringcache/cache"
)

// PeerHandler returns the handler of the peer routes for node, which must be
// the cache.Node built with this Pool as its PeerPicker. Mount it at
// Config.BasePath (mux.Handle(cfg.BasePath, h)) or as the whole handler of a
// listener of its own. It serves, under <BasePath><group>/<key>:
//
//	GET     the value as a groupcachepb.GetResponse (groupcache's protocol),
//	        served by Group.GetLocal: never forwarded to another peer
//	PUT     store the body as the value (Group.SetLocal); 204
//	DELETE  drop the key from this node's caches (Group.RemoveLocal); 204
//
// A key the origin does not have is a 404 with the X-Ringcache-Not-Found
// header; an unknown group is a plain 404, as in groupcache. With
// Config.Secret set, a request without a valid signature gets 401 before
// anything else is looked at.
func (p *Pool) PeerHandler(node *cache.Node) http.Handler {
	return &peerHandler{pool: p, node: node}
}

type peerHandler struct {
	pool *Pool
	node *cache.Node
}

func (h *peerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cfg := &h.pool.cfg
	w.Header()[hdrRingVersion] = h.pool.state.Load().versionHeader
	path := r.URL.EscapedPath()
	if len(cfg.Secret) > 0 {
		err := verifySignature(cfg.Secret, r.Method, path,
			r.Header.Get(hdrDate), r.Header.Get(hdrSignature), h.pool.now(), cfg.SignatureWindow)
		if err != nil {
			cfg.Logger.Debug("transport: refused peer request",
				"peer", r.Header.Get(hdrPeer), "remote", r.RemoteAddr, "err", err)
			writeError(w, err)
			return
		}
	}
	if !strings.HasPrefix(path, cfg.BasePath) {
		writeError(w, fmt.Errorf("%w: %s", ErrNoRoute, path))
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodPut, http.MethodDelete:
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		writeError(w, ErrMethodNotAllowed)
		return
	}
	group, key, err := parsePeerPath(path, cfg.BasePath, cfg.MaxKeyBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	g, ok := h.node.Group(group)
	if !ok {
		writeError(w, fmt.Errorf("%w: %q", cache.ErrNoSuchGroup, group))
		return
	}
	switch r.Method {
	case http.MethodGet:
		v, err := g.GetLocal(r.Context(), key)
		if err != nil {
			writeError(w, err)
			return
		}
		// The body is groupcache's GetResponse with only its value set,
		// written as the message's prefix then the value itself rather
		// than marshalled into a copy (TestEncodeGetResponse checks the
		// bytes against proto.Marshal).
		prefix := getResponsePrefix(len(v.Data))
		setValueHeaders(w.Header(), v)
		w.Header().Set("Content-Type", protobufType)
		w.Header().Set("Content-Length", strconv.Itoa(len(prefix)+len(v.Data)))
		w.Write(prefix)
		w.Write(v.Data)
	case http.MethodPut:
		v, err := readValue(w, r, g.Config().MaxValueBytes)
		if err != nil {
			writeError(w, err)
			return
		}
		v.ContentType = r.Header.Get(hdrContentType)
		if v.Expires, err = parseExpires(r.Header.Get(hdrExpires)); err != nil {
			writeError(w, fmt.Errorf("%w: %v", ErrBadRequest, err))
			return
		}
		v.NoStore = r.Header.Get(hdrNoStore) != ""
		if err := g.SetLocal(key, v); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case http.MethodDelete:
		g.RemoveLocal(key)
		w.WriteHeader(http.StatusNoContent)
	}
}

// readValue reads a PUT body of at most max bytes; a longer one is refused
// with an error that StatusOf maps to 413, and is not read further.
func readValue(w http.ResponseWriter, r *http.Request, max int64) (cache.Value, error) {
	body := http.MaxBytesReader(w, r.Body, max)
	var b bytes.Buffer
	if r.ContentLength > 0 && r.ContentLength <= max {
		b.Grow(int(r.ContentLength))
	}
	if _, err := b.ReadFrom(body); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return cache.Value{}, fmt.Errorf("%w: body over %d bytes", cache.ErrTooLarge, max)
		}
		return cache.Value{}, fmt.Errorf("%w: reading body: %v", ErrBadRequest, err)
	}
	return cache.Value{Data: b.Bytes()}, nil
}

// getResponsePrefix returns the bytes of a groupcachepb.GetResponse that
// precede a value of n bytes: the tag of field 1 (value, length-delimited)
// and the length.
func getResponsePrefix(n int) []byte {
	b := make([]byte, 0, 1+protowire.SizeVarint(uint64(n)))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}
