package main

// The flags and environment variables: one table of settings, from which
// the flag, the variable and the YAML key of each field derive.

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/consistenthash"
	"github.com/ringcache/ringcache/transport"
	"github.com/ringcache/ringcache/transport/origin"
)

// A setting is one configuration field: its flag, its environment variable
// (envPrefix + the name in upper case, '-' as '_') and its YAML key all
// derive from name, so the three cannot drift apart.
type setting struct {
	name  string
	def   string // the default as the configuration reference (README.md here) shows it
	usage string
	list  bool // a YAML sequence is accepted and joined with commas
	flag  bool // a boolean flag: "-name" alone means true
	set   func(c *Config, v string) error
}

// defaults is DefaultConfig, from which each setting's documented default
// derives, so that -help and the configuration reference (TestReferenceDefaults) show the real one.
var defaults = DefaultConfig()

// settings are the daemon's flags, in the order -help lists them. "group"
// and "config" are handled apart: one repeats, the other chooses the file.
var settings = []setting{
	{name: "listen", def: defaults.Listen, usage: "address of the public API (and of the peer routes unless -peer-listen)",
		set: func(c *Config, v string) error { c.Listen = v; return nil }},
	{name: "peer-listen", def: `""`, usage: "separate address for the peer routes; empty: served on -listen",
		set: func(c *Config, v string) error { c.PeerListen = v; return nil }},
	{name: "peer-url", def: "http://<hostname>:<peer port>", usage: "base URL other nodes use to reach this node's peer routes",
		set: func(c *Config, v string) error { c.PeerURL = v; return nil }},
	{name: "etcd", def: `""`, list: true, usage: "comma-separated etcd endpoints; empty: static membership from -peers",
		set: func(c *Config, v string) error { c.Etcd = splitList(v); return nil }},
	{name: "peers", def: `""`, list: true, usage: "comma-separated peer URLs of the other nodes, when -etcd is empty",
		set: func(c *Config, v string) error { c.Peers = splitList(v); return nil }},
	{name: "cluster", def: defaults.Cluster, usage: "cluster name: the ring's key prefix in etcd",
		set: func(c *Config, v string) error {
			if v == "" {
				return errors.New("must not be empty: an empty cluster would select the default")
			}
			c.Cluster = v
			return nil
		}},
	{name: "node-id", def: "<hostname>", usage: "this node's ID in etcd",
		set: func(c *Config, v string) error { c.NodeID = v; return nil }},
	{name: "lease-ttl", def: defaults.LeaseTTL.String(), usage: "etcd lease TTL: a crashed node leaves the ring after about this plus -hold-down",
		set: func(c *Config, v string) error { return parseNonZeroDuration(&c.LeaseTTL, v) }},
	{name: "hold-down", def: defaults.HoldDown.String(), usage: "how long a member whose key vanished stays in the ring",
		set: func(c *Config, v string) error { return parseNonZeroDuration(&c.HoldDown, v) }},
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
	{name: "log-level", def: defaults.LogLevel, usage: "debug, info, warn or error",
		set: func(c *Config, v string) error { c.LogLevel = v; return nil }},
	{name: "log-format", def: defaults.LogFormat, usage: "text or json",
		set: func(c *Config, v string) error { c.LogFormat = v; return nil }},
	{name: "max-key-bytes", def: strconv.Itoa(defaults.MaxKeyBytes), usage: "longest key accepted, in bytes",
		set: func(c *Config, v string) error { return parseNonZeroInt(&c.MaxKeyBytes, v) }},
	// xxhash with 160 points balances a small cluster within a few percent;
	// groupcache's defaults (crc32, 50) give three nodes shares as far apart
	// as 51% and 17%. Every node of a cluster must use the same two values.
	{name: "hash", def: defaults.Hash, usage: "ring hash: " + strings.Join(consistenthash.HashNames(), ", ") + " (crc32 with -replicas 50 to share a ring with groupcache)",
		set: func(c *Config, v string) error { c.Hash = v; return nil }},
	{name: "replicas", def: strconv.Itoa(defaults.Replicas), usage: "ring points per node; the same on every node",
		set: func(c *Config, v string) error { return parseNonZeroInt(&c.Replicas, v) }},
	{name: "weight", def: strconv.Itoa(defaults.Weight), usage: "this node's share of the ring relative to the others (a node with twice the memory: 2); needs -etcd",
		set: func(c *Config, v string) error { return parseNonZeroInt(&c.Weight, v) }},
	{name: "placement", def: defaults.Placement, usage: "ring placement: hashed (each node's -replicas points hashed from its URL), ranges (explicit arcs stored in etcd; a joining node splits the largest arcs), or auto: ranges with -etcd and -weight 1, else hashed; the same on every node",
		set: func(c *Config, v string) error { c.Placement = v; return nil }},
	{name: "positions", def: strconv.Itoa(defaults.Positions), usage: "with -placement ranges: arcs a joining node takes",
		set: func(c *Config, v string) error { return parseNonZeroInt(&c.Positions, v) }},
	{name: "shutdown-timeout", def: defaults.ShutdownTimeout.String(), usage: "bound on a graceful stop (leave the ring, finish requests)",
		set: func(c *Config, v string) error { return parseDuration(&c.ShutdownTimeout, v) }},
	// A peer that sends nothing for this long is suspected and its keys are
	// loaded locally until it answers a probe. An owner that is loading
	// sends 102 Processing every third of it, so a slow origin is waited
	// for (up to the group's load-timeout): only a hung or paused node is
	// timed out.
	{name: "peer-timeout", def: defaults.PeerTimeout.String(), usage: "how long a peer may stay silent before it is suspected and its keys fall back to local loads (owners that are loading say so; groups' load-timeout bounds the wait)",
		set: func(c *Config, v string) error { return parseNonZeroDuration(&c.PeerTimeout, v) }},
	{name: "copy-lease", def: defaults.CopyLease.String(), usage: "how long a node serves copies of a peer's values after it last heard from that peer; a write waits at most this for a node it cannot reach",
		set: func(c *Config, v string) error { return parseNonZeroDuration(&c.CopyLease, v) }},
	{name: "copies", def: "1", usage: "how many nodes hold each value (its owner and the next nodes that would own its key), so that a crash costs the origin nothing; a group's copies= overrides it",
		set: func(c *Config, v string) error { return parseCopies(&c.Copies, v) }},
	{name: "repair-rate", def: fmtBytes(transport.DefaultRepairRate), usage: "bytes a second of copies a node sends after a membership change to bring its keys back to -copies nodes; off: no bound",
		set: func(c *Config, v string) error {
			if v == "off" {
				c.RepairRate = -1
				return nil
			}
			if err := parseBytes(&c.RepairRate, v); err != nil || c.RepairRate == 0 {
				return fmt.Errorf("%q: want a size a second like 32MiB, or off", v)
			}
			return nil
		}},
	{name: "purge-lease", def: defaults.PurgeLease.String(), usage: "with etcd: how long a node serves from its caches after it last read the purge log (itself or through a peer); a purge waits at most this for a node it cannot reach, and an etcd out of every node's reach for longer makes the nodes serve from the origin until it is back",
		set: func(c *Config, v string) error { return parseNonZeroDuration(&c.PurgeLease, v) }},
	{name: "coalesce-fetches", def: strconv.FormatBool(defaults.CoalesceFetches), usage: "while a fetch to a peer is in flight, send the next fetches to it together, in one request the peer answers from its caches (keys it must load are then fetched alone)",
		set: func(c *Config, v string) error { return parseBool(&c.CoalesceFetches, v) }},
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
	{name: "max-conns", def: strconv.Itoa(defaults.Public.MaxConns), usage: "open connections per listener; beyond it a connection is refused at once (503)",
		set: func(c *Config, v string) error { return parseInt(&c.Public.MaxConns, v) }},
	// Everything behind one address shares its allowance: the clients of a
	// reverse proxy or a NAT, and a peer that reaches this listener.
	{name: "max-conns-per-client", def: "off",
		usage: fmt.Sprintf("open connections one client address (IPv4, or IPv6 /64) may have on each listener; beyond it refused as over -max-conns. For nodes that face clients you do not run (behind a reverse proxy every client is the proxy); at least %d where peers share the listener", transport.DefaultMaxIdleConnsPerHost),
		set:   func(c *Config, v string) error { return parseLimit(&c.Public.MaxConnsPerClient, v, 0) }},
	{name: "idle-timeout", def: defaults.Public.IdleTimeout.String(), usage: "an idle keep-alive connection is closed after this",
		set: func(c *Config, v string) error { return parseDuration(&c.Public.IdleTimeout, v) }},
	{name: "read-header-timeout", def: defaults.Public.ReadHeaderTimeout.String(), usage: "a request's headers must arrive within this (against slowloris)",
		set: func(c *Config, v string) error { return parseDuration(&c.Public.ReadHeaderTimeout, v) }},
	{name: "http-server", def: defaults.Public.HTTPServer, usage: "the public listener's HTTP server: fasthttp (less CPU per request; plain HTTP/1.1; needs -peer-listen), net/http, or auto: fasthttp with -peer-listen and without -tls-cert, else net/http",
		set: func(c *Config, v string) error { c.Public.HTTPServer = v; return nil }},
	{name: "client-misses", def: "off", usage: "cache misses one client address may have in flight (429 beyond), for nodes that face clients you do not run (32, say); each group's load bound protects the origin without it",
		set: func(c *Config, v string) error { return parseLimit(&c.Public.ClientMisses, v, 0) }},
	{name: "client-miss-rate", def: "off", usage: "cache misses per second one client address may start (429 beyond), for nodes that face clients you do not run (500, say)",
		set: func(c *Config, v string) error { return parseRate(&c.Public.ClientMissRate, v) }},
	{name: "client-miss-burst", def: "0", usage: "burst allowed above -client-miss-rate; 0: twice the rate",
		set: func(c *Config, v string) error {
			if err := parseInt(&c.Public.ClientMissBurst, v); err != nil || c.Public.ClientMissBurst < 0 {
				return fmt.Errorf("%q: want a count >= 0", v)
			}
			return nil
		}},
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
	{name: "bytes", def: fmtBytes(defaultGroupBytes), usage: "memory budget of the main and hot caches together",
		set: func(g *GroupSpec, v string) error { return parseBytes(&g.Bytes, v) }},
	{name: "hot-bytes", def: "bytes/8", usage: "part of bytes for hot copies of keys owned by peers; off: none",
		set: func(g *GroupSpec, v string) error {
			if v == "off" {
				g.HotBytes = -1
				return nil
			}
			return parseBytes(&g.HotBytes, v)
		}},
	{name: "copies", def: "the node's -copies", usage: "how many nodes hold each value of the group",
		set: func(g *GroupSpec, v string) error { return parseCopies(&g.Copies, v) }},
	{name: "policy", def: cache.PolicySLRU, usage: "which entries are evicted when the budget is full: slru (a key read twice outlives keys read once) or lru (the least recently used, as a CLOCK approximates it)",
		set: func(g *GroupSpec, v string) error { g.Policy = v; return nil }}, // checked by cache.GroupConfig.Validate
	{name: "ttl", def: "0s (until evicted)", usage: "how long a loaded value is served",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.TTL, v) }},
	{name: "not-found-ttl", def: "0s (not remembered)", usage: "how long an origin's not-found is remembered",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.NotFoundTTL, v) }},
	{name: "error-ttl", def: cache.DefaultErrorTTL.String(), usage: "how long a failed origin load is remembered (callers get the error, the origin sees one load per interval); off: never",
		set: func(g *GroupSpec, v string) error {
			if v == "off" {
				g.ErrorTTL = -1 // the cache reads any negative ErrorTTL as off
				return nil
			}
			if err := parseDuration(&g.ErrorTTL, v); err != nil || g.ErrorTTL < 0 {
				return fmt.Errorf("%q: want a duration like 500ms or 5s, or off", v)
			}
			return nil
		}},
	{name: "stale-while-revalidate", def: "0s (off)", usage: "how long past its expiry a value is still served while one background load refreshes it (RFC 5861)",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.StaleWhileRevalidate, v) }},
	{name: "stale-if-error", def: "0s (off)", usage: "how long past its expiry a value is served instead of an error when the origin fails (RFC 5861)",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.StaleIfError, v) }},
	{name: "load-timeout", def: cache.DefaultLoadTimeout.String(), usage: "bound on one origin load",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.LoadTimeout, v) }},
	{name: "max-value-bytes", def: fmtBytes(cache.DefaultMaxValueBytes), usage: "largest value accepted from the origin or a PUT",
		set: func(g *GroupSpec, v string) error { return parseBytes(&g.MaxValueBytes, v) }},
	{name: "max-loads", def: strconv.Itoa(cache.DefaultMaxLoads), usage: "origin loads this node runs for the group at once (a whole cluster: nodes × this); loads beyond wait in the queue; off: no bound",
		set: func(g *GroupSpec, v string) error { return parseLimit(&g.MaxLoads, v, -1) }},
	{name: "load-queue", def: strconv.Itoa(cache.DefaultLoadQueue), usage: "origin loads that may wait for a slot; when full, the client with the most loads waiting is shed first (503 with Retry-After); off: none wait",
		set: func(g *GroupSpec, v string) error { return parseLimit(&g.LoadQueue, v, -1) }},
	{name: "load-queue-wait", def: cache.DefaultLoadQueueWait.String(), usage: "longest wait for a load slot before the miss is shed (503 with Retry-After)",
		set: func(g *GroupSpec, v string) error {
			if err := parseDuration(&g.LoadQueueWait, v); err != nil || g.LoadQueueWait <= 0 {
				return fmt.Errorf("%q: want a duration > 0 like 500ms or 5s", v)
			}
			return nil
		}},
	{name: "timeout", def: origin.DefaultTimeout.String(), usage: "http: bound on one upstream request",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.Timeout, v) }},
	{name: "demo-size", def: strconv.Itoa(origin.DefaultDemoSize), usage: "demo: bytes per value",
		set: func(g *GroupSpec, v string) error { return parseInt(&g.DemoSize, v) }},
	{name: "demo-latency", def: "0s", usage: "demo: sleep per load, as a slow origin would",
		set: func(g *GroupSpec, v string) error { return parseDuration(&g.DemoLatency, v) }},
}

// envName returns the environment variable of a flag.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
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

// parseCopies reads a copies count: 1 to cache.MaxCopies.
func parseCopies(n *int, v string) error {
	if err := parseInt(n, v); err != nil || *n < 1 || *n > cache.MaxCopies {
		return fmt.Errorf("%q: want 1 to %d", v, cache.MaxCopies)
	}
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

// errZero refuses a zero for a setting whose library reads a zero field as
// "unset: use my default". Here nothing is unset (every setting starts at
// its default), so an operator who writes 0 means zero, and must not
// silently get the default (-hold-down 0s would mean 2s). The libraries'
// own rules for the other values apply when the configuration is validated.
var errZero = errors.New("want a value other than zero: a zero would select the default")

func parseNonZeroDuration(d *time.Duration, v string) error {
	if err := parseDuration(d, v); err != nil {
		return err
	}
	if *d == 0 {
		return fmt.Errorf("%q: %w", v, errZero)
	}
	return nil
}

func parseNonZeroInt(n *int, v string) error {
	if err := parseInt(n, v); err != nil {
		return err
	}
	if *n == 0 {
		return fmt.Errorf("%q: %w", v, errZero)
	}
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
		fmt.Fprintf(w, "  -%-20s %-30s default %s\n      %s\n", s.name, envName(s.name), s.def, s.usage)
	}
	fmt.Fprintf(w, "\nGroup fields (-group name=api,origin=http,url=http://origin/{group}/{key},bytes=128MiB):\n")
	for _, f := range groupFields {
		fmt.Fprintf(w, "  %-16s default %-20s %s\n", f.name, f.def, f.usage)
	}
}
