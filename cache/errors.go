package cache

import (
	"errors"
	"fmt"
)

// Errors returned by groups. Callers test them with errors.Is; the transport
// maps them to HTTP status codes in one place.
var (
	// ErrNotFound means the origin says the key does not exist. It is never
	// cached as a value; a group may remember it for NotFoundTTL.
	ErrNotFound = errors.New("cache: not found")

	// ErrNoSuchGroup is returned for a group name a Node does not have.
	ErrNoSuchGroup = errors.New("cache: no such group")

	// ErrGroupExists is returned by NewGroup for a name already in use.
	ErrGroupExists = errors.New("cache: group already exists")

	// ErrBadKey is returned for an empty key.
	ErrBadKey = errors.New("cache: bad key")

	// ErrTooLarge is returned by Set and PeerView.Set for a value larger than
	// the group's MaxValueBytes, and, wrapped in ErrLoad, by Get when the
	// origin returned such a value: the one rule for every origin and for
	// writes. A value too large to cache is refused rather than served
	// uncached, so that its key costs one origin load per ErrorTTL instead
	// of one per request.
	ErrTooLarge = errors.New("cache: value too large")

	// ErrNotOwner is returned by PeerView.Set and PeerView.Remove on a node that
	// does not own the key by its ring (or cannot be sure it still does),
	// and by Set and Remove when the peer they sent the write to said so:
	// the write was not applied. It happens while a membership change
	// settles; a retry after a moment goes to the new owner.
	ErrNotOwner = errors.New("cache: not the key's owner")

	// ErrConfig is returned by NewGroup for an invalid GroupConfig, as a
	// *ConfigError that names the field.
	ErrConfig = errors.New("cache: invalid config")

	// ErrLoad wraps every failure of the origin (a Getter error or panic),
	// so that a caller can tell "the origin failed" from "the key is absent".
	// A deadline is reported as context.DeadlineExceeded as well.
	ErrLoad = errors.New("cache: load failed")

	// ErrOverloaded is returned by Get when the key had to be loaded from
	// the origin and the group's load queue shed it (GroupConfig.MaxLoads,
	// LoadQueue, LoadQueueWait): the origin is busy, retry in a moment. It
	// is not remembered as a failure, and a value within its
	// stale-if-error window is served instead.
	ErrOverloaded = errors.New("cache: origin overloaded")

	// ErrOwnerUnreachable is returned by Get for a key that was written at
	// its owner (this node applied, forwarded or was told of the write)
	// when the owner's value cannot be read now: the owner cannot be
	// reached and no heir holds a copy, or the owner is this node and its
	// tenure is in doubt (Config.Tenure) or it may have missed a purge
	// (Config.Current). The origin's value is older than the written one,
	// so none is loaded in its place. It passes when the owner answers
	// again (its tenure is settled, it reads the purge log), or when the
	// ring gives the key to another node.
	ErrOwnerUnreachable = errors.New("cache: key written at its owner, which cannot be reached")

	// ErrPurgeNotRecorded is returned by a Purger (Purge, PurgePrefix)
	// that could not write the purge to its purge log (etcd out of
	// reach): nothing was purged.
	ErrPurgeNotRecorded = errors.New("the purge could not be recorded")
)

// A ConfigError reports the field of a config that its Validate refused,
// so that a program that fills the config from its own settings (a daemon's
// flags, its group descriptions) can name the setting at fault. It is the
// one config error of ringcache's packages (transport.ConfigError and
// peers.ConfigError are this type), and it matches its package's
// ErrConfig.
type ConfigError struct {
	// Err is the ErrConfig of the package whose config it is; nil for a
	// GroupConfig (this package's).
	Err error
	// Group is the group's name, for a GroupConfig; empty if that is what
	// is missing.
	Group string
	// Field is the field as Go spells it: "TTL", "HotBytes", "Replicas".
	Field string
	// Reason is the field's value and what a valid one is: "-1s: must not
	// be negative".
	Reason string
}

// Error returns "cache: invalid config: group "Group": Field: Reason" for
// a GroupConfig, and "<package>: invalid config: Field: Reason" for
// another.
func (e *ConfigError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%v: group %q: %s: %s", ErrConfig, e.Group, e.Field, e.Reason)
	}
	return fmt.Sprintf("%v: %s: %s", e.Err, e.Field, e.Reason)
}

// Unwrap returns Err, or ErrConfig for a GroupConfig.
func (e *ConfigError) Unwrap() error {
	if e.Err == nil {
		return ErrConfig
	}
	return e.Err
}
