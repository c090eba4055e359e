package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/ringcache/ringcache/cache"
)

// Errors of the public API, each with its status code (StatusOf). Their
// text begins with "transport: ", as the errors of every transport package
// do.
var (
	// ErrConfig is returned by NewHandler, NewAuth, NewClientLimiter and
	// the other constructors of the transport packages for an invalid
	// config (transport.ErrConfig is the same error). The errors of the
	// configs' Validate methods are *cache.ConfigError values, which match
	// it and name the field.
	ErrConfig = errors.New("transport: invalid config")

	// ErrNoRoute is returned for a path outside the routes a handler serves.
	ErrNoRoute = errors.New("transport: no such route")

	// ErrBadPath is returned for a request path that does not name a group
	// and a key, or whose escaping is invalid.
	ErrBadPath = errors.New("transport: bad path")

	// ErrBadRequest is returned for a request that is malformed in some
	// other way (a bad header, a body that could not be read).
	ErrBadRequest = errors.New("transport: bad request")

	// ErrMethodNotAllowed is returned for a method a route does not serve.
	ErrMethodNotAllowed = errors.New("transport: method not allowed")

	// ErrKeyTooLong is returned for a key longer than the configured limit.
	ErrKeyTooLong = errors.New("transport: key too long")

	// ErrNoToken is returned for a public request that needs a bearer
	// token and carries none (401, with WWW-Authenticate: Bearer).
	ErrNoToken = errors.New("transport: bearer token required")

	// ErrBadToken is returned for a public request whose bearer token is
	// not one of the configured ones (401).
	ErrBadToken = errors.New("transport: invalid bearer token")

	// ErrWritesDisabled is returned for a public PUT or DELETE on a node
	// that has no write token and whose writes are not open (403).
	ErrWritesDisabled = errors.New("transport: public writes are disabled on this node")

	// ErrTooManyRequests is returned for a public request that would reach
	// the origin while its client is over its limit of such requests (429).
	ErrTooManyRequests = errors.New("transport: too many cache misses from this client")
)

// fieldError returns a *cache.ConfigError for field, its reason formatted
// as by fmt.Sprintf.
func fieldError(field, format string, args ...any) error {
	return &cache.ConfigError{Err: ErrConfig, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// StatusOf returns the HTTP status code for err, the one place where errors
// become status codes (on the public and the peer routes):
//
//	nil                                          200 OK
//	ErrBadPath, ErrBadRequest, ErrKeyTooLong,
//	  cache.ErrBadKey                            400 Bad Request
//	ErrNoToken, ErrBadToken                      401 Unauthorized
//	ErrWritesDisabled                            403 Forbidden
//	ErrNoRoute, cache.ErrNoSuchGroup,
//	  cache.ErrNotFound                          404 Not Found
//	ErrMethodNotAllowed                          405 Method Not Allowed
//	cache.ErrLoad with cache.ErrTooLarge         502 Bad Gateway (the origin's value is over the limit)
//	cache.ErrTooLarge                            413 Content Too Large (a write)
//	ErrTooManyRequests                           429 Too Many Requests
//	cache.ErrOverloaded                          503 Service Unavailable (with Retry-After)
//	cache.ErrPurgeNotRecorded                    503 Service Unavailable (with Retry-After)
//	cache.ErrOwnerUnreachable                    503 Service Unavailable (with Retry-After)
//	context.DeadlineExceeded                     504 Gateway Timeout
//	cache.ErrLoad, a RemoteError                 502 Bad Gateway
//	cache.ErrNotOwner, context.Canceled          503 Service Unavailable
//	anything else                                500 Internal Server Error
//
// (The peer route answers as StatusOf says, but for a request it refuses
// as unsigned, 401, and cache.ErrNotOwner of its own, 421 Misdirected
// Request: see transport's peerStatus.) The order matters where an error
// matches two rows: an origin's refusal of a key (cache.ErrBadKey inside cache.ErrLoad)
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
	case errors.Is(err, cache.ErrOverloaded), errors.Is(err, cache.ErrPurgeNotRecorded),
		errors.Is(err, cache.ErrOwnerUnreachable):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, cache.ErrLoad):
		return http.StatusBadGateway
	case errors.Is(err, cache.ErrNotOwner), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	case isRemote(err):
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
	case code == http.StatusServiceUnavailable && errors.Is(err, cache.ErrPurgeNotRecorded):
		return "purge log (etcd) out of reach: nothing was purged; retry"
	case code == http.StatusServiceUnavailable:
		return "request canceled"
	case code == http.StatusInternalServerError:
		return "internal error"
	case errors.Is(err, cache.ErrNotFound) || fromLoad || isRemote(err):
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

// writeError writes err's status with a short text body on the public API.
func writeError(w http.ResponseWriter, err error) { WriteError(w, StatusOf(err), err) }

// WriteError writes an error answer with code (StatusOf(err), or a route's
// own) and err's short text body: what went wrong for a client's error,
// only what failed for a server's, so that an origin's or a peer's
// internals do not leak. A 503 that retrying may cure says when (Retry-After:
// 1). Headers set for a value before the failure are cleared. The peer
// route writes its errors with it too, after its markers.
func WriteError(w http.ResponseWriter, code int, err error) {
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
		(errors.Is(err, cache.ErrNotOwner) || errors.Is(err, cache.ErrOverloaded) || errors.Is(err, cache.ErrPurgeNotRecorded) ||
			errors.Is(err, cache.ErrOwnerUnreachable))
}

// A RemoteError is another node's failure to answer (transport.PeerError
// is one). StatusOf answers 502 Bad Gateway for it, unless an error it
// wraps says otherwise (a not-found, an origin's failure), and its text
// does not reach clients.
type RemoteError interface {
	error
	// RemoteNode names the node that failed.
	RemoteNode() string
}

func isRemote(err error) bool {
	_, ok := errors.AsType[RemoteError](err)
	return ok
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
