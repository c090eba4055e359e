package peers

import (
	"errors"
	"fmt"
)

// ErrConfig is matched by every error Config.Validate and New return for a Config that
// cannot work: a missing NodeID or PeerURL, a TTL below one second, a negative hold-down. Those
// errors are *ConfigError values, which name the field.
var ErrConfig = errors.New("peers: invalid config")

// A ConfigError reports the field of a Config that Config.Validate refused, so that a program
// that fills the Config from its own settings (a daemon's flags) can name the setting at fault.
// It matches ErrConfig.
type ConfigError struct {
	// Field is the Config field as Go spells it: "TTL", "NodeID".
	Field string
	// Reason is the field's value and what a valid one is: "1.5s: want a whole number of
	// seconds, at least 1s".
	Reason string
}

// Error returns "peers: invalid config: Field: Reason".
func (e *ConfigError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrConfig, e.Field, e.Reason)
}

// Unwrap returns ErrConfig.
func (e *ConfigError) Unwrap() error { return ErrConfig }

// fieldError returns a *ConfigError for field, its reason formatted as by fmt.Sprintf.
func fieldError(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ErrBadPeerURL is returned, wrapped with the offending value, for a peer URL that is not an
// absolute http or https URL with a host.
var ErrBadPeerURL = errors.New("peers: bad peer url")

// ErrBadMember is returned, wrapped with the reason, when a value found under the members
// prefix does not describe a member: bad JSON, an ID that does not match its key, a bad peer
// URL or weight. The registry logs such values and treats the member as absent.
var ErrBadMember = errors.New("peers: bad member description")
