package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// TestBatchRead reads many keys of a 3-node cluster in one request through
// one node, by GET and by POST: one line per key in the order asked, each
// as a single GET would answer it (a value, a not-found, a binary value in
// base64), every key loaded once cluster-wide; bad batches are refused
// whole.
func TestBatchRead(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 3, clusterOpts{origin: func(_ context.Context, _, key string) (cache.Value, error) {
		switch {
		case strings.HasPrefix(key, "missing"):
			return cache.Value{}, cache.ErrNotFound
		case key == "binary":
			return cache.Value{Data: []byte{0xff, 0x00, 0xfe}}, nil
		}
		return cache.Value{Data: valueOf(key)}, nil
	}})
	c := testClient(t)
	var keys []string
	for i := range 60 {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	keys = append(keys, "missing-1", "binary", "k3")
	read := func(r response) []api.BatchItem {
		t.Helper()
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("batch: %d %s %q", r.status, r.header.Get("Content-Type"), r.body)
		}
		var items []api.BatchItem
		for line := range strings.SplitSeq(strings.TrimSuffix(r.body, "\n"), "\n") {
			var it api.BatchItem
			if err := json.Unmarshal([]byte(line), &it); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			items = append(items, it)
		}
		if len(items) != len(keys) {
			t.Fatalf("%d lines for %d keys", len(items), len(keys))
		}
		for i, it := range items {
			k := keys[i]
			switch {
			case it.Key != k:
				t.Errorf("line %d is %q, want %q", i, it.Key, k)
			case k == "missing-1":
				if it.Status != http.StatusNotFound || it.Error != "not found" {
					t.Errorf("%s: %+v, want a 404", k, it)
				}
			case k == "binary":
				if it.Status != http.StatusOK || string(it.ValueBase64) != "\xff\x00\xfe" || it.Value != "" {
					t.Errorf("%s: %+v, want the bytes in value_base64", k, it)
				}
			case it.Status != http.StatusOK || it.Value != string(valueOf(k)) || it.ETag == "":
				t.Errorf("%s: %+v", k, it)
			}
		}
		return items
	}
	q := url.Values{"key": keys}
	read(mustDo(t, c, "GET", nodes[0].url+api.PublicPrefix+"g?"+q.Encode(), nil))
	if got := loads.count(); got != 62 {
		t.Errorf("%d origin loads for 62 distinct keys (60, a missing one and a binary one), want 62", got)
	}
	read(mustDo(t, c, "POST", nodes[1].url+api.PublicPrefix+"g", strings.NewReader(q.Encode()), "Content-Type", "application/x-www-form-urlencoded"))
	// Only the missing key is asked of the origin again: a not-found is
	// not remembered by default (NotFoundTTL).
	if got := loads.count(); got != 63 {
		t.Errorf("the second batch, through another node, loaded %d keys again; want 1 (the missing one)", got-62)
	}

	many := url.Values{}
	for i := range api.MaxBatchKeys + 1 {
		many.Add("key", fmt.Sprint("x", i))
	}
	for _, tt := range []struct {
		name, url string
		status    int
	}{
		{"no key", nodes[0].url + api.PublicPrefix + "g", 400},
		{"an empty key", nodes[0].url + api.PublicPrefix + "g?key=a&key=", 400},
		{"a key too long", nodes[0].url + api.PublicPrefix + "g?key=" + strings.Repeat("k", api.DefaultMaxKeyBytes+1), 400},
		{"too many keys", nodes[0].url + api.PublicPrefix + "g?" + many.Encode(), 400},
		{"an unknown group", nodes[0].url + api.PublicPrefix + "nosuch?key=a", 404},
	} {
		if r := mustDo(t, c, "GET", tt.url, nil); r.status != tt.status {
			t.Errorf("%s: %d %q, want %d", tt.name, r.status, r.body, tt.status)
		}
	}
}

// TestBatchReadAsksEachOwnerOnce reads 100 keys through node 0 of three,
// with no hot copies kept (so every key of another owner is asked of it):
// node 0 sends each of the other two owners one request, cold and warm,
// and no single fetch. Cold, every key is loaded once, by its owner; keys
// whose load outlasts the peer timeout are still answered in that request
// (the owner streams beats while it loads), and a failed load is answered
// as a single GET would answer it (502), without a second load.
func TestBatchReadAsksEachOwnerOnce(t *testing.T) {
	t.Parallel()
	var ops peerOps
	nodes, loads := newCluster(t, 3, clusterOpts{
		group: func(g *cache.GroupConfig) { noHotCache(g); g.ErrorTTL = time.Minute },
		pool:  ops.pool(func(c *Config) { c.PeerTimeout = 300 * time.Millisecond }),
		origin: func(_ context.Context, _, key string) (cache.Value, error) {
			switch {
			case strings.HasPrefix(key, "slow"):
				time.Sleep(time.Second) // over three peer timeouts
			case strings.HasPrefix(key, "fail"):
				return cache.Value{}, errors.New("the origin failed")
			}
			return cache.Value{Data: valueOf(key)}, nil
		}})
	c := testClient(t)
	var keys []string
	for i := range 94 {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	keys = append(keys, "slow-1", "slow-2", "slow-3", "fail-1", "fail-2", "fail-3")
	batch := nodes[0].url + api.PublicPrefix + "g?" + url.Values{"key": keys}.Encode()
	owners := map[string]bool{}
	for _, k := range keys {
		if o, remote := nodes[0].pool.PickPeer(k); remote {
			owners[o.String()] = true
		}
	}
	if len(owners) != 2 {
		t.Fatalf("the keys are owned by %d other nodes; the test needs both", len(owners))
	}
	for _, round := range []string{"cold", "warm"} {
		r := mustDo(t, c, "GET", batch, nil)
		if r.status != http.StatusOK {
			t.Fatalf("%s batch: %d %q", round, r.status, r.body)
		}
		lines := strings.Split(strings.TrimSuffix(r.body, "\n"), "\n")
		if len(lines) != len(keys) {
			t.Fatalf("%s batch: %d lines for %d keys", round, len(lines), len(keys))
		}
		for i, line := range lines {
			var it api.BatchItem
			if err := json.Unmarshal([]byte(line), &it); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			switch k := keys[i]; {
			case strings.HasPrefix(k, "fail"):
				if it.Status != http.StatusBadGateway {
					t.Errorf("%s batch, %s: %+v; want 502", round, k, it)
				}
			case it.Status != http.StatusOK || it.Value != string(valueOf(k)):
				t.Errorf("%s batch, %s: %+v", round, k, it)
			}
		}
		batches, failed := ops.count("batch")
		gets, _ := ops.count("get")
		if batches != 2 || failed != 0 || gets != 0 {
			t.Errorf("%s batch: node 0 sent %d batches (%d failed) and %d single fetches; want one batch to each of the 2 other owners", round, batches, failed, gets)
		}
		ops.mu.Lock()
		clear(ops.ops)
		clear(ops.bad)
		ops.mu.Unlock()
		// Each key once; a failed load is remembered for ErrorTTL (a minute).
		if got := loads.count(); got != len(keys) {
			t.Errorf("after the %s batch: %d origin loads for %d keys; want one each", round, got, len(keys))
		}
	}
}

// TestBatchReadPausedOwner pauses one owner and reads 50 keys through
// node 0 in one batch: the request to the paused owner fails once, after
// the peer timeout, and its keys are read as single GETs read them (the
// breaker is open, so they are loaded at node 0), so every key is answered.
// Only one request goes to the paused owner.
func TestBatchReadPausedOwner(t *testing.T) {
	t.Parallel()
	var ops peerOps
	nodes, _ := newCluster(t, 3, clusterOpts{
		group: noHotCache,
		pool:  ops.pool(func(c *Config) { c.PeerTimeout = 300 * time.Millisecond }),
	})
	c := testClient(t)
	var keys []string
	paused := 0
	for i := range 50 {
		k := fmt.Sprintf("k%d", i)
		keys = append(keys, k)
		if o, remote := nodes[0].pool.PickPeer(k); remote && o.String() == nodes[2].url {
			paused++
		}
	}
	if paused == 0 {
		t.Fatal("node 2 owns none of the keys")
	}
	nodes[2].gate.pause()
	defer nodes[2].gate.resume()
	start := time.Now()
	r := mustDo(t, c, "GET", nodes[0].url+api.PublicPrefix+"g?"+url.Values{"key": keys}.Encode(), nil)
	took := time.Since(start)
	if r.status != http.StatusOK {
		t.Fatalf("batch: %d %q", r.status, r.body)
	}
	for i, line := range strings.Split(strings.TrimSuffix(r.body, "\n"), "\n") {
		var it api.BatchItem
		if err := json.Unmarshal([]byte(line), &it); err != nil || it.Status != http.StatusOK || it.Value != string(valueOf(keys[i])) {
			t.Errorf("line %d: %+v %v", i, it, err)
		}
	}
	// Fetches of its keys after that may go out in batches too, which the
	// open breaker fails at once, unsent.
	if batches, failed := ops.sent("batch"); batches != 2 || failed != 1 {
		t.Errorf("node 0 sent %d batches, %d failed; want one to each owner, the paused one's failed", batches, failed)
	}
	if took > 3*time.Second {
		t.Errorf("the batch took %v with an owner paused; want about the peer timeout (300ms)", took)
	}
	t.Logf("%d of 50 keys at the paused owner; the batch took %v", paused, took)
}

// BenchmarkBatchRead reads 100 warm keys of a 3-node cluster through one
// node, as 100 GETs one after another (what a client without batches
// does), as 100 GETs from 16 goroutines, and as one batch; with the copies
// node 0 keeps of other owners' keys (hot), and without (every read of a
// key node 0 does not own goes to its owner):
// go test -run '^$' -bench BatchRead -count 6 ./transport.
func BenchmarkBatchRead(b *testing.B) {
	for _, hot := range []bool{true, false} {
		o := clusterOpts{}
		name := "hot"
		if !hot {
			o.group, name = noHotCache, "owners"
		}
		b.Run(name, func(b *testing.B) { benchmarkBatchRead(b, o) })
	}
}

func benchmarkBatchRead(b *testing.B, o clusterOpts) {
	nodes, _ := newCluster(b, 3, o)
	c := testClient(b)
	var keys []string
	for i := range 100 {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	batch := nodes[0].url + api.PublicPrefix + "g?" + url.Values{"key": keys}.Encode()
	for range 2 { // warm: loaded, then copies kept where they are read
		mustDo(b, c, "GET", batch, nil)
	}
	var failed atomic.Int64
	get := func(k string) {
		if r, err := do(b, c, "GET", nodes[0].url+api.PublicPrefix+"g/"+k, nil); err != nil || r.status != http.StatusOK {
			failed.Add(1)
		}
	}
	b.Run("100-gets", func(b *testing.B) {
		for b.Loop() {
			for _, k := range keys {
				get(k)
			}
		}
	})
	b.Run("100-gets-16-at-once", func(b *testing.B) {
		for b.Loop() {
			runAtOnce(16, len(keys), func(i int) { get(keys[i]) })
		}
	})
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d GETs failed", n)
	}
	b.Run("1-batch", func(b *testing.B) {
		for b.Loop() {
			if r := mustDo(b, c, "GET", batch, nil); r.status != http.StatusOK {
				b.Fatal(r.status)
			}
		}
	})
}

// runAtOnce calls f(0..n-1) from k goroutines and waits for them.
func runAtOnce(k, n int, f func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
