package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringcache/ringcache/internal/faultnet"
)

// etcdBehindProxy starts an embedded etcd, as dev mode does, and a proxy
// in front of it that the test can cut.
func etcdBehindProxy(t *testing.T) *faultnet.Proxy {
	t.Helper()
	c := &devCluster{dir: t.TempDir()}
	if err := c.startEtcd(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.close1.Do(c.etcd.Close) })
	p, err := faultnet.Listen(strings.TrimPrefix(c.etcdURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// awaitNodes polls every node until ok holds for it, for up to 60s.
func awaitNodes(t *testing.T, nodes []*node, what string, ok func(*node) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range nodes {
		for !ok(n) {
			if time.Now().After(deadline) {
				t.Fatalf("node %s: not %s within 60s", n.nodeID, what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// reader reads and writes keys of group "g" through a cluster's nodes and
// checks each answer against what the key must hold.
type reader struct {
	t     *testing.T
	c     *http.Client
	urls  []string
	mu    sync.Mutex
	wrong []string
}

func (r *reader) do(method, url, body string) (int, string) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if method != http.MethodGet {
		req.Header.Set("Authorization", "Bearer "+testToken)
	}
	resp, err := r.c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// check reads key through node i and notes a wrong answer.
func (r *reader) check(i int, key, want string) {
	code, got := r.do(http.MethodGet, r.urls[i%len(r.urls)]+"/cache/g/"+key, "")
	if code != http.StatusOK || got != want {
		r.mu.Lock()
		r.wrong = append(r.wrong, fmt.Sprintf("%s via %s: %d %q, want %q", key, r.urls[i%len(r.urls)], code, got, want))
		r.mu.Unlock()
	}
}

// failures returns and forgets the wrong answers, at most a few of them.
func (r *reader) failures() (n int, some []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, some = len(r.wrong), r.wrong[:min(5, len(r.wrong))]
	r.wrong = nil
	return n, some
}

// TestEtcdCutKeepsCaches cuts every node of a cluster off from a running
// etcd for twice the lease TTL, so that etcd expires their leases and
// deletes their keys, at the daemon's default settings. The nodes keep
// serving throughout, and when etcd is reachable again and they have
// registered again, every warm key is served without an origin load and
// every acknowledged PUT is still served: nobody dropped them, so a new
// registration is no reason to drop a cache.
func TestEtcdCutKeepsCaches(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			t.Parallel()
			testEtcdCut(t, n)
		})
	}
}

func testEtcdCut(t *testing.T, size int) {
	const keys, written = 2000, 100
	o := newCountingOrigin(t, 0)
	etcd := etcdBehindProxy(t)
	nodes, urls := startCluster(t, size, o, "", func(c *Config) {
		c.Peers = nil
		c.Etcd = []string{"http://" + etcd.Addr()}
		c.Public.WriteToken = testToken
	})
	awaitNodes(t, nodes, fmt.Sprintf("in a ring of %d", size), func(n *node) bool { return n.members() == size })
	r := &reader{t: t, c: clientFrom("127.0.0.1", 64), urls: urls}

	value := func(i int) string {
		if i < written {
			return fmt.Sprintf("put-%d", i)
		}
		return fmt.Sprintf("v:k%d", i)
	}
	runWorkers(16, written, func(i int) {
		if code, body := r.do(http.MethodPut, fmt.Sprintf("%s/cache/g/k%d", urls[(i+1)%size], i), value(i)); code != http.StatusNoContent {
			t.Errorf("PUT k%d: %d %s", i, code, body)
		}
	})
	runWorkers(64, keys, func(i int) { r.check(i, fmt.Sprintf("k%d", i), value(i)) })
	if n, some := r.failures(); n > 0 {
		t.Fatalf("warming: %d wrong answers, such as %v", n, some)
	}
	warm, _, _ := o.stats()

	lease := DefaultConfig().LeaseTTL
	etcd.Cut()
	cutAt := time.Now()
	for pass := 0; time.Since(cutAt) < 2*lease+time.Second; pass++ {
		// The nodes keep serving while etcd is out of reach.
		runWorkers(16, keys/10, func(i int) { i = i*10 + pass%10; r.check(i+pass, fmt.Sprintf("k%d", i), value(i)) })
		time.Sleep(200 * time.Millisecond)
	}
	if n, some := r.failures(); n > 0 {
		t.Errorf("while etcd was cut off: %d wrong answers, such as %v", n, some)
	}
	etcd.Restore()
	awaitNodes(t, nodes, "registered again", func(n *node) bool { c, _ := n.etcdConnected(); return c })
	t.Logf("etcd cut off for %v; every node registered again %v after", 2*lease+time.Second, time.Since(cutAt).Round(time.Millisecond))

	runWorkers(64, keys, func(i int) { r.check(i+2, fmt.Sprintf("k%d", i), value(i)) })
	if n, some := r.failures(); n > 0 {
		t.Errorf("after etcd came back: %d of %d reads wrong, such as %v", n, keys, some)
	}
	if loads, _, _ := o.stats(); loads != warm {
		t.Errorf("%d origin loads after etcd came back for %d warm keys; want 0", loads-warm, keys)
	}
}
