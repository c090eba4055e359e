package transport

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"sync"
	"time"

	"github.com/ringcache/ringcache/internal/listen"
)

// Peer client tuning, measured by BenchmarkPeerFetch (deploy/bench/README.md).
const (
	peerKeepAlive   = 30 * time.Second
	peerIdleTimeout = listen.PeerIdleConnTimeout // below NewServer's IdleTimeout, so the client closes first
	peerBufferBytes = 4 << 10                    // net/http's default; 64 KiB cost more CPU per 1 KiB fetch
)

// newPeerTransport returns the transport of a Pool's client, one for every
// peer, so that keep-alive connections are shared and bounded per host
// rather than per peer object: a directTransport for http peers, over an
// http.Transport for the rest (https).
func newPeerTransport(cfg Config, dialer *net.Dialer) http.RoundTripper {
	return &directTransport{
		dial:        dialer.DialContext,
		maxIdle:     cfg.MaxIdleConnsPerHost,
		idleTimeout: peerIdleTimeout,
		other:       newHTTPTransport(cfg, dialer),
	}
}

// newHTTPTransport returns net/http's transport with the peer client's
// settings.
func newHTTPTransport(cfg Config, dialer *net.Dialer) *http.Transport {
	return &http.Transport{
		Proxy:               nil, // peers are reached directly, never through HTTP_PROXY
		DialContext:         dialer.DialContext,
		MaxIdleConns:        0, // no global cap; the per-host cap bounds it
		MaxIdleConnsPerHost: cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:     peerIdleTimeout,
		// Values are opaque bytes, often already compressed: do not ask for
		// gzip and spend CPU on both ends.
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
		WriteBufferSize:       peerBufferBytes,
		ReadBufferSize:        peerBufferBytes,
	}
}

// directTransport is an HTTP/1.1 client for plain-http peers that runs each
// exchange on the caller's goroutine: it writes the request on a pooled
// keep-alive connection and reads the response from it, where net/http's
// Transport hands every request to a writer goroutine and every response
// back from a reader goroutine (four handoffs an exchange, each a wakeup on
// a busy machine). It speaks plain HTTP/1.1, so any peer, groupcache's
// included, understands it.
//
// A connection goes back to the pool only when its response body was read
// to the end (or to its Content-Length) and closed, the response did not
// ask to close it, and the request's context did not end: otherwise its
// state is unknown and it is closed. The request's context bounds the whole
// exchange, as a deadline on the connection and, when it ends earlier, by
// expiring that deadline at once. A request whose reused connection turns
// out to be closed by the peer before any byte of the response arrives is
// sent once more on a new connection, as net/http does, if it is
// idempotent (its method, or an Idempotency-Key header: every peer
// request is). The other idle connections to that peer go too: a peer
// that closed one has usually restarted, and closed them all.
//
// A directTransport is safe for concurrent use.
type directTransport struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int           // idle connections kept per host
	idleTimeout time.Duration // an idle connection older than this is closed, not used
	other       *http.Transport

	mu   sync.Mutex
	idle map[string][]*directConn // by host:port, most recently used last; guarded by mu
}

var _ http.RoundTripper = (*directTransport)(nil)

// directConn is one connection of a directTransport.
type directConn struct {
	conn  net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	nread int64     // bytes read from conn, to tell whether a response began
	since time.Time // when it went idle
}

func (c *directConn) Read(p []byte) (int, error) {
	n, err := c.conn.Read(p)
	c.nread += int64(n)
	return n, err
}

// RoundTrip sends req and returns the response, whose body the caller must
// close.
func (t *directTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" {
		return t.other.RoundTrip(req)
	}
	ctx := req.Context()
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	for retried := false; ; retried = true {
		// An idle connection is taken without the context's say, and the
		// watcher that ends an exchange with it (exchange) may start after
		// the request is written: a request whose context has ended is not
		// sent at all.
		if err := ctx.Err(); err != nil {
			closeRequestBody(req)
			return nil, err
		}
		c, reused, err := t.get(ctx, addr)
		if err != nil {
			closeRequestBody(req)
			return nil, err
		}
		res, began, err := t.exchange(ctx, c, addr, req)
		if err == nil {
			return res, nil
		}
		c.conn.Close()
		if err := contextError(ctx, err); err != nil {
			closeRequestBody(req)
			return nil, err
		}
		if !reused || began || retried || !idempotent(req) || (req.Body != nil && req.GetBody == nil) {
			closeRequestBody(req)
			return nil, err
		}
		t.dropIdle(addr)
		// The peer closed the idle connection just as we picked it. Send a
		// copy with a fresh body: RoundTrip must not modify req.
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			retry := *req
			retry.Body = body
			req = &retry
		}
	}
}

// exchange writes req on c and reads the response's head. began reports
// whether any byte of a response arrived.
func (t *directTransport) exchange(ctx context.Context, c *directConn, addr string, req *http.Request) (_ *http.Response, began bool, _ error) {
	before := c.nread
	if d, ok := ctx.Deadline(); ok {
		c.conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	err := req.Write(c.bw)
	if err == nil {
		err = c.bw.Flush()
	}
	keep := err == nil
	// A peer may answer before it has read the whole body (413 for a value
	// over its limit) and close the connection, which fails our write: its
	// answer is still the one to return, as net/http's Transport does.
	res, rerr := readResponse(ctx, c.br, req)
	if rerr != nil {
		stop()
		if err == nil {
			err = rerr
		}
		return nil, c.nread != before, err
	}
	res.Body = &directBody{t: t, c: c, addr: addr, body: res.Body, stop: stop,
		want: res.ContentLength, keep: keep && !res.Close && !req.Close}
	return res, true, nil
}

// max1xx bounds the informational responses read before the final one
// when nobody listens for them (net/http's limit).
const max1xx = 5

// readResponse reads the final response to req from br. Informational
// responses (1xx but 101) before it go to the request's
// httptrace.ClientTrace.Got1xxResponse, as net/http's Transport does; a
// peer may send them to show that it is working on a slow request.
func readResponse(ctx context.Context, br *bufio.Reader, req *http.Request) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(ctx)
	for n := 0; ; n++ {
		res, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, err
		}
		code := res.StatusCode
		if code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
			return res, nil
		}
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(res.Header)); err != nil {
				return nil, err
			}
		} else if n >= max1xx {
			return nil, errors.New("transport: too many 1xx informational responses")
		}
	}
}

// directBody is a response body that gives its connection back to the pool
// once it has been read to the end.
type directBody struct {
	t    *directTransport
	c    *directConn // nil once released
	addr string
	body io.ReadCloser
	stop func() bool // stops the context's AfterFunc; false if it ran
	want int64       // Content-Length, or -1
	read int64
	eof  bool
	keep bool // the response allows reuse
}

func (b *directBody) Read(p []byte) (int, error) {
	if b.c == nil {
		return 0, errors.New("transport: read on a closed response body")
	}
	n, err := b.body.Read(p)
	b.read += int64(n)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// Close releases the connection: back to the pool if the body was read to
// its end, else closed.
func (b *directBody) Close() error {
	c := b.c
	if c == nil {
		return nil
	}
	b.c = nil
	done := b.eof || (b.want >= 0 && b.read == b.want)
	if b.stop() && done && b.keep && c.br.Buffered() == 0 {
		c.conn.SetDeadline(time.Time{})
		b.t.put(b.addr, c)
		return nil
	}
	return c.conn.Close()
}

// get returns an idle connection to addr, or dials a new one.
func (t *directTransport) get(ctx context.Context, addr string) (c *directConn, reused bool, err error) {
	var stale []*directConn
	now := time.Now()
	t.mu.Lock()
	list := t.idle[addr]
	for len(list) > 0 && c == nil {
		last := list[len(list)-1]
		list = list[:len(list)-1]
		if now.Sub(last.since) > t.idleTimeout {
			stale = append(stale, last)
			continue
		}
		c = last
	}
	if t.idle != nil {
		t.idle[addr] = list
	}
	t.mu.Unlock()
	for _, s := range stale {
		s.conn.Close()
	}
	if c != nil {
		return c, true, nil
	}
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	c = &directConn{conn: nc}
	c.br = bufio.NewReaderSize(c, peerBufferBytes)
	c.bw = bufio.NewWriterSize(nc, peerBufferBytes)
	return c, false, nil
}

// put keeps c for reuse, or closes it when addr has maxIdle idle already.
func (t *directTransport) put(addr string, c *directConn) {
	c.since = time.Now()
	t.mu.Lock()
	if t.idle == nil {
		t.idle = make(map[string][]*directConn)
	}
	if len(t.idle[addr]) < t.maxIdle {
		t.idle[addr] = append(t.idle[addr], c)
		c = nil
	}
	t.mu.Unlock()
	if c != nil {
		c.conn.Close()
	}
}

// CloseIdleConnections closes the idle connections; http.Client's method of
// the same name calls it.
func (t *directTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.conn.Close()
		}
	}
	t.other.CloseIdleConnections()
}

// contextError returns the context's error if the exchange failed because
// ctx ended: the connection's deadline, which is ctx's, can expire a moment
// before ctx reports it.
func contextError(ctx context.Context, err error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return nil
}

// idempotent reports whether req may be sent again, by net/http's rule.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
		return true
	}
	_, key := req.Header[hdrIdempotencyKey]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// dropIdle closes the idle connections to addr.
func (t *directTransport) dropIdle(addr string) {
	t.mu.Lock()
	list := t.idle[addr]
	delete(t.idle, addr)
	t.mu.Unlock()
	for _, c := range list {
		c.conn.Close()
	}
}

func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
