package peers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport"
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

// TestNewRejectsBadConfig checks that Validate refuses, and New rejects rather than adjusts,
// every bad field, naming it, before New touches the network.
func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	valid := func() Config {
		return Config{Endpoints: []string{"http://127.0.0.1:1"}, NodeID: "a", PeerURL: "http://a:7070"}
	}
	placer := PlacerFunc(func(map[string][]uint32, string) ([]uint32, error) { return []uint32{1}, nil })
	tests := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"no etcd", func(c *Config) { c.Endpoints = nil }, "Endpoints"},
		{"no node id", func(c *Config) { c.NodeID = "" }, "NodeID"},
		{"node id with slash", func(c *Config) { c.NodeID = "a/b" }, "NodeID"},
		{"node id with a space", func(c *Config) { c.NodeID = "a b" }, "NodeID"},
		{"node id too long", func(c *Config) { c.NodeID = strings.Repeat("a", 129) }, "NodeID"},
		{"no peer url", func(c *Config) { c.PeerURL = "" }, "PeerURL"},
		{"peer url without scheme", func(c *Config) { c.PeerURL = "a:7070" }, "PeerURL"},
		{"peer url with a query", func(c *Config) { c.PeerURL = "http://a:7070/?x=1" }, "PeerURL"},
		{"bad cluster", func(c *Config) { c.Cluster = "x y" }, "Cluster"},
		{"prefix without slash", func(c *Config) { c.Prefix = "/members" }, "Prefix"},
		{"negative weight", func(c *Config) { c.Weight = -1 }, "Weight"},
		{"weight too large", func(c *Config) { c.Weight = MaxWeight + 1 }, "Weight"},
		{"weight with a placer", func(c *Config) { c.Weight, c.Placer = 2, placer }, "Weight"},
		{"placer without a RangesSetter", func(c *Config) { c.Placer, c.Setter = placer, refusingSetter{} }, "Setter"},
		{"ttl below a second", func(c *Config) { c.TTL = 500 * time.Millisecond }, "TTL"},
		{"ttl not whole seconds", func(c *Config) { c.TTL = 2500 * time.Millisecond }, "TTL"},
		{"negative ttl", func(c *Config) { c.TTL = -time.Second }, "TTL"},
		{"negative hold-down", func(c *Config) { c.HoldDown = -1 }, "HoldDown"},
		{"negative confirm delay", func(c *Config) { c.ConfirmDelay = -1 }, "ConfirmDelay"},
		{"negative dial timeout", func(c *Config) { c.DialTimeout = -1 }, "DialTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tt.edit(&c)
			ce, ok := errors.AsType[*ConfigError](c.Validate())
			if !ok || ce.Field != tt.field || !errors.Is(ce, ErrConfig) {
				t.Errorf("Validate = %v; want a ConfigError for %s matching ErrConfig", ce, tt.field)
			}
			r, err := New(context.Background(), c)
			if ce, ok := errors.AsType[*ConfigError](err); !ok || ce.Field != tt.field {
				t.Fatalf("New = %v, %v; want a ConfigError for %s", r, err, tt.field)
			}
		})
	}
}

// TestValidateAcceptsZeroAndBounds: zero fields select defaults and are valid, and so are the
// bounds of every range.
func TestValidateAcceptsZeroAndBounds(t *testing.T) {
	t.Parallel()
	placer := PlacerFunc(func(map[string][]uint32, string) ([]uint32, error) { return []uint32{1}, nil })
	for name, c := range map[string]Config{
		"zero but the required":  {Endpoints: []string{"x"}, NodeID: "a", PeerURL: "http://a"},
		"a client, no endpoints": {Client: &clientv3.Client{}, NodeID: "a", PeerURL: "http://a"},
		"bounds": {Endpoints: []string{"x"}, NodeID: strings.Repeat("a", 128), PeerURL: "https://a:1/p",
			Weight: MaxWeight, TTL: time.Second, Cluster: "a.b_c:d-e"},
		"a placer, weight 1": {Endpoints: []string{"x"}, NodeID: "a", PeerURL: "http://a", Placer: placer, Weight: 1},
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}

func TestCheckPositions(t *testing.T) {
	t.Parallel()
	for n, ok := range map[int]bool{-1: false, 0: false, 1: true, MaxPositions: true, MaxPositions + 1: false} {
		if err := CheckPositions(n); (err == nil) != ok || !ok && !errors.Is(err, ErrBadPositions) {
			t.Errorf("CheckPositions(%d) = %v, want ok=%v", n, err, ok)
		}
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

// TestOneConfigErrorType: every package's config error is a
// *cache.ConfigError that names its field and matches its own package's
// ErrConfig, not another's, and says which package refused it.
func TestOneConfigErrorType(t *testing.T) {
	t.Parallel()
	_, terr := transport.NewPool(transport.Config{Self: "http://127.0.0.1:1", Replicas: -1})
	perr := Config{}.Validate()
	_, cerr := cache.New(cache.Config{}).NewGroup(cache.GroupConfig{Name: "g", MaxBytes: 1 << 20, TTL: -1, Getter: cache.GetterFunc(func(context.Context, string) (cache.Value, error) { return cache.Value{}, nil })})
	for _, tt := range []struct {
		err         error
		is, isNot   []error
		field, text string
	}{
		{terr, []error{transport.ErrConfig}, []error{ErrConfig, cache.ErrConfig}, "Replicas", "transport: invalid config: Replicas: "},
		{perr, []error{ErrConfig}, []error{transport.ErrConfig, cache.ErrConfig}, "Endpoints", "peers: invalid config: Endpoints: "},
		{cerr, []error{cache.ErrConfig}, []error{ErrConfig, transport.ErrConfig}, "TTL", `cache: invalid config: group "g": TTL: `},
	} {
		ce, ok := errors.AsType[*cache.ConfigError](tt.err)
		if !ok || ce.Field != tt.field || !strings.HasPrefix(tt.err.Error(), tt.text) {
			t.Errorf("%v: want a *cache.ConfigError for %s saying %q", tt.err, tt.field, tt.text)
			continue
		}
		for _, e := range tt.is {
			if !errors.Is(tt.err, e) {
				t.Errorf("%v does not match %v", tt.err, e)
			}
		}
		for _, e := range tt.isNot {
			if errors.Is(tt.err, e) {
				t.Errorf("%v matches %v", tt.err, e)
			}
		}
	}
}
