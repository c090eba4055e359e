package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/poll"
	"github.com/ringcache/ringcache/transport/api"
)

// peerOps records the peer requests a node makes (Config.OnPeerRequest).
type peerOps struct {
	mu  sync.Mutex
	ops map[string]int // op -> requests
	bad map[string]int // op -> requests that failed other than not-found
	// down counts, by op, the requests an open breaker kept from being sent
	// (ErrPeerDown; also in ops and bad).
	down map[string]int
	last error
}

func (o *peerOps) hook(_, op string, _ time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ops == nil {
		o.ops, o.bad, o.down = map[string]int{}, map[string]int{}, map[string]int{}
	}
	o.ops[op]++
	if errors.Is(err, ErrPeerDown) {
		o.down[op]++
	}
	if err != nil && !errors.Is(err, cache.ErrNotFound) {
		o.bad[op]++
		o.last = err
	}
}

// pool returns a clusterOpts.pool that applies set, if not nil, to every
// node and records node 0's peer requests.
func (o *peerOps) pool(set func(*Config)) func(int, *Config) {
	return func(i int, c *Config) {
		if set != nil {
			set(c)
		}
		if i == 0 {
			c.OnPeerRequest = o.hook
		}
	}
}

// noHotCache turns the hot cache off, so that every read of a peer's key
// fetches it.
func noHotCache(g *cache.GroupConfig) { g.HotBytes = -1 }

// sent is count without the requests an open breaker kept from being sent.
func (o *peerOps) sent(op string) (n, failed int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ops[op] - o.down[op], o.bad[op] - o.down[op]
}

func (o *peerOps) count(op string) (n, failed int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ops[op], o.bad[op]
}

// slowPeer delays every peer request to a node, so that fetches to it
// overlap and coalesce.
func slowPeer(d time.Duration) func(int, http.Handler) http.Handler {
	return func(_ int, h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(d)
			h.ServeHTTP(w, r)
		})
	}
}

// coalesceOrigin serves typed values that expire, a not-found for keys
// that start with "missing", and a 100 KiB value (too large for a batch)
// for keys that start with "big".
func coalesceOrigin(_ context.Context, _, key string) (cache.Value, error) {
	switch {
	case strings.HasPrefix(key, "missing"):
		return cache.Value{}, cache.ErrNotFound
	case strings.HasPrefix(key, "big"):
		return cache.Value{Data: bytes.Repeat([]byte(key[:1]), 100<<10), ContentType: "application/octet-stream"}, nil
	}
	return cache.Value{Data: valueOf(key), ContentType: "text/x-" + key, Expires: time.Now().Add(time.Hour)}, nil
}

// TestFetchesCoalesce: concurrent fetches from one node to one owner share
// requests, and each key's answer is what a fetch of its own gives: the
// value with its content type and expiry, a not-found, a value too large to
// batch, and keys the owner had to load (loaded once, by the owner); with
// and without signed peer requests.
func TestFetchesCoalesce(t *testing.T) {
	t.Parallel()
	for _, signed := range []bool{false, true} {
		t.Run(fmt.Sprintf("signed=%v", signed), func(t *testing.T) {
			t.Parallel()
			testFetchesCoalesce(t, signed)
		})
	}
}

func testFetchesCoalesce(t *testing.T, signed bool) {
	var ops peerOps
	nodes, loads := newCluster(t, 2, clusterOpts{
		pool: ops.pool(func(c *Config) {
			if signed {
				c.Secrets = [][]byte{[]byte("coalesce-test-secret-0123456789")}
			}
		}),
		group:    func(g *cache.GroupConfig) { g.HotBytes = -1; g.NotFoundTTL = time.Hour },
		origin:   coalesceOrigin,
		wrapPeer: slowPeer(2 * time.Millisecond),
	})
	asker, own := nodes[0], nodes[1]
	var warm, cold []string
	for i := range 120 {
		prefix := "k"
		switch i % 10 {
		case 0:
			prefix = "missing"
		case 1:
			prefix = "big"
		}
		warm = append(warm, keyOf(t, nodes, own, fmt.Sprintf("%s%d-", prefix, i)))
	}
	for i := range 40 {
		cold = append(cold, keyOf(t, nodes, own, fmt.Sprintf("cold%d-", i)))
	}
	for _, k := range warm {
		own.group.Get(t.Context(), k) // the owner holds them, a not-found included
	}
	before := loads.count()

	var wg sync.WaitGroup
	for _, k := range append(append([]string(nil), warm...), cold...) {
		wg.Go(func() {
			got, err := asker.group.Get(t.Context(), k)
			want, werr := coalesceOrigin(t.Context(), "", k)
			switch {
			case werr != nil:
				if !errors.Is(err, cache.ErrNotFound) {
					t.Errorf("%s: %v, want not found", k, err)
				}
			case err != nil:
				t.Errorf("%s: %v", k, err)
			case !bytes.Equal(got.Data, want.Data) || got.ContentType != want.ContentType || got.Expires.IsZero() != want.Expires.IsZero():
				t.Errorf("%s: %d bytes %q expires %v, want %d bytes %q", k, len(got.Data), got.ContentType, got.Expires, len(want.Data), want.ContentType)
			case !want.Expires.IsZero() && want.Expires.Sub(got.Expires).Abs() > time.Minute:
				t.Errorf("%s: expires %v, want about %v", k, got.Expires, want.Expires)
			}
		})
	}
	wg.Wait()

	batches, failed := ops.count("batch")
	singles, _ := ops.count("get")
	t.Logf("%d keys: %d batches, %d single GETs", len(warm)+len(cold), batches, singles)
	if batches == 0 || failed != 0 {
		t.Fatalf("%d batches, %d failed (%v); want some and none", batches, failed, ops.last)
	}
	// Every warm key but the big ones is answered by a batch or a GET of
	// its own; coalescing saves requests only if most go in batches.
	if singles+batches >= len(warm) {
		t.Errorf("%d requests for %d warm and %d cold keys: fetches did not share requests", singles+batches, len(warm), len(cold))
	}
	// The cold keys were loaded once each, by their owner, and nothing
	// warm was loaded again.
	if got := loads.count() - before; got != len(cold) {
		t.Errorf("%d loads during the reads, want %d (the cold keys)", got, len(cold))
	}
	for _, k := range cold {
		if got := loads.of(k); len(got) != 1 || got[0] != own.url {
			t.Errorf("loads of %s: %v, want one by the owner", k, got)
		}
	}
	if s := asker.group.Stats(); s.LocalLoads != 0 || s.PeerErrors != 0 {
		t.Errorf("asker: %d loads, %d peer errors; want none", s.LocalLoads, s.PeerErrors)
	}
}

// TestCoalescedMissesLoadInTheBatch reads 40 keys the owner holds and 40
// it must load, all at once through another node with its hot cache on:
// the misses are loaded for the batches they went in (no second round
// trip a miss: few single GETs), each once, by the owner; a value the owner
// held is kept as a copy (it came under the batch's lease), and one it
// loaded for a batch is not (its load postdates that lease).
func TestCoalescedMissesLoadInTheBatch(t *testing.T) {
	t.Parallel()
	var ops peerOps
	nodes, loads := newCluster(t, 2, clusterOpts{pool: ops.pool(nil), wrapPeer: slowPeer(2 * time.Millisecond)})
	asker, own := nodes[0], nodes[1]
	var warm, cold []string
	for i := range 40 {
		warm = append(warm, keyOf(t, nodes, own, fmt.Sprintf("warm%d-", i)))
		cold = append(cold, keyOf(t, nodes, own, fmt.Sprintf("cold%d-", i)))
	}
	for _, k := range warm {
		if _, err := own.group.Get(t.Context(), k); err != nil {
			t.Fatal(err)
		}
	}
	before := loads.count()
	var wg sync.WaitGroup
	for _, k := range append(append([]string(nil), warm...), cold...) {
		wg.Go(func() {
			if v, err := asker.group.Get(t.Context(), k); err != nil || !bytes.Equal(v.Data, valueOf(k)) {
				t.Errorf("%s: %q %v", k, v.Data, err)
			}
		})
	}
	wg.Wait()
	batches, failed := ops.count("batch")
	singles, _ := ops.count("get")
	t.Logf("80 keys: %d batches, %d single GETs", batches, singles)
	if batches == 0 || failed != 0 {
		t.Fatalf("%d batches, %d failed (%v); want some and none", batches, failed, ops.last)
	}
	if singles >= len(cold)/2 {
		t.Errorf("%d single GETs for %d misses: the misses were not loaded in their batches", singles, len(cold))
	}
	if got := loads.count() - before; got != len(cold) {
		t.Errorf("%d loads, want %d (the cold keys, once each)", got, len(cold))
	}
	kept := func(keys []string) (n int) {
		for _, k := range keys {
			if _, cached, _ := asker.group.GetCached(k); cached {
				n++
			}
		}
		return n
	}
	if n := kept(warm); n != len(warm) {
		t.Errorf("%d of %d values the owner held were kept as copies; want all", n, len(warm))
	}
	// A miss fetched alone (a GET, leased at its answer) may be kept.
	if n := kept(cold); n > singles {
		t.Errorf("%d of %d values loaded for a batch were kept as copies (%d single GETs); want none", n, len(cold), singles)
	}
}

// readAtOnce reads n of own's keys through asker at once, checks each value,
// and returns how long that took.
func readAtOnce(t *testing.T, nodes []*testNode, asker, own *testNode, prefix string, n int) time.Duration {
	t.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		k := keyOf(t, nodes, own, fmt.Sprintf("%s%d-", prefix, i))
		wg.Go(func() {
			v, err := asker.group.Get(t.Context(), k)
			if err != nil || !bytes.Equal(v.Data, valueOf(k)) {
				t.Errorf("%s: %q %v", k, v.Data, err)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// TestFetchesCoalesceWithoutTheRoute: a peer that answers the batch route
// with 405 (a ringcache node from before it) is asked one key at a time
// from then on, and every key still reads right.
func TestFetchesCoalesceWithoutTheRoute(t *testing.T) {
	t.Parallel()
	var ops peerOps
	nodes, _ := newCluster(t, 2, clusterOpts{
		pool:  ops.pool(nil),
		group: noHotCache,
		wrapPeer: func(i int, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(2 * time.Millisecond)
				if r.Method == http.MethodPost && strings.Contains(r.URL.Path, batchRoute) {
					w.Header().Set("Allow", "GET, PUT, DELETE")
					http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
					return
				}
				h.ServeHTTP(w, r)
			})
		},
	})
	asker, own := nodes[0], nodes[1]
	read := func(prefix string) { readAtOnce(t, nodes, asker, own, prefix, 40) }
	read("a")
	first, _ := ops.count("batch")
	if first == 0 {
		t.Fatal("no batch was tried")
	}
	read("b")
	if n, _ := ops.count("batch"); n != first {
		t.Fatalf("%d more batches after the peer refused the route", n-first)
	}
	if s := asker.group.Stats(); s.LocalLoads != 0 {
		t.Errorf("the asker loaded %d keys itself; the owner should have", s.LocalLoads)
	}
}

// TestCoalescedHotCopiesFollowWrites: copies kept from batch answers are
// dropped by a write at the owner like any other: each reads as its new
// value on the node that held it.
func TestCoalescedHotCopiesFollowWrites(t *testing.T) {
	t.Parallel()
	var ops peerOps
	nodes, _ := newCluster(t, 2, clusterOpts{
		pool:     ops.pool(nil),
		wrapPeer: slowPeer(2 * time.Millisecond),
	})
	c := testClient(t)
	asker, own := nodes[0], nodes[1]
	keys := copiesFromBatches(t, nodes, &ops, asker, own, "w", 40, "old")
	for _, k := range keys {
		if r := put(t, c, own, k, "new"); r.status != http.StatusNoContent || r.header.Get(api.HeaderUnreached) != "" {
			t.Fatalf("PUT %s = %d %q, unreached %q", k, r.status, r.body, r.header.Get(api.HeaderUnreached))
		}
		mustRead(t, c, asker, k, "new")
	}
}

// TestWriteRacingABatchAnswer: a write at the owner that lands while a batch
// answer with the old values is on its way to the asker (the owner has
// answered; the asker has not read it) must not leave the old values behind
// as the asker's copies. The reads that overlapped the write may return
// either value; every read after it returns the new one. The owner's batch
// answers are held back until the writes have returned.
func TestWriteRacingABatchAnswer(t *testing.T) {
	t.Parallel()
	var ops peerOps
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	nodes, _ := newCluster(t, 2, clusterOpts{
		pool: ops.pool(nil),
		wrapPeer: func(i int, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(2 * time.Millisecond) // fetches overlap: the later ones batch
				if i != 1 || r.Method != http.MethodPost || !strings.Contains(r.URL.Path, batchRoute) {
					h.ServeHTTP(w, r)
					return
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r) // answered now, from the old values
				select {
				case held <- struct{}{}:
				default:
				}
				<-release
				maps.Copy(w.Header(), rec.Header())
				w.WriteHeader(rec.Code)
				w.Write(rec.Body.Bytes())
			})
		},
	})
	c := testClient(t)
	asker, own := nodes[0], nodes[1]
	var keys []string
	for i := range 40 {
		k := keyOf(t, nodes, own, fmt.Sprintf("race%d-", i))
		keys = append(keys, k)
		if r := put(t, c, own, k, "old"); r.status != http.StatusNoContent {
			t.Fatalf("PUT %s = %d %q", k, r.status, r.body)
		}
	}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			r, err := do(t, c, http.MethodGet, publicURL(asker.url, testGroup, k), nil)
			if err != nil || r.status != http.StatusOK || r.body != "old" && r.body != "new" {
				t.Errorf("GET %s during the write = %d %q %v", k, r.status, r.body, err)
			}
		})
	}
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		close(release)
		wg.Wait()
		t.Fatal("no batch reached the owner")
	}
	for _, k := range keys {
		if r := put(t, c, own, k, "new"); r.status != http.StatusNoContent {
			t.Errorf("PUT %s = %d %q", k, r.status, r.body)
		}
	}
	close(release)
	wg.Wait()
	if n, _ := ops.count("batch"); n == 0 {
		t.Fatal("no batch was sent")
	}
	for _, k := range keys {
		mustRead(t, c, asker, k, "new")
	}
}

// copiesFromBatches writes value under n of own's keys, reads them all at
// once through holder's public API, and checks that holder keeps a copy of
// each and that they came from batch answers (ops records holder's peer
// requests). It returns the keys.
func copiesFromBatches(t *testing.T, nodes []*testNode, ops *peerOps, holder, own *testNode, prefix string, n int, value string) []string {
	t.Helper()
	c := testClient(t)
	var keys []string
	for i := range n {
		k := keyOf(t, nodes, own, fmt.Sprintf("%s%d-", prefix, i))
		keys = append(keys, k)
		if r := put(t, c, own, k, value); r.status != http.StatusNoContent {
			t.Fatalf("PUT %s = %d %q", k, r.status, r.body)
		}
	}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			r, err := do(t, c, http.MethodGet, publicURL(holder.url, testGroup, k), nil)
			if err != nil || r.status != http.StatusOK || r.body != value {
				t.Errorf("GET %s at %s = %d %q %v, want %q", k, holder.url, r.status, r.body, err, value)
			}
		})
	}
	wg.Wait()
	if n, failed := ops.count("batch"); n == 0 || failed != 0 {
		t.Fatalf("%d batches, %d failed (%v): the copies did not come from batch answers", n, failed, ops.last)
	}
	if s := holder.group.Stats(); s.HotItems != int64(len(keys)) {
		t.Fatalf("%s keeps %d hot copies, want %d", holder.url, s.HotItems, len(keys))
	}
	return keys
}

// TestPausedOwnerReleasesBatches: fetches waiting in batches for a paused
// owner end within about one PeerTimeout, served by a load of their own,
// and after the owner resumes a write through it is read back everywhere.
func TestPausedOwnerReleasesBatches(t *testing.T) {
	t.Parallel()
	var ops peerOps
	nodes, _ := newCluster(t, 2, clusterOpts{
		pool:  ops.pool(func(c *Config) { c.PeerTimeout = DefaultPeerTimeout }),
		group: noHotCache,
	})
	c := testClient(t)
	asker, own := nodes[0], nodes[1]
	var keys []string
	for i := range 30 {
		keys = append(keys, keyOf(t, nodes, own, fmt.Sprintf("p%d-", i)))
	}
	own.gate.pause()
	start := time.Now()
	var wg sync.WaitGroup
	for i, k := range keys {
		time.Sleep(time.Until(start.Add(time.Duration(i) * 10 * time.Millisecond)))
		wg.Go(func() {
			v, err := asker.group.Get(t.Context(), k)
			if err != nil || !bytes.Equal(v.Data, valueOf(k)) {
				t.Errorf("%s: %q %v", k, v.Data, err)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	own.gate.resume()
	if n, _ := ops.count("batch"); n == 0 {
		t.Fatal("no batch was sent")
	}
	if took > DefaultPeerTimeout+500*time.Millisecond {
		t.Fatalf("the reads took %v with a paused owner, want about one PeerTimeout (%v)", took, DefaultPeerTimeout)
	}
	if s := asker.group.Stats(); s.LocalLoads != int64(len(keys)) {
		t.Fatalf("the asker loaded %d keys, want each of the %d once", s.LocalLoads, len(keys))
	}
	// Once the owner answers again, a write through the asker reaches it
	// and reads back on both nodes.
	poll.Until(t, 10*time.Second, func() (bool, string) {
		r := put(t, c, asker, keys[0], "after")
		return r.status == http.StatusNoContent, fmt.Sprintf("PUT after resume = %d %q", r.status, r.body)
	})
	mustRead(t, c, own, keys[0], "after")
	mustRead(t, c, asker, keys[0], "after")
}

// TestBatchFrames: answers decode to what was encoded, and broken answers
// are refused rather than read.
func TestBatchFrames(t *testing.T) {
	t.Parallel()
	exp := time.Unix(1_700_000_000, 123456789)
	vals := []cache.Value{
		{Data: []byte("plain")},
		{Data: []byte{}, ContentType: "text/plain", Expires: exp},
		{Data: []byte("stale"), Stale: true, Age: 1500 * time.Millisecond, NoStore: true},
		{Data: bytes.Repeat([]byte{7}, 3000)},
	}
	var b []byte
	for i, v := range vals {
		b = appendValueFrame(b, i, v)
	}
	b = appendIndexFrame(b, frameNotFound, 4)
	b = appendIndexFrame(b, frameMiss, 5)
	res := make([]batchResult, 6)
	if err := readFrames(bufio.NewReader(bytes.NewReader(b)), res, batchValueBytes); err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		got := res[i].v
		if !res[i].final || res[i].err != nil || !bytes.Equal(got.Data, v.Data) || got.Data == nil || got.ContentType != v.ContentType ||
			!got.Expires.Equal(v.Expires) || got.Stale != v.Stale || got.Age != v.Age || got.NoStore != v.NoStore {
			t.Errorf("value %d: %+v, want %+v", i, res[i], v)
		}
		if cap(got.Data) != len(got.Data) {
			t.Errorf("value %d has spare capacity %d: appending would write into the next", i, cap(got.Data)-len(got.Data))
		}
	}
	if !res[4].final || !errors.Is(res[4].err, cache.ErrNotFound) || res[5].final {
		t.Errorf("not-found %+v, miss %+v", res[4], res[5])
	}
	// Each error an owner answers in a batch reads back as the error a
	// single GET's answer carries: a refusal as the key's owner included,
	// so that the requester asks the owner by its own ring instead of
	// fetching the key alone from this node.
	for _, sent := range []error{cache.ErrLoad, fmt.Errorf("%w: %w", cache.ErrLoad, context.DeadlineExceeded),
		fmt.Errorf("%w: %w", cache.ErrLoad, cache.ErrTooLarge), cache.ErrOverloaded, fmt.Errorf("%w: leaving", cache.ErrNotOwner)} {
		kind := loadErrorKind(sent)
		if kind == 0 {
			t.Fatalf("%v: no frame kind", sent)
		}
		res := make([]batchResult, 1)
		if err := readFrames(bufio.NewReader(bytes.NewReader(append(appendIndexFrame(nil, frameError, 0), kind))), res, batchValueBytes); err != nil {
			t.Fatal(err)
		}
		if !res[0].final || loadErrorKind(res[0].err) != kind {
			t.Errorf("%v came back as %+v", sent, res[0])
		}
	}
	if res := loadError(loadNotOwner); !errors.Is(res, cache.ErrNotOwner) {
		t.Errorf("the not-owner kind reads as %v, want cache.ErrNotOwner", res)
	}
	if err := readFrames(bufio.NewReader(bytes.NewReader(appendValueFrame(nil, 0, vals[0]))), make([]batchResult, 1), 4); !errors.Is(err, errBatchAnswer) {
		t.Errorf("a %d-byte value with a 4-byte limit (MaxResponseBytes): %v, want errBatchAnswer", len(vals[0].Data), err)
	}
	for name, bad := range map[string][]byte{
		"index past the keys": appendIndexFrame(nil, frameMiss, 6),
		"index twice":         appendIndexFrame(appendIndexFrame(nil, frameMiss, 1), frameNotFound, 1),
		"unknown frame":       appendIndexFrame(nil, 'x', 0),
		"truncated value":     appendValueFrame(nil, 0, vals[0])[:8],
		"no index":            {frameMiss},
		"value too large":     appendValueFrame(nil, 0, cache.Value{Data: make([]byte, batchValueBytes+1)}),
		"type too long":       appendValueFrame(nil, 0, cache.Value{Data: []byte("v"), ContentType: strings.Repeat("t", batchTypeBytes+1)}),
	} {
		if err := readFrames(bufio.NewReader(bytes.NewReader(bad)), make([]batchResult, 6), batchValueBytes); !errors.Is(err, errBatchAnswer) {
			t.Errorf("%s: %v, want errBatchAnswer", name, err)
		}
	}
}

// FuzzBatch: any bytes are read or refused as a batch's keys or as its
// answer, never a panic; keys read re-encode to themselves, and every value
// read is capped.
func FuzzBatch(f *testing.F) {
	f.Add(appendKeys(nil, []string{"a", "bb"}))
	f.Add(appendIndexFrame(appendValueFrame(nil, 0, cache.Value{Data: []byte("v"), ContentType: "t", Stale: true, Age: time.Second}), frameMiss, 1))
	f.Add([]byte{frameValue, 0, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if keys, err := readKeys(b, maxBatchKeys); err == nil {
			if len(keys) == 0 || len(keys) > maxBatchKeys {
				t.Fatalf("%d keys read", len(keys))
			}
			if again, err := readKeys(appendKeys(nil, keys), maxBatchKeys); err != nil || len(again) != len(keys) {
				t.Fatalf("re-encoded keys read as %q, %v", again, err)
			}
		}
		res := make([]batchResult, 4)
		if err := readFrames(bufio.NewReader(bytes.NewReader(b)), res, batchValueBytes); err != nil {
			if !errors.Is(err, errBatchAnswer) {
				t.Fatalf("error %v is not errBatchAnswer", err)
			}
			return
		}
		for i, r := range res {
			if r.final && r.err == nil && (r.v.Data == nil || cap(r.v.Data) != len(r.v.Data)) {
				t.Fatalf("value %d: %d bytes, capacity %d", i, len(r.v.Data), cap(r.v.Data))
			}
		}
	})
}

// TestSlowBatchAnswer: an owner that sends a batch answer a byte at a time
// is a silent peer, as it would be for a GET: within about one PeerTimeout
// the breaker opens and its keys are loaded here; and the fetches after
// that go alone (the owner answers its GETs), not in batches that would
// each cost another PeerTimeout.
func TestSlowBatchAnswer(t *testing.T) {
	t.Parallel()
	var ops peerOps
	// Once a batch has been asked, the owner's answers to lease pings wait
	// until the test has seen the breaker open: a ping is the breaker's
	// half-open probe, and one answered at once (they come from several
	// places: lease renewals, membership checks) could close it before the
	// test looks.
	var batched atomic.Bool
	checked := make(chan struct{})
	nodes, _ := newCluster(t, 2, clusterOpts{
		pool:  ops.pool(func(c *Config) { c.PeerTimeout = DefaultPeerTimeout }),
		group: noHotCache,
		wrapPeer: func(_ int, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(2 * time.Millisecond)
				if batched.Load() && strings.HasSuffix(r.URL.Path, leaseRoute) {
					select {
					case <-checked:
					case <-r.Context().Done():
						return
					}
				}
				if r.Method != http.MethodPost || !strings.Contains(r.URL.Path, batchRoute) {
					h.ServeHTTP(w, r)
					return
				}
				batched.Store(true)
				// A value frame for the first key whose 1,000 bytes come
				// one every 100ms.
				head := appendValueHead(nil, 0, cache.Value{Data: make([]byte, 1000)})
				w.Header().Set("Content-Type", batchType)
				w.Header().Set("Content-Length", strconv.Itoa(len(head)+1000))
				w.WriteHeader(http.StatusOK)
				w.Write(head)
				rc := http.NewResponseController(w)
				for range 30 {
					w.Write([]byte{'x'})
					rc.Flush()
					select {
					case <-time.After(100 * time.Millisecond):
					case <-r.Context().Done():
						return
					}
				}
			})
		},
	})
	asker, own := nodes[0], nodes[1]
	read := func(prefix string) time.Duration { return readAtOnce(t, nodes, asker, own, prefix, 30) }
	if d := read("a"); d > DefaultPeerTimeout+500*time.Millisecond {
		t.Fatalf("30 reads took %v with an owner that dribbles its batch answers, want about one PeerTimeout (%v)", d, DefaultPeerTimeout)
	}
	if n, failed := ops.count("batch"); n == 0 || failed != n {
		t.Fatalf("%d batches, %d failed; want some, all failed", n, failed)
	}
	if got := asker.pool.Suspected(); len(got) != 1 || got[0] != own.url {
		t.Fatalf("suspected %v right after, want the owner: its answer did not arrive within PeerTimeout", got)
	}
	close(checked)
	// The probe may close the breaker at once (the owner answers its
	// pings); either way the next reads go alone, not in batches that the
	// owner would answer as slowly.
	batches, _ := ops.count("batch")
	if d := read("b"); d > 500*time.Millisecond {
		t.Fatalf("30 more reads took %v after a batch failed, want them served at once", d)
	}
	if n, _ := ops.count("batch"); n != batches {
		t.Fatalf("%d more batches within batchPause of a failed one", n-batches)
	}
}

// TestCoalescedCopiesUnderAPausedHolder: copies that came from batch
// answers live under the owner's contact lease like any other. A write
// while their holder is paused answers 204 naming it, after about a lease,
// and the holder then serves the new value, never its copy.
func TestCoalescedCopiesUnderAPausedHolder(t *testing.T) {
	t.Parallel()
	const peerTimeout, leaseTTL = 300 * time.Millisecond, 2 * time.Second
	var ops peerOps
	nodes, _ := newCluster(t, 2, clusterOpts{
		pool:     ops.pool(func(c *Config) { c.PeerTimeout, c.LeaseTTL = peerTimeout, leaseTTL }),
		wrapPeer: slowPeer(2 * time.Millisecond),
	})
	c := testClient(t)
	holder, own := nodes[0], nodes[1]
	keys := copiesFromBatches(t, nodes, &ops, holder, own, "h", 20, "v1")

	holder.gate.pause()
	start := time.Now()
	r := put(t, c, own, keys[0], "v2")
	d := time.Since(start)
	if r.status != http.StatusNoContent || r.header.Get(api.HeaderUnreached) != holder.url {
		t.Fatalf("PUT with the holder paused = %d %q, unreached %q; want 204 naming %s", r.status, r.body, r.header.Get(api.HeaderUnreached), holder.url)
	}
	if limit := peerTimeout + leaseTTL + leaseMargin(leaseTTL) + 500*time.Millisecond; d > limit {
		t.Fatalf("PUT took %v with the holder paused, want under %v", d, limit)
	}
	// The owner waited out the lease its copies were served under: the
	// holder no longer serves them, paused or not.
	if v, err := holder.group.Get(t.Context(), keys[0]); err != nil || string(v.Data) != "v2" {
		t.Fatalf("the holder after the write: %q %v, want v2", v.Data, err)
	}
	holder.gate.resume()
	mustRead(t, c, holder, keys[0], "v2")
	mustRead(t, c, holder, keys[1], "v1")
}

// appendValueFrame appends key i's value frame whole, as serveBatch writes
// it in two parts (appendValueHead, then the value's bytes).
func appendValueFrame(b []byte, i int, v cache.Value) []byte {
	return append(appendValueHead(b, i, v), v.Data...)
}

// TestCallersHeader: the callers of a batch's keys survive hdrCallers, a
// run of one caller is sent once, none named is no header, and a header
// that names more callers than keys is ignored.
func TestCallersHeader(t *testing.T) {
	t.Parallel()
	callers := []string{"", "10.0.0.1", "10.0.0.1", "tenant,a b", "10.0.0.1", "10.0.0.1"}
	h := string(appendCallers(nil, callers))
	if h != ",10.0.0.1,,tenant%2Ca+b,10.0.0.1," {
		t.Errorf("header %q", h)
	}
	if got := readCallers(h, len(callers)); !slices.Equal(got, callers) {
		t.Errorf("read back %q, want %q", got, callers)
	}
	if appendCallers(nil, []string{"", ""}) != nil {
		t.Error("a header for keys without callers")
	}
	if readCallers(h, 3) != nil {
		t.Error("a header naming more callers than keys was read")
	}
	if got := readCallers("a", 2); !slices.Equal(got, []string{"a", ""}) {
		t.Errorf("a cut header read as %q", got)
	}
}

// readFrames decodes a batch answer from r into res, one slot per key sent
// (readEachFrame).
func readFrames(r *bufio.Reader, res []batchResult, maxValue int64) error {
	return readEachFrame(r, len(res), maxValue, frameSink{got: func(i int, br batchResult) { res[i] = br }})
}
