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
