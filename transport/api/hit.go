package api

import (
	"cmp"
	"strconv"
	"time"
)

// Hit is the head of the node's answer to a GET or HEAD of a value its
// caches hold, as its public Handler answers it: another HTTP server
// (transport/fast) writes these headers, and the body CachedHit returns
// with them, instead of running the Handler.
type Hit struct {
	// Status is 200, or 404 for a remembered not-found (the body is then
	// its text, and no header below is set).
	Status int
	// ETag is the value's entity tag.
	ETag []byte
	// CacheControl is nil when the answer has none.
	CacheControl []byte
	// Age, the seconds a stale value is past its expiry, is nil but for
	// one.
	Age []byte
	// ContentType is the value's, or application/octet-stream when it has
	// none, as the Handler says.
	ContentType string
}

// CachedHit answers a GET or HEAD of uri, a request target as sent, from
// the node's caches, when the public API would answer it with a value they
// hold (or a remembered not-found) and nothing else. ok is false for every
// other request, which the caller gives to the node's PublicHandler: one
// whose token authorization (the Authorization header, asked for only when
// reads need a token) does not allow, a target that is not a plain key's
// path, a miss. A conditional request (If-None-Match) is the caller's to
// give to the handler. b is a buffer the Hit's header values may use. The
// body is the value's bytes, which are the cache's own: never write to
// them. (It is a result of its own so that a server that keeps the body
// does not make b escape with it.)
func (h *Handler) CachedHit(uri []byte, authorization func() string, b []byte) (_ Hit, body []byte, ok bool) {
	// Open reads skip the header's lookup, which costs a hit a measurable
	// share.
	if !h.cfg.Auth.readsOpen() && h.cfg.Auth.checkRead(authorization()) != nil {
		return Hit{}, nil, false
	}
	p := plainPath(uri)
	if p == nil {
		return Hit{}, nil, false
	}
	group, key, ok := routePath(string(p))
	if !ok || CheckKey(key, h.cfg.MaxKeyBytes) != nil {
		return Hit{}, nil, false
	}
	g, ok := h.node.Group(group)
	if !ok {
		return Hit{}, nil, false
	}
	v, ok, err := g.GetCached(key)
	if !ok {
		return Hit{}, nil, false
	}
	if err != nil { // a remembered not-found, counted already
		code := StatusOf(err)
		return Hit{Status: code}, []byte(errorText(err, code) + "\n"), true
	}
	b, tagEnd, lenEnd, expires := h.appendHead(b, v)
	hit := Hit{Status: 200, ETag: b[:tagEnd], ContentType: cmp.Or(v.ContentType, octetStream[0])}
	switch {
	case v.NoStore:
		hit.CacheControl = hitNoStore
	case v.Stale:
		hit.CacheControl = hitMaxAgeZero
		hit.Age = strconv.AppendInt(b[len(b):], int64(v.Age/time.Second), 10)
	case expires:
		hit.CacheControl = b[lenEnd:]
	}
	return hit, v.Data, true
}

// The fixed Cache-Control values of a Hit, in bytes (never written to).
var (
	hitNoStore    = []byte(noStore[0])
	hitMaxAgeZero = []byte(maxAgeZero[0])
)

// plainPath returns the path of a request target when it is in origin form
// and holds only bytes that net/url leaves as they are, so that it is the
// URL's EscapedPath, as Handler routes it: letters, digits, "-._~", the
// sub-delimiters, ":", "@", "/" and well-formed percent escapes. Otherwise it
// returns nil and the request goes the slow way, through net/url.
func plainPath(uri []byte) []byte {
	if len(uri) == 0 || uri[0] != '/' {
		return nil
	}
	for i := 0; i < len(uri); i++ {
		c := uri[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '?':
			return uri[:i]
		case c == '%':
			if i+2 >= len(uri) || !isHex(uri[i+1]) || !isHex(uri[i+2]) {
				return nil
			}
			i += 2
		default:
			switch c {
			case '-', '.', '_', '~', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@', '/':
			default:
				return nil
			}
		}
	}
	return uri
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
