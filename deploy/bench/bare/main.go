// Command bare is the ceiling of deploy/bench/compare.sh: a bare server that
// answers every request with the same value, as a handler that does nothing
// else would. It listens on -addr and serves until killed, with net/http's
// server or, with -server fasthttp, fasthttp's (the ceiling of a node whose
// public API runs on fasthttp).
package main

import (
	"flag"
	"log"
	"net/http"

	"github.com/valyala/fasthttp"

	"github.com/ringcache/ringcache/transport/origin"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	size := flag.Int("size", 1024, "body bytes")
	server := flag.String("server", "net/http", "net/http or fasthttp")
	flag.Parse()

	body := origin.DemoValue("demo", "bare", *size)
	switch *server {
	case "net/http":
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Write(body)
		})
		log.Fatal(http.ListenAndServe(*addr, h))
	case "fasthttp":
		s := &fasthttp.Server{
			Handler: func(ctx *fasthttp.RequestCtx) {
				ctx.SetContentType("text/plain; charset=utf-8")
				ctx.SetBody(body)
			},
			NoDefaultServerHeader: true,
		}
		log.Fatal(s.ListenAndServe(*addr))
	default:
		log.Fatalf("bare: -server %q: want net/http or fasthttp", *server)
	}
}
