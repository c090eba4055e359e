package peers

import (
	"errors"
	"fmt"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport"
)

// ErrConfig is matched by every error Config.Validate and New return for a Config that
// cannot work: a missing NodeID or PeerURL, a TTL below one second, a negative hold-down. Those
// errors are *ConfigError values, which name the field.
var ErrConfig = errors.New("peers: invalid config")

// A ConfigError reports the field of a Config that Config.Validate refused (cache.ConfigError,
// the one config error type), so that a program that fills the Config from its own settings (a
// daemon's flags) can name the setting at fault. This package's match ErrConfig.
type ConfigError = cache.ConfigError

// fieldError returns a *ConfigError for field, its reason formatted as by fmt.Sprintf.
func fieldError(field, format string, args ...any) error {
	return &ConfigError{Err: ErrConfig, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ErrBadPeerURL is returned, wrapped with the offending value, for a peer URL that is not an
// absolute http or https URL with a host: it is transport.ErrBadPeer, as the rule is the
// transport's.
var ErrBadPeerURL = transport.ErrBadPeer

// ErrBadMember is returned, wrapped with the reason, when a value found under the members
// prefix does not describe a member: bad JSON, an ID that does not match its key, a bad peer
// URL or weight. The registry logs such values and treats the member as absent.
var ErrBadMember = errors.New("peers: bad member description")
