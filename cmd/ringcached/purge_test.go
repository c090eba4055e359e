package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/internal/faultnet"
	"github.com/ringcache/ringcache/internal/linearize"
)

// versionedOrigin serves "<key>@<gen>": the test moves gen on as a data
// fix would, so that a read tells a value loaded before a purge from one
// loaded after it. It counts its loads.
type versionedOrigin struct {
	*httptest.Server
	gen   atomic.Int64
	loads atomic.Int64
}

func newVersionedOrigin(t *testing.T) *versionedOrigin {
	o := &versionedOrigin{}
	o.gen.Store(1)
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.loads.Add(1)
		_, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		fmt.Fprintf(w, "%s@%d", key, o.gen.Load())
	}))
	t.Cleanup(o.Close)
	return o
}

// purgeCluster starts n nodes with a group "g" loading from o and a write
// token; mod, if not nil, changes each node's configuration last.
func purgeCluster(t *testing.T, n int, o *versionedOrigin, mod func(*Config)) *testCluster {
	t.Helper()
	tc := startCluster(t, n, nil, "", func(c *Config) {
		spec, err := parseGroupFlag(fmt.Sprintf("name=g,origin=http,url=%s/%s/{key}", o.URL, c.NodeID))
		if err != nil {
			t.Fatal(err)
		}
		c.Groups = []GroupSpec{spec}
		c.Public.WriteToken = testToken
		if mod != nil {
			mod(c)
		}
	})
	return tc
}

// purge sends DELETE /cache/g[?prefix=] through base and decodes the answer.
func purge(t *testing.T, r *reader, base, prefix string) (int, purgeAnswer) {
	t.Helper()
	u := base + "/cache/g"
	if prefix != "" {
		u += "?prefix=" + url.QueryEscape(prefix)
	}
	code, body := r.do(http.MethodDelete, u, "")
	var a purgeAnswer
	if code == http.StatusOK {
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatalf("purge answer %q: %v", body, err)
		}
	} else {
		a.body = body
	}
	return code, a
}

type purgeAnswer struct {
	ID          string   `json:"id"`
	Prefix      string   `json:"prefix"`
	Confirmed   []string `json:"confirmed"`
	Unconfirmed []string `json:"unconfirmed"`
	Recorded    bool     `json:"recorded"`
	body        string
}

// readAll reads every key through every node and returns the answers that
// are not want(key).
func readAll(r *reader, keys []string, want func(key string) string) []string {
	for i := range r.urls {
		runWorkers(32, len(keys), func(k int) { r.check(i, keys[k], want(keys[k])) })
	}
	n, some := r.failures()
	if n == 0 {
		return nil
	}
	return append([]string{fmt.Sprintf("%d wrong answers", n)}, some...)
}

// TestPurgeGroupAndPrefix warms 1,000 keys on 3 nodes (through every node,
// so that non-owners hold hot copies), changes the origin's data, and
// purges first a prefix, then the whole group: after each purge every read
// through every node returns the new data, the keys outside the prefix
// stay cached, and the origin sees exactly one load per purged key.
func TestPurgeGroupAndPrefix(t *testing.T) {
	t.Parallel()
	o := newVersionedOrigin(t)
	tc := purgeCluster(t, 3, o, nil)
	r := &reader{t: t, c: clientFrom("127.0.0.1", 32), urls: tc.urls}
	var keys []string
	for i := range 500 {
		keys = append(keys, fmt.Sprintf("a/%d", i), fmt.Sprintf("b/%d", i))
	}
	gen := func(g int) func(string) string { return func(k string) string { return fmt.Sprintf("%s@%d", k, g) } }
	if bad := readAll(r, keys, gen(1)); bad != nil {
		t.Fatalf("warming: %v", bad)
	}
	if bad := readAll(r, keys, gen(1)); bad != nil {
		t.Fatalf("reading warm: %v", bad)
	}
	warm := o.loads.Load()
	if warm != int64(len(keys)) {
		t.Fatalf("%d origin loads to warm %d keys", warm, len(keys))
	}

	// The origin's data changes: a purge makes every node load it again.
	o.gen.Store(2)
	code, a := purge(t, r, tc.urls[1], "a/")
	if code != http.StatusOK || a.Prefix != "a/" || len(a.Confirmed) != 2 || len(a.Unconfirmed) != 0 {
		t.Fatalf("prefix purge: %d %+v", code, a)
	}
	if bad := readAll(r, keys, func(k string) string {
		if strings.HasPrefix(k, "a/") {
			return k + "@2"
		}
		return k + "@1" // outside the prefix: still cached
	}); bad != nil {
		t.Fatalf("after the prefix purge: %v", bad)
	}
	if got := o.loads.Load() - warm; got != 500 {
		t.Errorf("the prefix purge of 500 keys cost %d origin loads; want 500", got)
	}

	before := o.loads.Load()
	o.gen.Store(3)
	if code, a := purge(t, r, tc.urls[2], ""); code != http.StatusOK || a.Prefix != "" || len(a.Confirmed) != 2 {
		t.Fatalf("group purge: %d %+v", code, a)
	}
	if bad := readAll(r, keys, gen(3)); bad != nil {
		t.Fatalf("after the group purge: %v", bad)
	}
	if got := o.loads.Load() - before; got != int64(len(keys)) {
		t.Errorf("the group purge of %d keys cost %d origin loads; want %d", len(keys), got, len(keys))
	}
	var ring ringInfo
	getJSON(t, tc.urls[0]+"/debug/ring", &ring)
	if len(ring.Purges) != 2 || ring.Purges[0].Prefix != "a/" || ring.Purges[1].Prefix != "" || !ring.PurgesCurrent {
		t.Errorf("/debug/ring lists purges %+v (current %v); want the prefix purge, then the group's", ring.Purges, ring.PurgesCurrent)
	}
	mfs := scrape(t, tc.urls[0])
	if v := value(t, mfs, "ringcache_purges_total", "group", "g", "scope", "prefix"); v != 1 {
		t.Errorf("ringcache_purges_total{scope=prefix} = %v, want 1", v)
	}

	// Refusals: no token, an empty prefix, an unknown group.
	req, _ := http.NewRequest(http.MethodDelete, tc.urls[0]+"/cache/g", nil)
	if res, err := r.c.Do(req); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("purge without a token: %v %v; want 401", res.StatusCode, err)
	} else {
		res.Body.Close()
	}
	if code, body := r.do(http.MethodDelete, tc.urls[0]+"/cache/g?prefix=", ""); code != http.StatusBadRequest {
		t.Errorf("purge with an empty prefix: %d %q; want 400", code, body)
	}
	if code, body := r.do(http.MethodDelete, tc.urls[0]+"/cache/nosuch", ""); code != http.StatusNotFound {
		t.Errorf("purge of an unknown group: %d %q; want 404", code, body)
	}
}

// TestPurgeReachesAPartitionedNode cuts one node of three (in etcd) off from
// the others and from etcd, purges the group through another, and checks
// that the cut-off node serves no value from before the purge once the
// purge returned: neither while it is cut off (its purge lease ran out, so
// it serves from the origin) nor after it is back (it applies the purge).
func TestPurgeReachesAPartitionedNode(t *testing.T) {
	t.Parallel()
	etcd := etcdBehindProxy(t) // not cut: each node gets its own proxy to it
	o := newVersionedOrigin(t)
	var mu sync.Mutex
	toEtcd, toPeer := map[string]*faultnet.Proxy{}, map[string]*faultnet.Proxy{}
	proxy := func(target string) *faultnet.Proxy {
		p, err := faultnet.Listen(target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	tc := purgeCluster(t, 3, o, func(c *Config) {
		mu.Lock()
		defer mu.Unlock()
		toEtcd[c.NodeID] = proxy(etcd.Addr())
		toPeer[c.NodeID] = proxy(c.Listen)
		c.Peers = nil
		c.Etcd = []string{"http://" + toEtcd[c.NodeID].Addr()}
		c.PeerURL = "http://" + toPeer[c.NodeID].Addr()
		c.LogLevel = "info"
		c.PurgeLease = 30 * time.Second // what the purge waits for n2
	})
	defer func() {
		if t.Failed() {
			for i, out := range tc.outs {
				t.Logf("node %s's log:\n%s", tc.nodes[i].nodeID, out)
			}
		}
	}()
	awaitNodes(t, tc.nodes, "in a ring of 3", func(n *node) bool { return n.members() == 3 })
	r := &reader{t: t, c: clientFrom("127.0.0.1", 32), urls: tc.urls}
	var keys []string
	for i := range 300 {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	gen := func(g int) func(string) string { return func(k string) string { return fmt.Sprintf("%s@%d", k, g) } }
	if bad := readAll(r, keys, gen(1)); bad != nil {
		t.Fatalf("warming: %v", bad)
	}

	// n2 is cut off from etcd and from its peers; clients still reach it.
	// (Restored before the nodes stop, whatever happens: a node's stop
	// leaves etcd, unbounded in tests.)
	toEtcd["n2"].Cut()
	toPeer["n2"].Cut()
	t.Cleanup(func() { toEtcd["n2"].Restore(); toPeer["n2"].Restore() })
	o.gen.Store(2)
	start := time.Now()
	// The purge waits out n2's purge lease: longer than the reader's
	// client waits.
	slow := &reader{t: t, c: &http.Client{Timeout: 3 * time.Minute}, urls: tc.urls}
	code, a := purge(t, slow, tc.urls[0], "")
	took := time.Since(start)
	if code != http.StatusOK || !a.Recorded || len(a.Unconfirmed) != 1 || a.Unconfirmed[0] != tc.nodes[2].self {
		t.Fatalf("purge with n2 cut off: %d %+v; want it recorded, n2 unconfirmed", code, a)
	}
	t.Logf("the purge returned after %v with %v unconfirmed", took.Round(time.Millisecond), a.Unconfirmed)
	if bad := readAll(&reader{t: t, c: r.c, urls: tc.urls[2:]}, keys, gen(2)); bad != nil {
		t.Errorf("n2, still cut off, after the purge returned: %v", bad)
	}

	toEtcd["n2"].Restore()
	toPeer["n2"].Restore()
	if bad := readAll(r, keys, gen(2)); bad != nil {
		t.Errorf("every node, n2 back: %v", bad)
	}
	awaitNodes(t, tc.nodes[2:], "current again", func(n *node) bool { return n.pool.PurgesCurrent() })
	var ring ringInfo
	getJSON(t, tc.urls[2]+"/debug/ring", &ring)
	if len(ring.Purges) != 1 || ring.Purges[0].ID != a.ID {
		t.Errorf("n2 lists purges %+v; want %s", ring.Purges, a.ID)
	}
	if bad := readAll(r, keys, gen(2)); bad != nil {
		t.Errorf("every node, n2 current again: %v", bad)
	}
}

// TestPurgesRacingWritesLinearizable runs 8 clients writing and reading 16
// keys through every node of a 3-node cluster in etcd while purges of the
// group come every few hundred milliseconds, and checks every key's history
// with porcupine, a purge counting as a delete of every key between its
// call and its return: no acknowledged write is lost but to a purge that
// began after it, and nothing purged comes back.
func TestPurgesRacingWritesLinearizable(t *testing.T) {
	t.Parallel()
	etcd := etcdHealthy(t)
	o := newCountingOrigin(t, 0)
	tc := startCluster(t, 3, o, "", func(c *Config) {
		c.Peers = nil
		c.Etcd = []string{etcd.endpoint}
		c.Public.WriteToken = testToken
	})
	awaitNodes(t, tc.nodes, "in a ring of 3", func(n *node) bool { return n.members() == 3 })
	r := &reader{t: t, c: clientFrom("127.0.0.1", 16), urls: tc.urls}
	stop := make(chan struct{})
	done := make(chan *linearize.History)
	go func() { done <- runClients(t, r, 8, 16, stop) }()
	type purgeOp struct{ call, ret time.Time }
	var purges []purgeOp
	deadline := time.Now().Add(8 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		call := time.Now()
		code, body := r.do(http.MethodDelete, tc.urls[i%3]+"/cache/g", "")
		if code != http.StatusOK {
			t.Fatalf("purge: %d %s", code, body)
		}
		purges = append(purges, purgeOp{call, time.Now()})
		time.Sleep(300 * time.Millisecond)
	}
	close(stop)
	h := <-done
	for i, p := range purges {
		for k := range 16 {
			h.Add(1000+k, linearize.Input{Op: "delete", Key: fmt.Sprintf("h%02d", k), Via: fmt.Sprintf("purge%d", i)}, "", p.call, p.ret, true)
		}
	}
	t.Logf("%d purges", len(purges))
	checkHistory(t, h, o)
}

// TestStaticPurgeNamesWhatItMissed purges through a static cluster of three
// with one node stopped: the purge answers after retrying it for 10 s, names
// it unconfirmed and the two others confirmed, and is not recorded (there
// is no log without etcd).
func TestStaticPurgeNamesWhatItMissed(t *testing.T) {
	t.Parallel()
	o := newVersionedOrigin(t)
	tc := purgeCluster(t, 3, o, nil)
	tc.nodes[2].stop(t.Context())
	r := &reader{t: t, c: &http.Client{Timeout: time.Minute}, urls: tc.urls}
	start := time.Now()
	code, a := purge(t, r, tc.urls[0], "")
	took := time.Since(start)
	if code != http.StatusOK || a.Recorded || len(a.Confirmed) != 1 || a.Confirmed[0] != tc.urls[1] ||
		len(a.Unconfirmed) != 1 || a.Unconfirmed[0] != tc.urls[2] {
		t.Fatalf("purge with n2 down: %d %+v; want n1 confirmed, n2 unconfirmed, not recorded", code, a)
	}
	if took < 9*time.Second {
		t.Errorf("the purge answered after %v; want it to have retried the stopped node for 10s", took)
	}
}
