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

// Example embeds a three-node cluster in one program: each transport.Node
// serves the public API and the peer routes on a loopback listener. Reading
// a key through every node, in Go and over HTTP, loads it from the origin
// once, at its owner.
func Example() {
	var loads atomic.Int64
	origin := cache.GetterFunc(func(ctx context.Context, key string) (cache.Value, error) {
		loads.Add(1)
		return cache.Value{Data: []byte("profile of " + key)}, nil
	})

	var nodes []*transport.Node
	var urls []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		node, err := transport.NewNode(transport.NodeConfig{Pool: transport.Config{Self: "http://" + ln.Addr().String()}})
		if err != nil {
			log.Fatal(err)
		}
		if _, err := node.NewGroup(cache.GroupConfig{Name: "users", MaxBytes: 64 << 20, Getter: origin}); err != nil {
			log.Fatal(err)
		}
		go node.Serve(ln, nil)
		defer node.Shutdown(context.Background())
		nodes, urls = append(nodes, node), append(urls, node.Self())
	}
	for _, node := range nodes {
		if err := node.Set(urls...); err != nil { // what peers.Static or peers.New do
			log.Fatal(err)
		}
	}

	for i, node := range nodes {
		g, _ := node.Group("users")
		v, err := g.Get(context.Background(), "alice")
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
