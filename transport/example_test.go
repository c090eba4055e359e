package transport_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport"
)

// Example embeds a three-node cluster in one program: each node is a
// cache.Node whose peers are a transport.Pool, serving the peer protocol and
// the public API on a loopback listener. Reading a key through every node,
// in Go and over HTTP, loads it from the origin once, at its owner.
func Example() {
	ctx := context.Background()

	// Listen first: a node's URL is part of every node's ring.
	var listeners []net.Listener
	var urls []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		listeners = append(listeners, ln)
		urls = append(urls, "http://"+ln.Addr().String())
	}

	var loads atomic.Int64
	origin := cache.GetterFunc(func(ctx context.Context, key string) (cache.Value, error) {
		loads.Add(1)
		return cache.Value{Data: []byte("profile of " + key)}, nil
	})

	var groups []*cache.Group
	for i, ln := range listeners {
		pool, err := transport.NewPool(transport.Config{Self: urls[i]})
		if err != nil {
			log.Fatal(err)
		}
		defer pool.Close()
		if err := pool.Set(urls...); err != nil {
			log.Fatal(err)
		}
		node := cache.New(cache.Config{Peers: pool})
		g, err := node.NewGroup(cache.GroupConfig{Name: "users", MaxBytes: 64 << 20, Getter: origin})
		if err != nil {
			log.Fatal(err)
		}
		groups = append(groups, g)

		api, err := transport.NewHandler(node, transport.HandlerConfig{})
		if err != nil {
			log.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle(transport.DefaultBasePath, pool.PeerHandler(node)) // peers
		mux.Handle(transport.PublicPrefix, api)                       // clients
		srv := transport.NewServer("", mux)
		go srv.Serve(ln)
		defer srv.Close()
	}

	for i, g := range groups {
		v, err := g.Get(ctx, "alice")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("node %d: %s\n", i, v.Data)
	}

	res, err := http.Get(urls[2] + "/cache/users/alice")
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	fmt.Printf("HTTP: %d %s (%s)\n", res.StatusCode, body, res.Header.Get("Content-Type"))
	fmt.Println("origin loads:", loads.Load())
	// Output:
	// node 0: profile of alice
	// node 1: profile of alice
	// node 2: profile of alice
	// HTTP: 200 profile of alice (application/octet-stream)
	// origin loads: 1
}
