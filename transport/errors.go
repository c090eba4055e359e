package transport

import (
	"errors"
	"fmt"

	"github.com/ringcache/ringcache/cache"
)

// Errors returned by the transport. The peer client's failures are
// *PeerError values; errors.Is sees through them to these sentinels and to
// the cache's, which say that the owner answered: cache.ErrNotFound (its
// origin has no such key), cache.ErrLoad (its origin failed; with
// context.DeadlineExceeded when it timed out), cache.ErrBadKey and
// cache.ErrTooLarge (it refused the key or the value).
var (
	// ErrConfig is returned by NewPool, NewNode, NewHandler and the other
	// constructors for an invalid config. The errors of Config.Validate,
	// ClientLimitConfig.Validate and AuthConfig.Validate are *ConfigError
	// values, which match it and name the field.
	ErrConfig = errors.New("transport: invalid config")

	// ErrBadPeer is returned by Pool.Set for a peer that is not an
	// http(s) base URL.
	ErrBadPeer = errors.New("transport: bad peer URL")

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

	// ErrUnauthorized is returned for a peer request without a valid
	// signature, and by the peer client when a peer answered 401.
	ErrUnauthorized = errors.New("transport: unauthorized peer request")

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

	// ErrPeerStatus is returned by the peer client when a peer answered
	// with an unexpected status code.
	ErrPeerStatus = errors.New("transport: unexpected peer status")

	// ErrPeerDown is returned by the peer client, without a request, for a
	// suspected peer: one that could not be dialled or fell silent, and has
	// not answered a probe since.
	ErrPeerDown = errors.New("transport: peer unreachable")

	// ErrPeerSilent is returned by the peer client for a request that got
	// no byte of an answer within Config.PeerTimeout: a hung or paused
	// process, whose kernel still accepts connections.
	ErrPeerSilent = errors.New("transport: peer silent")

	// ErrBadResponse is returned by the peer client for a response it
	// cannot decode.
	ErrBadResponse = errors.New("transport: bad peer response")
)

// A PeerError reports a failed request to a peer. Err is what went wrong: a
// network error, a context error (Config.PeerTimeout), ErrUnauthorized,
// ErrPeerStatus, ErrBadResponse, or one of the cache's errors listed above
// when the peer answered with it.
type PeerError struct {
	Peer       string // the peer's base URL
	Op         string // "get", "batch", "handoff", "set", "remove", "drop", "adopt" or "lease"
	StatusCode int    // the peer's status code, or 0 if none arrived
	Err        error
}

// Error returns a message naming the peer, the operation and the cause.
func (e *PeerError) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("transport: %s %s: status %d: %v", e.Op, e.Peer, e.StatusCode, e.Err)
	}
	return fmt.Sprintf("transport: %s %s: %v", e.Op, e.Peer, e.Err)
}

// Unwrap returns the cause.
func (e *PeerError) Unwrap() error { return e.Err }

// A ConfigError reports the field of a config that its Validate method
// refused (cache.ConfigError, the one config error type), so that a
// program that fills the config from its own settings (a daemon's flags)
// can name the setting at fault. This package's match ErrConfig.
type ConfigError = cache.ConfigError

// fieldError returns a *ConfigError for field, its reason formatted as by
// fmt.Sprintf.
func fieldError(field, format string, args ...any) error {
	return &ConfigError{Err: ErrConfig, Field: field, Reason: fmt.Sprintf(format, args...)}
}
