package transport

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// startGroupcache builds testdata/gcpeer (groupcache as shipped) and runs it
// as a process of its own, a member of a ring with peers, with gcpeer's
// flags args besides. It returns its base URL; the process stops when the
// test ends.
func startGroupcache(t testing.TB, peers []string, args ...string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the groupcache peer:", err)
	}
	bin := filepath.Join(t.TempDir(), "gcpeer")
	build := exec.CommandContext(t.Context(), goBin, "build", "-o", bin, "./testdata/gcpeer")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build gcpeer: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, append([]string{"-peers", strings.Join(peers, ","), "-group", testGroup}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // gcpeer exits when its stdin closes
		if err := cmd.Wait(); err != nil {
			t.Errorf("gcpeer: %v\n%s", err, stderr.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	self, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("gcpeer said %q, %v\n%s", line, err, stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	return self
}

// TestGroupcacheInterop puts a groupcache process and two ringcache nodes on
// one ring (same members, replicas, hash and base path) and checks that they
// agree on every key's owner and serve each other, both ways, with keys
// that need escaping.
func TestGroupcacheInterop(t *testing.T) {
	t.Parallel()
	var ops peerOps
	nodes, loads := newCluster(t, 2, clusterOpts{pool: ops.pool(nil)})
	urls := []string{nodes[0].url, nodes[1].url}
	gc := startGroupcache(t, urls)
	for _, n := range nodes {
		if err := n.pool.Set(append(urls, gc)...); err != nil {
			t.Fatal(err)
		}
	}
	c := testClient(t)

	// A batch read through node 1, whose first contact with groupcache
	// this is: the request for groupcache's keys is refused (groupcache
	// answers it without our headers), and they are fetched one by one,
	// from groupcache, not loaded at node 1.
	var many []string
	for i := range 30 {
		many = append(many, fmt.Sprint("many-", i))
	}
	for i, r := range nodes[1].group.GetMany(t.Context(), many) {
		key, owner := many[i], nodes[1].pool.Owner(many[i])
		want, loadedBy := string(valueOf(key)), []string{owner}
		if owner == gc {
			want, loadedBy = "gc:"+key, nil
		}
		if r.Err != nil || string(r.Value.Data) != want {
			t.Errorf("GetMany through node 1, %q: %q %v, want %q", key, r.Value.Data, r.Err, want)
		}
		if got := loads.of(key); !slices.Equal(got, loadedBy) {
			t.Errorf("GetMany through node 1, %q (owner %s): loaded by %v, want %v", key, owner, got, loadedBy)
		}
	}
	if s := nodes[1].group.Stats(); s.PeerErrors != 0 {
		t.Errorf("node 1: %d peer errors in a batch read; a refused batch is not one", s.PeerErrors)
	}
	local0 := nodes[0].group.Stats().LocalLoads // node 0's own keys of the batch

	// First contact is a batch: while a fetch of a slow key is in flight
	// to groupcache, the next fetch to it goes in a batch, which groupcache
	// does not know. It is answered by a GET of its own, and the peer is
	// asked one key at a time from then on.
	gcOwned := func(prefix string) string {
		for i := 0; ; i++ {
			if k := fmt.Sprint(prefix, i); nodes[0].pool.Owner(k) == gc {
				return k
			}
		}
	}
	slow, next := gcOwned("slow-"), gcOwned("next-")
	slowDone := make(chan error, 1)
	go func() {
		v, err := nodes[0].group.Get(t.Context(), slow)
		if err == nil && string(v.Data) != "gc:"+slow {
			err = fmt.Errorf("%q", v.Data)
		}
		slowDone <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if v, err := nodes[0].group.Get(t.Context(), next); err != nil || string(v.Data) != "gc:"+next {
		t.Fatalf("fetch of %q from groupcache while another was in flight: %q %v", next, v.Data, err)
	}
	if err := <-slowDone; err != nil {
		t.Fatalf("slow fetch from groupcache: %v", err)
	}
	if n, failed := ops.count("batch"); n != 1 || failed != 1 {
		t.Fatalf("batches to groupcache: %d, %d failed; want one, refused", n, failed)
	}
	if gets, failed := ops.count("get"); gets != 2 || failed != 0 {
		t.Fatalf("GETs to groupcache: %d, %d failed; want 2", gets, failed)
	}
	if s := nodes[0].group.Stats(); s.LocalLoads != local0 || s.PeerErrors != 0 {
		t.Fatalf("node 0: %d local loads, %d peer errors; groupcache should have served both", s.LocalLoads-local0, s.PeerErrors)
	}

	gcGet := func(key string) response {
		t.Helper()
		return mustDo(t, c, http.MethodGet, gc+"/get?key="+url.QueryEscape(key), nil)
	}

	// Which side loaded a value shows whose ring said who owns the key:
	// groupcache's values start with "gc:", ours with "v:". Read every key
	// through groupcache and through a ringcache node.
	// Each awkward key, in a variant that groupcache owns and one that
	// ringcache owns, so that it crosses the peer protocol both ways.
	var keys []string
	for _, base := range []string{"a b", "a+b", "a/b/c", "100%", "ключ", "\x00\xff", "q?x=1&y=2", "..."} {
		var gcKey, rcKey string
		for i := 0; gcKey == "" || rcKey == ""; i++ {
			k := fmt.Sprint(base, "#", i)
			if nodes[0].pool.Owner(k) == gc {
				gcKey = cmp.Or(gcKey, k)
			} else {
				rcKey = cmp.Or(rcKey, k)
			}
		}
		keys = append(keys, gcKey, rcKey)
	}
	for i := range 200 {
		keys = append(keys, fmt.Sprint("key-", i))
	}
	var toGC, toRC int
	for _, key := range keys {
		owner := nodes[0].pool.Owner(key)
		want := string(valueOf(key))
		if owner == gc {
			want = "gc:" + key
			toGC++
		} else {
			toRC++
		}
		if r := gcGet(key); r.status != http.StatusOK || r.body != want {
			t.Errorf("groupcache GET %q (owner %s): %d %q, want %q", key, owner, r.status, r.body, want)
		}
		for _, n := range nodes {
			r := mustDo(t, c, http.MethodGet, publicURL(n.url, testGroup, key), nil)
			if r.status != http.StatusOK || r.body != want {
				t.Errorf("ringcache GET %q at %s (owner %s): %d %q, want %q", key, n.url, owner, r.status, r.body, want)
			}
		}
		if owner != gc {
			// groupcache asked the owner over the peer protocol, and only
			// the owner loaded.
			if got := loads.of(key); !slices.Equal(got, []string{owner}) {
				t.Errorf("ringcache loads of %q = %v, want one by %s", key, got, owner)
			}
		} else if got := loads.of(key); len(got) != 0 {
			t.Errorf("ringcache loaded %q, which groupcache owns: %v", key, got)
		}
	}
	if toGC == 0 || toRC == 0 {
		t.Fatalf("keys owned by groupcache: %d, by ringcache: %d; want both", toGC, toRC)
	}

	// groupcache loaded exactly the keys it owns, each once.
	r := mustDo(t, c, http.MethodGet, gc+"/loads", nil)
	var gcLoads []string
	for l := range strings.Lines(r.body) {
		k, err := url.QueryUnescape(strings.TrimSpace(l))
		if err != nil {
			t.Fatal(err)
		}
		gcLoads = append(gcLoads, k)
	}
	want := []string{slow, next}
	for _, key := range append(keys, many...) {
		if nodes[0].pool.Owner(key) == gc {
			want = append(want, key)
		}
	}
	slices.Sort(gcLoads)
	slices.Sort(want)
	if !slices.Equal(gcLoads, want) {
		t.Fatalf("groupcache loaded %d keys %q, want the %d it owns %q", len(gcLoads), gcLoads, len(want), want)
	}
}
