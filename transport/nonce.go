package transport

import (
	"encoding/hex"
	"fmt"
	"sync"
)

// nonceLen is the length of a request nonce in bytes: 128 random bits, so
// that two honest requests never share one.
const nonceLen = 16

type nonce [nonceLen]byte

// parseNonce reads a nonce header: exactly 2*nonceLen hex digits.
func parseNonce(s string) (nonce, error) {
	var n nonce
	if len(s) != 2*nonceLen {
		return n, fmt.Errorf("%w: bad nonce", ErrUnauthorized)
	}
	if _, err := hex.Decode(n[:], []byte(s)); err != nil {
		return n, fmt.Errorf("%w: bad nonce", ErrUnauthorized)
	}
	return n, nil
}

// nonceEntry is a remembered nonce and the date (Unix ms) of its request.
type nonceEntry struct {
	n    nonce
	date int64
}

// nonceCache remembers the nonces of accepted peer requests so that none is
// accepted twice, in at most max entries.
//
// The rule it keeps: every nonce accepted with a date after floor is in
// seen. A nonce leaves seen only from the front of the arrival queue, and
// its leaving raises floor to its date; a request dated at or before floor
// is refused. So a forgotten nonce can never come back:
//   - expiry: an entry goes once its date is more than window old, when its
//     request is outside the signature window anyway; floor then lies a
//     window behind now and refuses nothing the window would accept, even if
//     the clock later steps back;
//   - the bound: when max entries are remembered, the oldest arrival goes
//     early. floor then moves closer to now, which narrows the window on its
//     old side: a request from a peer whose clock lags by more than
//     now-floor is refused (401) until the rate drops. Replays stay refused
//     either way; what the bound costs is tolerance of clock skew, never
//     safety.
//
// A nonceCache is safe for concurrent use.
type nonceCache struct {
	mu     sync.Mutex
	max    int
	window int64 // ms
	seen   map[nonce]struct{}
	// queue holds the entries in arrival order: a ring buffer of q entries
	// from head, grown by doubling up to max.
	queue []nonceEntry
	head  int
	q     int
	floor int64
}

func newNonceCache(max int, windowMillis int64) *nonceCache {
	return &nonceCache{max: max, window: windowMillis, seen: make(map[nonce]struct{}), floor: -1 << 63}
}

// check records n, of a request dated date, at now (both Unix ms), and
// returns an ErrUnauthorized if a request with n was accepted before or may
// have been (its date is at or before the floor).
func (c *nonceCache) check(n nonce, date, now int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.q > 0 && c.queue[c.head].date+c.window < now {
		c.pop()
	}
	if date <= c.floor {
		return fmt.Errorf("%w: dated before the replay floor (the nonce memory is full or the date is stale)", ErrUnauthorized)
	}
	if _, ok := c.seen[n]; ok {
		return fmt.Errorf("%w: replayed request (nonce seen before)", ErrUnauthorized)
	}
	if c.q == c.max {
		c.pop()
	}
	if c.q == len(c.queue) {
		c.grow()
	}
	c.queue[(c.head+c.q)%len(c.queue)] = nonceEntry{n, date}
	c.q++
	c.seen[n] = struct{}{}
	return nil
}

// pop forgets the oldest arrival and raises the floor to its date.
func (c *nonceCache) pop() {
	e := c.queue[c.head]
	delete(c.seen, e.n)
	c.floor = max(c.floor, e.date)
	c.head = (c.head + 1) % len(c.queue)
	c.q--
}

// grow doubles the queue, up to max, keeping the arrival order.
func (c *nonceCache) grow() {
	size := min(max(2*len(c.queue), 64), c.max)
	q := make([]nonceEntry, size)
	for i := range c.q {
		q[i] = c.queue[(c.head+i)%len(c.queue)]
	}
	c.queue, c.head = q, 0
}

// len returns the number of remembered nonces.
func (c *nonceCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.q
}
