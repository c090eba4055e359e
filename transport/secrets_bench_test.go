package transport

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
)

// BenchmarkSignedPeerFetch compares a 1 KiB peer fetch over loopback
// without a secret, with a secret (signature, nonce, replay check), and
// with a secret over mutual TLS, in one run, over connections already open:
// the cost of each layer is the ratio between them.
func BenchmarkSignedPeerFetch(b *testing.B) {
	const size = 1 << 10
	value := func(ctx context.Context, node, key string) (cache.Value, error) {
		return cache.Value{Data: []byte(strings.Repeat("x", size))}, nil
	}
	for _, parallel := range []bool{false, true} {
		for _, mode := range []string{"plain", "signed", "signed+mtls"} {
			b.Run(fmt.Sprintf("mode=%s/parallel=%v", mode, parallel), func(b *testing.B) {
				var fetch func() error
				switch mode {
				case "signed+mtls":
					nodes := newTLSClusterFor(b, value)
					pe, key := ownedBy(b, nodes[0].pool, nodes[1].pool.Config().Self)
					if _, err := nodes[1].group.Get(b.Context(), key); err != nil {
						b.Fatal(err)
					}
					fetch = func() error { _, err := pe.Fetch(b.Context(), testGroup, key); return err }
				default:
					o := clusterOpts{origin: value, pool: func(_ int, c *Config) {
						c.PeerTimeout = benchPeerTimeout
						if mode == "signed" {
							c.Secrets = [][]byte{[]byte("bench secret, 32 bytes long....")}
						}
					}}
					nodes, _ := newCluster(b, 2, o)
					pe, key := ownedBy(b, nodes[0].pool, nodes[1].url)
					if _, err := nodes[1].group.Get(b.Context(), key); err != nil {
						b.Fatal(err)
					}
					fetch = func() error { _, err := pe.Fetch(b.Context(), testGroup, key); return err }
				}
				// Open the connections the parallel callers need first: a TLS
				// handshake costs more than many fetches, and a short run would
				// measure mostly those.
				var wg sync.WaitGroup
				for range 64 {
					wg.Go(func() {
						if err := fetch(); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
				b.ResetTimer()
				done := reportCPU(b)
				fetches(b, size, parallel, fetch)
				done()
			})
		}
	}
}

// benchPeerTimeout is long: on a loaded machine a fetch that times out
// closes its connection, and the next one's TLS handshake costs more CPU,
// which is the throughput this benchmark is not about.
const benchPeerTimeout = 30 * time.Second

// ownedBy returns the peer, in p, for a key that owner owns.
func ownedBy(b testing.TB, p *Pool, owner string) (cache.Peer, string) {
	for i := 0; ; i++ {
		k := fmt.Sprint("bench-", i)
		if p.Owner(k) == owner {
			pe, _ := p.PickPeer(k)
			return pe, k
		}
	}
}

// newTLSClusterFor is newTLSCluster for a benchmark: two signed nodes over
// mutual TLS, serving value.
func newTLSClusterFor(b *testing.B, value origin) []*tlsNode {
	ca := newCA(b, "bench CA")
	return newTLSClusterOpts(b, ca, 2, &loadLog{}, value, []byte("bench secret, 32 bytes long...."))
}

// BenchmarkNonceMemory fills a nonce memory to DefaultMaxNonces and reports
// the heap it takes per nonce.
func BenchmarkNonceMemory(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := newNonceCache(DefaultMaxNonces, DefaultSignatureWindow.Milliseconds())
		now := time.Now().UnixMilli()
		for i := range DefaultMaxNonces {
			var n nonce
			n[0], n[1], n[2], n[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
			if err := c.check(n, now, now); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/DefaultMaxNonces, "bytes/nonce")
		runtime.KeepAlive(c)
	}
}

// BenchmarkPeerAuth measures what signing costs a request without the
// network: sign alone (the sender), and sign then verify with the nonce
// check (sender and receiver), on a GET and on a 1 KiB PUT.
func BenchmarkPeerAuth(b *testing.B) {
	cfg := Config{Self: "http://10.0.0.1:8080", Secrets: [][]byte{[]byte("bench secret, 32 bytes long....")}}
	cfg, err := cfg.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(strings.Repeat("x", 1<<10))
	for _, method := range []string{"GET", "PUT"} {
		for _, verify := range []bool{false, true} {
			b.Run(fmt.Sprintf("method=%s/verify=%v", method, verify), func(b *testing.B) {
				a := newPeerAuth(cfg)
				var reqBody []byte
				if method == "PUT" {
					reqBody = body
				}
				b.ReportAllocs()
				done := reportCPU(b)
				for b.Loop() {
					req, _ := http.NewRequest(method, cfg.Self+"/_groupcache/g/some-key", nil)
					now := time.Now()
					a.sign(req, cfg.Self, reqBody, now)
					if verify {
						if err := a.verify(req, now); err != nil {
							b.Fatal(err)
						}
						if method == "PUT" {
							if err := a.checkBody(req, reqBody); err != nil {
								b.Fatal(err)
							}
						}
					}
				}
				done()
			})
		}
	}
}
