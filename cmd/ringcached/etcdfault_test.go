package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringcache/ringcache/internal/faultnet"
	"github.com/ringcache/ringcache/internal/poll"
)

// etcdBehindProxy starts an embedded etcd, as dev mode does, and a proxy
// in front of it that the test can cut.
func etcdBehindProxy(t *testing.T) *faultnet.Proxy {
	t.Helper()
	c := &devCluster{dir: t.TempDir()}
	if err := c.startEtcd(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.etcd.Close)
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
		poll.Until(t, time.Until(deadline), func() (bool, string) { return ok(n), "node " + n.nodeID + ": not " + what })
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

// etcdFault is a fault of etcd that a test injects and heals.
type etcdFault struct {
	endpoint     string // what the nodes dial
	inject, heal func()
}

// etcdCut is a running etcd that the nodes are cut off from (a proxy).
func etcdCut(t *testing.T) etcdFault {
	p := etcdBehindProxy(t)
	return etcdFault{endpoint: "http://" + p.Addr(), inject: p.Cut, heal: p.Restore}
}

// etcdStall is an etcd process paused with SIGSTOP, as a stalled disk, a
// paused VM or a long election would leave it: connections to it open, and
// nothing answers.
func etcdStall(t *testing.T) etcdFault {
	proc, endpoint := startEtcdProcess(t)
	return etcdFault{
		endpoint: endpoint,
		inject:   func() { proc.Signal(syscall.SIGSTOP) },
		heal:     func() { proc.Signal(syscall.SIGCONT) },
	}
}

var etcdBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "ringcache-etcd-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "etcd")
	// deploy/lib.sh's flags, so that the two builds share the build cache.
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "go.etcd.io/etcd/server/v3")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build etcd: %v\n%s", err, out)
	}
	return bin, nil
})

// startEtcdProcess runs a real single-member etcd, built from the module's
// tool dependency, on free loopback ports, and returns its process and
// client URL. The test kills it at cleanup, waking it first if paused.
func startEtcdProcess(t *testing.T) (*os.Process, string) {
	t.Helper()
	bin, err := etcdBinary()
	if err != nil {
		t.Fatal(err)
	}
	client, peer := "http://"+freeAddr(t), "http://"+freeAddr(t)
	cmd := exec.Command(bin, "--name", "test", "--data-dir", t.TempDir(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "test="+peer, "--log-level", "error")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	poll.Until(t, 30*time.Second, func() (bool, string) {
		resp, err := http.Get(client + "/health")
		if err != nil {
			return false, fmt.Sprintf("etcd at %s not healthy: %v", client, err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("etcd at %s answers %d", client, resp.StatusCode)
	})
	return cmd.Process, client
}

// TestEtcdFaultsKeepCaches stalls etcd (SIGSTOP of its process) or cuts
// every node off from a running etcd, for twice the lease TTL, at the
// daemon's default settings: either way etcd expires the nodes' leases and
// deletes their keys. The nodes keep serving throughout, and when etcd
// answers again and they have registered again, every warm key is served
// without an origin load and every acknowledged PUT is still served:
// nobody dropped them, so a new registration is no reason to drop a cache.
//
// The four runs go one after another: each loads two cores with a cluster
// and 64 readers, and a node starved of CPU for seconds answers its peers
// too late for them to count it in.
func TestEtcdFaultsKeepCaches(t *testing.T) {
	for _, f := range []struct {
		name  string
		fault func(*testing.T) etcdFault
	}{{"cut", etcdCut}, {"stall", etcdStall}} {
		for _, n := range []int{3, 5} {
			t.Run(fmt.Sprintf("%s/%d nodes", f.name, n), func(t *testing.T) {
				testEtcdFault(t, n, f.fault(t), 2*DefaultConfig().LeaseTTL+time.Second)
			})
		}
	}
}

// TestEtcdOutForAMinuteAndAHalf: at the default purge lease, etcd stalled,
// or cut off from the nodes, for 90 s (a bad minute of etcd, and half
// more) costs the caches nothing either: the nodes serve every read from
// their caches throughout, and keep them when it answers again.
func TestEtcdOutForAMinuteAndAHalf(t *testing.T) {
	for _, f := range []struct {
		name  string
		fault func(*testing.T) etcdFault
	}{{"cut", etcdCut}, {"stall", etcdStall}} {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel() // each with its own etcd and nodes: 90 s once, not twice
			testEtcdFault(t, 3, f.fault(t), 90*time.Second)
		})
	}
}

// testEtcdFault warms a cluster of size nodes, keeps etcd out of their
// reach for out, reading throughout, and reads every key again once it is
// back: no wrong answer and no origin load, during or after.
func testEtcdFault(t *testing.T, size int, etcd etcdFault, out time.Duration) {
	const keys, written = 2000, 100
	o := newCountingOrigin(t, 0)
	tc := startCluster(t, size, o, "", func(c *Config) {
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

	etcd.inject()
	cutAt := time.Now()
	for pass := 0; time.Since(cutAt) < out; pass++ {
		// The nodes keep serving while etcd is out of reach.
		runWorkers(16, keys/10, func(i int) { i = i*10 + pass%10; r.check(i+pass, fmt.Sprintf("k%d", i), value(i)) })
		time.Sleep(200 * time.Millisecond)
	}
	if n, some := r.failures(); n > 0 {
		t.Errorf("while etcd was out: %d wrong answers, such as %v", n, some)
	}
	if loads, _, _ := o.stats(); loads != warm {
		t.Errorf("%d origin loads while etcd was out for %v; want 0", loads-warm, out)
	}
	etcd.heal()
	awaitNodes(t, nodes, "registered again", func(n *node) bool { c, _ := n.etcdConnected(); return c })
	t.Logf("etcd out for %v; every node registered again %v after the fault began", out, time.Since(cutAt).Round(time.Millisecond))

	runWorkers(64, keys, func(i int) { r.check(i+2, fmt.Sprintf("k%d", i), value(i)) })
	if n, some := r.failures(); n > 0 {
		t.Errorf("after etcd came back: %d of %d reads wrong, such as %v", n, keys, some)
	}
	if loads, _, _ := o.stats(); loads != warm {
		t.Errorf("%d origin loads after etcd came back for %d warm keys; want 0", loads-warm, keys)
	}
}

// TestEtcdOutPastThePurgeLease: etcd out of every node's reach for longer
// than the purge lease allows (here a short one) makes the nodes serve from
// the origin, since a purge may have been recorded that they cannot see;
// but a key written in the cluster is then answered 503 with Retry-After,
// never with the origin's value in place of the write (which a missed
// purge would have made right, and no missed purge wrong). Once etcd
// answers, every write is served again from the caches kept.
func TestEtcdOutPastThePurgeLease(t *testing.T) {
	const keys, written = 300, 30
	etcd := etcdStall(t)
	o := newCountingOrigin(t, 0)
	tc := startCluster(t, 3, o, "", func(c *Config) {
		c.Peers = nil
		c.Etcd = []string{etcd.endpoint}
		c.Public.WriteToken = testToken
		c.PurgeLease = 8 * time.Second // caches trusted for 5.5 s after the last read of the log
	})
	awaitNodes(t, tc.nodes, "in a ring of 3", func(n *node) bool { return n.members() == 3 })
	r := &reader{t: t, c: clientFrom("127.0.0.1", 32), urls: tc.urls}
	value := func(i int) string {
		if i < written {
			return fmt.Sprintf("put-%d", i)
		}
		return fmt.Sprintf("v:k%d", i)
	}
	runWorkers(8, written, func(i int) {
		if code, body := r.do(http.MethodPut, fmt.Sprintf("%s/cache/g/k%d", tc.urls[i%3], i), value(i)); code != http.StatusNoContent {
			t.Errorf("PUT k%d: %d %s", i, code, body)
		}
	})
	runWorkers(16, keys, func(i int) { r.check(i, fmt.Sprintf("k%d", i), value(i)) })
	if n, some := r.failures(); n > 0 {
		t.Fatalf("warming: %d wrong answers, such as %v", n, some)
	}
	warm, _, _ := o.stats()

	etcd.inject()
	stallAt := time.Now()
	awaitNodes(t, tc.nodes, "serving from the origin", func(n *node) bool { return !n.pool.PurgesCurrent() })
	var mu sync.Mutex
	answers := map[string]int{}
	runWorkers(16, keys, func(i int) {
		code, got := r.do(http.MethodGet, fmt.Sprintf("%s/cache/g/k%d", tc.urls[i%3], i), "")
		kind := "written"
		if i >= written {
			kind = "unwritten"
		}
		switch {
		case code == http.StatusOK && got == value(i):
			kind += ": its value"
		case code == http.StatusServiceUnavailable && i < written:
			kind += ": 503"
		default:
			kind += fmt.Sprintf(": %d %q", code, got)
			t.Errorf("k%d via %s, etcd out %v: %d %q; want %q, or a 503 for a written key", i, tc.urls[i%3],
				time.Since(stallAt).Round(time.Millisecond), code, got, value(i))
		}
		mu.Lock()
		answers[kind]++
		mu.Unlock()
	})
	t.Logf("past the purge lease: %v", answers)
	etcd.heal()
	awaitNodes(t, tc.nodes, "serving from their caches again", func(n *node) bool { return n.pool.PurgesCurrent() })
	before, _, _ := o.stats()
	runWorkers(16, keys, func(i int) { r.check(i+1, fmt.Sprintf("k%d", i), value(i)) })
	if n, some := r.failures(); n > 0 {
		t.Errorf("etcd back: %d wrong answers, such as %v", n, some)
	}
	if after, _, _ := o.stats(); after != before || before == warm {
		t.Errorf("origin loads: %d while etcd was out, %d after it answered; want some, then 0", before-warm, after-before)
	}
}
