// Command gcpeer is a node of github.com/golang/groupcache, as shipped, for
// the transport package's interoperability test. groupcache's HTTPPool is
// process-global, so it runs in a process of its own.
//
// It listens on -addr (port 0 picks one), prints "listening <base URL>" on
// stdout, and serves:
//
//	<-base><group>/<key>  groupcache's peer protocol (HTTPPool)
//	/get?key=K            group.Get(K) as groupcache's clients would do it
//	/loads                the keys its getter loaded, one per line (escaped)
//
// Its getter returns "gc:" + key, so a reader can tell which side loaded a
// value; with -size N, that padded with '.' to N bytes (for benchmarks). It
// stops on SIGTERM, SIGINT or when stdin closes.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/golang/groupcache"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	peers := flag.String("peers", "", "comma-separated base URLs of the other members")
	group := flag.String("group", "g", "group name")
	base := flag.String("base", "/_groupcache/", "peer base path")
	replicas := flag.Int("replicas", 50, "ring replicas")
	size := flag.Int("size", 0, "pad each value with '.' to this many bytes")
	flag.Parse()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	self := "http://" + ln.Addr().String()
	pool := groupcache.NewHTTPPoolOpts(self, &groupcache.HTTPPoolOptions{BasePath: *base, Replicas: *replicas})
	members := []string{self}
	if *peers != "" {
		members = append(members, strings.Split(*peers, ",")...)
	}
	pool.Set(members...)

	var mu sync.Mutex
	var loads []string
	g := groupcache.NewGroup(*group, 64<<20, groupcache.GetterFunc(
		func(_ context.Context, key string, dest groupcache.Sink) error {
			mu.Lock()
			loads = append(loads, url.QueryEscape(key))
			mu.Unlock()
			if strings.HasPrefix(key, "slow-") {
				time.Sleep(300 * time.Millisecond) // holds a peer's fetch in flight
			}
			v := "gc:" + key
			if pad := *size - len(v); pad > 0 {
				v += strings.Repeat(".", pad)
			}
			return dest.SetString(v)
		}))

	mux := http.NewServeMux()
	mux.Handle(*base, pool)
	mux.HandleFunc("/get", func(w http.ResponseWriter, r *http.Request) {
		var v string
		if err := g.Get(r.Context(), r.URL.Query().Get("key"), groupcache.StringSink(&v)); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		io.WriteString(w, v)
	})
	mux.HandleFunc("/loads", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range loads {
			fmt.Fprintln(w, k)
		}
	})
	srv := &http.Server{Handler: mux}
	fmt.Printf("listening %s\n", self)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		io.Copy(io.Discard, os.Stdin) // the test closes stdin to stop us
		stop()
	}()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
