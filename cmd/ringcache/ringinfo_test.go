package main

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ringcache/ringcache/transport/origin"
)

// originLoads returns how many times each node's demo origin loaded key.
func originLoads(t *testing.T, urls []string, key string) []int64 {
	t.Helper()
	out := make([]int64, len(urls))
	for i, u := range urls {
		resp, err := http.Get(u + "/debug/origin")
		if err != nil {
			t.Fatal(err)
		}
		var loads map[string]origin.DemoLoads
		err = json.NewDecoder(resp.Body).Decode(&loads)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = loads["demo"].Keys[key]
	}
	return out
}

func TestOwnerIsTheNodeThatLoads(t *testing.T) {
	urls := devCluster(t)
	for _, key := range []string{"owner-a", "owner-b", "owner-c", "owner/d", "owner e"} {
		r := cli(t, "", urlEnv(urls...), "owner", "-o", "json", key)
		if r.err != nil {
			t.Fatalf("owner %q: %v", key, r.err)
		}
		var got ownerResult
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("owner -o json: %v\n%s", err, r.stdout)
		}
		if !got.Agree || got.Members != 3 || len(got.Views) != 3 || got.Share <= 0.1 || got.Share >= 0.6 || got.NodeID == "" {
			t.Errorf("owner %q = %+v", key, got)
		}
		// The owner is the node whose origin loads the key, whichever node
		// is asked (dev nodes serve the public API on their peer URL).
		if r := cli(t, "", urlEnv(urls[2]), "get", "--", key); r.err != nil {
			t.Fatal(r.err)
		}
		loads := originLoads(t, urls, key)
		i := slices.Index(urls, got.Owner)
		if i < 0 || loads[i] != 1 || loads[0]+loads[1]+loads[2] != 1 {
			t.Errorf("owner %q = %s, but the origin loads per node are %v (nodes %v)", key, got.Owner, loads, urls)
		}
	}
}

func TestOwnerText(t *testing.T) {
	urls := devCluster(t)
	r := cli(t, "", urlEnv(urls...), "owner", "hello")
	if r.err != nil {
		t.Fatal(r.err)
	}
	for _, want := range []string{`key "hello": owner http://`, "share: ", "of the ring (3 members", "agreed by 3 of 3 nodes"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("owner output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestOwnerWithOneNodeDown(t *testing.T) {
	urls := devCluster(t)
	closed := closedURL(t)
	r := cli(t, "", urlEnv(urls[0], closed), "owner", "-o", "json", "hello")
	if r.code() != exitFailure || !strings.Contains(r.err.Error(), closed) {
		t.Errorf("owner with a node down: exit %d, %v; want 1 naming %s", r.code(), r.err, closed)
	}
	var got ownerResult // still printed, from the node that answered
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Owner == "" || got.Views[1].Error == "" {
		t.Errorf("owner output with a node down: %v\n%s", err, r.stdout)
	}
}

func TestMembers(t *testing.T) {
	urls := devCluster(t)
	r := cli(t, "", urlEnv(urls...), "members", "-o", "json")
	if r.err != nil {
		t.Fatal(r.err)
	}
	var got membersResult
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("members -o json: %v\n%s", err, r.stdout)
	}
	if !got.Agree || len(got.Nodes) != 3 || len(got.Members) != 3 || got.Version == "" {
		t.Fatalf("members = %+v", got)
	}
	var sum float64
	ids := map[string]bool{}
	for _, m := range got.Members {
		sum += m.Share
		ids[m.NodeID] = true
		if !slices.Contains(urls, m.URL) {
			t.Errorf("member %+v: its public URL is not one of %v", m, urls)
		}
	}
	if math.Abs(sum-1) > 1e-9 || len(ids) != 3 {
		t.Errorf("shares sum to %v, node IDs %v", sum, ids)
	}
	for _, n := range got.Nodes {
		if !n.Ready || n.Connected == nil || !*n.Connected || n.Members != 3 || n.Version != got.Version {
			t.Errorf("node %+v", n)
		}
	}

	r = cli(t, "", urlEnv(urls...), "members")
	for _, want := range []string{"NODE", "READY", "connected", "ring " + got.Version + ": 3 members", "MEMBER", "SHARE", "node1", "node2", "node3"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("members output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestMajority(t *testing.T) {
	t.Parallel()
	mk := func(owners ...string) []view {
		var vs []view
		for _, o := range owners {
			vs = append(vs, view{Info: ringInfo{Owner: o}})
		}
		return vs
	}
	tests := []struct {
		name   string
		owners []string
		want   string
		agree  bool
	}{
		{"all agree", []string{"a", "a", "a"}, "a", true},
		{"two of three", []string{"b", "a", "a"}, "a", false},
		{"tie: first seen", []string{"b", "a"}, "b", false},
		{"empty value wins when most say so", []string{"", "", "a"}, "", false},
		{"one", []string{"x"}, "x", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, agree := majority(mk(tt.owners...), func(v view) string { return v.Info.Owner })
			if got != tt.want || agree != tt.agree {
				t.Errorf("majority(%q) = %q, %v; want %q, %v", tt.owners, got, agree, tt.want, tt.agree)
			}
		})
	}
}

func TestAllFindsTheOtherMembers(t *testing.T) {
	urls := devCluster(t)
	for _, args := range [][]string{{"members"}, {"stats"}} {
		r := cli(t, "", urlEnv(urls[1]), append(args, "-all", "-o", "json")...)
		if r.err != nil {
			t.Fatalf("%s -all: %v", args[0], r.err)
		}
		var got struct{ Nodes []struct{ URL string } }
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatal(err)
		}
		var asked []string
		for _, n := range got.Nodes {
			asked = append(asked, n.URL)
		}
		// The node named first, then the others from its ring.
		if len(asked) != 3 || asked[0] != urls[1] || !slices.Contains(asked, urls[0]) || !slices.Contains(asked, urls[2]) {
			t.Errorf("%s -all with %s asked %v", args[0], urls[1], asked)
		}
	}
	r := cli(t, "", urlEnv(urls[0]), "bench", "-all", "-n", "30", "-q", "-o", "json")
	if rep := benchJSON(t, r); r.err != nil || len(rep.Nodes) != 3 || rep.Cluster.NodesScraped != 3 {
		t.Errorf("bench -all: %v, nodes %v, scraped %d", r.err, rep.Nodes, rep.Cluster.NodesScraped)
	}
}
