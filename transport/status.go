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
//	cache.ErrLoad with cache.ErrTooLarge         502 Bad Gateway (the origin's value is over the limit)
//	cache.ErrTooLarge                            413 Content Too Large (a write)
//	ErrTooManyRequests                           429 Too Many Requests
//	cache.ErrOverloaded                          503 Service Unavailable (with Retry-After)
//	ErrPurgeNotRecorded                          503 Service Unavailable (with Retry-After)
//	cache.ErrOwnerUnreachable                    503 Service Unavailable (with Retry-After)
//	context.DeadlineExceeded                     504 Gateway Timeout
//	cache.ErrLoad, *PeerError                    502 Bad Gateway
//	cache.ErrNotOwner, context.Canceled          503 Service Unavailable
//	anything else                                500 Internal Server Error
//
// (The peer route answers cache.ErrNotOwner of its own with 421 Misdirected
// Request: see writePeerError.) The order matters where an error matches two
// rows: an origin's refusal of a key (cache.ErrBadKey inside cache.ErrLoad)
// is the client's fault (400), an origin's value that is too large is the
// origin's (502), and an origin that timed out (context.DeadlineExceeded
// inside cache.ErrLoad) is a 504, not a 502.
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
	case errors.Is(err, cache.ErrLoad) && errors.Is(err, cache.ErrTooLarge):
		return http.StatusBadGateway
	case errors.Is(err, cache.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrTooManyRequests):
		return http.StatusTooManyRequests
	case errors.Is(err, cache.ErrOverloaded), errors.Is(err, ErrPurgeNotRecorded),
		errors.Is(err, cache.ErrOwnerUnreachable):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, cache.ErrLoad):
		return http.StatusBadGateway
	case errors.Is(err, cache.ErrNotOwner), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	case isPeerError(err):
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

// errorText returns the short body of an error answer. Client errors (4xx)
// say what was wrong, from our own error text; server errors, and errors
// that carry an origin's text or a peer's address (a not-found, an origin
// or a peer refusing a key or value), say only what failed, so that an
// origin's or peer's internals do not leak to clients.
func errorText(err error, code int) string {
	fromLoad := errors.Is(err, cache.ErrLoad)
	switch {
	case code == http.StatusGatewayTimeout && fromLoad:
		return "origin timed out"
	case code == http.StatusGatewayTimeout:
		return "key owner timed out"
	case code == http.StatusBadGateway && errors.Is(err, cache.ErrTooLarge):
		return "origin value too large"
	case code == http.StatusBadGateway && fromLoad:
		return "origin failed"
	case code == http.StatusBadGateway:
		return "key owner unreachable"
	case code == http.StatusServiceUnavailable && errors.Is(err, cache.ErrNotOwner):
		return "key owner is changing; retry"
	case code == http.StatusServiceUnavailable && errors.Is(err, cache.ErrOverloaded):
		return "origin busy; retry later"
	case code == http.StatusServiceUnavailable && errors.Is(err, cache.ErrOwnerUnreachable):
		return "key owner unreachable, and the key was written there: the origin's value would be older; retry"
	case code == http.StatusServiceUnavailable && errors.Is(err, ErrPurgeNotRecorded):
		return "purge log (etcd) out of reach: nothing was purged; retry"
	case code == http.StatusServiceUnavailable:
		return "request canceled"
	case code == http.StatusInternalServerError:
		return "internal error"
	case errors.Is(err, cache.ErrNotFound) || fromLoad || isPeerError(err):
		return strings.ToLower(http.StatusText(code))
	}
	return plainText(err)
}

// plainText is err's text for an HTTP user: without the Go package names
// that prefix our errors ("transport: bad path: ..." is "bad path: ..."),
// which logs keep.
func plainText(err error) string {
	return pkgPrefix.Replace(err.Error())
}

var pkgPrefix = strings.NewReplacer("transport: ", "", "cache: ", "", "peers: ", "")

// writeError writes err's status with a short text body (errorText) on the
// public API. It sets no header of the peer protocol.
func writeError(w http.ResponseWriter, err error) {
	code := StatusOf(err)
	if retryLater(code, err) {
		w.Header().Set("Retry-After", "1")
	}
	writeStatus(w, code, errorText(err, code))
}

// retryLater reports whether an error answer says when to retry: a 503
// for an owner that is changing or out of reach, or an origin too busy to
// load.
func retryLater(code int, err error) bool {
	return code == http.StatusServiceUnavailable &&
		(errors.Is(err, cache.ErrNotOwner) || errors.Is(err, cache.ErrOverloaded) || errors.Is(err, ErrPurgeNotRecorded) ||
			errors.Is(err, cache.ErrOwnerUnreachable))
}

// writePeerError writes err on the peer route: as writeError, plus the
// markers the peer client reads. A not-found from the origin carries
// X-Ringcache-Not-Found, which tells it from a 404 for an unknown group; a
// failure of the origin X-Ringcache-Load-Error (too-large when the value was
// over the limit); and this node's own refusal of a write for a key it does
// not own is a 421 Misdirected Request.
func writePeerError(w http.ResponseWriter, err error) {
	code := StatusOf(err)
	switch {
	case errors.Is(err, cache.ErrNotOwner) && !isPeerError(err):
		code = http.StatusMisdirectedRequest
	case errors.Is(err, cache.ErrLoad) && errors.Is(err, cache.ErrTooLarge):
		w.Header().Set(hdrLoadError, loadTooLarge)
	case errors.Is(err, cache.ErrLoad):
		w.Header().Set(hdrLoadError, "1")
	case code == http.StatusNotFound && errors.Is(err, cache.ErrNotFound):
		w.Header().Set(hdrNotFound, "1")
	case errors.Is(err, cache.ErrOverloaded):
		w.Header().Set(hdrOverloaded, "1")
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, cache.ErrOwnerUnreachable):
		w.Header().Set(hdrWritten, "1")
		w.Header().Set("Retry-After", "1")
	}
	writeStatus(w, code, errorText(err, code))
}

func writeStatus(w http.ResponseWriter, code int, msg string) {
	// Clear headers that described a value, in case a handler set them
	// before it failed.
	h := w.Header()
	h.Del("ETag")
	h.Del("Cache-Control")
	h.Del("Content-Length")
	http.Error(w, msg, code)
}
