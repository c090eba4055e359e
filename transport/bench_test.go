package transport

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/golang/groupcache"
	"github.com/golang/groupcache/groupcachepb"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/listen"
	"github.com/ringcache/ringcache/transport/api"
)

var benchSizes = []int{1 << 10, 64 << 10}

// fetches runs fetch for the benchmark: b.N times in a row, or from 32
// goroutines per CPU if parallel (more concurrent fetches than groupcache's
// 2 idle connections per host). A failure in a parallel worker is reported
// with Error: Fatal may only be called from the benchmark's own goroutine.
func fetches(b *testing.B, size int, parallel bool, fetch func() error) {
	b.ReportAllocs()
	b.SetBytes(int64(size))
	defer reportCPU(b)()
	if parallel {
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := fetch(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		return
	}
	for b.Loop() {
		if err := fetch(); err != nil {
			b.Fatal(err)
		}
	}
}

// reportCPU starts counting the process's CPU time; the function it returns
// reports it per op as cpu-ns/op. Client and server run in this process, so
// that is the whole cost of an exchange, and it depends far less than ns/op
// on what else runs on the machine.
func reportCPU(b *testing.B) func() {
	start, ok := cpuTime()
	return func() {
		if end, ok2 := cpuTime(); ok && ok2 && b.N > 0 {
			b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

// peerOwner is a node alone in its ring, holding one value in its main
// cache and serving its peer routes on loopback with HTTP/1.1 and, for
// clients that open with HTTP/2's preface, unencrypted HTTP/2.
type peerOwner struct {
	url   string
	key   string
	value []byte
}

func newPeerOwner(b *testing.B, size int) *peerOwner {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	o := &peerOwner{url: "http://" + ln.Addr().String(), key: "bench-key",
		value: bytes.Repeat([]byte("v"), size)}
	pool, err := NewPool(Config{Self: o.url})
	if err != nil {
		b.Fatal(err)
	}
	node := cache.New(cache.Config{Peers: pool})
	g, err := node.NewGroup(cache.GroupConfig{Name: testGroup, MaxBytes: 64 << 20,
		Getter: cache.GetterFunc(func(context.Context, string) (cache.Value, error) {
			return cache.Value{Data: o.value}, nil
		})})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := g.Get(b.Context(), o.key); err != nil {
		b.Fatal(err)
	}
	srv := listen.NewServer("", pool.PeerHandler(node))
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return o
}

// peerClients are the peer clients BenchmarkPeerFetch compares: each
// returns the transport a Pool's client uses.
var peerClients = []struct {
	name      string
	transport func(Config) http.RoundTripper
	single    bool // Config.DisableCoalescing
}{
	{"direct", func(cfg Config) http.RoundTripper { return newPeerTransport(cfg, &net.Dialer{}) }, false},
	{"direct-single", func(cfg Config) http.RoundTripper { return newPeerTransport(cfg, &net.Dialer{}) }, true},
	{"h1", func(cfg Config) http.RoundTripper { return newHTTPTransport(cfg, &net.Dialer{}) }, true},
	{"h1-64KiB-buffers", func(cfg Config) http.RoundTripper {
		tr := newHTTPTransport(cfg, &net.Dialer{})
		tr.WriteBufferSize = 64 << 10
		tr.ReadBufferSize = 64 << 10
		return tr
	}, true},
	{"h2c", func(cfg Config) http.RoundTripper {
		tr := newHTTPTransport(cfg, &net.Dialer{})
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
		return tr
	}, true},
}

// BenchmarkPeerFetch measures one peer fetch over loopback: the requester's
// client, the owner's peer handler serving from its main cache, and the
// response decoded. parallel=true runs 32 callers per CPU, each fetching
// the next of 64 keys. client=direct is the Pool as it is (directTransport,
// concurrent fetches coalesced into batches); direct-single is the same
// with DisableCoalescing; the other ringcache clients are the Pool with
// net/http's Transport instead, every fetch alone: HTTP/1.1 (h1), the same with
// 64 KiB buffers, and HTTP/2 without TLS (h2c, prior knowledge: net/http's
// own implementation, which golang.org/x/net/http2 also is). client=groupcache
// is groupcache's own HTTPPool client (http.DefaultTransport, 2 idle
// connections per host) against the same owner, in the same run.
func BenchmarkPeerFetch(b *testing.B) {
	for _, size := range benchSizes {
		for _, parallel := range []bool{false, true} {
			for _, pc := range peerClients {
				name := fmt.Sprintf("size=%dKiB/parallel=%v/client=%s", size>>10, parallel, pc.name)
				b.Run(name, func(b *testing.B) {
					o := newPeerOwner(b, size)
					pool, err := NewPool(Config{Self: "http://requester.invalid", DisableCoalescing: pc.single})
					if err != nil {
						b.Fatal(err)
					}
					pool.client.Transport = pc.transport(pool.Config())
					b.Cleanup(pool.Close)
					if err := pool.Set(o.url); err != nil {
						b.Fatal(err)
					}
					pe, keys := warmKeys(b, pool, o.url, o.key) // the owner's origin serves any key
					ctx := b.Context()
					var next atomic.Uint32
					fetches(b, size, parallel, func() error {
						key := keys[next.Add(1)%uint32(len(keys))]
						v, err := pe.Fetch(ctx, testGroup, key)
						if err != nil || !bytes.Equal(v.Data, o.value) {
							return fmt.Errorf("Fetch: %d bytes, %v", len(v.Data), err)
						}
						return nil
					})
				})
			}
			name := fmt.Sprintf("size=%dKiB/parallel=%v/client=groupcache", size>>10, parallel)
			b.Run(name, func(b *testing.B) {
				o := newPeerOwner(b, size)
				getter := groupcacheClient(o.url)
				b.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
				ctx := b.Context()
				fetches(b, size, parallel, func() error {
					req := &groupcachepb.GetRequest{Group: new(testGroup), Key: &o.key}
					var res groupcachepb.GetResponse
					if err := getter.Get(ctx, req, &res); err != nil || !bytes.Equal(res.Value, o.value) {
						return fmt.Errorf("Get: %d bytes, %v", len(res.Value), err)
					}
					return nil
				})
			})
		}
	}
}

// BenchmarkPeerFetchFromProcess is BenchmarkPeerFetch with the owner in a
// process of its own, as peers run: a groupcache node as shipped
// (testdata/gcpeer) holding 64 keys of 1 KiB, asked by ringcache's client
// (the Pool as it is; it learns at the first answer that the peer does not
// batch) and by groupcache's, in the same run. cpu-ns/op is then the
// client's CPU alone. In BenchmarkPeerFetch both sides share one process and
// its scheduler, which favours groupcache's client on serial fetches; here
// the two clients are measured as a requester runs them.
func BenchmarkPeerFetchFromProcess(b *testing.B) {
	const size = 1 << 10
	owner := startGroupcache(b, nil, "-size", strconv.Itoa(size))
	pool, err := NewPool(Config{Self: "http://requester.invalid"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if err := pool.Set(owner); err != nil {
		b.Fatal(err)
	}
	pe, keys := warmKeys(b, pool, owner, "key-")
	wants := make(map[string][]byte, len(keys)) // gcpeer's values, made before the clock runs
	for _, k := range keys {
		v := []byte("gc:" + k)
		wants[k] = append(v, bytes.Repeat([]byte("."), size-len(v))...)
	}
	ctx := b.Context()
	for _, parallel := range []bool{false, true} {
		b.Run(fmt.Sprintf("parallel=%v/client=ringcache", parallel), func(b *testing.B) {
			var next atomic.Uint32
			fetches(b, size, parallel, func() error {
				key := keys[next.Add(1)%uint32(len(keys))]
				v, err := pe.Fetch(ctx, testGroup, key)
				if err != nil || !bytes.Equal(v.Data, wants[key]) {
					return fmt.Errorf("Fetch: %d bytes, %v", len(v.Data), err)
				}
				return nil
			})
		})
		b.Run(fmt.Sprintf("parallel=%v/client=groupcache", parallel), func(b *testing.B) {
			getter := groupcacheClient(owner)
			b.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
			var next atomic.Uint32
			fetches(b, size, parallel, func() error {
				key := keys[next.Add(1)%uint32(len(keys))]
				req := &groupcachepb.GetRequest{Group: new(testGroup), Key: &key}
				var res groupcachepb.GetResponse
				if err := getter.Get(ctx, req, &res); err != nil || !bytes.Equal(res.Value, wants[key]) {
					return fmt.Errorf("Get: %d bytes, %v", len(res.Value), err)
				}
				return nil
			})
		})
	}
}

// warmKeys returns the peer of owner in pool and 64 keys (prefix and a
// number) that owner owns by pool's ring, each fetched once so that the
// owner holds it.
func warmKeys(b *testing.B, pool *Pool, owner, prefix string) (cache.Peer, []string) {
	var keys []string
	for i := 0; len(keys) < 64; i++ {
		if k := fmt.Sprint(prefix, i); pool.Owner(k) == owner {
			keys = append(keys, k)
		}
	}
	pe, ok := pool.PickPeer(keys[0])
	if !ok {
		b.Fatal("no peer owns the key")
	}
	for _, k := range keys {
		if _, err := pe.Fetch(b.Context(), testGroup, k); err != nil {
			b.Fatal(err)
		}
	}
	return pe, keys
}

// groupcache's HTTPPool can be made once per process; the benchmark points
// its ring at one owner at a time.
var (
	gcPoolOnce sync.Once
	gcPool     *groupcache.HTTPPool
)

func groupcacheClient(owner string) groupcache.ProtoGetter {
	gcPoolOnce.Do(func() {
		gcPool = groupcache.NewHTTPPoolOpts("http://groupcache-bench.invalid", nil)
	})
	gcPool.Set(owner)
	getter, ok := gcPool.PickPeer("any")
	if !ok {
		panic("groupcache picked itself")
	}
	return getter
}

// BenchmarkPublicGetHit measures the public handler serving a value from the
// main cache, without the network: what a GET costs the node besides the
// socket (path routing, the ETag, headers, the copy into the response).
// limits=on is the daemon's default, per-client miss limits, which a hit
// does not reach: one lookup (Group.GetCached) answers it.
func BenchmarkPublicGetHit(b *testing.B) {
	for _, bc := range []struct {
		size   int
		limits bool
	}{{1 << 10, false}, {1 << 20, false}, {1 << 10, true}} {
		size := bc.size
		b.Run(fmt.Sprintf("size=%dKiB/limits=%s", size>>10, map[bool]string{false: "off", true: "on"}[bc.limits]), func(b *testing.B) {
			node := cache.New(cache.Config{})
			value := []byte(strings.Repeat("x", size))
			holding(b, node.NewGroup, "k", cache.Value{Data: value})
			var hc api.HandlerConfig
			var err error
			if bc.limits {
				if hc.Clients, err = api.NewClientLimiter(exampleClientLimits); err != nil {
					b.Fatal(err)
				}
			}
			h, err := api.NewHandler(node, hc)
			if err != nil {
				b.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, api.PublicPrefix+testGroup+"/k", nil)
			w := &discardWriter{header: http.Header{}}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			defer reportCPU(b)()
			for b.Loop() {
				clear(w.header)
				h.ServeHTTP(w, req)
				if w.code != http.StatusOK || w.n != size {
					b.Fatalf("status %d, %d bytes", w.code, w.n)
				}
				w.n = 0
			}
		})
	}
}

// holding adds to a node (newGroup: its NewGroup) the group testGroup, whose
// origin answers v for every key, and loads key into its cache: the setup
// of the hit benchmarks.
func holding(b *testing.B, newGroup func(cache.GroupConfig) (*cache.Group, error), key string, v cache.Value) {
	b.Helper()
	g, err := newGroup(cache.GroupConfig{Name: testGroup, MaxBytes: 64 << 20,
		Getter: cache.GetterFunc(func(context.Context, string) (cache.Value, error) { return v, nil })})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := g.Get(b.Context(), key); err != nil {
		b.Fatal(err)
	}
}

// discardWriter is an http.ResponseWriter that keeps only the status and the
// body's length, so that a benchmark measures the handler, not a recorder.
type discardWriter struct {
	header http.Header
	code   int
	n      int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// BenchmarkColdFill reads keys never read before through node 0 of three
// in-process nodes, 32 callers per CPU: every read is a miss, loaded once by
// its owner (two in three by another node, through the peer hop; the
// origin answers at once). allocs/op and cpu-ns/op are per miss, both
// sides of the hop counted: go test -run '^$' -bench ColdFill -benchmem
// -count 6 ./transport.
func BenchmarkColdFill(b *testing.B) {
	// copies=2 is what a crash that costs the origin nothing costs a miss:
	// a copy sent to the key's heir after each load.
	for _, copies := range []int{1, 2} {
		b.Run(fmt.Sprintf("copies=%d", copies), func(b *testing.B) {
			nodes, _ := newCluster(b, 3, clusterOpts{group: withCopies(copies)})
			g := nodes[0].group
			var next atomic.Uint64
			var failed atomic.Int64
			b.SetParallelism(32)
			b.ReportAllocs()
			defer reportCPU(b)()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := fmt.Sprintf("cold-%d", next.Add(1))
					if v, err := g.Get(b.Context(), k); err != nil || !bytes.Equal(v.Data, valueOf(k)) {
						failed.Add(1)
					}
				}
			})
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d reads failed", n)
			}
		})
	}
}

// BenchmarkWrites sends PUTs through node 0 of three in-process nodes, 32
// callers per CPU: to keys each new, and all to one key, whose owner
// applies them one at a time where it keeps copies (cache: a write's turn),
// each to the end of its drops and its copy. ns/op is per PUT.
func BenchmarkWrites(b *testing.B) {
	for _, tc := range []struct {
		copies int
		keys   string
	}{{1, "distinct"}, {1, "one"}, {2, "distinct"}, {2, "one"}} {
		keys := tc.keys
		b.Run(fmt.Sprintf("copies=%d/keys=%s", tc.copies, keys), func(b *testing.B) {
			nodes, _ := newCluster(b, 3, clusterOpts{group: withCopies(tc.copies)})
			g := nodes[0].group
			var next atomic.Uint64
			var failed atomic.Int64
			b.SetParallelism(32)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := next.Add(1)
					k := "hot"
					if keys == "distinct" {
						k = fmt.Sprintf("w-%d", n)
					}
					if _, err := g.Set(b.Context(), k, cache.Value{Data: []byte(strconv.FormatUint(n, 10))}); err != nil {
						failed.Add(1)
					}
				}
			})
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d writes failed", n)
			}
		})
	}
}
