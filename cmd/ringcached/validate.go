package main

// Validation of the whole configuration before anything starts.

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/consistenthash"
)

// Validate checks the whole configuration, so that nothing starts
// half-configured; the error names the setting at fault. The rules here are
// the daemon's own (its listeners, its log, how it combines membership,
// placement and weights, its group descriptions); the libraries' rules are
// theirs, asked by validateComponents and validateGroups.
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
	if len(c.Etcd) > 0 && len(c.Peers) > 0 {
		return bad("peers", "set either etcd or peers, not both")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return bad("log-level", "%v", err)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return bad("log-format", "%q: want text or json", c.LogFormat)
	}
	if _, ok := consistenthash.HashByName(c.Hash); !ok {
		return bad("hash", "%q: want one of %s", c.Hash, strings.Join(consistenthash.HashNames(), ", "))
	}
	// Static members are handed over as URLs alone.
	if c.Weight != 1 && len(c.Etcd) == 0 {
		return bad("weight", "needs -etcd: static members all weigh 1")
	}
	switch c.Placement {
	case placementHashed, placementAuto:
	case placementRanges:
		// Positions live in etcd: without it nodes could not agree on them.
		if len(c.Etcd) == 0 {
			return bad("placement", "ranges needs -etcd: the positions are stored there")
		}
	default:
		return bad("placement", "%q: want auto, hashed or ranges", c.Placement)
	}
	if err := c.validateComponents(); err != nil {
		return err
	}
	if err := c.validateSecurity(); err != nil {
		return err
	}
	if c.ShutdownTimeout <= 0 {
		return bad("shutdown-timeout", "%v: must be > 0", c.ShutdownTimeout)
	}
	if err := c.validatePublic(); err != nil {
		return err
	}
	return c.validateGroups()
}

// validate checks a group by the daemon's rules, and fills in its Bytes
// default; the cache's rules are checked by validateGroups, the origin's when
// the node builds it.
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
	// Every demo value would be refused as too large.
	if maxValue := cmp.Or(g.MaxValueBytes, cache.DefaultMaxValueBytes); int64(g.DemoSize) > maxValue {
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
