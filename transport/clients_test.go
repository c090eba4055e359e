package transport

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// TestClientMissLimit drives the limit through the public handler: a client
// with MaxMisses misses waiting on the origin gets 429 for another miss, but
// hits still (and a remembered not-found, which costs the origin nothing
// either), and other clients are not held back.
func TestClientMissLimit(t *testing.T) {
	t.Parallel()
	limiter, err := api.NewClientLimiter(api.ClientLimitConfig{MaxMisses: 2})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	arrived := make(chan string, 10)
	nodes, _ := newCluster(t, 1, clusterOpts{
		handler: func(_ int, c *api.HandlerConfig) { c.Clients = limiter },
		group:   func(c *cache.GroupConfig) { c.NotFoundTTL = time.Hour },
		origin: func(ctx context.Context, node, key string) (cache.Value, error) {
			if key == "gone" {
				return cache.Value{}, cache.ErrNotFound
			}
			if strings.HasPrefix(key, "slow") {
				arrived <- key
				<-release
			}
			return defaultOrigin(ctx, node, key)
		},
	})
	n := nodes[0]
	c := testClient(t)
	if err := get(t, c, n, "hit"); err != nil { // now cached
		t.Fatal(err)
	}
	gone := publicURL(n.url, testGroup, "gone")
	if r := mustDo(t, c, http.MethodGet, gone, nil); r.status != http.StatusNotFound { // now remembered
		t.Fatalf("GET gone = %d, want 404", r.status)
	}
	var wg sync.WaitGroup
	for _, key := range []string{"slow1", "slow2"} {
		wg.Go(func() {
			if err := get(t, c, n, key); err != nil {
				t.Error(err)
			}
		})
	}
	<-arrived
	<-arrived
	r := mustDo(t, c, http.MethodGet, publicURL(n.url, testGroup, "slow3"), nil)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Errorf("a third miss = %d %q (Retry-After %q), want 429 with Retry-After", r.status, r.body, r.header.Get("Retry-After"))
	}
	if err := get(t, c, n, "hit"); err != nil {
		t.Errorf("a hit while over the miss limit: %v", err)
	}
	if r := mustDo(t, c, http.MethodGet, gone, nil); r.status != http.StatusNotFound {
		t.Errorf("a remembered not-found while over the miss limit = %d %q, want 404", r.status, r.body)
	}
	close(release)
	wg.Wait()
	if err := get(t, c, n, "slow3"); err != nil {
		t.Errorf("a miss after the others finished: %v", err)
	}
}

// exampleClientLimits are the bounds api.ClientLimitConfig's doc suggests for
// a node that faces clients one does not run.
var exampleClientLimits = api.ClientLimitConfig{MaxMisses: 32, MissRate: 500, MissBurst: 1000}
