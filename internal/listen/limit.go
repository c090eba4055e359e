package listen

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
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
	// address or an IPv6 /64, the client an api.ClientLimiter counts. If zero or
	// negative, no per-client cap: one address is often a whole
	// application (a connection pool, a reverse proxy, a NAT, a
	// Kubernetes node), and everything behind it shares the cap, a peer's
	// pool included when peers reach this listener. Set it on a listener
	// that faces clients you do not run, at several times the connections
	// one of your own instances opens (and at least
	// transport.DefaultMaxIdleConnsPerHost where peers share the listener).
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
	clients *api.ClientLimiter // a connection is a miss in flight; nil: no per-client cap
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
// *cache.ConfigError naming the field at fault. A program that binds its
// listeners late checks its limits with it before it starts.
func (c LimitConfig) Validate() error {
	if c.Max <= 0 {
		return &cache.ConfigError{Err: api.ErrConfig, Field: "Max", Reason: fmt.Sprintf("%d: must be > 0", c.Max)}
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
		if l.clients, err = api.NewClientLimiter(api.ClientLimitConfig{MaxMisses: l.perCli}); err != nil {
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
