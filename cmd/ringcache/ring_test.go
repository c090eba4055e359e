package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestRunRingHashed(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := run(t.Context(), []string{"ring", "--placement", "hashed", "--nodes", "10", "--replicas", "160", "--hash", "xxhash", "--keys", "100000"}, environ{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"placement=hashed hash=xxhash nodes=10 replicas=160 keys=100000",
		"node-0", "node-9", "balance: max/mean", "ideal cv 0.0791 (1/sqrt(160))",
		"join   10 -> 11:", "leave  10 -> 9:", "hash%N moved",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "node-10 ") {
		t.Errorf("the joining node is listed among the 10:\n%s", s)
	}
}

func TestMeasureHashed(t *testing.T) {
	t.Parallel()
	cfg, err := parseRing([]string{"--placement", "hashed", "--nodes", "20", "--replicas", "160", "--keys", "200000"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := measure(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range rep.Nodes {
		total += n.Keys
		// Key shares estimate space shares: 200,000 keys over 20
		// nodes leave a sampling error near 0.0005.
		if math.Abs(n.KeyShare-n.SpaceShare) > 0.003 {
			t.Errorf("%s: key share %.4f, space share %.4f", n.Name, n.KeyShare, n.SpaceShare)
		}
	}
	if total != 200000 || len(rep.Nodes) != 20 {
		t.Fatalf("%d keys over %d nodes", total, len(rep.Nodes))
	}
	// Consistent hashing moves about 1/(n+1) and 1/n of the keys, and
	// hash % N nearly all of them.
	if r := rep.Join.Moved / rep.Join.Ideal; r < 0.6 || r > 1.4 {
		t.Errorf("join moved %.4f, ideal %.4f", rep.Join.Moved, rep.Join.Ideal)
	}
	if r := rep.Leave.Moved / rep.Leave.Ideal; r < 0.6 || r > 1.4 {
		t.Errorf("leave moved %.4f, ideal %.4f", rep.Leave.Moved, rep.Leave.Ideal)
	}
	if math.Abs(rep.Join.Modulo-20.0/21) > 0.01 || math.Abs(rep.Leave.Modulo-19.0/20) > 0.01 {
		t.Errorf("hash %% N moved %.4f and %.4f, want about 20/21 and 19/20", rep.Join.Modulo, rep.Leave.Modulo)
	}
	if rep.IdealCV != 1/math.Sqrt(160) || rep.CV <= 0 || rep.MaxMean < 1 {
		t.Errorf("balance: cv %v ideal %v max/mean %v", rep.CV, rep.IdealCV, rep.MaxMean)
	}
}

// TestMeasureDefaults: at the default settings (ranges, 16 positions a
// node: ringcached's placement where the nodes are in etcd), the busiest
// node's share of the ring is at most 1.05 times the mean from 3 to 100
// nodes, and a join or a leave moves within 1.1 times the ideal.
func TestMeasureDefaults(t *testing.T) {
	t.Parallel()
	for _, nodes := range []int{3, 10, 50, 100} {
		cfg, err := parseRing([]string{"--nodes", strconv.Itoa(nodes), "--keys", "300000"}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Placement != "ranges" || cfg.Positions != 16 {
			t.Fatalf("defaults: placement %q, %d positions", cfg.Placement, cfg.Positions)
		}
		rep, err := measure(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		var mx float64
		for _, n := range rep.Nodes {
			mx = max(mx, n.SpaceShare)
		}
		if mm := mx * float64(nodes); mm > 1.05 || math.Abs(mm-rep.SpaceMaxMean) > 1e-9 {
			t.Errorf("%d nodes: space max/mean %.4f (reported %.4f), want at most 1.05", nodes, mm, rep.SpaceMaxMean)
		}
		// A joining node takes exactly 1/(n+1) of the space; a leaving
		// one's space goes to the others. Keys, 300,000 of them, measure
		// it within about 1/sqrt(300,000 / (n+1)).
		for _, m := range []struct {
			name string
			r    float64
		}{{"join", rep.Join.Moved / rep.Join.Ideal}, {"leave", rep.Leave.Moved / rep.Leave.Ideal}} {
			if m.r < 0.9 || m.r > 1.1 {
				t.Errorf("%d nodes: %s moved %.3f of the ideal", nodes, m.name, m.r)
			}
		}
		if rep.IdealCV != 0 {
			t.Errorf("ranges report an ideal cv %v", rep.IdealCV)
		}
	}
}

func TestBalance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		keys        []int
		maxMean, cv float64
	}{
		{"even", []int{10, 10, 10, 10}, 1, 0},
		{"one node", []int{7}, 1, 0},
		// mean 10, sample sd sqrt((25+25)/1) = 7.07
		{"skewed", []int{5, 15}, 1.5, math.Sqrt(50) / 10},
		{"empty", nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ns []nodeStat
			for _, k := range tt.keys {
				ns = append(ns, nodeStat{Keys: k})
			}
			mm, cv := balance(ns)
			if math.Abs(mm-tt.maxMean) > 1e-12 || math.Abs(cv-tt.cv) > 1e-12 {
				t.Errorf("balance(%v) = %v, %v; want %v, %v", tt.keys, mm, cv, tt.maxMean, tt.cv)
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want error
	}{
		{"no subcommand", nil, errUsage},
		{"unknown subcommand", []string{"serve"}, errUsage},
		{"unknown flag", []string{"ring", "--bogus"}, errUsage},
		{"bad hash", []string{"ring", "--hash", "sha1"}, errUsage},
		{"bad placement", []string{"ring", "--placement", "random"}, errUsage},
		{"zero nodes", []string{"ring", "--nodes", "0"}, errUsage},
		{"zero keys", []string{"ring", "--keys", "0"}, errUsage},
		{"zero replicas", []string{"ring", "--replicas", "0"}, errUsage},
		{"too many points", []string{"ring", "--placement", "hashed", "--nodes", "100000", "--replicas", "1000"}, errUsage},
		{"too many nodes for ranges", []string{"ring", "--nodes", "100000"}, errUsage},
		{"leave unknown", []string{"ring", "--leave", "node-99", "--nodes", "3"}, errUsage},
		{"stray argument", []string{"ring", "extra"}, errUsage},
		{"bad output", []string{"ring", "-o", "yaml"}, errUsage},
		{"help", []string{"ring", "-h"}, flag.ErrHelp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			if err := run(t.Context(), tt.args, environ{Stdout: &out}); !errors.Is(err, tt.want) {
				t.Errorf("run(%q) = %v, want %v", tt.args, err, tt.want)
			}
		})
	}
}

func TestRunHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := run(ctx, []string{"ring", "--keys", "1000000"}, environ{Stdout: &bytes.Buffer{}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("run with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestRunRingJSON(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"ring", "-nodes", "4", "-keys", "10000", "-o", "json"}, environ{Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("ring -o json: %v\n%s", err, out.String())
	}
	keys := 0
	for _, n := range rep.Nodes {
		keys += n.Keys
	}
	if len(rep.Nodes) != 4 || keys != 10000 || rep.Config.Hash != "xxhash" || rep.Join.To != 5 || rep.Leave.To != 3 {
		t.Errorf("ring -o json = %+v", rep)
	}
}

func TestRunSingleNode(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"ring", "--nodes", "1", "--keys", "1000"}, environ{Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Contains(s, "leave") || !strings.Contains(s, "join   1 -> 2:") {
		t.Errorf("single-node report:\n%s", s)
	}
}
