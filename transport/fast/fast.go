// Package fast serves a transport.Node's public API with
// github.com/valyala/fasthttp: a daemon that wants its CPU savings imports
// it; an embedder that does not never compiles fasthttp. Its tests are in
// transport's directory (package transport_test), beside the cluster
// helpers they share with transport's own.
package fast

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/listen"
	"github.com/ringcache/ringcache/transport"
)

// Config configures a Server. Zero durations take NewServer's.
type Config struct {
	// Handler serves every request that the fast path leaves: the node's
	// PublicHandler, or a handler that sends the public API to it (and
	// serves other routes, such as the operator's, itself). Required.
	Handler http.Handler
	// ReadHeaderTimeout bounds the arrival of a request's line and headers,
	// from its first byte (against slowloris); ReadTimeout the arrival of
	// its body after them.
	ReadHeaderTimeout, ReadTimeout time.Duration
	WriteTimeout, IdleTimeout      time.Duration
	// MaxHeaderBytes bounds a request's line and headers (431 above it).
	// Each connection holds a read buffer of this size. If zero, 16 KiB.
	MaxHeaderBytes int
	// MaxBodyBytes is the largest body Handler accepts: give the largest
	// of the groups' MaxValueBytes. If zero, cache.DefaultMaxValueBytes. A
	// body is read whole before Handler runs, up to MaxBodyBytes plus
	// 256 KiB, so that a body just over a group's limit gets the
	// Handler's 413; a larger one gets fasthttp's 413 and the connection
	// is closed, which a client still sending it may see as a reset, as
	// net/http's server does past the same 256 KiB.
	MaxBodyBytes int
	// Logger receives what the server could not serve, such as a
	// connection it failed to read. If nil, logs are discarded.
	Logger *slog.Logger
}

// DefaultMaxHeaderBytes is Config.MaxHeaderBytes' default.
const DefaultMaxHeaderBytes = 16 << 10

// bodyMargin is how far past Config.MaxBodyBytes a body is still read:
// net/http's server reads that much of a body its handler refused before
// it closes the connection, so that the client reads the refusal.
const bodyMargin = 256 << 10

// Server serves a node's public API over HTTP/1.1 with
// github.com/valyala/fasthttp, which spends less CPU per request than
// net/http's server: no goroutine hand-off to watch the connection, no
// header map per request. A GET or HEAD of a value (or a remembered
// not-found) that the node's caches hold (cache.Group.GetCached) is
// answered by the fast path, with the headers and body the Handler would
// send, after the same token check. Every other request — writes, misses,
// errors, conditional requests, paths that need cleaning or unescaping,
// reads refused for their token, and every route outside /cache/ — goes
// to Config.Handler through fasthttpadaptor, which runs it as net/http
// would, its body read whole first. It serves plain HTTP/1.1 only: a TLS
// listener (for HTTP/2) stays on net/http (NewServer).
type Server struct {
	node   *transport.Node
	log    *slog.Logger
	slow   fasthttp.RequestHandler
	srv    fasthttp.Server
	closed atomic.Bool
}

// New returns a Server of n's public API. Add it to the node
// (Node.AddServer) for Shutdown to stop it.
func New(n *transport.Node, cfg Config) (*Server, error) {
	if cfg.Handler == nil {
		return nil, fmt.Errorf("%w: Config.Handler is nil", transport.ErrConfig)
	}
	if cfg.MaxHeaderBytes < 0 || cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("%w: Config.MaxHeaderBytes %d or MaxBodyBytes %d < 0", transport.ErrConfig, cfg.MaxHeaderBytes, cfg.MaxBodyBytes)
	}
	if min(cfg.ReadHeaderTimeout, cfg.ReadTimeout, cfg.WriteTimeout, cfg.IdleTimeout) < 0 {
		return nil, fmt.Errorf("%w: Config has a negative timeout", transport.ErrConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	readTimeout := cmp.Or(cfg.ReadTimeout, listen.ServerReadTimeout)
	h := cfg.Handler
	slow := fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, ownRequest(r))
	}))
	s := &Server{node: n, log: log, slow: func(ctx *fasthttp.RequestCtx) {
		// The adaptor answers a target net/url refuses with a 500; net/http
		// answers 400 before any handler runs.
		if _, err := url.ParseRequestURI(string(ctx.RequestURI())); err != nil {
			fastError(ctx, err)
			return
		}
		slow(ctx)
	}}
	s.srv = fasthttp.Server{
		Handler: s.ServeFastHTTP,
		// fasthttp's ReadTimeout runs from a request's first byte; once
		// the headers are in, a body gets ReadTimeout of its own.
		ReadTimeout: cmp.Or(cfg.ReadHeaderTimeout, listen.ServerReadHeaderTimeout),
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			if h.ContentLength() == 0 {
				return fasthttp.RequestConfig{}
			}
			return fasthttp.RequestConfig{ReadTimeout: readTimeout}
		},
		WriteTimeout:          cmp.Or(cfg.WriteTimeout, listen.ServerWriteTimeout),
		IdleTimeout:           cmp.Or(cfg.IdleTimeout, listen.ServerIdleTimeout),
		ReadBufferSize:        cmp.Or(cfg.MaxHeaderBytes, DefaultMaxHeaderBytes),
		MaxRequestBodySize:    cmp.Or(cfg.MaxBodyBytes, cache.DefaultMaxValueBytes) + bodyMargin,
		NoDefaultServerHeader: true,
		LazyRequestTime:       true, // nothing reads RequestCtx.Time: no clock read for it per request
		NoDefaultContentType:  true, // as net/http, a 204 has none
		CloseOnShutdown:       true,
		SecureErrorLogMessage: true, // no request bytes in the logs
		ErrorHandler:          fastError,
		Logger:                fastLogger{log},
	}
	return s, nil
}

// Serve serves ln until Shutdown, and then returns http.ErrServerClosed, as
// http.Server.Serve does.
func (s *Server) Serve(ln net.Listener) error {
	err := s.srv.Serve(ln)
	if s.closed.Load() {
		return http.ErrServerClosed
	}
	return err
}

// Shutdown stops accepting connections, closes the idle ones and waits for
// the requests in flight, within ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closed.Store(true)
	return s.srv.ShutdownWithContext(ctx)
}

// Close stops accepting connections and closes the idle ones without
// waiting; a connection busy with a request is closed when it ends.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// ownRequest returns a copy of r, as fasthttpadaptor made it, that a
// handler may keep parts of. The adaptor's strings (method, target, host,
// header names and values) alias the connection's buffers, which fasthttp
// reuses for the next request once this one is answered; but a handler
// keeps some beyond that: a key in a load that outlives the request or in
// an origin's records, a header value in a log line. Its context is not
// the adaptor's, which is the *fasthttp.RequestCtx itself: fasthttp ends it
// at Shutdown, whereas net/http ends it only when the client leaves (which
// fasthttp does not report), and a request in flight at Shutdown must be
// finished, not cancelled; and fasthttp reuses it for the next request,
// while a load that outlives this one still asks its context for values
// (a dial does): a race on the RequestCtx under the race detector, and a
// read of another request's values without it. Nothing of ours reads a
// value from it. Reading the body copies it.
func ownRequest(r *http.Request) *http.Request {
	c := r.WithContext(context.Background())
	c.Method = strings.Clone(r.Method)
	c.Proto = strings.Clone(r.Proto)
	c.Host = strings.Clone(r.Host)
	c.RequestURI = strings.Clone(r.RequestURI)
	if u, err := url.ParseRequestURI(c.RequestURI); err == nil {
		c.URL = u // as the adaptor parsed it, from the copy
	}
	c.Header = make(http.Header, len(r.Header))
	for k, vs := range r.Header {
		owned := make([]string, len(vs))
		for i, v := range vs {
			owned[i] = strings.Clone(v)
		}
		c.Header[strings.Clone(k)] = owned
	}
	if r.TransferEncoding != nil {
		c.TransferEncoding = make([]string, len(r.TransferEncoding))
		for i, v := range r.TransferEncoding {
			c.TransferEncoding[i] = strings.Clone(v)
		}
	}
	return c
}

// ServeFastHTTP serves one request: a fasthttp.RequestHandler, for a
// fasthttp server of the caller's own.
func (s *Server) ServeFastHTTP(ctx *fasthttp.RequestCtx) {
	s.node.BeginRequest()
	defer s.node.EndRequest()
	// fasthttp lets a handler's panic end the process; net/http logs it and
	// closes the connection, and so does this. (The slow path's handler
	// runs under the adaptor's recover, which answers 500.)
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("fast server: handler panicked", "panic", r, "stack", string(debug.Stack()))
			ctx.Error(http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			ctx.SetConnectionClose()
		}
	}()
	if !s.hit(ctx) {
		s.slow(ctx)
	}
}

// hit answers a GET or HEAD of a cached value, as the node's Handler
// would (transport.Node.CachedHit), and reports whether it did. It leaves
// every other request to the slow path untouched.
func (s *Server) hit(ctx *fasthttp.RequestCtx) bool {
	head := ctx.IsHead()
	if !head && !ctx.IsGet() {
		return false
	}
	rh := &ctx.Request.Header
	if len(rh.Peek("If-None-Match")) > 0 {
		return false
	}
	var buf [80]byte
	h, body, ok := s.node.CachedHit(rh.RequestURI(), func() string { return string(rh.Peek("Authorization")) }, buf[:0])
	if !ok {
		return false
	}
	wh := &ctx.Response.Header
	if h.Status != http.StatusOK { // a remembered not-found
		ctx.Response.Reset()
		ctx.SetStatusCode(h.Status)
		ctx.Response.Header.SetContentTypeBytes(hdrTextPlain)
		wh.SetCanonical(hdrNameNoSniff, hdrNoSniffValue)
		ctx.SetBody(body)
		return true
	}
	wh.SetCanonical(hdrNameETag, h.ETag)
	if h.CacheControl != nil {
		wh.SetCanonical(hdrNameCacheControl, h.CacheControl)
	}
	if h.Age != nil {
		wh.SetCanonical(hdrNameAge, h.Age)
	}
	wh.SetContentType(h.ContentType)
	wh.SetCanonical(hdrNameNoSniff, hdrNoSniffValue)
	if head {
		ctx.Response.SkipBody = true
		wh.SetContentLength(len(body))
		return true
	}
	// The body is the cache's own bytes, never written again.
	ctx.Response.SetBodyRaw(body)
	return true
}

// The fast path's header names and fixed values, in the bytes fasthttp
// copies from.
var (
	hdrNameETag         = []byte("Etag")
	hdrNameCacheControl = []byte("Cache-Control")
	hdrNameAge          = []byte("Age")
	hdrNameNoSniff      = []byte("X-Content-Type-Options")
	hdrNoSniffValue     = []byte("nosniff")
	hdrTextPlain        = []byte("text/plain; charset=utf-8") // http.Error's
)

// fastError answers a request fasthttp could not read, as net/http's server
// would: a status and its text.
func fastError(ctx *fasthttp.RequestCtx, err error) {
	code := http.StatusBadRequest
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		code = http.StatusRequestHeaderFieldsTooLarge
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		code = http.StatusRequestEntityTooLarge
	case errors.As(err, &ne) && ne.Timeout():
		code = http.StatusRequestTimeout
	}
	ctx.Error(strconv.Itoa(code)+" "+http.StatusText(code), code) // resets the response
	ctx.SetConnectionClose()
}

// fastLogger is fasthttp's logger on slog, at debug: what fasthttp logs is
// a connection that sent no valid request, which a client chooses to do
// (and could flood the logs with), as net/http's server does not log.
type fastLogger struct{ log *slog.Logger }

func (l fastLogger) Printf(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("fast server: " + fmt.Sprintf(format, args...))
	}
}
