package transport

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/consistenthash"
)

func TestNewPoolConfig(t *testing.T) {
	t.Parallel()
	const self = "http://a:1"
	tests := []struct {
		name  string
		cfg   Config
		field string // that the ConfigError names
	}{
		{"no self", Config{}, "Self"},
		{"self not a URL", Config{Self: "10.0.0.1:8080"}, "Self"},
		{"self with query", Config{Self: "http://a:1/?x=1"}, "Self"},
		{"self ftp", Config{Self: "ftp://a:1"}, "Self"},
		{"base path without slashes", Config{Self: self, BasePath: "_groupcache"}, "BasePath"},
		{"base path needing escapes", Config{Self: self, BasePath: "/a b/"}, "BasePath"},
		{"negative replicas", Config{Self: self, Replicas: -1}, "Replicas"},
		{"too many replicas", Config{Self: self, Replicas: consistenthash.MaxPoints + 1}, "Replicas"},
		{"negative max weight", Config{Self: self, MaxWeight: -1}, "MaxWeight"},
		// A member of weight 1000 with 1049 replicas would need more
		// than MaxPoints points.
		{"a heavy member would not fit", Config{Self: self, Replicas: consistenthash.MaxPoints/1000 + 1, MaxWeight: 1000}, "Replicas"},
		{"the default replicas would not fit", Config{Self: self, MaxWeight: consistenthash.MaxPoints/DefaultReplicas + 1}, "Replicas"},
		{"negative timeout", Config{Self: self, PeerTimeout: -1}, "PeerTimeout"},
		{"negative lease", Config{Self: self, LeaseTTL: -1}, "LeaseTTL"},
		{"negative dial timeout", Config{Self: self, DialTimeout: -1}, "DialTimeout"},
		{"negative response bound", Config{Self: self, MaxResponseBytes: -1}, "MaxResponseBytes"},
		{"negative idle conns", Config{Self: self, MaxIdleConnsPerHost: -1}, "MaxIdleConnsPerHost"},
		{"negative key limit", Config{Self: self, MaxKeyBytes: -1}, "MaxKeyBytes"},
		{"negative window", Config{Self: self, SignatureWindow: -1}, "SignatureWindow"},
		{"negative nonces", Config{Self: self, MaxNonces: -1}, "MaxNonces"},
		{"an empty secret", Config{Self: self, Secrets: [][]byte{[]byte("0123456789abcdef"), nil}}, "Secrets"},
		{"a short secret (the library's own minimum, as the daemon's)", Config{Self: self, Secrets: [][]byte{[]byte("0123456789abcde")}}, "Secrets"},
		{"too many secrets", Config{Self: self, Secrets: slices.Repeat([][]byte{[]byte("s")}, MaxSecrets+1)}, "Secrets"},
		{"a purge lease past what the public route waits for", Config{Self: self, PurgeLease: cache.MaxPurgeLease + time.Second}, "PurgeLease"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if ce, ok := errors.AsType[*ConfigError](tt.cfg.Validate()); !ok || ce.Field != tt.field {
				t.Errorf("Validate() = %v, want a ConfigError for %s", ce, tt.field)
			}
			_, err := NewPool(tt.cfg)
			if ce, ok := errors.AsType[*ConfigError](err); !ok || ce.Field != tt.field || !errors.Is(err, ErrConfig) {
				t.Fatalf("NewPool(%+v) error = %v, want a ConfigError for %s matching ErrConfig", tt.cfg, err, tt.field)
			}
		})
	}
	// The bounds themselves are valid.
	for _, cfg := range []Config{
		{Self: self, PurgeLease: cache.MaxPurgeLease},
		{Self: self, Replicas: consistenthash.MaxPoints},
		{Self: self, Replicas: consistenthash.MaxPoints / 1000, MaxWeight: 1000},
		{Self: self, MaxWeight: consistenthash.MaxPoints / DefaultReplicas},
	} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate(Replicas %d, MaxWeight %d) = %v", cfg.Replicas, cfg.MaxWeight, err)
		}
	}

	p, err := NewPool(Config{Self: "http://a:1/"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got := p.Config()
	want := DefaultConfig()
	if got.Self != "http://a:1" || got.BasePath != want.BasePath || got.Replicas != want.Replicas ||
		got.PeerTimeout != want.PeerTimeout || got.MaxIdleConnsPerHost != want.MaxIdleConnsPerHost ||
		got.MaxKeyBytes != want.MaxKeyBytes || got.SignatureWindow != want.SignatureWindow ||
		got.MaxResponseBytes != want.MaxResponseBytes || got.DialTimeout != DefaultDialTimeout ||
		got.Hash == nil || got.Logger == nil {
		t.Fatalf("defaults not applied: %+v", got)
	}
}

func TestPoolSet(t *testing.T) {
	t.Parallel()
	const self = "http://a:1"
	p, err := NewPool(Config{Self: self})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := p.Members(); !slices.Equal(got, []string{self}) {
		t.Fatalf("new pool members = %v, want only self", got)
	}
	if _, ok := p.PickPeer("k"); ok {
		t.Fatal("a pool of one picked a peer")
	}

	if err := p.Set("http://c:3/", "http://b:2", "http://b:2", self); err != nil {
		t.Fatal(err)
	}
	want := []string{self, "http://b:2", "http://c:3"}
	if got := p.Members(); !slices.Equal(got, want) {
		t.Fatalf("members = %v, want %v", got, want)
	}
	if n := len(p.Peers()); n != 2 {
		t.Fatalf("Peers() has %d peers, want 2 (self excluded)", n)
	}
	shares := p.Shares()
	if len(shares) != 3 {
		t.Fatalf("Shares() = %v, want 3 members", shares)
	}

	// Every key: PickPeer agrees with Owner, and names self exactly when it
	// reports false.
	owners := map[string]int{}
	for i := range 1000 {
		key := fmt.Sprint("key-", i)
		owner := p.Owner(key)
		owners[owner]++
		pe, ok := p.PickPeer(key)
		if ok == (owner == self) {
			t.Fatalf("PickPeer(%q) ok=%v but owner is %s", key, ok, owner)
		}
		if ok && pe.(*peer).url != owner {
			t.Fatalf("PickPeer(%q) = %s, Owner = %s", key, pe.(*peer).url, owner)
		}
	}
	if len(owners) != 3 {
		t.Fatalf("1000 keys spread over %d members, want 3: %v", len(owners), owners)
	}

	// Members that stay keep their peer value.
	before := p.state.Load().peers["http://b:2"]
	version := p.Version()
	if err := p.Set("http://b:2", "http://d:4"); err != nil {
		t.Fatal(err)
	}
	if p.state.Load().peers["http://b:2"] != before {
		t.Error("Set replaced the peer of a member that stayed")
	}
	if p.Version() == version {
		t.Error("ring version unchanged after a membership change")
	}

	// A bad URL leaves the membership as it was.
	members := p.Members()
	if err := p.Set("http://b:2", "not a url"); !errors.Is(err, ErrBadPeer) {
		t.Fatalf("Set with a bad URL: %v, want ErrBadPeer", err)
	}
	if got := p.Members(); !slices.Equal(got, members) {
		t.Fatalf("members after a failed Set = %v, want %v", got, members)
	}
}

// TestPoolVersionAgrees checks that nodes with the same membership, given in
// any order and each from its own point of view, report the same ring
// version and route every key alike: the property peers rely on.
func TestPoolVersionAgrees(t *testing.T) {
	t.Parallel()
	urls := []string{"http://a:1", "http://b:2", "http://c:3"}
	var pools []*Pool
	for i, self := range urls {
		p, err := NewPool(Config{Self: self})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		others := slices.Clone(urls)
		slices.Reverse(others)
		if err := p.Set(others[i:]...); err != nil { // self is added anyway
			t.Fatal(err)
		}
		if err := p.Set(others...); err != nil {
			t.Fatal(err)
		}
		pools = append(pools, p)
	}
	for _, p := range pools[1:] {
		if p.Version() != pools[0].Version() {
			t.Fatalf("versions differ: %d vs %d", p.Version(), pools[0].Version())
		}
	}
	for i := range 500 {
		key := fmt.Sprint(i)
		for _, p := range pools[1:] {
			if p.Owner(key) != pools[0].Owner(key) {
				t.Fatalf("owner of %q differs", key)
			}
		}
	}
	// Another hash is another ring, which the version shows.
	fnv, err := NewPool(Config{Self: urls[0], Hash: consistenthash.FNV1_32})
	if err != nil {
		t.Fatal(err)
	}
	defer fnv.Close()
	if err := fnv.Set(urls...); err != nil {
		t.Fatal(err)
	}
	if fnv.Version() == pools[0].Version() {
		t.Fatal("rings with different hashes report the same version")
	}
}

// TestPoolSetWeighted: weights shape the ring exactly as
// consistenthash.AddWeighted does, whichever node builds it; Set is
// SetWeighted with weight 1; a bad weight leaves the membership unchanged.
func TestPoolSetWeighted(t *testing.T) {
	t.Parallel()
	weights := map[string]int{"http://a:1": 1, "http://b:2": 3, "http://c:3": 1}
	want := consistenthash.New(DefaultReplicas, nil)
	for u, w := range weights {
		if err := want.AddWeighted(u, w); err != nil {
			t.Fatal(err)
		}
	}
	var pools []*Pool
	for self := range weights {
		p, err := NewPool(Config{Self: self})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.SetWeighted(weights); err != nil {
			t.Fatal(err)
		}
		pools = append(pools, p)
	}
	for _, p := range pools {
		if p.Version() != want.Version() {
			t.Fatalf("%s: version %x, want the weighted ring's %x", p.Config().Self, p.Version(), want.Version())
		}
		for i := range 1000 {
			key := fmt.Sprint("key-", i)
			if got := p.Owner(key); got != want.Get(key) {
				t.Fatalf("%s: owner of %q = %s, want %s", p.Config().Self, key, got, want.Get(key))
			}
		}
	}
	heavy := pools[0].Shares()["http://b:2"]
	if heavy < 0.45 {
		t.Fatalf("weight 3 of 5 got a share of %.2f", heavy)
	}

	p := pools[0]
	before := p.Version()
	if err := p.SetWeighted(map[string]int{"http://d:4": 0}); !errors.Is(err, consistenthash.ErrBadWeight) {
		t.Fatalf("weight 0: err = %v, want ErrBadWeight", err)
	}
	if err := p.SetWeighted(map[string]int{"ftp://d:4": 1}); !errors.Is(err, ErrBadPeer) {
		t.Fatalf("bad URL: err = %v, want ErrBadPeer", err)
	}
	if p.Version() != before {
		t.Fatal("a refused SetWeighted changed the ring")
	}

	// Set is SetWeighted with every weight 1.
	plain, err := NewPool(Config{Self: "http://a:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ones, err := NewPool(Config{Self: "http://a:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer ones.Close()
	if err := plain.Set("http://b:2", "http://c:3"); err != nil {
		t.Fatal(err)
	}
	if err := ones.SetWeighted(map[string]int{"http://b:2": 1, "http://c:3": 1}); err != nil {
		t.Fatal(err)
	}
	if plain.Version() != ones.Version() {
		t.Fatal("Set and SetWeighted with weight 1 build different rings")
	}
}
