package main

// The libraries' configurations, built from the daemon's. The start builds
// the node from them, and Validate asks each library about them beforehand,
// so that every rule about a library's setting is the library's alone: the
// daemon only turns the library's field names into its settings' names.

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/consistenthash"
	"github.com/ringcache/ringcache/peers"
	"github.com/ringcache/ringcache/transport"
	"github.com/ringcache/ringcache/transport/api"
)

// Stand-ins for what Validate cannot know, so that it can check the rest of
// a library's configuration before anything starts: the node ID and peer URL
// derived at start from the host name and the bound port, the etcd endpoints
// of a static membership (which has none), and a group's origin (a dir
// origin needs its directory when the node starts, not when the
// configuration is read). The start checks the real ones by the same rules.
const (
	standInNodeID  = "stand-in"
	standInPeerURL = "http://stand-in.invalid:1"
	standInEtcd    = "http://stand-in.invalid:2379"
)

var originAtStart = cache.GetterFunc(func(context.Context, string) (cache.Value, error) {
	return cache.Value{}, errors.New("ringcached: the origin is built when the node starts")
})

// poolConfig is the configuration of the node's Pool, whose peers reach it
// at self. The start adds the peer security and the metrics hook.
func (c *Config) poolConfig(self string) transport.Config {
	hash, _ := consistenthash.HashByName(c.Hash) // Validate checked the name
	tc := transport.Config{
		Self:        self,
		Hash:        hash,
		Replicas:    c.Replicas,
		MaxKeyBytes: c.MaxKeyBytes,
		PeerTimeout: c.PeerTimeout,
		LeaseTTL:    c.CopyLease,
		PurgeLease:  c.PurgeLease,
		RepairRate:  c.RepairRate,

		DisableCoalescing: !c.CoalesceFetches,
	}
	if len(c.Etcd) > 0 {
		// Any member may announce up to peers.MaxWeight: the ring must
		// hold it.
		tc.MaxWeight = peers.MaxWeight
	}
	return tc
}

// peersConfig is the configuration of the node's etcd registration. The
// start adds the logger and the Setter.
func (c *Config) peersConfig(nodeID, peerURL string) peers.Config {
	pc := peers.DefaultConfig()
	pc.Endpoints = c.Etcd
	pc.Cluster = c.Cluster
	pc.NodeID = nodeID
	pc.PeerURL = peerURL
	pc.TTL = c.LeaseTTL
	pc.HoldDown = c.HoldDown
	pc.Weight = c.Weight
	if c.placement() == placementRanges {
		positions := c.Positions
		pc.Placer = peers.PlacerFunc(func(ring map[string][]uint32, node string) ([]uint32, error) {
			return consistenthash.JoinPositions(positions, ring, node)
		})
	}
	return pc
}

// groupConfig is the configuration of g's cache group, loading through
// getter.
// copies is the node's -copies, for a group that does not set its own.
func (g *GroupSpec) groupConfig(getter cache.Getter, copies int) cache.GroupConfig {
	return cache.GroupConfig{
		Copies:               cmp.Or(g.Copies, copies),
		Name:                 g.Name,
		Getter:               getter,
		MaxBytes:             g.Bytes,
		HotBytes:             g.HotBytes,
		Policy:               g.Policy,
		TTL:                  g.TTL,
		NotFoundTTL:          g.NotFoundTTL,
		ErrorTTL:             g.ErrorTTL,
		StaleWhileRevalidate: g.StaleWhileRevalidate,
		StaleIfError:         g.StaleIfError,
		LoadTimeout:          g.LoadTimeout,
		MaxValueBytes:        g.MaxValueBytes,
		MaxLoads:             g.MaxLoads,
		LoadQueue:            g.LoadQueue,
		LoadQueueWait:        g.LoadQueueWait,
	}
}

// settingOf names the setting that fills each library field the daemon
// sets, as "package.Field".
var settingOf = map[string]string{
	"peers.Endpoints": "etcd",
	"peers.Cluster":   "cluster",
	"peers.NodeID":    "node-id",
	"peers.PeerURL":   "peer-url",
	"peers.Weight":    "weight",
	"peers.TTL":       "lease-ttl",
	"peers.HoldDown":  "hold-down",

	"transport.Self":              "peer-url",
	"transport.Replicas":          "replicas",
	"transport.MaxKeyBytes":       "max-key-bytes",
	"transport.PeerTimeout":       "peer-timeout",
	"transport.LeaseTTL":          "copy-lease",
	"transport.PurgeLease":        "purge-lease",
	"transport.RepairRate":        "repair-rate",
	"transport.DisableCoalescing": "coalesce-fetches",
	"transport.Secrets":           "secret-file",
	"transport.Max":               "max-conns",
	"transport.MaxPerClient":      "max-conns-per-client",
	"transport.MaxMisses":         "client-misses",
	"transport.MissRate":          "client-miss-rate",
	"transport.MissBurst":         "client-miss-burst",
	"transport.OpenWrites":        "open-writes",
	"transport.WriteTokens":       "write-token",
	"transport.ReadTokens":        "read-token",
}

// groupFieldOf names the group field that fills each cache.GroupConfig
// field.
var groupFieldOf = map[string]string{
	"Name":                 "name",
	"MaxBytes":             "bytes",
	"HotBytes":             "hot-bytes",
	"Policy":               "policy",
	"Copies":               "copies",
	"TTL":                  "ttl",
	"NotFoundTTL":          "not-found-ttl",
	"ErrorTTL":             "error-ttl",
	"StaleWhileRevalidate": "stale-while-revalidate",
	"StaleIfError":         "stale-if-error",
	"LoadTimeout":          "load-timeout",
	"MaxValueBytes":        "max-value-bytes",
	"MaxLoads":             "max-loads",
	"LoadQueue":            "load-queue",
	"LoadQueueWait":        "load-queue-wait",
}

// libError returns a library's refusal of its configuration as the daemon's
// configuration error, naming the setting that filled the field at fault
// ("lease-ttl: 1.5s: want a whole number of seconds, at least 1s"). An error
// about no field the daemon fills keeps the library's words.
func libError(err error) error {
	var field, reason string
	if e, ok := errors.AsType[*cache.ConfigError](err); ok {
		switch {
		case errors.Is(e, peers.ErrConfig):
			field, reason = "peers."+e.Field, e.Reason
		case errors.Is(e, transport.ErrConfig):
			field, reason = "transport."+e.Field, e.Reason
		}
	}
	if name, ok := settingOf[field]; ok {
		return fmt.Errorf("%w: %s: %s", errConfig, name, reason)
	}
	return fmt.Errorf("%w: %w", errConfig, err)
}

// groupError is libError for a group: the group field at fault, and why.
func groupError(err error) error {
	if e, ok := errors.AsType[*cache.ConfigError](err); ok {
		if name, ok := groupFieldOf[e.Field]; ok {
			return fmt.Errorf("%s: %s", name, e.Reason)
		}
	}
	return err
}

// validateComponents asks each library whether it takes what the node will
// give it.
func (c *Config) validateComponents() error {
	self := cmp.Or(c.PeerURL, standInPeerURL)
	if err := c.poolConfig(self).Validate(); err != nil {
		return libError(err)
	}
	// Settings that only etcd membership or ranges placement use are
	// checked all the same: a bad one is a mistake either way, and should
	// not wait for the day it is used to be found.
	pc := c.peersConfig(cmp.Or(c.NodeID, standInNodeID), self)
	if len(pc.Endpoints) == 0 {
		pc.Endpoints = []string{standInEtcd}
	}
	if err := pc.Validate(); err != nil {
		return libError(err)
	}
	if err := peers.CheckPositions(c.Positions); err != nil {
		return fmt.Errorf("%w: positions: %v", errConfig, err)
	}
	// The static members, which the Pool is given at start.
	for _, u := range c.Peers {
		if err := transport.CheckPeerURL(u); err != nil {
			return fmt.Errorf("%w: peers: %v", errConfig, err)
		}
	}
	p := &c.Public
	if err := p.limitConfig(false).Validate(); err != nil {
		return libError(err)
	}
	if l := p.clientLimits(); l != nil {
		if err := l.Validate(); err != nil {
			return libError(err)
		}
	}
	// The token files are read at start, and checked by the same rules then.
	ac := api.AuthConfig{OpenWrites: p.OpenWrites}
	ac.WriteTokens, _ = tokens(p.WriteToken, "")
	ac.ReadTokens, _ = tokens(p.ReadToken, "")
	if err := ac.Validate(); err != nil {
		return libError(err)
	}
	return nil
}

// validateGroups checks each group by the daemon's rules (validate), then
// adds it to a cache.Node of its own, with a stand-in origin, so that the
// cache's rules (budgets, TTLs, one group per name) are the cache's alone.
func (c *Config) validateGroups() error {
	if len(c.Groups) == 0 {
		return fmt.Errorf("%w: group: no groups: give at least one with -group or in the config file", errConfig)
	}
	check := cache.New(cache.Config{}) // nothing in it ever runs
	for i := range c.Groups {
		g := &c.Groups[i]
		field := fmt.Sprintf("group #%d", i+1)
		if g.Name != "" {
			field = fmt.Sprintf("group %q", g.Name)
		}
		err := g.validate()
		if err == nil {
			_, err = check.NewGroup(g.groupConfig(originAtStart, c.Copies))
		}
		if errors.Is(err, cache.ErrGroupExists) {
			err = errors.New("name: used by another group")
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %v", errConfig, field, groupError(err))
		}
	}
	return nil
}
