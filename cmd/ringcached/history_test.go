package main

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/ringcache/ringcache/internal/linearize"
)

// runClients runs clients that read and write keys through random nodes
// until stop is closed: 60% GET, 30% PUT of a value never written before,
// 10% DELETE; a write answered 503 is sent again (write).
func runClients(t *testing.T, r *reader, clients, keys int, stop <-chan struct{}) *linearize.History {
	h := &linearize.History{}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("h%02d", rng.IntN(keys))
				node := rng.IntN(len(r.urls))
				url, via := r.urls[node]+"/cache/g/"+key, fmt.Sprintf("n%d", node)
				call := time.Now()
				switch p := rng.IntN(10); {
				case p < 6:
					code, body := r.do(http.MethodGet, url, "")
					if code != http.StatusOK {
						continue // a failed read changes nothing
					}
					if body == "v:"+key {
						body = ""
					}
					h.Add(c, linearize.Input{Op: "get", Key: key, Via: via}, body, call, time.Now(), true)
				case p < 9:
					v := fmt.Sprintf("w-c%d-%d", c, n)
					code := write(r, http.MethodPut, url, v)
					h.Add(c, linearize.Input{Op: "put", Key: key, Value: v, Via: via}, "", call, time.Now(), code == http.StatusNoContent)
				default:
					code := write(r, http.MethodDelete, url, "")
					h.Add(c, linearize.Input{Op: "delete", Key: key, Via: via}, "", call, time.Now(), code == http.StatusNoContent)
				}
			}
		})
	}
	wg.Wait()
	return h
}

// write sends a PUT or DELETE, again while it is answered 503 (the key's
// owner is changing: README says to retry), for up to 2 s, as a client
// following the API does. It is one operation: the same value each time,
// from its first call to its last answer, whatever earlier tries did.
func write(r *reader, method, url, body string) int {
	deadline := time.Now().Add(2 * time.Second)
	for {
		code, _ := r.do(method, url, body)
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return code
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// etcdHealthy is etcd without a fault: the control of the history test.
func etcdHealthy(t *testing.T) etcdFault {
	f := etcdCut(t)
	f.inject, f.heal = func() {}, func() {}
	return f
}

// TestEtcdFaultsLinearizable runs 8 clients writing and reading 16 keys
// through every node of a 3-node cluster while etcd stalls or is cut off
// from the nodes for twice the lease TTL, and checks every key's history
// for linearizability with porcupine: no acknowledged write is lost, no
// read returns a value that was replaced, none goes back to an older one.
func TestEtcdFaultsLinearizable(t *testing.T) {
	for _, f := range []struct {
		name  string
		fault func(*testing.T) etcdFault
	}{{"none", etcdHealthy}, {"cut", etcdCut}, {"stall", etcdStall}} {
		t.Run(f.name, func(t *testing.T) { // one after another, as TestEtcdFaultsKeepCaches
			etcd := f.fault(t)
			o := newCountingOrigin(t, 0)
			tc := startCluster(t, 3, o, "", func(c *Config) {
				c.Peers = nil
				c.Etcd = []string{etcd.endpoint}
				c.Public.WriteToken = testToken
				c.LogLevel = "info"
			})
			nodes, urls, outs := tc.nodes, tc.urls, tc.outs
			defer func() {
				if t.Failed() {
					for i, out := range outs {
						t.Logf("node %s's log:\n%s", nodes[i].nodeID, out)
					}
				}
			}()
			awaitNodes(t, nodes, "in a ring of 3", func(n *node) bool { return n.members() == 3 })
			r := &reader{t: t, c: clientFrom("127.0.0.1", 16), urls: urls}

			stop := make(chan struct{})
			done := make(chan *linearize.History)
			go func() { done <- runClients(t, r, 8, 16, stop) }()
			time.Sleep(2 * time.Second)
			etcd.inject()
			time.Sleep(2*DefaultConfig().LeaseTTL + time.Second)
			etcd.heal()
			awaitNodes(t, nodes, "registered again", func(n *node) bool { c, _ := n.etcdConnected(); return c })
			time.Sleep(3 * time.Second)
			close(stop)
			h := <-done

			checkHistory(t, h, o)
		})
	}
}

// checkHistory checks h with porcupine and fails t, describing the first
// violation with the origin's loads around it, if it is not linearizable.
func checkHistory(t *testing.T, h *linearize.History, o *countingOrigin) {
	t.Helper()
	ops, open := h.Close(time.Now())
	res, info := porcupine.CheckOperationsVerbose(linearize.Model, ops, time.Minute)
	t.Logf("%d operations (%d writes without a known outcome) on 16 keys: %v", len(ops), open, res)
	if res == porcupine.Ok {
		return
	}
	if dir := os.Getenv("RINGCACHE_HISTORY_DIR"); dir != "" {
		name := strings.ReplaceAll(t.Name(), "/", "-") + ".html"
		if f, err := os.Create(filepath.Join(dir, name)); err == nil {
			porcupine.Visualize(linearize.Model, info, f)
			f.Close()
		}
	}
	t.Errorf("the history is %v (set RINGCACHE_HISTORY_DIR to keep its visualization)\n%s", res, linearize.Explain(ops, o.loadsOf))
}

// TestRollingRestartLinearizable restarts every node of a 3-node cluster
// in etcd, one at a time and gracefully (each leaves, hands its values to
// their next owners, and starts again), while 8 clients write and read 16
// keys through every node; porcupine checks each key's history. A graceful
// restart loses no acknowledged write: the hand-off carries written values
// as it carries loaded ones.
func TestRollingRestartLinearizable(t *testing.T) {
	t.Parallel()
	etcd := etcdHealthy(t)
	o := newCountingOrigin(t, 0)
	tc := startCluster(t, 3, o, "", func(c *Config) {
		c.Peers = nil
		c.Etcd = []string{etcd.endpoint}
		c.Public.WriteToken = testToken
		c.LogLevel = "info"
	})
	defer func() {
		if t.Failed() {
			for i, out := range tc.outs {
				t.Logf("node %s's log:\n%s", tc.nodes[i].nodeID, out)
			}
		}
	}()
	inRing := func(n *node) bool { return n.members() == 3 }
	awaitNodes(t, tc.nodes, "in a ring of 3", inRing)
	r := &reader{t: t, c: clientFrom("127.0.0.1", 16), urls: tc.urls}
	stop := make(chan struct{})
	done := make(chan *linearize.History)
	go func() { done <- runClients(t, r, 8, 16, stop) }()
	time.Sleep(2 * time.Second)
	for i := range tc.nodes {
		tc.restart(t, i)
		awaitNodes(t, tc.nodes, "in a ring of 3 again", inRing)
		time.Sleep(time.Second)
	}
	time.Sleep(2 * time.Second)
	close(stop)
	checkHistory(t, <-done, o)
}
