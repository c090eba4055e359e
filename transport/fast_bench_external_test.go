package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/golang/groupcache"
	"github.com/valyala/fasthttp"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/listen"
	"github.com/ringcache/ringcache/transport"
	"github.com/ringcache/ringcache/transport/api"
	"github.com/ringcache/ringcache/transport/fast"
)

// BenchmarkFastHit measures the FastServer's fast path alone, without the
// network: a GET of a cached 1 KiB value handed to the server's handler in
// a reused fasthttp.RequestCtx, as BenchmarkPublicGetHit hands one to the
// net/http Handler.
func BenchmarkFastHit(b *testing.B) {
	n, err := transport.NewNode(transport.NodeConfig{Pool: transport.Config{Self: "http://127.0.0.1:1"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Shutdown(context.Background()) })
	value := []byte(strings.Repeat("x", 1<<10))
	transport.Holding(b, n.NewGroup, "k", cache.Value{Data: value})
	srv, err := fast.New(n, fast.Config{Handler: n.PublicHandler()})
	if err != nil {
		b.Fatal(err)
	}
	var req fasthttp.Request
	req.SetRequestURI(api.PublicPrefix + transport.TestGroup + "/k")
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	b.SetBytes(int64(len(value)))
	defer transport.ReportCPU(b)()
	for b.Loop() {
		ctx.Init(&req, nil, nil)
		srv.ServeFastHTTP(&ctx)
		if ctx.Response.StatusCode() != http.StatusOK || len(ctx.Response.Body()) != len(value) {
			b.Fatalf("status %d, %d bytes", ctx.Response.StatusCode(), len(ctx.Response.Body()))
		}
	}
}

// BenchmarkPublicServeHit measures a hit end to end: a GET of a cached
// 1 KiB value through the public Handler served by a real http.Server on
// loopback, next to a bare handler writing the same bytes through the same
// kind of server (listen.NewServer), in the same run, so that the ratio of the two
// is what the Handler costs a hit on top of net/http. Each client keeps one
// connection alive, writes a request and reads the transport.TestResponse with
// net/http's parser, and checks the body byte for byte; conns=16 runs 16 of
// them at once.
func BenchmarkPublicServeHit(b *testing.B) {
	value := bytes.Repeat([]byte("0123456789abcdef"), 64)
	const contentType = "text/plain; charset=utf-8"
	n, err := transport.NewNode(transport.NodeConfig{Pool: transport.Config{Self: "http://127.0.0.1:1"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Shutdown(context.Background()) })
	transport.Holding(b, n.NewGroup, "key", cache.Value{Data: value, ContentType: contentType})
	public := n.PublicHandler()
	fastSrv, err := fast.New(n, fast.Config{Handler: public})
	if err != nil {
		b.Fatal(err)
	}
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Write(value)
	})
	bareFast := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.SetContentType(contentType)
		ctx.Response.SetBodyRaw(value)
	}}
	gc := groupcacheHits(b, value, contentType)
	// bare-untimed is the bare handler on an http.Server without
	// listen.NewServer's timeouts, as compare.sh's bare server and groupcache's
	// nodes run: what the timeouts cost an exchange. groupcache is its
	// group's Get in a handler as a groupcache user writes it, on such a
	// server. ringcache-fast is the Node's FastServer, next to a bare
	// fasthttp handler.
	for _, conns := range []int{1, 16} {
		for _, sv := range []struct {
			name    string
			h       http.Handler
			untimed bool
			fast    fastServer
		}{
			{name: "bare", h: bare}, {name: "ringcache", h: public}, {name: "bare-untimed", h: bare, untimed: true},
			{name: "groupcache", h: gc, untimed: true}, {name: "ringcache-fast", fast: fastSrv}, {name: "bare-fasthttp", fast: bareFast},
		} {
			b.Run(fmt.Sprintf("server=%s/conns=%d", sv.name, conns), func(b *testing.B) {
				var addr string
				if sv.fast != nil {
					addr = serveFast(b, sv.fast)
				} else {
					addr = serve(b, sv.h, sv.untimed)
				}
				get := func(c *rawClient) error { return c.get(value) }
				b.ReportAllocs()
				b.SetBytes(int64(len(value)))
				defer transport.ReportCPU(b)()
				if conns == 1 {
					c := dialRaw(b, addr, api.PublicPrefix+transport.TestGroup+"/key")
					for b.Loop() {
						if err := get(c); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.SetParallelism((conns + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				b.RunParallel(func(pb *testing.PB) {
					c := dialRaw(b, addr, api.PublicPrefix+transport.TestGroup+"/key")
					for pb.Next() {
						if err := get(c); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// serve serves h with listen.NewServer (or, untimed, a plain http.Server) on a
// loopback port until the benchmark ends.
func serve(b *testing.B, h http.Handler, untimed bool) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := listen.NewServer(ln.Addr().String(), h)
	if untimed {
		srv = &http.Server{Handler: h}
	}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// fastServer is a FastServer or a bare fasthttp.Server.
type fastServer interface {
	Serve(net.Listener) error
}

// serveFast serves srv on a loopback port until the benchmark ends (the
// listener closes; the server stays, as fasthttp's cannot restart).
func serveFast(b *testing.B, srv fastServer) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	b.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// groupcacheHits returns a handler that serves every key from one
// groupcache group transport.Holding value, as compare.sh's groupcache nodes do. Its
// group is created once per process: groupcache's registry is global.
var groupcacheHits = sync.OnceValue(func() func(*testing.B, []byte, string) http.Handler {
	var once sync.Once
	var h http.Handler
	return func(b *testing.B, value []byte, contentType string) http.Handler {
		once.Do(func() {
			g := groupcache.NewGroup("bench-hits", 64<<20, groupcache.GetterFunc(
				func(_ context.Context, _ string, dest groupcache.Sink) error { return dest.SetBytes(value) }))
			prefix := api.PublicPrefix + transport.TestGroup + "/"
			h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var v groupcache.ByteView
				if err := g.Get(r.Context(), strings.TrimPrefix(r.URL.Path, prefix), groupcache.ByteViewSink(&v)); err != nil {
					http.Error(w, err.Error(), http.StatusBadGateway)
					return
				}
				w.Header().Set("Content-Type", contentType)
				v.WriteTo(w)
			})
		})
		return h
	}
})()

// rawClient is one keep-alive HTTP/1.1 connection that sends the same GET
// again and again: a client cheaper than http.Client, so that the server's
// share of each exchange shows.
type rawClient struct {
	conn net.Conn
	br   *bufio.Reader
	req  []byte
	body []byte
}

func dialRaw(b *testing.B, addr, path string) *rawClient {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		b.Error(err)
		return nil
	}
	b.Cleanup(func() { conn.Close() })
	return &rawClient{
		conn: conn,
		br:   bufio.NewReader(conn),
		req:  []byte("GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n"),
	}
}

// get sends the request and checks that the transport.TestResponse is a 200 of want.
func (c *rawClient) get(want []byte) error {
	if c == nil {
		return fmt.Errorf("no connection")
	}
	if _, err := c.conn.Write(c.req); err != nil {
		return err
	}
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || res.ContentLength != int64(len(want)) {
		return fmt.Errorf("status %d, length %d", res.StatusCode, res.ContentLength)
	}
	if cap(c.body) < len(want) {
		c.body = make([]byte, len(want))
	}
	body := c.body[:len(want)]
	if _, err := io.ReadFull(res.Body, body); err != nil {
		return err
	}
	if !bytes.Equal(body, want) {
		return fmt.Errorf("wrong body %q", body[:min(len(body), 32)])
	}
	return nil
}
