package origin

import (
	"errors"
	"fmt"

	"github.com/ringcache/ringcache/cache"
)

// Errors returned by the origins, besides cache.ErrNotFound for an absent key.
var (
	// ErrTooLarge is returned when a value is larger than the origin's
	// MaxBytes; the value is not returned in part. It matches
	// cache.ErrTooLarge too, so that a group counts and remembers it like a
	// value over its MaxValueBytes (the one rule for every origin).
	ErrTooLarge = fmt.Errorf("origin: %w", cache.ErrTooLarge)

	// ErrConfig is returned by the constructors for an invalid Config.
	ErrConfig = errors.New("origin: invalid config")
)

// A KeyError reports a key that an origin refuses to look up, such as a
// directory key that would leave the root. errors.Is(err, cache.ErrBadKey)
// holds for it, so the transport answers 400 rather than 502.
type KeyError struct {
	Key    string
	Reason string
}

// Error returns a message naming the key and why it was refused.
func (e *KeyError) Error() string {
	return fmt.Sprintf("origin: bad key %q: %s", e.Key, e.Reason)
}

// Unwrap returns cache.ErrBadKey.
func (e *KeyError) Unwrap() error { return cache.ErrBadKey }

// A StatusError reports an HTTP upstream answer that is neither 2xx nor 404.
type StatusError struct {
	URL        string // the URL requested
	StatusCode int
}

// Error returns a message naming the URL and the status.
func (e *StatusError) Error() string {
	return fmt.Sprintf("origin: %s: unexpected status %d", e.URL, e.StatusCode)
}

func configError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}
