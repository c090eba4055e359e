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

// LimitConfig bounds the connections a LimitListener keeps open.
type LimitConfig struct {
	// Max is how many connections the listener may have open at once; it
	// must be > 0.
	Max int
	// MaxPerClient is how many of them one client may have: an IPv4
	// address or an IPv6 /64, the client a ClientLimiter counts. If zero or
	// negative, no per-client cap: one address is often a whole
	// application (a connection pool, a reverse proxy, a NAT, a
	// Kubernetes node), and everything behind it shares the cap, a peer's
	// pool included when peers reach this listener. Set it on a listener
	// that faces clients you do not run, at several times the connections
	// one of your own instances opens (and at least
	// DefaultMaxIdleConnsPerHost where peers share the listener).
	MaxPerClient int
	// PlainHTTP makes a refused connection get a 503 before it is closed.
	// Leave it false for a listener whose connections speak TLS, where
	// plain bytes would be noise.
	PlainHTTP bool
}

// LimitListener caps the connections a listener has open at once, in all
// and per client address. Unlike golang.org/x/net/netutil.LimitListener,
// which stops accepting at the cap and so leaves new connections queued in
// the kernel for as long as the old ones live, it goes on accepting and
// refuses every connection beyond a cap at once: with a short HTTP 503
// (Connection: close, Retry-After) when the listener serves plain HTTP,
// else by closing it. A client over a cap learns so in one round trip, a
// flood of connections cannot make the ones already open wait, and one
// address cannot take more than its share of the listener.
//
// A LimitListener is safe for concurrent use.
type LimitListener struct {
	net.Listener
	max     int64
	clients *ClientLimiter // a connection is a miss in flight; nil: no per-client cap
	perCli  int
	reply   []byte // written to a refused connection; nil: just close it
	open    atomic.Int64
	refused atomic.Uint64 // at the listener's cap
	overCli atomic.Uint64 // at the per-client cap
}

// refuseWriteTimeout bounds writing the 503 to a refused connection. The
// reply fits in any socket's send buffer, so the write does not wait in
// practice; the deadline only guarantees that Accept never does.
const refuseWriteTimeout = 50 * time.Millisecond

// Validate reports whether NewLimitListener would accept c: nil, or a
// *ConfigError naming the field at fault. A program that binds its
// listeners late checks its limits with it before it starts.
func (c LimitConfig) Validate() error {
	if c.Max <= 0 {
		return fieldError("Max", "%d: must be > 0", c.Max)
	}
	return nil
}

// NewLimitListener returns ln capped as cfg says.
func NewLimitListener(ln net.Listener, cfg LimitConfig) (*LimitListener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &LimitListener{Listener: ln, max: int64(cfg.Max), perCli: cfg.MaxPerClient}
	if l.perCli > 0 {
		// The miss limiter's in-flight count is exactly a count of open
		// connections per client, with the same notion of a client; without
		// a rate it forgets a client when its last connection closes.
		var err error
		if l.clients, err = NewClientLimiter(ClientLimitConfig{MaxMisses: l.perCli}); err != nil {
			return nil, err
		}
	} else {
		l.perCli = 0
	}
	if cfg.PlainHTTP {
		const body = "too many connections\n"
		l.reply = []byte("HTTP/1.1 503 Service Unavailable\r\n" +
			"Content-Type: text/plain; charset=utf-8\r\n" +
			"Connection: close\r\nRetry-After: 1\r\n" +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	}
	return l, nil
}

// Accept returns the next connection under the caps, refusing those beyond
// them on the way. The per-client cap is checked first, so that a client
// over its share is refused as such whatever the listener's state.
func (l *LimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		var release func()
		if l.clients != nil {
			addr := ""
			if a := c.RemoteAddr(); a != nil {
				addr = a.String()
			}
			if release, err = l.clients.Acquire(addr); err != nil {
				l.refuse(c, &l.overCli)
				continue
			}
		}
		if l.open.Add(1) <= l.max {
			return &limitedConn{Conn: c, l: l, release: release}, nil
		}
		l.open.Add(-1)
		if release != nil {
			release()
		}
		l.refuse(c, &l.refused)
	}
}

// refuse counts c on count and closes it, after the 503 on plain HTTP.
func (l *LimitListener) refuse(c net.Conn, count *atomic.Uint64) {
	count.Add(1)
	if l.reply != nil {
		c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
		c.Write(l.reply) // best effort: the close below is the refusal
	}
	c.Close()
}

// Open returns the number of accepted connections not yet closed.
func (l *LimitListener) Open() int { return int(l.open.Load()) }

// Refused returns how many connections were refused at the listener's cap.
func (l *LimitListener) Refused() uint64 { return l.refused.Load() }

// ClientRefused returns how many connections were refused at the
// per-client cap.
func (l *LimitListener) ClientRefused() uint64 { return l.overCli.Load() }

// Max returns the listener's cap.
func (l *LimitListener) Max() int { return int(l.max) }

// MaxPerClient returns the per-client cap, 0 for none.
func (l *LimitListener) MaxPerClient() int { return l.perCli }

// limitedConn gives its slots back when it is closed, once.
type limitedConn struct {
	net.Conn
	l       *LimitListener
	release func() // the client's slot; nil without a per-client cap
	once    sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		if c.release != nil {
			c.release()
		}
	})
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
// zero field sets no bound of its kind, and the zero config none at all.
//
// No bound is the right default: a miss of a key that a peer owns counts
// as one even when the peer has the value, and one address is often a
// whole application, so a bound low enough to matter refuses legitimate
// traffic. What protects the origin is each group's load bound
// (cache.GroupConfig.MaxLoads), which queues and sheds loads by fair
// share. Per-client bounds are for a node that faces clients you do not
// run, as a first line against one of them: say 32 in flight and 500 a
// second, with every client of a proxy counted as the proxy.
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

// ClientLimiter enforces a ClientLimitConfig. A client is its IP address;
// an IPv6 client is its /64, the block one host usually holds, so that
// walking through one's own addresses does not multiply the allowance. It
// trusts no forwarding header: behind a proxy, every client is the proxy.
// A LimitListener counts each client's open connections with one, a
// connection for a miss in flight.
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

// Validate reports whether NewClientLimiter would accept c: nil, or a
// *ConfigError naming the field at fault.
func (c ClientLimitConfig) Validate() error {
	switch {
	case c.MaxMisses < 0:
		return fieldError("MaxMisses", "%d: must not be negative", c.MaxMisses)
	case !(c.MissRate >= 0): // NaN too
		return fieldError("MissRate", "%g: want a rate >= 0", c.MissRate)
	case c.MissBurst < 0:
		return fieldError("MissBurst", "%d: must not be negative", c.MissBurst)
	}
	return nil
}

// NewClientLimiter validates cfg and returns a limiter enforcing it.
func NewClientLimiter(cfg ClientLimitConfig) (*ClientLimiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
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
