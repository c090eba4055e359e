package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ringcache/ringcache/consistenthash"
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
	Placement       string        // "hashed" (replicas from names) or "ranges" (arcs in etcd)
	Positions       int           // ranges: positions a joining node takes
	ShutdownTimeout time.Duration // bound on a graceful stop
	PeerTimeout     time.Duration // how long a peer may stay silent
	CopyLease       time.Duration // how long copies of a peer's values outlive contact with it
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
	IdleTimeout       time.Duration // idle keep-alive connections are closed after it
	ReadHeaderTimeout time.Duration // a request's headers must arrive within it
	ClientMisses      int           // misses in flight per client; -1: no limit
	ClientMissRate    float64       // misses per second per client; -1: no limit
	ClientMissBurst   int           // burst of ClientMissRate
}

// GroupSpec describes one group and its origin. Zero values select the
// defaults documented in groupFields.
type GroupSpec struct {
	Name                 string
	Origin               string // "demo", "http" or "dir"
	URL                  string // http: URL template with {group} and {key}
	Dir                  string // dir: the directory
	Bytes                int64
	HotBytes             int64 // 0: Bytes/8; negative: no hot cache
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
}

// Ring placements.
const (
	placementHashed = "hashed"
	placementRanges = "ranges"
)

// Origins a group can have.
const (
	originDemo = "demo"
	originHTTP = "http"
	originDir  = "dir"
)

// defaultGroupBytes is a group's memory budget when none is given.
const defaultGroupBytes = 64 << 20

// DefaultConfig returns the configuration used for everything the flags,
// the environment and the file leave unset. NodeID and PeerURL stay empty:
// they are derived from the host name and the listener when the node starts.
func DefaultConfig() Config {
	return Config{
		Listen:          ":8080",
		Cluster:         peers.DefaultCluster,
		LeaseTTL:        peers.DefaultTTL,
		HoldDown:        peers.DefaultHoldDown,
		LogLevel:        "info",
		LogFormat:       "text",
		MaxKeyBytes:     transport.DefaultMaxKeyBytes,
		Hash:            "xxhash",
		Replicas:        160,
		Weight:          1,
		Placement:       placementHashed,
		Positions:       consistenthash.DefaultPositions,
		ShutdownTimeout: 10 * time.Second,
		PeerTimeout:     transport.DefaultPeerTimeout,
		CopyLease:       transport.DefaultLeaseTTL,
		Public: PublicConfig{
			MaxConns:          transport.DefaultMaxConns,
			IdleTimeout:       transport.ServerIdleTimeout,
			ReadHeaderTimeout: transport.ServerReadHeaderTimeout,
			ClientMisses:      transport.DefaultClientLimits.MaxMisses,
			ClientMissRate:    transport.DefaultClientLimits.MissRate,
			ClientMissBurst:   transport.DefaultClientLimits.MissBurst,
		},
	}
}

// A setting is one configuration field: its flag, its environment variable
// (envPrefix + the name in upper case, '-' as '_') and its YAML key all
// derive from name, so the three cannot drift apart.
type setting struct {
	name  string
	def   string // the default as README shows it
	usage string
	list  bool // a YAML sequence is accepted and joined with commas
	flag  bool // a boolean flag: "-name" alone means true
	set   func(c *Config, v string) error
}

// settings are the daemon's flags, in the order -help lists them. "group"
// and "config" are handled apart: one repeats, the other chooses the file.
var settings = []setting{
	{name: "listen", def: ":8080", usage: "address of the public API (and of the peer routes unless -peer-listen)",
		set: func(c *Config, v string) error { c.Listen = v; return nil }},
	{name: "peer-listen", def: `""`, usage: "separate address for the peer routes; empty: served on -listen",
		set: func(c *Config, v string) error { c.PeerListen = v; return nil }},
	{name: "peer-url", def: "http://<hostname>:<peer port>", usage: "base URL other nodes use to reach this node's peer routes",
		set: func(c *Config, v string) error { c.PeerURL = v; return nil }},
	{name: "etcd", def: `""`, list: true, usage: "comma-separated etcd endpoints; empty: static membership from -peers",
		set: func(c *Config, v string) error { c.Etcd = splitList(v); return nil }},
	{name: "peers", def: `""`, list: true, usage: "comma-separated peer URLs of the other nodes, when -etcd is empty",
		set: func(c *Config, v string) error { c.Peers = splitList(v); return nil }},
	{name: "cluster", def: peers.DefaultCluster, usage: "cluster name: the ring's key prefix in etcd",
		set: func(c *Config, v string) error { c.Cluster = v; return nil }},
	{name: "node-id", def: "<hostname>", usage: "this node's ID in etcd",
		set: func(c *Config, v string) error { c.NodeID = v; return nil }},
	{name: "lease-ttl", def: peers.DefaultTTL.String(), usage: "etcd lease TTL: a crashed node leaves the ring after about this plus -hold-down",
		set: func(c *Config, v string) error { return parseDuration(&c.LeaseTTL, v) }},
	{name: "hold-down", def: peers.DefaultHoldDown.String(), usage: "how long a member whose key vanished stays in the ring",
		set: func(c *Config, v string) error { return parseDuration(&c.HoldDown, v) }},
	// Peer security: the cluster secret, protected mode and mutual TLS
	// (security.go).
	{name: "secret", def: `""`, usage: "cluster secret (at least 16 bytes): peer requests are signed with HMAC-SHA256, unsigned and replayed ones refused; prefer -secret-file",
		set: func(c *Config, v string) error { c.Secret = v; return nil }},
	{name: "secret-file", def: `""`, usage: "file of cluster secrets, one a line: the first signs, all are accepted; re-read on SIGHUP and when it changes",
		set: func(c *Config, v string) error { c.SecretFile = v; return nil }},
	{name: "insecure-peers", def: "false", flag: true, usage: "let peer routes on a non-loopback address run without a secret or mutual TLS (groupcache peers need it)",
		set: func(c *Config, v string) error { return parseBool(&c.InsecurePeers, v) }},
	{name: "peer-ca", def: `""`, usage: "mutual TLS between peers: the CA file peers' certificates must chain to (needs -peer-listen; peer URLs are https)",
		set: func(c *Config, v string) error { c.PeerCA = v; return nil }},
	{name: "peer-cert", def: `""`, usage: "mutual TLS: this node's certificate file (server and client use), re-read on SIGHUP and when it changes",
		set: func(c *Config, v string) error { c.PeerCert = v; return nil }},
	{name: "peer-key", def: `""`, usage: "mutual TLS: this node's private key file",
		set: func(c *Config, v string) error { c.PeerKey = v; return nil }},
	{name: "log-level", def: "info", usage: "debug, info, warn or error",
		set: func(c *Config, v string) error { c.LogLevel = v; return nil }},
	{name: "log-format", def: "text", usage: "text or json",
		set: func(c *Config, v string) error { c.LogFormat = v; return nil }},
	{name: "max-key-bytes", def: strconv.Itoa(transport.DefaultMaxKeyBytes), usage: "longest key accepted, in bytes",
		set: func(c *Config, v string) error { return parseInt(&c.MaxKeyBytes, v) }},
	// xxhash with 160 points balances a small cluster within a few percent;
	// groupcache's defaults (crc32, 50) give three nodes shares as far apart
	// as 51% and 17%. Every node of a cluster must use the same two values.
	{name: "hash", def: "xxhash", usage: "ring hash: " + strings.Join(consistenthash.HashNames(), ", ") + " (crc32 with -replicas 50 to share a ring with groupcache)",
		set: func(c *Config, v string) error { c.Hash = v; return nil }},
	{name: "replicas", def: "160", usage: "ring points per node; the same on every node",
		set: func(c *Config, v string) error { return parseInt(&c.Replicas, v) }},
	{name: "weight", def: "1", usage: "this node's share of the ring relative to the others (a node with twice the memory: 2); needs -etcd",
		set: func(c *Config, v string) error { return parseInt(&c.Weight, v) }},
	{name: "placement", def: "hashed", usage: "ring placement: hashed (each node's -replicas points hashed from its URL) or ranges (explicit arcs stored in etcd; a joining node splits the largest arcs); the same on every node",
		set: func(c *Config, v string) error { c.Placement = v; return nil }},
	{name: "positions", def: strconv.Itoa(consistenthash.DefaultPositions), usage: "with -placement ranges: arcs a joining node takes",
		set: func(c *Config, v string) error { return parseInt(&c.Positions, v) }},
	{name: "shutdown-timeout", def: "10s", usage: "bound on a graceful stop (leave the ring, finish requests)",
		set: func(c *Config, v string) error { return parseDuration(&c.ShutdownTimeout, v) }},
	// A peer that sends nothing for this long is suspected and its keys are
	// loaded locally until it answers a probe. An owner that is loading
	// sends 102 Processing every third of it, so a slow origin is waited
	// for (up to the group's load-timeout): only a hung or paused node is
	// timed out.
	{name: "peer-timeout", def: transport.DefaultPeerTimeout.String(), usage: "how long a peer may stay silent before it is suspected and its keys fall back to local loads (owners that are loading say so; groups' load-timeout bounds the wait)",
		set: func(c *Config, v string) error { return parseDuration(&c.PeerTimeout, v) }},
	{name: "copy-lease", def: transport.DefaultLeaseTTL.String(), usage: "how long a node serves copies of a peer's values after it last heard from that peer; a write waits at most this for a node it cannot reach",
		set: func(c *Config, v string) error { return parseDuration(&c.CopyLease, v) }},
	{name: "memory-limit", def: "auto", usage: "soft memory limit of the process: auto (the groups' bytes + 1/8 + 48MiB, or GOMEMLIMIT if set; must fit a cgroup limit), off, or a size like 360MiB",
		set: func(c *Config, v string) error { return parseMemoryLimit(&c.MemoryLimit, v) }},

	// The public API: who may write and read, TLS, and the bounds that keep
	// one client or a flood of connections from taking the node down.
	{name: "write-token", def: `""`, usage: "bearer token that PUT and DELETE need; without it (or -write-token-file) they get 403 unless -open-writes",
		set: func(c *Config, v string) error { c.Public.WriteToken = v; return nil }},
	{name: "write-token-file", def: `""`, usage: "file of write tokens, one a line (two during a rotation); reread on SIGHUP",
		set: func(c *Config, v string) error { c.Public.WriteTokenFile = v; return nil }},
	{name: "open-writes", def: "false", flag: true, usage: "let anyone who reaches the public API PUT and DELETE, without a token",
		set: func(c *Config, v string) error { return parseBool(&c.Public.OpenWrites, v) }},
	{name: "read-token", def: `""`, usage: "if set, GET and HEAD need this bearer token (or a write token)",
		set: func(c *Config, v string) error { c.Public.ReadToken = v; return nil }},
	{name: "read-token-file", def: `""`, usage: "file of read tokens, one a line; reread on SIGHUP",
		set: func(c *Config, v string) error { c.Public.ReadTokenFile = v; return nil }},
	{name: "admin-listen", def: `""`, usage: "separate address for /metrics and /debug/*, which then leave the public listener",
		set: func(c *Config, v string) error { c.Public.AdminListen = v; return nil }},
	{name: "tls-cert", def: `""`, usage: "PEM certificate chain of the public listener (with -tls-key; needs -peer-listen); reread on SIGHUP",
		set: func(c *Config, v string) error { c.Public.TLSCert = v; return nil }},
	{name: "tls-key", def: `""`, usage: "PEM private key of -tls-cert",
		set: func(c *Config, v string) error { c.Public.TLSKey = v; return nil }},
	{name: "max-conns", def: strconv.Itoa(transport.DefaultMaxConns), usage: "open connections per listener; beyond it a connection is refused at once (503)",
		set: func(c *Config, v string) error { return parseInt(&c.Public.MaxConns, v) }},
	{name: "idle-timeout", def: transport.ServerIdleTimeout.String(), usage: "an idle keep-alive connection is closed after this",
		set: func(c *Config, v string) error { return parseDuration(&c.Public.IdleTimeout, v) }},
	{name: "read-header-timeout", def: transport.ServerReadHeaderTimeout.String(), usage: "a request's headers must arrive within this (against slowloris)",
		set: func(c *Config, v string) error { return parseDuration(&c.Public.ReadHeaderTimeout, v) }},
	{name: "client-misses", def: strconv.Itoa(transport.DefaultClientLimits.MaxMisses), usage: "cache misses one client address may have in flight (429 beyond); off: no limit",
		set: func(c *Config, v string) error { return parseLimit(&c.Public.ClientMisses, v) }},
	{name: "client-miss-rate", def: strconv.FormatFloat(transport.DefaultClientLimits.MissRate, 'g', -1, 64), usage: "cache misses per second one client address may start (429 beyond); off: no limit",
		set: func(c *Config, v string) error { return parseRate(&c.Public.ClientMissRate, v) }},
	{name: "client-miss-burst", def: strconv.Itoa(transport.DefaultClientLimits.MissBurst), usage: "burst allowed above -client-miss-rate",
		set: func(c *Config, v string) error { return parseInt(&c.Public.ClientMissBurst, v) }},
}

// A groupField is one key of a group description, the same in a -group
// flag ("name=demo,bytes=64MiB") and in the YAML file's groups list.
type groupField struct {
	name  string
	def   string
	usage string
	set   func(g *GroupSpec, v string) error
}

var groupFields = []groupField{
	{name: "name", def: "required", usage: "group name: letters, digits and ._- ; unique",
		set: func(g *GroupSpec, v string) error { g.Name = v; return nil }},
	{name: "origin", def: "required", usage: "demo, http or dir",
		set: func(g *GroupSpec, v string) error { g.Origin = v; return nil }},
	{name: "url", def: "required for http", usage: "http: URL template with {group} and {key}",
		set: func(g *GroupSpec, v string) error { g.URL = v; return nil }},
	{name: "dir", def: "required for dir", usage: "dir: the directory whose files are the values",
		set: func(g *GroupSpec, v string) error { g.Dir = v; return nil }},
	{name: "bytes", def: "64MiB", usage: "memory budget of the main and hot caches together",
		set: func(g *GroupSpec, v string) error { return parseBytes(&g.Bytes, v) }},
	{name: "hot-bytes", def: "bytes/8", usage: "part of bytes for hot copies of keys owned by peers; off: none",
		set: func(g *GroupSpec, v string) error {
			if v == "off" {
				g.HotBytes = -1
				return nil
			}
			return parseBytes(&g.HotBytes, v)
		}},
	{name: "ttl", def: "0s (until evicted)", usage: "how long a loaded value is served",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.TTL, v) }},
	{name: "not-found-ttl", def: "0s (not remembered)", usage: "how long an origin's not-found is remembered",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.NotFoundTTL, v) }},
	{name: "error-ttl", def: "1s", usage: "how long a failed origin load is remembered (callers get the error, the origin sees one load per interval); off: never",
		set: func(g *GroupSpec, v string) error {
			if v == "off" {
				g.ErrorTTL = -1
				return nil
			}
			return parseDuration(&g.ErrorTTL, v)
		}},
	{name: "stale-while-revalidate", def: "0s (off)", usage: "how long past its expiry a value is still served while one background load refreshes it (RFC 5861)",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.StaleWhileRevalidate, v) }},
	{name: "stale-if-error", def: "0s (off)", usage: "how long past its expiry a value is served instead of an error when the origin fails (RFC 5861)",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.StaleIfError, v) }},
	{name: "load-timeout", def: "30s", usage: "bound on one origin load",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.LoadTimeout, v) }},
	{name: "max-value-bytes", def: "1MiB", usage: "largest value accepted from the origin or a PUT",
		set: func(g *GroupSpec, v string) error { return parseBytes(&g.MaxValueBytes, v) }},
	{name: "timeout", def: "10s", usage: "http: bound on one upstream request",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.Timeout, v) }},
	{name: "demo-size", def: "64", usage: "demo: bytes per value",
		set: func(g *GroupSpec, v string) error { return parseInt(&g.DemoSize, v) }},
	{name: "demo-latency", def: "0s", usage: "demo: sleep per load, as a slow origin would",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.DemoLatency, v) }},
}

// envName returns the environment variable of a flag.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
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

// parseGroupFlag parses "name=demo,origin=demo,bytes=64MiB". Values cannot
// contain commas; the YAML file has no such limit.
func parseGroupFlag(v string) (GroupSpec, error) {
	var g GroupSpec
	seen := map[string]bool{}
	for _, kv := range splitOn(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return g, fmt.Errorf("%q: want key=value", kv)
		}
		if err := setGroupField(&g, k, strings.TrimSpace(val), seen); err != nil {
			return g, err
		}
	}
	return g, nil
}

// setGroupField sets the field named k, refusing unknown and repeated ones.
func setGroupField(g *GroupSpec, k, v string, seen map[string]bool) error {
	i := slices.IndexFunc(groupFields, func(f groupField) bool { return f.name == k })
	if i < 0 {
		return fmt.Errorf("unknown field %q", k)
	}
	if seen[k] {
		return fmt.Errorf("%s: given twice", k)
	}
	seen[k] = true
	if err := groupFields[i].set(g, v); err != nil {
		return fmt.Errorf("%s: %v", k, err)
	}
	return nil
}

// decodeYAML overlays the YAML document data on cfg. It is strict: an
// unknown or repeated key, or a value of the wrong shape, is an error that
// names the key and its line. Keys are the flag names; "groups" is a list
// of mappings with the -group fields.
func decodeYAML(cfg *Config, data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	if doc.Kind == 0 { // an empty file
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping of settings", root.Line)
	}
	seen := map[string]bool{}
	for i := 0; i < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if seen[k.Value] {
			return fmt.Errorf("line %d: %s: given twice", k.Line, k.Value)
		}
		seen[k.Value] = true
		if k.Value == "groups" {
			if err := decodeGroups(cfg, v); err != nil {
				return err
			}
			continue
		}
		i := slices.IndexFunc(settings, func(s setting) bool { return s.name == k.Value })
		if i < 0 {
			return fmt.Errorf("line %d: unknown field %q", k.Line, k.Value)
		}
		s := settings[i]
		val, err := scalar(v, s.list)
		if err != nil {
			return fmt.Errorf("line %d: %s: %v", v.Line, k.Value, err)
		}
		if err := s.set(cfg, val); err != nil {
			return fmt.Errorf("line %d: %s: %v", v.Line, k.Value, err)
		}
	}
	return nil
}

func decodeGroups(cfg *Config, n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: groups: want a list", n.Line)
	}
	for gi, gn := range n.Content {
		if gn.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: groups[%d]: want a mapping", gn.Line, gi)
		}
		var g GroupSpec
		seen := map[string]bool{}
		for i := 0; i < len(gn.Content); i += 2 {
			k, v := gn.Content[i], gn.Content[i+1]
			val, err := scalar(v, false)
			if err == nil {
				err = setGroupField(&g, k.Value, val, seen)
			} else {
				err = fmt.Errorf("%s: %v", k.Value, err)
			}
			if err != nil {
				return fmt.Errorf("line %d: groups[%d]: %v", k.Line, gi, err)
			}
		}
		cfg.Groups = append(cfg.Groups, g)
	}
	return nil
}

// scalar returns a node's text: a scalar's value, or for a list setting a
// sequence of scalars joined with commas.
func scalar(n *yaml.Node, list bool) (string, error) {
	switch {
	case n.Kind == yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "", nil
		}
		return n.Value, nil
	case n.Kind == yaml.SequenceNode && list:
		parts := make([]string, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return "", errors.New("want a list of strings")
			}
			parts = append(parts, c.Value)
		}
		return strings.Join(parts, ","), nil
	case list:
		return "", errors.New("want a string or a list of strings")
	}
	return "", errors.New("want a single value")
}

// Validate checks the whole configuration, so that nothing starts
// half-configured; the error names the field at fault.
func (c *Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", errConfig, field, fmt.Sprintf(format, args...))
	}
	if err := checkAddr(c.Listen); err != nil {
		return bad("listen", "%v", err)
	}
	if c.PeerListen != "" {
		if err := checkAddr(c.PeerListen); err != nil {
			return bad("peer-listen", "%v", err)
		}
		if c.PeerListen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
			return bad("peer-listen", "same address as listen")
		}
	}
	if c.PeerURL != "" {
		if err := checkPeerURL(c.PeerURL); err != nil {
			return bad("peer-url", "%v", err)
		}
	}
	if len(c.Etcd) > 0 && len(c.Peers) > 0 {
		return bad("peers", "set either etcd or peers, not both")
	}
	for _, p := range c.Peers {
		if err := checkPeerURL(p); err != nil {
			return bad("peers", "%v", err)
		}
	}
	if c.Cluster == "" {
		return bad("cluster", "must not be empty")
	}
	if c.NodeID != "" && !validName(c.NodeID, ".:_-", 128) {
		return bad("node-id", "%q: want 1 to 128 of [A-Za-z0-9._:-]", c.NodeID)
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL%time.Second != 0 {
		return bad("lease-ttl", "%v: want a whole number of seconds, at least 1s", c.LeaseTTL)
	}
	// peers reads a zero hold-down as its default (2s): accepting 0 here
	// would make "-hold-down 0s" silently mean 2s.
	if c.HoldDown <= 0 {
		return bad("hold-down", "%v: must be > 0", c.HoldDown)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return bad("log-level", "%v", err)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return bad("log-format", "%q: want text or json", c.LogFormat)
	}
	if c.MaxKeyBytes <= 0 {
		return bad("max-key-bytes", "%d: must be > 0", c.MaxKeyBytes)
	}
	if _, ok := consistenthash.HashByName(c.Hash); !ok {
		return bad("hash", "%q: want one of %s", c.Hash, strings.Join(consistenthash.HashNames(), ", "))
	}
	if c.Replicas < 1 || c.Replicas > consistenthash.MaxPoints {
		return bad("replicas", "%d: want 1 to %d", c.Replicas, consistenthash.MaxPoints)
	}
	if c.Weight < 1 || c.Weight > peers.MaxWeight {
		return bad("weight", "%d: want 1 to %d", c.Weight, peers.MaxWeight)
	}
	// Any member may be the heaviest: its points must fit on the ring.
	if c.Replicas > consistenthash.MaxPoints/peers.MaxWeight && len(c.Etcd) > 0 {
		return bad("replicas", "%d: with etcd at most %d, so that a member of weight %d fits", c.Replicas, consistenthash.MaxPoints/peers.MaxWeight, peers.MaxWeight)
	}
	if c.Weight != 1 && len(c.Etcd) == 0 {
		return bad("weight", "needs -etcd: static members all weigh 1")
	}
	switch c.Placement {
	case placementHashed:
	case placementRanges:
		// Positions live in etcd: without it nodes could not agree on them.
		if len(c.Etcd) == 0 {
			return bad("placement", "ranges needs -etcd: the positions are stored there")
		}
		if c.Weight != 1 {
			return bad("weight", "%d with -placement ranges: every member takes an equal share", c.Weight)
		}
	default:
		return bad("placement", "%q: want hashed or ranges", c.Placement)
	}
	if c.Positions < 1 || c.Positions > peers.MaxPositions {
		return bad("positions", "%d: want 1 to %d", c.Positions, peers.MaxPositions)
	}
	if err := c.validateSecurity(); err != nil {
		return err
	}
	if c.ShutdownTimeout <= 0 {
		return bad("shutdown-timeout", "%v: must be > 0", c.ShutdownTimeout)
	}
	if c.PeerTimeout <= 0 {
		return bad("peer-timeout", "%v: must be > 0", c.PeerTimeout)
	}
	if c.CopyLease <= 0 {
		return bad("copy-lease", "%v: must be > 0", c.CopyLease)
	}
	if err := c.validatePublic(); err != nil {
		return err
	}
	if len(c.Groups) == 0 {
		return bad("group", "no groups: give at least one with -group or in the config file")
	}
	names := map[string]bool{}
	for i := range c.Groups {
		g := &c.Groups[i]
		field := fmt.Sprintf("group #%d", i+1)
		if g.Name != "" {
			field = fmt.Sprintf("group %q", g.Name)
		}
		if err := g.validate(); err != nil {
			return bad(field, "%v", err)
		}
		if names[g.Name] {
			return bad(field, "name: used by another group")
		}
		names[g.Name] = true
	}
	return nil
}

// validate checks a group and fills in its Bytes default.
func (g *GroupSpec) validate() error {
	if !validName(g.Name, "._-", 128) {
		return fmt.Errorf("name %q: want 1 to 128 of [A-Za-z0-9._-]", g.Name)
	}
	if g.Name == "." || g.Name == ".." {
		// Routers clean /cache/../k: no request could reach the group.
		return fmt.Errorf("name %q: not a path segment a URL can keep", g.Name)
	}
	// Fields of another origin are refused, not ignored: a url given to a
	// dir group is a mistake the operator wants to hear about.
	notFor := func(field string, set bool) error {
		if set {
			return fmt.Errorf("%s: not used by origin %s", field, g.Origin)
		}
		return nil
	}
	var err error
	switch g.Origin {
	case originDemo:
		err = errors.Join(notFor("url", g.URL != ""), notFor("dir", g.Dir != ""), notFor("timeout", g.Timeout != 0))
	case originHTTP:
		if g.URL == "" {
			return errors.New("url: required for origin http")
		}
		err = errors.Join(notFor("dir", g.Dir != ""), notFor("demo-size", g.DemoSize != 0), notFor("demo-latency", g.DemoLatency != 0))
	case originDir:
		if g.Dir == "" {
			return errors.New("dir: required for origin dir")
		}
		err = errors.Join(notFor("url", g.URL != ""), notFor("timeout", g.Timeout != 0), notFor("demo-size", g.DemoSize != 0), notFor("demo-latency", g.DemoLatency != 0))
	case "":
		return errors.New("origin: required (demo, http or dir)")
	default:
		return fmt.Errorf("origin %q: want demo, http or dir", g.Origin)
	}
	if err != nil {
		return err
	}
	if g.Bytes == 0 {
		g.Bytes = defaultGroupBytes
	}
	switch {
	case g.HotBytes >= g.Bytes:
		return fmt.Errorf("hot-bytes %d: must be less than bytes (%d)", g.HotBytes, g.Bytes)
	case g.TTL < 0:
		return fmt.Errorf("ttl %v: must not be negative", g.TTL)
	case g.NotFoundTTL < 0:
		return fmt.Errorf("not-found-ttl %v: must not be negative", g.NotFoundTTL)
	case g.ErrorTTL < -1:
		return fmt.Errorf("error-ttl %v: must not be negative", g.ErrorTTL)
	case g.StaleWhileRevalidate < 0:
		return fmt.Errorf("stale-while-revalidate %v: must not be negative", g.StaleWhileRevalidate)
	case g.StaleIfError < 0:
		return fmt.Errorf("stale-if-error %v: must not be negative", g.StaleIfError)
	case g.LoadTimeout < 0:
		return fmt.Errorf("load-timeout %v: must not be negative", g.LoadTimeout)
	case g.Timeout < 0:
		return fmt.Errorf("timeout %v: must not be negative", g.Timeout)
	case g.DemoSize < 0:
		return fmt.Errorf("demo-size %d: must not be negative", g.DemoSize)
	case g.DemoLatency < 0:
		return fmt.Errorf("demo-latency %v: must not be negative", g.DemoLatency)
	}
	maxValue := g.MaxValueBytes
	if maxValue == 0 {
		maxValue = 1 << 20
	}
	if int64(g.DemoSize) > maxValue {
		return fmt.Errorf("demo-size %d: larger than max-value-bytes (%d)", g.DemoSize, maxValue)
	}
	return nil
}

// validName reports whether s is 1 to max characters of letters, digits
// and the given punctuation.
func validName(s, punct string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune(punct, r)) {
			return false
		}
	}
	return true
}

// checkAddr accepts host:port with a numeric port (0: any free port).
func checkAddr(addr string) error {
	if addr == "" {
		return errors.New("must not be empty")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: want host:port with a port number", addr)
	}
	return nil
}

func checkPeerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q: want an http(s) URL with a host", s)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: want a base URL without path, query or fragment", s)
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	switch s {
	case "debug", "info", "warn", "error":
		return l, l.UnmarshalText([]byte(s))
	}
	return l, fmt.Errorf("%q: want debug, info, warn or error", s)
}

func parseDuration(d *time.Duration, v string) error {
	x, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q: want a duration like 500ms, 5s or 1m", v)
	}
	*d = x
	return nil
}

func parseBool(b *bool, v string) error {
	x, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("%q: want true or false", v)
	}
	*b = x
	return nil
}

func parseInt(n *int, v string) error {
	x, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("%q: want an integer", v)
	}
	*n = x
	return nil
}

// byteUnits are the suffixes parseBytes accepts, longest first.
var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// parseBytes parses a size: an integer with an optional unit (B, KiB, MiB,
// GiB, TiB, or the decimal KB, MB, GB, TB), for example "64MiB" or "1024".
func parseBytes(n *int64, v string) error {
	num, mult := strings.TrimSpace(v), int64(1)
	for _, u := range byteUnits {
		if s, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(s), u.mult
			break
		}
	}
	x, err := strconv.ParseInt(num, 10, 64)
	switch {
	case err != nil || x < 0:
		return fmt.Errorf("%q: want a size like 1048576, 512KiB or 64MiB", v)
	case x > math.MaxInt64/mult:
		return fmt.Errorf("%q: too large", v)
	}
	*n = x * mult
	return nil
}

// splitList splits a comma-separated list, trimming spaces and dropping
// empty elements.
func splitList(v string) []string { return splitOn(v, ",") }

func splitOn(v, sep string) []string {
	var out []string
	for p := range strings.SplitSeq(v, sep) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// printUsage writes the help of "serve": every flag with its environment
// variable and default, then the group fields.
func printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: ringcached [serve] [flags]\n       ringcached dev [-base-port 8081]\n       ringcached healthcheck [-url http://127.0.0.1:8080/readyz]\n\n")
	fmt.Fprintf(w, "Flags of serve (each also from its environment variable; a flag wins over the\nvariable, the variable over the -config file):\n")
	rows := append(slices.Clone(settings),
		setting{name: "config", def: `""`, usage: "YAML file with groups and any of these settings (same names)"},
		setting{name: "group", def: "none", usage: "a group, repeatable (env: groups separated by ';'): name=N,origin=demo|http|dir,..."})
	for _, s := range rows {
		fmt.Fprintf(w, "  -%-17s %-27s default %s\n      %s\n", s.name, envName(s.name), s.def, s.usage)
	}
	fmt.Fprintf(w, "\nGroup fields (-group name=api,origin=http,url=http://origin/{group}/{key},bytes=128MiB):\n")
	for _, f := range groupFields {
		fmt.Fprintf(w, "  %-16s default %-20s %s\n", f.name, f.def, f.usage)
	}
}
