package peers

import "errors"

// ErrInvalidConfig is returned by New, wrapped with the field at fault, when a Config cannot
// work: a missing NodeID or PeerURL, a TTL below one second, a negative hold-down.
var ErrInvalidConfig = errors.New("peers: invalid config")

// ErrBadPeerURL is returned, wrapped with the offending value, for a peer URL that is not an
// absolute http or https URL with a host.
var ErrBadPeerURL = errors.New("peers: bad peer url")

// ErrBadMember is returned, wrapped with the reason, when a value found under the members
// prefix does not describe a member: bad JSON, an ID that does not match its key, a bad peer
// URL or weight. The registry logs such values and treats the member as absent.
var ErrBadMember = errors.New("peers: bad member description")
