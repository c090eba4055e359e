package transport_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/ringcache/ringcache/cache"
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
	if _, err := node.NewGroup(cache.GroupConfig{Name: "users", MaxBytes: 64 << 20, Getter: origin}); err != nil {
		log.Fatal(err)
	}
	reg, err := peers.New(ctx, peers.Config{Endpoints: []string{etcdURL}, NodeID: "node-1", PeerURL: node.Self(), Setter: node})
	if err != nil {
		log.Fatal(err)
	}
	node.SetMembership(reg)
	go node.Serve(ln, nil)
	defer node.Shutdown(ctx) // not ready, leave the ring, hand values over, drain, wait for loads

	fmt.Println("members:", len(node.Pool().Members()), "ready:", node.Ready())
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
	// HTTP: 200 profile of alice
}

// exampleEtcd starts a single-member etcd on loopback for the example and
// returns its client URL and a function that stops it and removes its data.
func exampleEtcd() (string, func()) {
	dir, err := os.MkdirTemp("", "ringcache-example-etcd")
	if err != nil {
		log.Fatal(err)
	}
	local := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{local}, []url.URL{local}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{local}, []url.URL{local}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatal(err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		log.Fatal("etcd not ready after 30s")
	}
	var once sync.Once // embed.Etcd.Close panics when called twice
	return "http://" + e.Clients[0].Addr().String(), func() {
		once.Do(func() {
			e.Close()
			os.RemoveAll(dir)
		})
	}
}
