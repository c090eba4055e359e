// Command gcnode is one node of github.com/golang/groupcache for
// deploy/bench/compare.sh, holding the same values as ringcached's demo
// origin so that the two can be compared under the same load. groupcache's
// HTTPPool is process-global, so each node is a process of its own.
//
// It listens on -addr and serves:
//
//	/_groupcache/<group>/<key>  groupcache's peer protocol (HTTPPool)
//	/cache/<group>/<key>        group.Get(key), as a groupcache user's
//	                            handler would serve it
//
// -idle-conns 0 keeps groupcache's client as shipped (http.DefaultTransport:
// 2 idle connections per peer); a positive value gives the pool a transport
// that keeps that many.
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"strings"

	"github.com/golang/groupcache"

	"github.com/ringcache/ringcache/transport/origin"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	self := flag.String("self", "", "this node's base URL, as its peers reach it (default http://<addr>)")
	peers := flag.String("peers", "", "comma-separated base URLs of the other members")
	group := flag.String("group", "demo", "group name")
	size := flag.Int("size", 1024, "bytes per value (the demo origin's)")
	cacheBytes := flag.Int64("bytes", 64<<20, "group cache bytes")
	idle := flag.Int("idle-conns", 0, "idle connections kept per peer; 0: groupcache as shipped (2)")
	flag.Parse()

	if *self == "" {
		*self = "http://" + *addr
	}
	pool := groupcache.NewHTTPPoolOpts(*self, nil)
	if *idle > 0 {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = *idle
		pool.Transport = func(context.Context) http.RoundTripper { return tr }
	}
	members := []string{*self}
	if *peers != "" {
		members = append(members, strings.Split(*peers, ",")...)
	}
	pool.Set(members...)

	g := groupcache.NewGroup(*group, *cacheBytes, groupcache.GetterFunc(
		func(_ context.Context, key string, dest groupcache.Sink) error {
			return dest.SetBytes(origin.DemoValue(*group, key, *size))
		}))

	prefix := "/cache/" + *group + "/"
	mux := http.NewServeMux()
	mux.Handle("/_groupcache/", pool)
	mux.HandleFunc(prefix, func(w http.ResponseWriter, r *http.Request) {
		var v groupcache.ByteView
		if err := g.Get(r.Context(), strings.TrimPrefix(r.URL.Path, prefix), groupcache.ByteViewSink(&v)); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		v.WriteTo(w)
	})
	log.Fatal(http.ListenAndServe(*addr, mux))
}
