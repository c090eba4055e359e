package transport

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/ringcache/ringcache/cache"
)

// StatusOf returns the HTTP status code for err, the one place where errors
// become status codes (on the public and the peer routes):
//
//	nil                                          200 OK
//	ErrBadPath, ErrBadRequest, ErrKeyTooLong,
//	  cache.ErrBadKey                            400 Bad Request
//	ErrUnauthorized (not from a peer),
//	  ErrNoToken, ErrBadToken                    401 Unauthorized
//	ErrWritesDisabled                            403 Forbidden
//	ErrNoRoute, cache.ErrNoSuchGroup,
//	  cache.ErrNotFound                          404 Not Found
//	ErrMethodNotAllowed                          405 Method Not Allowed
//	cache.ErrTooLarge                            413 Content Too Large
//	ErrTooManyRequests                           429 Too Many Requests
//	context.DeadlineExceeded                     504 Gateway Timeout
//	cache.ErrLoad, *PeerError                    502 Bad Gateway
//	context.Canceled                             503 Service Unavailable
//	anything else                                500 Internal Server Error
//
// The order matters where an error matches two rows: an origin's refusal of
// a key (cache.ErrBadKey inside cache.ErrLoad) is the client's fault (400),
// and an origin that timed out (context.DeadlineExceeded inside
// cache.ErrLoad) is a 504, not a 502.
func StatusOf(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrBadPath), errors.Is(err, ErrBadRequest),
		errors.Is(err, ErrKeyTooLong), errors.Is(err, cache.ErrBadKey):
		return http.StatusBadRequest
	case errors.Is(err, ErrUnauthorized) && !isPeerError(err):
		return http.StatusUnauthorized
	case errors.Is(err, ErrNoToken), errors.Is(err, ErrBadToken):
		return http.StatusUnauthorized
	case errors.Is(err, ErrWritesDisabled):
		return http.StatusForbidden
	case errors.Is(err, ErrNoRoute), errors.Is(err, cache.ErrNoSuchGroup), errors.Is(err, cache.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrMethodNotAllowed):
		return http.StatusMethodNotAllowed
	case errors.Is(err, cache.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrTooManyRequests):
		return http.StatusTooManyRequests
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, cache.ErrLoad), isPeerError(err):
		return http.StatusBadGateway
	case errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// writeError writes err's status with a short text body. Client errors (4xx)
// say what was wrong, from our own error text; server errors, and errors
// that carry an origin's text or a peer's address (a not-found, an origin
// or a peer refusing a key or value), say only what failed, so that an
// origin's or peer's internals do not leak to clients.
// A not-found from the origin carries the X-Ringcache-Not-Found header, which
// the peer client reads to tell it from a 404 for an unknown group, and a
// failure of the origin the X-Ringcache-Load-Error header.
func writeError(w http.ResponseWriter, err error) {
	code := StatusOf(err)
	msg := err.Error()
	if errors.Is(err, cache.ErrNotFound) || errors.Is(err, cache.ErrLoad) || isPeerError(err) {
		msg = strings.ToLower(http.StatusText(code))
	}
	if errors.Is(err, cache.ErrLoad) {
		w.Header().Set(hdrLoadError, "1")
	}
	switch code {
	case http.StatusNotFound:
		if errors.Is(err, cache.ErrNotFound) {
			w.Header().Set(hdrNotFound, "1")
		}
	case http.StatusGatewayTimeout:
		msg = "origin or peer timed out"
	case http.StatusBadGateway:
		msg = "origin or peer failed"
	case http.StatusServiceUnavailable:
		msg = "request canceled"
	case http.StatusInternalServerError:
		msg = "internal error"
	}
	// Clear headers that described a value, in case a handler set them
	// before it failed.
	h := w.Header()
	h.Del("ETag")
	h.Del("Cache-Control")
	h.Del("Content-Length")
	http.Error(w, msg, code)
}
