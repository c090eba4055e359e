package main

// Validation of the whole configuration before anything starts.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/ringcache/ringcache/consistenthash"
	"github.com/ringcache/ringcache/peers"
	"github.com/ringcache/ringcache/transport"
)

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
		if err := transport.CheckPeerURL(c.PeerURL); err != nil {
			return bad("peer-url", "%v", err)
		}
	}
	if len(c.Etcd) > 0 && len(c.Peers) > 0 {
		return bad("peers", "set either etcd or peers, not both")
	}
	for _, p := range c.Peers {
		if err := transport.CheckPeerURL(p); err != nil {
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

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	switch s {
	case "debug", "info", "warn", "error":
		return l, l.UnmarshalText([]byte(s))
	}
	return l, fmt.Errorf("%q: want debug, info, warn or error", s)
}
