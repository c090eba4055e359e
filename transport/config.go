package transport

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/consistenthash"
	"github.com/ringcache/ringcache/transport/api"
)

// Defaults applied to a zero Config field.
const (
	DefaultBasePath            = "/_groupcache/" // groupcache's
	DefaultReplicas            = 50              // groupcache's
	DefaultPeerTimeout         = time.Second
	DefaultLeaseTTL            = time.Second
	DefaultDialTimeout         = time.Second
	DefaultMaxResponseBytes    = 64 << 20
	DefaultMaxIdleConnsPerHost = 64
	DefaultSignatureWindow     = 30 * time.Second
	DefaultMaxNonces           = 1 << 18
	DefaultPurgeLease          = 2 * time.Minute
	DefaultRepairRate          = 32 << 20
)

// Config configures a Pool. A groupcache peer interoperates when BasePath,
// Replicas and Hash match its HTTPPoolOptions, without Secrets or TLS.
type Config struct {
	// Self is this node's base URL as its peers reach it, for example
	// "http://10.0.0.1:8080". Required. It is always a member of the ring.
	Self string

	// BasePath is the path under which peers are served. If empty,
	// "/_groupcache/" (groupcache's). It must start and end with "/".
	BasePath string

	// Replicas is the number of points per member on the ring, at most
	// consistenthash.MaxPoints. If zero, 50 (groupcache's). Every node of a
	// cluster must use the same value.
	Replicas int

	// MaxWeight, if not zero, is the heaviest weight the caller may give a
	// member through SetWeighted (peers.MaxWeight with an etcd membership,
	// where any member may announce up to that). NewPool then refuses a
	// Replicas for which a member that heavy would need more than
	// consistenthash.MaxPoints points, so that the configuration fails at
	// start rather than when such a member joins (SetWeighted would refuse
	// its weight). If zero, Replicas is checked as for weight 1.
	MaxWeight int

	// Hash places members and keys on the ring. If nil,
	// consistenthash.CRC32 (groupcache's). Every node of a cluster must use
	// the same function.
	Hash consistenthash.Hash

	// PeerTimeout is how long a peer may stay silent: a request fails, and
	// the peer is suspected (its keys fall back to local loads until it
	// answers a probe), when no byte of an answer arrives for this long. An
	// owner that is loading a key sends 102 Processing every PeerTimeout/3,
	// so a slow origin is waited for, up to the group's LoadTimeout, while
	// a hung or paused owner is noticed within PeerTimeout. If zero, 1s.
	// Keep it well above the network's round trip and the longest GC or
	// scheduling pause of a node. (A groupcache peer sends no 102: its
	// origin loads must finish within PeerTimeout or the requester loads
	// the key itself.)
	PeerTimeout time.Duration

	// LeaseTTL is how long a contact lease lasts: how long a node may serve
	// its copies of a peer's values after it last heard from that peer, and
	// so how long a write can wait for a node it cannot reach. If zero, 1s.
	LeaseTTL time.Duration

	// DialTimeout bounds connecting to a peer, name lookup included. If
	// zero, 1s (capped at PeerTimeout). A peer that could not be dialled is
	// suspected like a silent one, so that while a dead node is still in
	// the ring (its lease and hold-down running out) requests for its keys
	// fall back to a local load at once instead of each waiting to fail.
	DialTimeout time.Duration

	// PurgeLease bounds how long a node with a purge log (etcd membership)
	// serves from its caches after it last read the log, itself or through
	// a peer that had (lookups stop 1/16 of it early: they read a flag a
	// timer keeps, not the clock): past it the node serves every read from
	// the origin, keeping its caches, until it reads the log again. It is
	// how long a purge waits for a node it cannot reach before it returns
	// (a node it reached answers at once), and, less 1/16 of it and the
	// age of the last read (the log is read every 5 s, or every quarter of
	// the lease if shorter), how long etcd can be out of reach of every
	// node before the caches stop serving: 107 s at the default, so that a
	// bad minute of etcd (an election, a slow disk, a paused VM) costs the
	// caches nothing. If zero, 2m; at most 5m.
	PurgeLease time.Duration

	// RepairRate bounds the bytes a second of copies that a node sends
	// after a ring change to the heirs its keys gained (groups with
	// cache.GroupConfig.Copies > 1): repair is background traffic, and
	// must leave the peer links to requests. If zero, 32 MiB/s
	// (DefaultRepairRate); negative: no bound.
	RepairRate int64

	// MaxResponseBytes bounds a value read from a peer; a larger response
	// is an ErrBadResponse (and the caller loads locally). If zero, 64 MiB.
	// It only protects this node from a broken peer: keep it above every
	// group's MaxValueBytes.
	MaxResponseBytes int64

	// MaxIdleConnsPerHost is how many keep-alive connections to each peer
	// stay open between requests. If zero, 64. groupcache's default
	// transport keeps 2, so under load it opens a new TCP connection for
	// most peer requests; size this to the concurrency of peer fetches.
	MaxIdleConnsPerHost int

	// MaxKeyBytes bounds a key arriving on the peer route. If zero, 250.
	MaxKeyBytes int

	// Secrets, if not empty, make every peer request carry an HMAC-SHA256
	// signature, with the first secret, over its method, target node, path,
	// date, a random nonce, the body (PUT) and the headers the receiver acts
	// on; and the peer handler refuse (401), before it touches a group, any
	// request not signed with one of them, dated outside SignatureWindow, or
	// whose nonce it has seen (a replay). Every node must accept the secret
	// the others sign with; several are for a rotation (Pool.SetSecrets). At
	// most MaxSecrets, each of at least MinSecretBytes. Secrets authenticate
	// peers; they do not encrypt: use
	// TLS for confidentiality. Empty: peer requests are not signed (and a
	// groupcache peer can take part).
	Secrets [][]byte

	// SignatureWindow is how far a signed request's date may be from the
	// receiver's clock. If zero, 30s. Nonces are remembered that long.
	SignatureWindow time.Duration

	// MaxNonces bounds the nonces remembered against replays. If zero,
	// 262,144 (60 bytes each, about 16 MB; at 30 s, 8,700 peer requests a second keep
	// every nonce for the whole window). Past the bound the oldest are
	// forgotten and every request dated before them refused, which
	// narrows the window for peers with lagging clocks but never lets a
	// replay through.
	MaxNonces int

	// TLS, if not nil, makes the Pool dial its peers with mutual TLS
	// through it (NewPeerTLS) and refuse to send anything to a peer whose
	// URL is not https. Nil: plain HTTP, and https peer URLs use the
	// system's roots without a client certificate.
	TLS *PeerTLS

	// DisableCoalescing makes every fetch from a peer a request of its own.
	// By default, while a fetch to a peer is in flight, the next fetches to
	// it for one group wait and go together in one request (at most 64
	// keys), which the peer answers from its caches; keys it would have to
	// load are then fetched alone (see the package doc). Peers that do not
	// take such requests, groupcache's among them, are asked one key at a
	// time either way.
	DisableCoalescing bool

	// Logger receives membership changes and refused peer requests. If nil,
	// logs are discarded.
	Logger *slog.Logger

	// OnPeerRequest, if not nil, is called after every request this node
	// makes to a peer, with the peer's base URL, the operation ("get",
	// "batch", "handoff", "set", "remove", "drop", "adopt"; lease pings are
	// not reported), how long it took and its error (nil on success;
	// errors.Is(err, cache.ErrNotFound) when the key is absent). It runs on
	// the requesting goroutine and must be quick: it is meant for metrics.
	OnPeerRequest func(peer, op string, d time.Duration, err error)
}

// DefaultConfig returns a Config with every default filled in but Self and
// DialTimeout, whose default follows PeerTimeout (so a caller that lowers
// PeerTimeout lowers it too), and Logger (nil: discard).
func DefaultConfig() Config {
	return Config{
		BasePath:            DefaultBasePath,
		Replicas:            DefaultReplicas,
		Hash:                consistenthash.CRC32,
		PeerTimeout:         DefaultPeerTimeout,
		LeaseTTL:            DefaultLeaseTTL,
		PurgeLease:          DefaultPurgeLease,
		RepairRate:          DefaultRepairRate,
		MaxResponseBytes:    DefaultMaxResponseBytes,
		MaxIdleConnsPerHost: DefaultMaxIdleConnsPerHost,
		MaxKeyBytes:         api.DefaultMaxKeyBytes,
		SignatureWindow:     DefaultSignatureWindow,
		MaxNonces:           DefaultMaxNonces,
	}
}

// Validate reports whether NewPool would accept c: nil, or a *ConfigError
// naming the first field at fault. Zero fields are valid: they select the
// defaults documented on each field. NewPool applies the same rules, and
// never adjusts a bad value.
func (c Config) Validate() error {
	if _, err := normalizePeer(c.Self); err != nil {
		return fieldError("Self", "%q: want http(s)://host[:port][/path]", c.Self)
	}
	if c.BasePath != "" {
		if !strings.HasPrefix(c.BasePath, "/") || !strings.HasSuffix(c.BasePath, "/") {
			return fieldError("BasePath", "%q: must start and end with /", c.BasePath)
		}
		if escapeBasePath(c.BasePath) != c.BasePath {
			return fieldError("BasePath", "%q: must need no escaping", c.BasePath)
		}
	}
	if c.Replicas < 0 || c.Replicas > consistenthash.MaxPoints {
		return fieldError("Replicas", "%d: want 1 to %d", c.Replicas, consistenthash.MaxPoints)
	}
	if c.MaxWeight < 0 {
		return fieldError("MaxWeight", "%d: must not be negative", c.MaxWeight)
	}
	if replicas := cmp.Or(c.Replicas, DefaultReplicas); c.MaxWeight > 1 && replicas > consistenthash.MaxPoints/c.MaxWeight {
		return fieldError("Replicas", "%d: want at most %d, so that a member of weight %d fits on the ring (%d points at most)",
			replicas, consistenthash.MaxPoints/c.MaxWeight, c.MaxWeight, consistenthash.MaxPoints)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"PeerTimeout", c.PeerTimeout}, {"LeaseTTL", c.LeaseTTL}, {"DialTimeout", c.DialTimeout}, {"SignatureWindow", c.SignatureWindow},
		{"PurgeLease", c.PurgeLease},
	} {
		if d.v < 0 {
			return fieldError(d.field, "%v: must not be negative", d.v)
		}
	}
	if c.PurgeLease > cache.MaxPurgeLease {
		return fieldError("PurgeLease", "%v: at most %v (a purge waits up to this for its answer)", c.PurgeLease, cache.MaxPurgeLease)
	}
	for _, n := range []struct {
		field string
		v     int64
	}{
		{"MaxResponseBytes", c.MaxResponseBytes}, {"MaxIdleConnsPerHost", int64(c.MaxIdleConnsPerHost)},
		{"MaxKeyBytes", int64(c.MaxKeyBytes)}, {"MaxNonces", int64(c.MaxNonces)},
	} {
		if n.v < 0 {
			return fieldError(n.field, "%d: must not be negative", n.v)
		}
	}
	_, err := checkSecrets(c.Secrets)
	return err
}

// withDefaults validates c and fills its zero fields.
func (c Config) withDefaults() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	c.Self, _ = normalizePeer(c.Self)
	c.BasePath = cmp.Or(c.BasePath, DefaultBasePath)
	c.Replicas = cmp.Or(c.Replicas, DefaultReplicas)
	if c.Hash == nil {
		c.Hash = consistenthash.CRC32
	}
	c.PeerTimeout = cmp.Or(c.PeerTimeout, DefaultPeerTimeout)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	c.PurgeLease = cmp.Or(c.PurgeLease, DefaultPurgeLease)
	c.RepairRate = cmp.Or(c.RepairRate, DefaultRepairRate)
	c.DialTimeout = cmp.Or(c.DialTimeout, min(DefaultDialTimeout, c.PeerTimeout))
	c.MaxResponseBytes = cmp.Or(c.MaxResponseBytes, DefaultMaxResponseBytes)
	c.MaxIdleConnsPerHost = cmp.Or(c.MaxIdleConnsPerHost, DefaultMaxIdleConnsPerHost)
	c.MaxKeyBytes = cmp.Or(c.MaxKeyBytes, api.DefaultMaxKeyBytes)
	c.SignatureWindow = cmp.Or(c.SignatureWindow, DefaultSignatureWindow)
	c.MaxNonces = cmp.Or(c.MaxNonces, DefaultMaxNonces)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	// Copy the secrets so that a caller reusing its slices cannot change them.
	c.Secrets, _ = checkSecrets(c.Secrets)
	return c, nil
}

// escapeBasePath escapes each segment of p, to check that p is already in
// the form a request carries.
func escapeBasePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if s != "" {
			segs[i] = escapeSegment(s)
		}
	}
	return strings.Join(segs, "/")
}

// CheckPeerURL reports whether s may be a member's base URL: http or https,
// with a host and without user, query or fragment. A path is allowed (a
// node behind a proxy that strips it). Config.Self, Pool.Set and the members
// a membership hands over follow this rule; a daemon that checks URLs
// before it starts asks here rather than restating it.
func CheckPeerURL(s string) error {
	_, err := normalizePeer(s)
	return err
}

// normalizePeer checks that s is an http or https base URL with a host and
// no query, and strips a trailing slash so that "http://a/" and "http://a"
// name the same member (the ring hashes the string).
func normalizePeer(s string) (string, error) {
	u, err := url.Parse(s)
	why := ""
	switch {
	case err != nil:
		why = err.Error()
	case u.Scheme != "http" && u.Scheme != "https":
		why = "scheme must be http or https"
	case u.Host == "" || u.Opaque != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		why = "want http(s)://host[:port][/path]"
	}
	if why != "" {
		return "", fmt.Errorf("%w %q: %s", ErrBadPeer, s, why)
	}
	return strings.TrimSuffix(s, "/"), nil
}
