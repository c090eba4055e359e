package peers

import (
	"cmp"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Setter receives the whole member set, as sorted and deduplicated peer URLs, each time it
// changes; the transport's Pool satisfies it: its Set builds a new ring and swaps it in. A
// Registry calls Set from one goroutine at a time and never while holding a lock of its own.
// The URLs were checked before they were sent, so an error means the Setter refused a member
// set that peers accepted (a weight its ring cannot hold, say): the Registry logs it, and the
// Setter keeps the ring it had.
type Setter interface {
	Set(peers ...string) error
}

// WeightedSetter is an optional interface for a Setter that can build a weighted ring. When
// the Setter in Config also implements it, the Registry calls SetWeighted instead of Set:
// with every peer URL of the member set mapped to its member's Weight (1 to MaxWeight; if two
// members announce the same URL, the larger weight), each time a URL or a weight changes, so
// a member that restarts with another weight reaches the ring too. The map is the callee's
// to keep. Calls follow Set's rules: one at a time, never while the Registry holds a lock.
// The transport's Pool implements it by building its ring with
// consistenthash.Map.AddWeighted.
type WeightedSetter interface {
	SetWeighted(weights map[string]int) error
}

// Defaults, used for the zero value of the matching Config field.
const (
	DefaultCluster      = "default"
	DefaultTTL          = 5 * time.Second
	DefaultHoldDown     = 2 * time.Second
	DefaultConfirmDelay = 10 * time.Second
	DefaultDialTimeout  = 5 * time.Second
)

// Config configures a Registry. The zero value of each field is documented; NodeID, PeerURL
// and one of Client or Endpoints are required.
type Config struct {
	// Client is the etcd client to use; the Registry leaves it open on Close. If nil, New
	// connects to Endpoints and Close closes that client.
	Client *clientv3.Client
	// Endpoints are etcd client URLs, used only when Client is nil.
	Endpoints []string
	// DialTimeout bounds the first connection to Endpoints. If zero, 5s.
	DialTimeout time.Duration

	// Cluster names the ring; nodes of different clusters can share an etcd. If empty,
	// "default".
	Cluster string
	// Prefix is the etcd key prefix under which members register, ending in "/". If empty,
	// "/ringcache/<Cluster>/members/".
	Prefix string

	// NodeID identifies this node: 1 to 128 characters from [A-Za-z0-9._:-]. Required. Its
	// key is Prefix+NodeID.
	NodeID string
	// PeerURL is the absolute http(s) URL other nodes use to reach this one. Required.
	PeerURL string
	// Weight is this node's relative share of the ring, 1 to MaxWeight. If zero, 1.
	Weight int
	// Version is announced for operators (for example the build version). If empty, none.
	Version string

	// TTL is the lease time to live, a whole number of seconds of at least 1s (etcd raises
	// TTLs below its own minimum, about 2s). A crashed node is dropped about TTL+HoldDown
	// after its last keepalive. If zero, 5s.
	TTL time.Duration
	// HoldDown is how long a member must stay absent before it is removed from the ring, so
	// that a lease lost and put again during an etcd outage does not flap the ring. Graceful
	// leaves skip it. If zero, 2s.
	HoldDown time.Duration
	// ConfirmDelay holds back, beyond HoldDown, removals while half of the members or more
	// are missing at once (whether or not their hold-downs have ended): such a change more
	// likely means an etcd problem than half of the cluster crashing. If zero, 10s.
	ConfirmDelay time.Duration

	// Logger receives membership changes, lease losses and etcd errors. If nil, logs are
	// discarded.
	Logger *slog.Logger
	// Setter receives the member set after every change, and once from New; if it also
	// implements WeightedSetter, it receives the weights through SetWeighted instead. If
	// nil, the member set is only visible through State.
	Setter Setter

	// Placer, if not nil, places this node on a ring of explicit arcs shared through etcd:
	// each registration claims positions in one transaction (see Placer), the Member value
	// carries them, and the Setter, which must implement RangesSetter, receives every
	// member's positions. Weight must then be 1. If nil, no positions are stored and the
	// Setter builds a hashed ring from the member set.
	Placer Placer

	// beforeCommit, if not nil, runs in each join transaction between the read and the
	// commit: tests use it to make two joins race deterministically.
	beforeCommit func(attempt int)
}

// DefaultConfig returns a Config with every defaulted field set to its default; the caller
// fills in NodeID, PeerURL and Endpoints or Client.
func DefaultConfig() Config {
	return Config{
		DialTimeout:  DefaultDialTimeout,
		Cluster:      DefaultCluster,
		Weight:       1,
		TTL:          DefaultTTL,
		HoldDown:     DefaultHoldDown,
		ConfirmDelay: DefaultConfirmDelay,
	}
}

// Validate reports whether New would accept c, without connecting to anything: nil, or a
// *ConfigError naming the first field at fault. Zero fields are valid: they select the defaults
// documented on each field. New applies the same rules, and never adjusts a bad value.
func (c Config) Validate() error {
	const idChars = "want 1 to 128 characters from [A-Za-z0-9._:-]"
	switch {
	case c.Client == nil && len(c.Endpoints) == 0:
		return fieldError("Endpoints", "none: need Client or Endpoints")
	case c.DialTimeout < 0:
		return fieldError("DialTimeout", "%v: must not be negative", c.DialTimeout)
	case c.Cluster != "" && !checkID(c.Cluster):
		return fieldError("Cluster", "%q: %s", c.Cluster, idChars)
	case c.Prefix != "" && !strings.HasSuffix(c.Prefix, "/"):
		return fieldError("Prefix", "%q: must end in /", c.Prefix)
	case !checkID(c.NodeID):
		return fieldError("NodeID", "%q: %s", c.NodeID, idChars)
	}
	if err := checkPeerURL(c.PeerURL); err != nil {
		return fieldError("PeerURL", "%v", err)
	}
	if c.Weight < 0 || c.Weight > MaxWeight {
		return fieldError("Weight", "%d: want 1 to %d", c.Weight, MaxWeight)
	}
	if c.Placer != nil {
		if c.Weight > 1 {
			return fieldError("Weight", "%d: want 1 with a Placer: a ring of explicit arcs (ranges) gives every member an equal share", c.Weight)
		}
		if _, ok := c.Setter.(RangesSetter); c.Setter != nil && !ok {
			return fieldError("Setter", "%T: a Placer needs a Setter that implements RangesSetter", c.Setter)
		}
	}
	// etcd grants leases in whole seconds.
	if c.TTL != 0 && (c.TTL < time.Second || c.TTL%time.Second != 0) {
		return fieldError("TTL", "%v: want a whole number of seconds, at least 1s", c.TTL)
	}
	if c.HoldDown < 0 {
		return fieldError("HoldDown", "%v: must not be negative", c.HoldDown)
	}
	if c.ConfirmDelay < 0 {
		return fieldError("ConfirmDelay", "%v: must not be negative", c.ConfirmDelay)
	}
	return nil
}

// withDefaults validates c and returns it with zero values replaced by defaults.
func (c Config) withDefaults() (Config, error) {
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	c.DialTimeout = cmp.Or(c.DialTimeout, DefaultDialTimeout)
	c.Cluster = cmp.Or(c.Cluster, DefaultCluster)
	c.Prefix = cmp.Or(c.Prefix, "/ringcache/"+c.Cluster+"/members/")
	c.Weight = cmp.Or(c.Weight, 1)
	c.TTL = cmp.Or(c.TTL, DefaultTTL)
	c.HoldDown = cmp.Or(c.HoldDown, DefaultHoldDown)
	c.ConfirmDelay = cmp.Or(c.ConfirmDelay, DefaultConfirmDelay)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}
