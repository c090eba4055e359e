package transport_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/embedetcd"
	"github.com/ringcache/ringcache/peers"
	"github.com/ringcache/ringcache/transport"
)

// ExampleNode runs one node that joins its cluster through etcd: the
// registry feeds the node's ring, and Shutdown leaves the ring before the
// node stops serving. Every node of the cluster runs the same code with its
// own listener and NodeID.
func ExampleNode() {
	etcdURL, stopEtcd := exampleEtcd() // in production: your etcd's client URLs
	defer stopEtcd()
	ctx := context.Background()
	origin := cache.GetterFunc(func(ctx context.Context, key string) (cache.Value, error) {
		return cache.Value{Data: []byte("profile of " + key)}, nil
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	node, err := transport.NewNode(transport.NodeConfig{Pool: transport.Config{Self: "http://" + ln.Addr().String()}})
	if err != nil {
		log.Fatal(err)
	}
	users, err := node.NewGroup(cache.GroupConfig{Name: "users", MaxBytes: 64 << 20, Getter: origin})
	if err != nil {
		log.Fatal(err)
	}
	// Register in etcd: the members feed the node's ring, and Shutdown leaves.
	if _, err := peers.Join(ctx, node, peers.Config{Endpoints: []string{etcdURL}, NodeID: "node-1"}); err != nil {
		log.Fatal(err)
	}
	go node.Serve(ln, nil)
	defer node.Shutdown(ctx) // not ready, leave the ring, hand values over, drain, wait for loads

	fmt.Println("members:", len(node.Pool().Members()), "ready:", node.Ready())
	v, err := users.Get(ctx, "alice") // from this node's cache, its owner, or the origin (once)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("Get: %s\n", v.Data)
	res, err := http.Get(node.Self() + "/cache/users/alice")
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	fmt.Printf("HTTP: %d %s\n", res.StatusCode, body)
	// Output:
	// members: 1 ready: true
	// Get: profile of alice
	// HTTP: 200 profile of alice
}

// exampleEtcd starts an etcd on loopback for the example and returns its
// client URL and a function that stops it and removes its data.
func exampleEtcd() (string, func()) {
	dir, err := os.MkdirTemp("", "ringcache-example-etcd")
	if err != nil {
		log.Fatal(err)
	}
	e, err := embedetcd.Start(context.Background(), embedetcd.Config{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	return e.URL, func() { e.Close(); os.RemoveAll(dir) }
}
