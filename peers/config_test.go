package peers

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := Config{Endpoints: []string{"http://127.0.0.1:2379"}, NodeID: "a", PeerURL: "http://a:7070"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster != "default" || c.Prefix != "/ringcache/default/members/" || c.Weight != 1 ||
		c.TTL != 5*time.Second || c.HoldDown != 2*time.Second || c.ConfirmDelay != 10*time.Second ||
		c.DialTimeout != 5*time.Second || c.Logger == nil {
		t.Errorf("defaults: %+v", c)
	}
	c, err = Config{Endpoints: []string{"x"}, Cluster: "blue", NodeID: "a", PeerURL: "http://a"}.withDefaults()
	if err != nil || c.Prefix != "/ringcache/blue/members/" {
		t.Errorf("prefix for cluster blue: %q, %v", c.Prefix, err)
	}
	d := DefaultConfig()
	d.Endpoints, d.NodeID, d.PeerURL = []string{"x"}, "a", "http://a"
	if _, err := d.withDefaults(); err != nil {
		t.Errorf("DefaultConfig plus the required fields: %v", err)
	}
}

// TestNewRejectsBadConfig checks that New rejects, not adjusts, every bad field, before it
// touches the network.
func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	valid := func() Config {
		return Config{Endpoints: []string{"http://127.0.0.1:1"}, NodeID: "a", PeerURL: "http://a:7070"}
	}
	tests := []struct {
		name string
		edit func(*Config)
	}{
		{"no etcd", func(c *Config) { c.Endpoints = nil }},
		{"no node id", func(c *Config) { c.NodeID = "" }},
		{"node id with slash", func(c *Config) { c.NodeID = "a/b" }},
		{"no peer url", func(c *Config) { c.PeerURL = "" }},
		{"peer url without scheme", func(c *Config) { c.PeerURL = "a:7070" }},
		{"bad cluster", func(c *Config) { c.Cluster = "x y" }},
		{"prefix without slash", func(c *Config) { c.Prefix = "/members" }},
		{"negative weight", func(c *Config) { c.Weight = -1 }},
		{"weight too large", func(c *Config) { c.Weight = MaxWeight + 1 }},
		{"ttl below a second", func(c *Config) { c.TTL = 500 * time.Millisecond }},
		{"ttl not whole seconds", func(c *Config) { c.TTL = 2500 * time.Millisecond }},
		{"negative ttl", func(c *Config) { c.TTL = -time.Second }},
		{"negative hold-down", func(c *Config) { c.HoldDown = -1 }},
		{"negative confirm delay", func(c *Config) { c.ConfirmDelay = -1 }},
		{"negative dial timeout", func(c *Config) { c.DialTimeout = -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tt.edit(&c)
			r, err := New(context.Background(), c)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New = %v, %v; want ErrInvalidConfig", r, err)
			}
		})
	}
}

type refusingSetter struct{ err error }

func (s refusingSetter) Set(...string) error { return s.err }

// TestStaticReturnsSetterError: a member set that the Setter refuses is an
// error of Static, not a silent success.
func TestStaticReturnsSetterError(t *testing.T) {
	t.Parallel()
	refused := errors.New("ring full")
	got, err := Static(refusingSetter{refused}, "http://a:1", "http://b:2")
	if !errors.Is(err, refused) || got != nil {
		t.Fatalf("Static = %v, %v; want nil and the Setter's error", got, err)
	}
}
