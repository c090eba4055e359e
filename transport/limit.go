package transport

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxConns is the daemon's cap on each listener's open connections:
// well below a typical file-descriptor limit, well above what peers (up to
// MaxIdleConnsPerHost each) and clients with keep-alive pools need.
const DefaultMaxConns = 4096

// LimitListener caps the connections a listener has open at once. Unlike
// golang.org/x/net/netutil.LimitListener, which stops accepting at the cap
// and so leaves new connections queued in the kernel for as long as the
// old ones live, it goes on accepting and refuses every connection beyond
// the cap at once: with a short HTTP 503 (Connection: close, Retry-After)
// when the listener serves plain HTTP, else by closing it. A client over
// the cap learns so in one round trip, and a flood of connections cannot
// make the ones already open wait.
//
// A LimitListener is safe for concurrent use.
type LimitListener struct {
	net.Listener
	max     int64
	reply   []byte // written to a refused connection; nil: just close it
	open    atomic.Int64
	refused atomic.Uint64
}

// refuseWriteTimeout bounds writing the 503 to a refused connection. The
// reply fits in any socket's send buffer, so the write does not wait in
// practice; the deadline only guarantees that Accept never does.
const refuseWriteTimeout = 50 * time.Millisecond

// NewLimitListener returns ln capped at max open connections (max > 0).
// With plainHTTP, a refused connection gets a 503 before it is closed; give
// false for a listener whose connections speak TLS, where plain bytes would
// be noise.
func NewLimitListener(ln net.Listener, max int, plainHTTP bool) (*LimitListener, error) {
	if max <= 0 {
		return nil, fmt.Errorf("%w: connection limit %d: must be > 0", ErrConfig, max)
	}
	l := &LimitListener{Listener: ln, max: int64(max)}
	if plainHTTP {
		const body = "too many connections\n"
		l.reply = []byte("HTTP/1.1 503 Service Unavailable\r\n" +
			"Content-Type: text/plain; charset=utf-8\r\n" +
			"Connection: close\r\nRetry-After: 1\r\n" +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	}
	return l, nil
}

// Accept returns the next connection under the cap, refusing those beyond
// it on the way.
func (l *LimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		l.refused.Add(1)
		if l.reply != nil {
			c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
			c.Write(l.reply) // best effort: the close below is the refusal
		}
		c.Close()
	}
}

// Open returns the number of accepted connections not yet closed.
func (l *LimitListener) Open() int { return int(l.open.Load()) }

// Refused returns how many connections were refused at the cap.
func (l *LimitListener) Refused() uint64 { return l.refused.Load() }

// Max returns the cap.
func (l *LimitListener) Max() int { return int(l.max) }

// limitedConn gives its slot back when it is closed, once.
type limitedConn struct {
	net.Conn
	l    *LimitListener
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// CloseWrite half-closes a TCP connection, which net/http does before
// closing one after an error response, so that the client reads the
// response before the close resets the connection.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ClientLimitConfig bounds, per client address, the public requests that
// miss the cache and may so reach the origin (through the key's owner). A
// zero field sets no bound of its kind.
type ClientLimitConfig struct {
	// MaxMisses is how many such requests one client may have in flight.
	MaxMisses int
	// MissRate is how many such requests per second one client may start,
	// on average, with bursts of MissBurst.
	MissRate float64
	// MissBurst is the bucket size of MissRate. If zero, 2 × MissRate
	// (at least 1).
	MissBurst int
}

// DefaultClientLimits are the daemon's per-client bounds: far above what
// one application instance warming its keys needs, far below what would let
// one client make an owner load thousands of distinct keys per second.
var DefaultClientLimits = ClientLimitConfig{MaxMisses: 32, MissRate: 500, MissBurst: 1000}

// ClientLimiter enforces a ClientLimitConfig. A client is its IP address;
// an IPv6 client is its /64, the block one host usually holds, so that
// walking through one's own addresses does not multiply the allowance. It
// trusts no forwarding header: behind a proxy, every client is the proxy.
//
// It remembers a client while it has misses in flight or its bucket is
// refilling (at most MissBurst / MissRate seconds), so its memory follows
// the number of recently active clients.
//
// A ClientLimiter is safe for concurrent use.
type ClientLimiter struct {
	cfg     ClientLimitConfig
	mu      sync.Mutex
	clients map[netip.Prefix]*clientState
	sweepAt int // sweep idle clients when the map reaches this size
}

type clientState struct {
	inflight int
	tokens   float64   // of the rate bucket, as of at
	at       time.Time // when tokens was last brought up to date
}

// minSweep is the map size below which idle clients are not swept.
const minSweep = 1024

// NewClientLimiter validates cfg and returns a limiter enforcing it.
func NewClientLimiter(cfg ClientLimitConfig) (*ClientLimiter, error) {
	if cfg.MaxMisses < 0 || cfg.MissRate < 0 || cfg.MissBurst < 0 {
		return nil, fmt.Errorf("%w: client limits %+v: must not be negative", ErrConfig, cfg)
	}
	if cfg.MissRate > 0 && cfg.MissBurst == 0 {
		cfg.MissBurst = max(1, int(2*cfg.MissRate))
	}
	return &ClientLimiter{cfg: cfg, clients: map[netip.Prefix]*clientState{}, sweepAt: minSweep}, nil
}

// Config returns the limits with defaults applied.
func (l *ClientLimiter) Config() ClientLimitConfig { return l.cfg }

// Acquire admits one miss from the client at remoteAddr (an
// http.Request.RemoteAddr) and returns the function that ends it, or
// ErrTooManyRequests when the client is over a bound. An address that does
// not parse is one client of its own text.
func (l *ClientLimiter) Acquire(remoteAddr string) (release func(), err error) {
	key := clientKey(remoteAddr)
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.clients[key]
	if !ok {
		if len(l.clients) >= l.sweepAt {
			l.sweep(now)
		}
		c = &clientState{tokens: float64(l.cfg.MissBurst), at: now}
		l.clients[key] = c
	}
	if l.cfg.MaxMisses > 0 && c.inflight >= l.cfg.MaxMisses {
		return nil, fmt.Errorf("%w: %d in flight", ErrTooManyRequests, c.inflight)
	}
	if l.cfg.MissRate > 0 {
		l.refill(c, now)
		if c.tokens < 1 {
			return nil, fmt.Errorf("%w: over %g per second", ErrTooManyRequests, l.cfg.MissRate)
		}
		c.tokens--
	}
	c.inflight++
	var once sync.Once
	return func() { once.Do(func() { l.release(key, c) }) }, nil
}

func (l *ClientLimiter) release(key netip.Prefix, c *clientState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c.inflight--
	if c.inflight == 0 && l.cfg.MissRate == 0 {
		delete(l.clients, key) // nothing to remember about an idle client
	}
}

// refill brings c's bucket up to now.
func (l *ClientLimiter) refill(c *clientState, now time.Time) {
	c.tokens = min(float64(l.cfg.MissBurst), c.tokens+now.Sub(c.at).Seconds()*l.cfg.MissRate)
	c.at = now
}

// sweep forgets the clients with nothing in flight and a full bucket, and
// sets the next sweep at twice the size left, so that sweeping costs O(1)
// per new client however many are active.
func (l *ClientLimiter) sweep(now time.Time) {
	for k, c := range l.clients {
		if c.inflight > 0 {
			continue
		}
		if l.cfg.MissRate > 0 {
			l.refill(c, now)
			if c.tokens < float64(l.cfg.MissBurst) {
				continue
			}
		}
		delete(l.clients, k)
	}
	l.sweepAt = max(minSweep, 2*len(l.clients))
}

// clients returns the number of clients remembered, for tests.
func (l *ClientLimiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}

// clientKey returns the client a remote address belongs to: its IPv4
// address, or its IPv6 /64.
func clientKey(remoteAddr string) netip.Prefix {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		// Not ip:port (net/http gives ip:port for every TCP client): key
		// it by its first 16 bytes.
		var b [16]byte
		copy(b[:], remoteAddr)
		return netip.PrefixFrom(netip.AddrFrom16(b), 128)
	}
	a := ap.Addr().Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}
