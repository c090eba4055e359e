// Package inflight counts work in progress so that its owner can wait for
// it to end, bounded by a context.
package inflight

import (
	"context"
	"sync"
)

// Counter counts work in progress. Unlike a sync.WaitGroup, Add may race
// with Wait: a cache load or a request can start while a shutdown waits, and
// Wait returns at a moment when nothing is in progress. The zero Counter is
// ready; a nil *Counter counts nothing. A Counter is safe for concurrent use.
type Counter struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while n == 0
}

// Add counts one more piece of work in progress.
func (c *Counter) Add() {
	if c == nil {
		return
	}
	c.mu.Lock()
	if c.n == 0 {
		c.idle = make(chan struct{})
	}
	c.n++
	c.mu.Unlock()
}

// Done counts one piece of work as ended.
func (c *Counter) Done() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.n--
	if c.n == 0 {
		close(c.idle)
		c.idle = nil
	}
	c.mu.Unlock()
}

// Wait returns nil once nothing is in progress, or ctx's error if ctx ends
// first.
func (c *Counter) Wait(ctx context.Context) error {
	for {
		c.mu.Lock()
		idle := c.idle
		c.mu.Unlock()
		if idle == nil {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
