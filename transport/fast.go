package transport

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
)

// FastConfig configures a FastServer. Zero durations take NewServer's.
type FastConfig struct {
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

// DefaultFastMaxHeaderBytes is FastConfig.MaxHeaderBytes' default.
const DefaultFastMaxHeaderBytes = 16 << 10

// bodyMargin is how far past FastConfig.MaxBodyBytes a body is still read:
// net/http's server reads that much of a body its handler refused before
// it closes the connection, so that the client reads the refusal.
const bodyMargin = 256 << 10

// FastServer serves a node's public API over HTTP/1.1 with
// github.com/valyala/fasthttp, which spends less CPU per request than
// net/http's server: no goroutine hand-off to watch the connection, no
// header map per request. A GET or HEAD of a value (or a remembered
// not-found) that the node's caches hold (cache.Group.GetCached) is
// answered by the fast path, with the headers and body the Handler would
// send, after the same token check. Every other request — writes, misses,
// errors, conditional requests, paths that need cleaning or unescaping,
// reads refused for their token, and every route outside /cache/ — goes
// to FastConfig.Handler through fasthttpadaptor, which runs it as net/http
// would, its body read whole first. It serves plain HTTP/1.1 only: a TLS
// listener (for HTTP/2) stays on net/http (NewServer).
type FastServer struct {
	node   *Node
	log    *slog.Logger
	slow   fasthttp.RequestHandler
	srv    fasthttp.Server
	closed atomic.Bool
}

// NewFastServer returns a FastServer of the node's public API. Add it to
// the node (AddServer) for Shutdown to stop it.
func (n *Node) NewFastServer(cfg FastConfig) (*FastServer, error) {
	if cfg.Handler == nil {
		return nil, fmt.Errorf("%w: FastConfig.Handler is nil", ErrConfig)
	}
	if cfg.MaxHeaderBytes < 0 || cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("%w: FastConfig.MaxHeaderBytes %d or MaxBodyBytes %d < 0", ErrConfig, cfg.MaxHeaderBytes, cfg.MaxBodyBytes)
	}
	if min(cfg.ReadHeaderTimeout, cfg.ReadTimeout, cfg.WriteTimeout, cfg.IdleTimeout) < 0 {
		return nil, fmt.Errorf("%w: FastConfig has a negative timeout", ErrConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	readTimeout := cmp.Or(cfg.ReadTimeout, ServerReadTimeout)
	h := cfg.Handler
	slow := fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, ownRequest(r))
	}))
	s := &FastServer{node: n, log: log, slow: func(ctx *fasthttp.RequestCtx) {
		// The adaptor answers a target net/url refuses with a 500; net/http
		// answers 400 before any handler runs.
		if _, err := url.ParseRequestURI(string(ctx.RequestURI())); err != nil {
			fastError(ctx, err)
			return
		}
		slow(ctx)
	}}
	s.srv = fasthttp.Server{
		Handler: s.serve,
		// fasthttp's ReadTimeout runs from a request's first byte; once
		// the headers are in, a body gets ReadTimeout of its own.
		ReadTimeout: cmp.Or(cfg.ReadHeaderTimeout, ServerReadHeaderTimeout),
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			if h.ContentLength() == 0 {
				return fasthttp.RequestConfig{}
			}
			return fasthttp.RequestConfig{ReadTimeout: readTimeout}
		},
		WriteTimeout:          cmp.Or(cfg.WriteTimeout, ServerWriteTimeout),
		IdleTimeout:           cmp.Or(cfg.IdleTimeout, ServerIdleTimeout),
		ReadBufferSize:        cmp.Or(cfg.MaxHeaderBytes, DefaultFastMaxHeaderBytes),
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
func (s *FastServer) Serve(ln net.Listener) error {
	err := s.srv.Serve(ln)
	if s.closed.Load() {
		return http.ErrServerClosed
	}
	return err
}

// Shutdown stops accepting connections, closes the idle ones and waits for
// the requests in flight, within ctx.
func (s *FastServer) Shutdown(ctx context.Context) error {
	s.closed.Store(true)
	return s.srv.ShutdownWithContext(ctx)
}

// Close stops accepting connections and closes the idle ones without
// waiting; a connection busy with a request is closed when it ends.
func (s *FastServer) Close() error {
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
// an origin's records, a header value in a log line. Its context is
// detached from the server's: fasthttp ends it at Shutdown, whereas
// net/http ends it only when the client leaves (which fasthttp does not
// report), and a request in flight at Shutdown must be finished, not
// cancelled. Reading the body copies it.
func ownRequest(r *http.Request) *http.Request {
	c := r.WithContext(context.WithoutCancel(r.Context()))
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

func (s *FastServer) serve(ctx *fasthttp.RequestCtx) {
	s.node.requests.Add()
	defer s.node.requests.Done()
	// fasthttp lets a handler's panic end the process; net/http logs it and
	// closes the connection, and so does this. (The slow path's handler
	// runs under the adaptor's recover, which answers 500.)
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("transport: fast server: handler panicked", "panic", r, "stack", string(debug.Stack()))
			ctx.Error(http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			ctx.SetConnectionClose()
		}
	}()
	if !s.hit(ctx) {
		s.slow(ctx)
	}
}

// hit answers a GET or HEAD of a cached value, as Handler.writeValue
// would, and reports whether it did. It leaves every other request to the
// slow path untouched.
func (s *FastServer) hit(ctx *fasthttp.RequestCtx) bool {
	head := ctx.IsHead()
	if !head && !ctx.IsGet() {
		return false
	}
	rh := &ctx.Request.Header
	api := s.node.api
	if len(rh.Peek("If-None-Match")) > 0 {
		return false
	}
	// A read that needs a token and lacks a valid one goes the slow way,
	// which answers 401 with its challenge. Open reads skip the header's
	// lookup, which costs a hit a measurable share.
	if !api.cfg.Auth.readsOpen() && api.cfg.Auth.checkRead(string(rh.Peek("Authorization"))) != nil {
		return false
	}
	p := plainPath(rh.RequestURI())
	if p == nil {
		return false
	}
	group, key, ok := routePath(string(p))
	if !ok || checkKey(key, api.cfg.MaxKeyBytes) != nil {
		return false
	}
	g, ok := api.node.Group(group)
	if !ok {
		return false
	}
	v, ok, err := g.GetCached(key)
	if !ok {
		return false
	}
	if err != nil { // a remembered not-found, counted already
		fastStatus(ctx, err)
		return true
	}

	var buf [80]byte
	b, tagEnd, lenEnd, expires := api.appendHead(buf[:0], v)
	wh := &ctx.Response.Header
	wh.SetCanonical(hdrNameETag, b[:tagEnd])
	switch {
	case v.NoStore:
		wh.SetCanonical(hdrNameCacheControl, hdrNoStoreValue)
	case v.Stale:
		wh.SetCanonical(hdrNameCacheControl, hdrMaxAgeZero)
		wh.SetCanonical(hdrNameAge, strconv.AppendInt(b[len(b):], int64(v.Age/time.Second), 10))
	case expires:
		wh.SetCanonical(hdrNameCacheControl, b[lenEnd:])
	}
	if v.ContentType == "" {
		wh.SetContentTypeBytes(hdrOctetStream)
	} else {
		wh.SetContentType(v.ContentType)
	}
	wh.SetCanonical(hdrNameNoSniff, hdrNoSniffValue)
	if head {
		ctx.Response.SkipBody = true
		wh.SetContentLength(len(v.Data))
		return true
	}
	// The body is the cache's own bytes, never written again.
	ctx.Response.SetBodyRaw(v.Data)
	return true
}

// The fast path's header names and fixed values, in the bytes fasthttp
// copies from.
var (
	hdrNameETag         = []byte("Etag")
	hdrNameCacheControl = []byte("Cache-Control")
	hdrNameAge          = []byte("Age")
	hdrNameNoSniff      = []byte("X-Content-Type-Options")
	hdrNoSniffValue     = []byte(noSniff[0])
	hdrNoStoreValue     = []byte(noStore[0])
	hdrMaxAgeZero       = []byte(maxAgeZero[0])
	hdrOctetStream      = []byte(octetStream[0])
	hdrTextPlain        = []byte("text/plain; charset=utf-8") // http.Error's
)

// plainPath returns the path of a request target when it is in origin form
// and holds only bytes that net/url leaves as they are, so that it is the
// URL's EscapedPath, as Handler routes it: letters, digits, "-._~", the
// sub-delimiters, ":", "@", "/" and well-formed percent escapes. Otherwise it
// returns nil and the request goes the slow way, through net/url.
func plainPath(uri []byte) []byte {
	if len(uri) == 0 || uri[0] != '/' {
		return nil
	}
	for i := 0; i < len(uri); i++ {
		c := uri[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '?':
			return uri[:i]
		case c == '%':
			if i+2 >= len(uri) || !isHex(uri[i+1]) || !isHex(uri[i+2]) {
				return nil
			}
			i += 2
		default:
			switch c {
			case '-', '.', '_', '~', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@', '/':
			default:
				return nil
			}
		}
	}
	return uri
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

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

// fastStatus answers err, a remembered not-found (the one error
// GetCached returns), as writeError does on net/http: its status, and its
// short text with http.Error's headers.
func fastStatus(ctx *fasthttp.RequestCtx, err error) {
	code := StatusOf(err)
	ctx.Response.Reset()
	ctx.SetStatusCode(code)
	ctx.Response.Header.SetContentTypeBytes(hdrTextPlain)
	ctx.Response.Header.SetCanonical(hdrNameNoSniff, hdrNoSniffValue)
	ctx.SetBodyString(errorText(err, code) + "\n")
}

// fastLogger is fasthttp's logger on slog, at debug: what fasthttp logs is
// a connection that sent no valid request, which a client chooses to do
// (and could flood the logs with), as net/http's server does not log.
type fastLogger struct{ log *slog.Logger }

func (l fastLogger) Printf(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("transport: fast server: " + fmt.Sprintf(format, args...))
	}
}
