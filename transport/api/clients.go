package api

import (
	"fmt"
	"net/netip"
	"sync"
	"time"
)

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
// The daemon's listener caps (internal/listen) count each client's open
// connections with one, a connection for a miss in flight.
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
// *cache.ConfigError naming the field at fault.
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
	key := ClientOf(remoteAddr)
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

// Tracked returns how many clients it remembers: those with misses in
// flight or a bucket still refilling.
func (l *ClientLimiter) Tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}

// ClientOf returns the client a remote address belongs to: its IPv4
// address, or its IPv6 /64.
func ClientOf(remoteAddr string) netip.Prefix {
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
