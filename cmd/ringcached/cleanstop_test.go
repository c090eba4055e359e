package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCleanStopWarnsNobody stops one node of three (in etcd) gracefully
// while clients read through every node, and finds no warning in any
// node's log: the moment the others disagree about the ring while they
// apply the change is routine, not a fault.
func TestCleanStopWarnsNobody(t *testing.T) {
	t.Parallel()
	etcd := etcdHealthy(t)
	o := newCountingOrigin(t, 0)
	tc := startCluster(t, 3, o, "", func(c *Config) {
		c.Peers = nil
		c.Etcd = []string{etcd.endpoint}
	})
	awaitNodes(t, tc.nodes, "in a ring of 3", func(n *node) bool { return n.members() == 3 })
	r := &reader{t: t, c: clientFrom("127.0.0.1", 16), urls: tc.urls}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r.do(http.MethodGet, fmt.Sprintf("%s/cache/g/k%d", tc.urls[i%2], i%500), "")
		}
	}()
	time.Sleep(time.Second)
	tc.nodes[2].stop(t.Context())
	awaitNodes(t, tc.nodes[:2], "in a ring of 2", func(n *node) bool { return n.members() == 2 })
	time.Sleep(time.Second)
	close(stop)
	<-done
	for i, out := range tc.outs {
		if s := out.String(); strings.Contains(s, "level=WARN") || strings.Contains(s, "level=ERROR") {
			t.Errorf("node %s logged a warning or an error on a clean stop:\n%s", tc.nodes[i].nodeID, s)
		}
	}
}

// TestHotCopyCacheControl reads keys with no expiry through a node that
// does not own them, twice (the second answer comes from its hot copy), and
// through their owners: no answer carries Cache-Control, since the value
// itself never expires; the hot copy's own lifetime (HotTTL) is not the
// client's business.
func TestHotCopyCacheControl(t *testing.T) {
	t.Parallel()
	o := newCountingOrigin(t, 0)
	tc := startCluster(t, 2, o, "", nil)
	c := clientFrom("127.0.0.1", 4)
	hot := 0
	for i := 0; i < 40; i++ {
		key := fmt.Sprintf("cc%d", i)
		var ring ringInfo
		getJSON(t, tc.urls[0]+"/debug/ring?key="+key, &ring)
		for round := range 2 {
			res, err := c.Get(tc.urls[0] + "/cache/g/" + key)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if cc := res.Header.Get("Cache-Control"); res.StatusCode != http.StatusOK || cc != "" {
				t.Errorf("GET %s (owner %s, round %d): %d, Cache-Control %q; want 200 and none", key, ring.Owner, round, res.StatusCode, cc)
			}
			if ring.Owner != tc.nodes[0].self && round == 1 {
				hot++
			}
		}
	}
	if st := tc.nodes[0].cache.Groups()[0].Stats(); st.HotHits == 0 || hot == 0 {
		t.Fatalf("%d hot hits on node 0 (%d reads of copies): the test read no hot copy", st.HotHits, hot)
	}
}
