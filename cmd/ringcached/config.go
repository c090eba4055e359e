package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ringcache/ringcache/consistenthash"
	"github.com/ringcache/ringcache/internal/listen"
	"github.com/ringcache/ringcache/peers"
	"github.com/ringcache/ringcache/transport"
)

// errConfig is wrapped by every configuration error; the message after it
// names the field at fault.
var errConfig = errors.New("ringcached: invalid config")

// envPrefix starts the environment variable of every flag.
const envPrefix = "RINGCACHE_"

// Config is the daemon's configuration. It is built from DefaultConfig, then
// the YAML file named by -config, then the environment, then the flags: each
// layer overrides the ones before it, field by field.
type Config struct {
	Listen          string        // public API, and peer routes unless PeerListen
	PeerListen      string        // if not empty, the peer routes' own address
	PeerURL         string        // if empty, http://<hostname>:<peer port>
	Etcd            []string      // etcd endpoints; empty: static membership
	Peers           []string      // static peer URLs, when Etcd is empty
	Cluster         string        // the ring's name in etcd
	NodeID          string        // if empty, the host name
	LeaseTTL        time.Duration // etcd lease
	HoldDown        time.Duration // how long a vanished member stays
	Secret          string        // if not empty, peer requests are signed
	ConfigFile      string        // the YAML file read, for messages
	LogLevel        string        // debug, info, warn or error
	LogFormat       string        // text or json
	MaxKeyBytes     int           // longest key accepted
	Hash            string        // ring hash, by consistenthash.HashByName
	Replicas        int           // ring points per node
	Weight          int           // this node's points: Weight × Replicas
	Placement       string        // "hashed" (replicas from names), "ranges" (arcs in etcd) or "auto"; see placement
	Positions       int           // ranges: positions a joining node takes
	ShutdownTimeout time.Duration // bound on a graceful stop
	PeerTimeout     time.Duration // how long a peer may stay silent
	CopyLease       time.Duration // how long copies of a peer's values outlive contact with it
	PurgeLease      time.Duration // how long a node serves from its caches without reading the purge log
	Copies          int           // nodes that hold each value, for groups that do not say
	RepairRate      int64         // bytes a second of copies sent after a membership change; negative: no bound
	CoalesceFetches bool          // concurrent fetches to one peer share requests
	MemoryLimit     int64         // soft memory limit: 0 derives it from the budgets, negative is none
	Groups          []GroupSpec

	// Peer security besides Secret (security.go).
	SecretFile    string // if not empty, the file of secrets, one a line
	InsecurePeers bool   // allow open peer routes on a non-loopback address
	PeerCA        string // mutual TLS between peers: the CA file,
	PeerCert      string // this node's certificate file
	PeerKey       string // and its key file

	Public PublicConfig // the public API's access, TLS and limits
}

// PublicConfig is the public API's access, TLS and limits.
type PublicConfig struct {
	WriteToken        string        // bearer token for PUT and DELETE
	WriteTokenFile    string        // file of write tokens, one a line; reread on SIGHUP
	OpenWrites        bool          // PUT and DELETE without a token
	ReadToken         string        // if set, GET and HEAD need a token too
	ReadTokenFile     string        // file of read tokens; reread on SIGHUP
	AdminListen       string        // if set, /metrics and /debug/* listen here only
	TLSCert, TLSKey   string        // PEM files of the public listener; reread on SIGHUP
	MaxConns          int           // open connections per listener
	MaxConnsPerClient int           // of them per client address; 0 (off): no cap
	IdleTimeout       time.Duration // idle keep-alive connections are closed after it
	ReadHeaderTimeout time.Duration // a request's headers must arrive within it
	HTTPServer        string        // the public listener's server: auto, net/http or fasthttp
	ClientMisses      int           // misses in flight per client; 0 (off): no limit
	ClientMissRate    float64       // misses per second per client; 0 (off): no limit
	ClientMissBurst   int           // burst of ClientMissRate; 0: twice the rate
}

// GroupSpec describes one group and its origin. Zero values select the
// defaults documented in groupFields.
type GroupSpec struct {
	Name                 string
	Origin               string // "demo", "http" or "dir"
	URL                  string // http: URL template with {group} and {key}
	Dir                  string // dir: the directory
	Bytes                int64
	HotBytes             int64  // 0: Bytes/8; negative: no hot cache
	Policy               string // "": cache.PolicySLRU
	Copies               int    // 0: Config.Copies
	TTL                  time.Duration
	NotFoundTTL          time.Duration
	ErrorTTL             time.Duration // 0: the cache's default; negative: off
	StaleWhileRevalidate time.Duration
	StaleIfError         time.Duration
	LoadTimeout          time.Duration
	MaxValueBytes        int64
	Timeout              time.Duration // http: per request
	DemoSize             int
	DemoLatency          time.Duration
	MaxLoads             int           // 0: the cache's default; negative: no bound
	LoadQueue            int           // 0: the cache's default; negative: none wait
	LoadQueueWait        time.Duration // 0: the cache's default
}

// Ring placements.
const (
	placementHashed = "hashed"
	placementRanges = "ranges"
	// placementAuto, the default, is ranges where the members are in etcd
	// and all weigh 1, and hashed otherwise: explicit arcs keep the
	// busiest node within 1.05 of the mean share at 3 to 100 nodes, where
	// 160 hashed points per node leave it at 1.06 to 1.25 (`ringcache
	// ring`); static peers have nowhere to agree on arcs, and weights are
	// points.
	placementAuto = "auto"
)

// placement returns the ring placement the node uses: c.Placement, auto
// resolved.
func (c *Config) placement() string {
	if c.Placement != placementAuto {
		return c.Placement
	}
	if len(c.Etcd) > 0 && c.Weight == 1 {
		return placementRanges
	}
	return placementHashed
}

// Origins a group can have.
const (
	originDemo = "demo"
	originHTTP = "http"
	originDir  = "dir"
)

// defaultGroupBytes is a group's memory budget when none is given: the cache
// needs one (cache.GroupConfig.MaxBytes has no default), and a quick start
// should need none.
const defaultGroupBytes = 64 << 20

// DefaultConfig returns the configuration used for everything the flags,
// the environment and the file leave unset: the libraries' defaults (their
// DefaultConfig and constants), and the daemon's own choices for what only
// it has or where it departs from a library (the ring: see the hash
// setting). NodeID and PeerURL stay empty: they are derived from the host
// name and the listener when the node starts.
func DefaultConfig() Config {
	pc, tc := peers.DefaultConfig(), transport.DefaultConfig()
	return Config{
		Listen:          ":8080",
		Cluster:         pc.Cluster,
		LeaseTTL:        pc.TTL,
		HoldDown:        pc.HoldDown,
		LogLevel:        "info",
		LogFormat:       "text",
		MaxKeyBytes:     tc.MaxKeyBytes,
		Hash:            "xxhash",
		Replicas:        160,
		Weight:          pc.Weight,
		Placement:       placementAuto,
		Positions:       consistenthash.DefaultPositions,
		ShutdownTimeout: 10 * time.Second,
		PeerTimeout:     tc.PeerTimeout,
		CopyLease:       tc.LeaseTTL,
		PurgeLease:      tc.PurgeLease,
		Copies:          1,
		RepairRate:      tc.RepairRate,
		CoalesceFetches: !tc.DisableCoalescing,
		Public: PublicConfig{
			MaxConns:          listen.DefaultMaxConns,
			IdleTimeout:       listen.ServerIdleTimeout,
			ReadHeaderTimeout: listen.ServerReadHeaderTimeout,
			HTTPServer:        serverAuto,
			// No per-client caps by default (api.ClientLimitConfig
			// says why); each group's load bound protects the origin.
		},
	}
}

// loadConfig builds the configuration of "serve" from args (the flags after
// the subcommand) and the environment. It returns flag.ErrHelp after writing
// the usage to out for -h or -help.
func loadConfig(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	fs := flag.NewFlagSet("ringcached serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // our own usage and errors, below
	fs.Usage = func() {}
	// The flags only record their raw values here; they are applied last,
	// over the file and the environment.
	type rawFlag struct {
		s     setting
		value string
	}
	var flags []rawFlag
	for _, s := range settings {
		record := func(v string) error { flags = append(flags, rawFlag{s, v}); return nil }
		if s.flag {
			fs.BoolFunc(s.name, s.usage, record)
			continue
		}
		fs.Func(s.name, s.usage, record)
	}
	var groupFlags []string
	fs.Func("group", "", func(v string) error { groupFlags = append(groupFlags, v); return nil })
	var configFile string
	configSet := false
	fs.Func("config", "", func(v string) error { configFile, configSet = v, true; return nil })

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(out)
			return Config{}, err
		}
		return Config{}, fmt.Errorf("%w: %v (see -help)", errConfig, err)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("%w: unexpected argument %q (see -help)", errConfig, fs.Arg(0))
	}

	cfg := DefaultConfig()
	if !configSet {
		configFile = getenv(envName("config"))
	}
	if configFile != "" {
		data, err := os.ReadFile(configFile)
		if err != nil {
			return Config{}, fmt.Errorf("%w: config: %v", errConfig, err)
		}
		if err := decodeYAML(&cfg, data); err != nil {
			return Config{}, fmt.Errorf("%w: config file %s: %v", errConfig, configFile, err)
		}
		cfg.ConfigFile = configFile
	}

	flagged := make(map[string]bool, len(flags))
	for _, f := range flags {
		flagged[f.s.name] = true
	}
	for _, s := range settings {
		if flagged[s.name] {
			continue
		}
		if v := getenv(envName(s.name)); v != "" {
			if err := s.set(&cfg, v); err != nil {
				return Config{}, fmt.Errorf("%w: %s: %v", errConfig, envName(s.name), err)
			}
		}
	}
	for _, f := range flags {
		if err := f.s.set(&cfg, f.value); err != nil {
			return Config{}, fmt.Errorf("%w: -%s: %v", errConfig, f.s.name, err)
		}
	}

	// Groups add up: the file's, then the flags' (or, without any -group
	// flag, the environment's, separated by ';').
	source := "-group"
	if len(groupFlags) == 0 {
		if v := getenv(envName("group")); v != "" {
			groupFlags = splitOn(v, ";")
			source = envName("group")
		}
	}
	for i, v := range groupFlags {
		g, err := parseGroupFlag(v)
		if err != nil {
			return Config{}, fmt.Errorf("%w: %s #%d %q: %v", errConfig, source, i+1, v, err)
		}
		cfg.Groups = append(cfg.Groups, g)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
