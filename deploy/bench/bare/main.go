// Command bare is the ceiling of deploy/bench/compare.sh: a bare net/http
// server that answers every request with the same value, as a handler that
// does nothing else would. It listens on -addr and serves until killed.
package main

import (
	"flag"
	"log"
	"net/http"

	"github.com/ringcache/ringcache/transport/origin"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	size := flag.Int("size", 1024, "body bytes")
	flag.Parse()

	body := origin.DemoValue("demo", "bare", *size)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(body)
	})
	log.Fatal(http.ListenAndServe(*addr, h))
}
