// Package inflight counts work in progress so that its owner can wait for
// it to end, bounded by a context.
package inflight

import (
	"context"
	"sync"
	"sync/atomic"
)

// Counter counts work in progress. Unlike a sync.WaitGroup, Add may race
// with Wait: a cache load or a request can start while a shutdown waits, and
// Wait returns at a moment when nothing is in progress. Add and Done cost
// one atomic operation each while nobody waits, so a Counter can sit on
// every request. The zero Counter is ready; a nil *Counter counts nothing.
// A Counter is safe for concurrent use.
type Counter struct {
	n       atomic.Int64
	waiting atomic.Int64 // callers in Wait

	mu   sync.Mutex
	idle chan struct{} // guarded by mu: closed by the Done that reaches 0
}

// Add counts one more piece of work in progress.
func (c *Counter) Add() {
	if c != nil {
		c.n.Add(1)
	}
}

// Done counts one piece of work as ended.
func (c *Counter) Done() {
	if c == nil {
		return
	}
	// A waiter counts itself in waiting before it reads n: 1: Wait adds to
	// waiting, 2: Done drops n to 0, sees the waiter, wakes it; or 2 drops
	// n to 0 first and 1 then reads 0. Either way nobody sleeps past idle.
	if c.n.Add(-1) == 0 && c.waiting.Load() > 0 {
		c.mu.Lock()
		if c.idle != nil {
			close(c.idle)
			c.idle = nil
		}
		c.mu.Unlock()
	}
}

// Wait returns nil once nothing is in progress, or ctx's error if ctx ends
// first.
func (c *Counter) Wait(ctx context.Context) error {
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	for {
		c.mu.Lock()
		if c.idle == nil {
			c.idle = make(chan struct{})
		}
		idle := c.idle
		c.mu.Unlock()
		if c.n.Load() == 0 {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
