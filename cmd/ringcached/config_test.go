package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
)

// env returns a getenv over a map.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// writeFile writes a config file in a temp dir and returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ringcached.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const demoGroup = "name=demo,origin=demo"

func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig([]string{"-group", demoGroup}, env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Groups = []GroupSpec{{Name: "demo", Origin: "demo", Bytes: defaultGroupBytes}}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got  %+v\nwant %+v", cfg, want)
	}
}

// TestGroupFieldDefaults checks that a group field's documented default,
// given explicitly, makes the same group as leaving the field out: the
// cache applies the default the help shows. (The origins' fields, timeout
// and demo-size, show the origins' exported defaults.)
func TestGroupFieldDefaults(t *testing.T) {
	t.Parallel()
	node := cache.New(cache.Config{})
	add := func(g GroupSpec) cache.GroupConfig {
		t.Helper()
		if err := g.validate(); err != nil {
			t.Fatal(err)
		}
		grp, err := node.NewGroup(g.groupConfig(originAtStart, DefaultConfig().Copies))
		if err != nil {
			t.Fatal(err)
		}
		c := grp.Config()
		c.Name, c.Getter = "", nil
		return c
	}
	plain := add(GroupSpec{Name: "plain", Origin: originDemo})
	for _, f := range groupFields {
		if f.name == "timeout" || f.name == "demo-size" || strings.ContainsAny(f.def, " /") || f.def == "required" {
			continue
		}
		g := GroupSpec{Name: "with-" + f.name, Origin: originDemo}
		if err := f.set(&g, f.def); err != nil {
			t.Fatalf("%s: default %q does not parse: %v", f.name, f.def, err)
		}
		if got := add(g); got != plain {
			t.Errorf("%s=%s gives %+v, without it %+v", f.name, f.def, got, plain)
		}
	}
}

// TestLoadConfigLayers checks the order: defaults, file, environment, flags.
func TestLoadConfigLayers(t *testing.T) {
	t.Parallel()
	file := writeFile(t, `
listen: ":9000"
cluster: from-file
lease-ttl: 7s
log-level: debug
etcd: [http://e1:2379, http://e2:2379]
groups:
  - name: files
    origin: dir
    dir: /srv
    bytes: 1MiB
`)
	cfg, err := loadConfig(
		[]string{"-config", file, "-cluster", "from-flag", "-group", "name=api,origin=http,url=http://o/{key},ttl=1m"},
		env(map[string]string{
			"RINGCACHE_CLUSTER":   "from-env",
			"RINGCACHE_LEASE_TTL": "9s",
			"RINGCACHE_GROUP":     "name=ignored,origin=demo", // a -group flag wins
		}), nil)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		field     string
		got, want any
	}{
		{"listen (file)", cfg.Listen, ":9000"},
		{"cluster (flag over env over file)", cfg.Cluster, "from-flag"},
		{"lease-ttl (env over file)", cfg.LeaseTTL, 9 * time.Second},
		{"log-level (file)", cfg.LogLevel, "debug"},
		{"etcd (file list)", cfg.Etcd, []string{"http://e1:2379", "http://e2:2379"}},
		{"hold-down (default)", cfg.HoldDown, 2 * time.Second},
		{"groups (file, then flags)", cfg.Groups, []GroupSpec{
			{Name: "files", Origin: "dir", Dir: "/srv", Bytes: 1 << 20},
			{Name: "api", Origin: "http", URL: "http://o/{key}", TTL: time.Minute, Bytes: defaultGroupBytes},
		}},
		{"config file", cfg.ConfigFile, file},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}
}

func TestLoadConfigEnv(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "peers: http://a:8080, http://b:8080\n")
	cfg, err := loadConfig(nil, env(map[string]string{
		"RINGCACHE_CONFIG":           file,
		"RINGCACHE_LISTEN":           "127.0.0.1:8181",
		"RINGCACHE_PEER_LISTEN":      ":9181",
		"RINGCACHE_PEER_URL":         "http://node-a:9181",
		"RINGCACHE_NODE_ID":          "node-a",
		"RINGCACHE_HOLD_DOWN":        "1s",
		"RINGCACHE_SECRET":           "0123456789abcdef",
		"RINGCACHE_LOG_FORMAT":       "json",
		"RINGCACHE_MAX_KEY_BYTES":    "100",
		"RINGCACHE_HASH":             "crc32",
		"RINGCACHE_REPLICAS":         "50",
		"RINGCACHE_SHUTDOWN_TIMEOUT": "3s",
		"RINGCACHE_GROUP":            "name=a,origin=demo,demo-size=256,demo-latency=20ms; name=b,origin=demo,hot-bytes=off",
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Listen: "127.0.0.1:8181", PeerListen: ":9181", PeerURL: "http://node-a:9181",
		Peers: []string{"http://a:8080", "http://b:8080"}, Cluster: "default", NodeID: "node-a",
		LeaseTTL: 5 * time.Second, HoldDown: time.Second, Secret: "0123456789abcdef", ConfigFile: file,
		LogLevel: "info", LogFormat: "json", MaxKeyBytes: 100, Hash: "crc32", Replicas: 50, Weight: 1, ShutdownTimeout: 3 * time.Second,
		PeerTimeout: time.Second, CopyLease: time.Second, PurgeLease: 2 * time.Minute, CoalesceFetches: true, Placement: "auto", Positions: 16,
		Copies: 1, RepairRate: DefaultConfig().RepairRate,
		Public: DefaultConfig().Public,
		Groups: []GroupSpec{
			{Name: "a", Origin: "demo", Bytes: defaultGroupBytes, DemoSize: 256, DemoLatency: 20 * time.Millisecond},
			{Name: "b", Origin: "demo", Bytes: defaultGroupBytes, HotBytes: -1},
		},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got  %+v\nwant %+v", cfg, want)
	}
}

// TestLoadConfigErrors checks that every invalid configuration fails, with
// a message that names the field (and the flag, variable or line it came
// from).
func TestLoadConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		file string // YAML; passed with -config
		want []string
	}{
		{name: "no groups", want: []string{"group", "no groups"}},
		{name: "unknown flag", args: []string{"-nope"}, want: []string{"-nope"}},
		{name: "stray argument", args: []string{"-group", demoGroup, "extra"}, want: []string{`"extra"`}},
		{name: "bad duration flag", args: []string{"-group", demoGroup, "-lease-ttl", "soon"}, want: []string{"-lease-ttl", `"soon"`}},
		{name: "bad duration env", args: []string{"-group", demoGroup}, env: map[string]string{"RINGCACHE_HOLD_DOWN": "2"}, want: []string{"RINGCACHE_HOLD_DOWN"}},
		{name: "fractional lease", args: []string{"-group", demoGroup, "-lease-ttl", "1500ms"}, want: []string{"lease-ttl", "whole number of seconds"}},
		{name: "zero lease", args: []string{"-group", demoGroup, "-lease-ttl", "0s"}, want: []string{"lease-ttl"}},
		{name: "negative hold-down", args: []string{"-group", demoGroup, "-hold-down", "-1s"}, want: []string{"hold-down"}},
		{name: "zero hold-down", args: []string{"-group", demoGroup, "-hold-down", "0s"}, want: []string{"-hold-down", "other than zero"}},
		{name: "bad int", args: []string{"-group", demoGroup, "-max-key-bytes", "lots"}, want: []string{"-max-key-bytes"}},
		{name: "zero max key", args: []string{"-group", demoGroup, "-max-key-bytes", "0"}, want: []string{"max-key-bytes"}},
		{name: "unknown hash", args: []string{"-group", demoGroup, "-hash", "sha1"}, want: []string{"hash", "xxhash"}},
		{name: "zero replicas", args: []string{"-group", demoGroup, "-replicas", "0"}, want: []string{"replicas"}},
		{name: "negative max key", args: []string{"-group", demoGroup, "-max-key-bytes", "-5"}, want: []string{"max-key-bytes", "-5", "negative"}},
		{name: "too many replicas", args: []string{"-group", demoGroup, "-replicas", "2000000"}, want: []string{"replicas", "2000000", "1 to 1048576"}},
		{name: "zero weight", args: []string{"-group", demoGroup, "-etcd", "http://e:2379", "-weight", "0"}, want: []string{"weight"}},
		{name: "heavy weight", args: []string{"-group", demoGroup, "-etcd", "http://e:2379", "-weight", "1001"}, want: []string{"weight", "1001", "1 to 1000"}},
		{name: "bad cluster", args: []string{"-group", demoGroup, "-cluster", "a/b"}, want: []string{"cluster", `"a/b"`}},
		{name: "static weight", args: []string{"-group", demoGroup, "-weight", "2"}, want: []string{"weight", "-etcd"}},
		{name: "heavy replicas", args: []string{"-group", demoGroup, "-etcd", "http://e:2379", "-replicas", "5000"}, want: []string{"replicas", "1048"}},
		{name: "unknown placement", args: []string{"-group", demoGroup, "-placement", "random"}, want: []string{"placement", "auto, hashed or ranges"}},
		{name: "static ranges", args: []string{"-group", demoGroup, "-placement", "ranges"}, want: []string{"placement", "needs -etcd"}},
		{name: "weighted ranges", args: []string{"-group", demoGroup, "-etcd", "http://e:2379", "-placement", "ranges", "-weight", "2"}, want: []string{"weight", "ranges"}},
		{name: "zero positions", args: []string{"-group", demoGroup, "-etcd", "http://e:2379", "-placement", "ranges", "-positions", "0"}, want: []string{"-positions", "other than zero"}},
		{name: "too many positions", args: []string{"-group", demoGroup, "-etcd", "http://e:2379", "-placement", "ranges", "-positions", "2000"}, want: []string{"positions", "2000", "1 to 1024"}},
		{name: "unused positions", args: []string{"-group", demoGroup, "-positions", "-1"}, want: []string{"positions", "-1", "1 to 1024"}},
		{name: "zero shutdown", args: []string{"-group", demoGroup, "-shutdown-timeout", "0s"}, want: []string{"shutdown-timeout"}},
		{name: "zero peer timeout", args: []string{"-group", demoGroup, "-peer-timeout", "0s"}, want: []string{"-peer-timeout", "other than zero"}},
		{name: "negative peer timeout", args: []string{"-group", demoGroup, "-peer-timeout", "-1s"}, want: []string{"peer-timeout", "-1s", "negative"}},
		{name: "zero copy lease", args: []string{"-group", demoGroup, "-copy-lease", "0s"}, want: []string{"-copy-lease", "other than zero"}},
		{name: "negative copy lease", args: []string{"-group", demoGroup, "-copy-lease", "-1s"}, want: []string{"copy-lease", "-1s", "negative"}},
		{name: "negative error ttl", args: []string{"-group", "name=a,origin=demo,error-ttl=-2s"}, want: []string{"error-ttl"}},
		{name: "negative stale window", args: []string{"-group", "name=a,origin=demo,stale-if-error=-1s"}, want: []string{"stale-if-error"}},
		{name: "log level", args: []string{"-group", demoGroup, "-log-level", "loud"}, want: []string{"log-level", "loud"}},
		{name: "log format", args: []string{"-group", demoGroup, "-log-format", "xml"}, want: []string{"log-format"}},
		{name: "listen", args: []string{"-group", demoGroup, "-listen", "8080"}, want: []string{"listen"}},
		{name: "listen port", args: []string{"-group", demoGroup, "-listen", ":http"}, want: []string{"listen"}},
		{name: "peer-listen same", args: []string{"-group", demoGroup, "-listen", ":8080", "-peer-listen", ":8080"}, want: []string{"peer-listen"}},
		{name: "peer-url", args: []string{"-group", demoGroup, "-peer-url", "node:8080"}, want: []string{"peer-url"}},
		{name: "peer-url query", args: []string{"-group", demoGroup, "-peer-url", "http://node:8080/?x=1"}, want: []string{"peer-url"}},
		{name: "peers", args: []string{"-group", demoGroup, "-peers", "http://a:1,ftp://b"}, want: []string{"peers", "ftp://b"}},
		{name: "etcd and peers", args: []string{"-group", demoGroup, "-etcd", "e:2379", "-peers", "http://a:1"}, want: []string{"peers", "not both"}},
		{name: "node id", args: []string{"-group", demoGroup, "-node-id", "a b"}, want: []string{"node-id"}},
		{name: "empty cluster", args: []string{"-group", demoGroup, "-cluster", ""}, want: []string{"cluster"}},
		{name: "missing config file", args: []string{"-config", "/nonexistent/x.yaml"}, want: []string{"config", "/nonexistent/x.yaml"}},

		{name: "group syntax", args: []string{"-group", "name=a,demo"}, want: []string{"-group #1", `"demo"`, "key=value"}},
		{name: "group unknown field", args: []string{"-group", "name=a,origin=demo,colour=red"}, want: []string{"-group #1", `unknown field "colour"`}},
		{name: "group repeated field", args: []string{"-group", "name=a,origin=demo,name=b"}, want: []string{"name: given twice"}},
		{name: "group env", env: map[string]string{"RINGCACHE_GROUP": "name=a,origin=demo;name=b,origin=demo,ttl=x"}, want: []string{"RINGCACHE_GROUP #2", "ttl"}},
		{name: "group no name", args: []string{"-group", "origin=demo"}, want: []string{"group #1", "name"}},
		{name: "group bad name", args: []string{"-group", "name=a/b,origin=demo"}, want: []string{`group "a/b"`, "name"}},
		// /cache/../k and /cache/./k are cleaned by every router: unreachable.
		{name: "group dot-dot name", args: []string{"-group", "name=..,origin=demo"}, want: []string{`group ".."`, "name"}},
		{name: "group dot name", args: []string{"-group", "name=.,origin=demo"}, want: []string{`group "."`, "name"}},
		{name: "group no origin", args: []string{"-group", "name=a"}, want: []string{`group "a"`, "origin: required"}},
		{name: "group bad origin", args: []string{"-group", "name=a,origin=s3"}, want: []string{"origin", "s3"}},
		{name: "group duplicate", args: []string{"-group", demoGroup, "-group", demoGroup}, want: []string{`group "demo"`, "used by another group"}},
		{name: "http without url", args: []string{"-group", "name=a,origin=http"}, want: []string{"url: required"}},
		{name: "dir without dir", args: []string{"-group", "name=a,origin=dir"}, want: []string{"dir: required"}},
		{name: "demo with url", args: []string{"-group", "name=a,origin=demo,url=http://x/{key}"}, want: []string{"url: not used by origin demo"}},
		{name: "dir with demo-size", args: []string{"-group", "name=a,origin=dir,dir=/srv,demo-size=5"}, want: []string{"demo-size: not used"}},
		{name: "bad bytes", args: []string{"-group", "name=a,origin=demo,bytes=lots"}, want: []string{"bytes", `"lots"`}},
		{name: "negative bytes", args: []string{"-group", "name=a,origin=demo,bytes=-1"}, want: []string{"bytes"}},
		{name: "overflowing bytes", args: []string{"-group", "name=a,origin=demo,bytes=9000000000TiB"}, want: []string{"bytes", "too large"}},
		{name: "hot over budget", args: []string{"-group", "name=a,origin=demo,bytes=1MiB,hot-bytes=1MiB"}, want: []string{"hot-bytes"}},
		{name: "unknown policy", args: []string{"-group", "name=a,origin=demo,policy=lfu"}, want: []string{"policy", "slru"}},
		{name: "negative ttl", args: []string{"-group", "name=a,origin=demo,ttl=-1s"}, want: []string{"ttl"}},
		{name: "demo over max value", args: []string{"-group", "name=a,origin=demo,demo-size=2000,max-value-bytes=1KiB"}, want: []string{"demo-size", "max-value-bytes"}},

		{name: "yaml syntax", file: "listen: [", want: []string{"config file"}},
		{name: "yaml not a mapping", file: "- a\n- b\n", want: []string{"line 1", "mapping"}},
		{name: "yaml unknown field", file: "listen: ':1'\nlisten_addr: ':2'\n", want: []string{"line 2", `unknown field "listen_addr"`}},
		{name: "yaml repeated field", file: "cluster: a\ncluster: b\n", want: []string{"line 2", "cluster: given twice"}},
		{name: "yaml list for scalar", file: "listen: [a, b]\n", want: []string{"line 1", "listen", "single value"}},
		{name: "yaml map for list", file: "etcd: {a: b}\n", want: []string{"etcd"}},
		{name: "yaml bad duration", file: "lease-ttl: 5\n", want: []string{"line 1", "lease-ttl", `"5"`}},
		{name: "yaml groups not a list", file: "groups: {name: a}\n", want: []string{"groups: want a list"}},
		{name: "yaml group not a mapping", file: "groups: [a]\n", want: []string{"groups[0]: want a mapping"}},
		{name: "yaml group unknown field", file: "groups:\n  - name: a\n    origin: demo\n    sise: 5\n", want: []string{"line 4", "groups[0]", `unknown field "sise"`}},
		{name: "yaml group bad value", file: "groups:\n  - name: a\n    origin: demo\n    ttl: [1]\n", want: []string{"line 4", "groups[0]", "ttl"}},
		{name: "yaml group invalid", file: "groups:\n  - name: a\n    origin: http\n", want: []string{`group "a"`, "url: required"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := tt.args
			if tt.file != "" {
				args = append([]string{"-config", writeFile(t, tt.file)}, args...)
			}
			_, err := loadConfig(args, env(tt.env), nil)
			if !errors.Is(err, errConfig) {
				t.Fatalf("err = %v, want errConfig", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %q, want it to mention %q", err, w)
				}
			}
		})
	}
}

func TestLoadConfigHelp(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, err := loadConfig([]string{"-help"}, env(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	// Every flag, its variable and every group field are documented.
	for _, s := range settings {
		for _, w := range []string{"-" + s.name, envName(s.name), s.def} {
			if !strings.Contains(out.String(), w) {
				t.Errorf("usage lacks %q", w)
			}
		}
	}
	for _, w := range []string{"-config", "RINGCACHE_CONFIG", "-group", "RINGCACHE_GROUP"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("usage lacks %q", w)
		}
	}
	for _, f := range groupFields {
		if !strings.Contains(out.String(), "  "+f.name+" ") {
			t.Errorf("usage lacks group field %q", f.name)
		}
	}
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	for flag, want := range map[string]string{
		"listen": "RINGCACHE_LISTEN", "peer-listen": "RINGCACHE_PEER_LISTEN", "shutdown-timeout": "RINGCACHE_SHUTDOWN_TIMEOUT",
	} {
		if got := envName(flag); got != want {
			t.Errorf("envName(%q) = %q, want %q", flag, got, want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1024", 1024, true},
		{"12B", 12, true},
		{"512KiB", 512 << 10, true},
		{"64MiB", 64 << 20, true},
		{"64 MiB", 64 << 20, true},
		{"2GiB", 2 << 30, true},
		{"1TiB", 1 << 40, true},
		{"5KB", 5000, true},
		{"5MB", 5e6, true},
		{"1GB", 1e9, true},
		{"", 0, false},
		{"MiB", 0, false},
		{"1.5MiB", 0, false},
		{"-1", 0, false},
		{"64mb", 0, false},
		{"9223372036854775807", 1<<63 - 1, true},
		{"9223372036854775807KiB", 0, false},
	}
	for _, tt := range tests {
		var got int64
		err := parseBytes(&got, tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// FuzzParseGroupFlag checks that no -group value panics, and that one that
// parses and validates has the fields it named.
func FuzzParseGroupFlag(f *testing.F) {
	for _, s := range []string{
		demoGroup, "name=api,origin=http,url=http://o:9000/{group}/{key},bytes=128MiB,ttl=60s",
		"name=f,origin=dir,dir=/srv/data,bytes=32MiB", "name==,,", "=", ",,,", "name=a,hot-bytes=off",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := parseGroupFlag(s)
		if err != nil {
			return
		}
		if err := g.validate(); err != nil {
			return
		}
		if g.Name == "" || g.Bytes <= 0 || !strings.Contains(s, "name=") {
			t.Fatalf("%q gave a valid group %+v", s, g)
		}
	})
}

// TestExampleConfig loads the example file README shows.
func TestExampleConfig(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig([]string{"-config", "testdata/ringcached.yaml"}, env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PeerListen != ":7946" || len(cfg.Etcd) != 2 || cfg.Cluster != "prod" || cfg.LogFormat != "json" || len(cfg.Groups) != 3 {
		t.Errorf("got %+v", cfg)
	}
	api := cfg.Groups[0]
	if api.URL != "http://origin:9000/v1/{group}/{key}" || api.Timeout != 2*time.Second || api.Bytes != 128<<20 || api.TTL != time.Minute || api.NotFoundTTL != 5*time.Second {
		t.Errorf("api = %+v", api)
	}
	if demo := cfg.Groups[2]; demo.HotBytes != -1 || demo.DemoSize != 256 || demo.Bytes != defaultGroupBytes {
		t.Errorf("demo = %+v", demo)
	}
}

// FuzzDecodeYAML checks that no config file panics the decoder, and that
// what it accepts validates or fails with errConfig.
func FuzzDecodeYAML(f *testing.F) {
	example, err := os.ReadFile("testdata/ringcached.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{string(example), "", "listen: [", "groups: [{name: a}]", "etcd: [a, [b]]", "? [a]\n: b\n", "*x", "&a [1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg := DefaultConfig()
		if err := decodeYAML(&cfg, []byte(s)); err != nil {
			return
		}
		if err := cfg.Validate(); err != nil && !errors.Is(err, errConfig) {
			t.Fatalf("Validate: untyped error %v", err)
		}
	})
}

// TestPlacementAuto: the default placement is ranges where the members
// are in etcd and weigh 1, and hashed with static peers or weights; an
// explicit one is kept.
func TestPlacementAuto(t *testing.T) {
	t.Parallel()
	etcd := []string{"http://e:2379"}
	for _, tt := range []struct {
		placement string
		etcd      []string
		weight    int
		want      string
	}{
		{placementAuto, etcd, 1, placementRanges},
		{placementAuto, nil, 1, placementHashed},
		{placementAuto, etcd, 2, placementHashed},
		{placementHashed, etcd, 1, placementHashed},
		{placementRanges, etcd, 1, placementRanges},
	} {
		c := DefaultConfig()
		if c.Placement != placementAuto {
			t.Fatalf("default placement %q, want %q", c.Placement, placementAuto)
		}
		c.Placement, c.Etcd, c.Weight = tt.placement, tt.etcd, tt.weight
		if got := c.placement(); got != tt.want {
			t.Errorf("placement %q with etcd %v and weight %d = %q, want %q", tt.placement, tt.etcd, tt.weight, got, tt.want)
		}
		// What the registration gets: a Placer exactly with ranges.
		if placer := c.peersConfig("n1", "http://n1:8080").Placer != nil; placer != (tt.want == placementRanges) {
			t.Errorf("placement %q with etcd %v: a Placer %v", tt.placement, tt.etcd, placer)
		}
	}
}
