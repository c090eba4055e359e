package cache

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// callerKey is the context key of WithCaller.
type callerKey struct{}

// WithCaller returns ctx carrying caller, the name of whoever is asking:
// a client's address, a tenant, a peer. A group that must queue or shed
// origin loads shares them fairly between callers (see GroupConfig.MaxLoads);
// calls without a caller share one name, "". The name is only compared;
// it is never logged or sent anywhere but to the key's owner.
func WithCaller(ctx context.Context, caller string) context.Context {
	return context.WithValue(ctx, callerKey{}, caller)
}

// CallerOf returns the caller that WithCaller put in ctx, or "".
func CallerOf(ctx context.Context) string {
	s, _ := ctx.Value(callerKey{}).(string)
	return s
}

// loadGate bounds a group's origin loads on this node: at most max run at
// once, at most queueMax wait for a slot, each for at most wait. A freed
// slot goes to the callers in turn (round robin, oldest load of each
// caller first), so a caller with a thousand loads waiting gets a slot as
// often as one with a single load; when the queue is full, the newest load
// of the caller with the most loads waiting is shed. One client walking
// random keys thus fills the queue with its own loads and loses them first,
// and the others keep their share.
//
// Only origin loads pass the gate: hits, fetches from peers and callers
// that join a load already in flight never wait in it.
type loadGate struct {
	max      int // loads running at once; 0: no bound (a nil gate)
	queueMax int // loads waiting; 0: shed at once when max are running
	wait     time.Duration

	mu      sync.Mutex
	running int                     // guarded by mu
	waiting int                     // guarded by mu
	byName  map[string]*callerQueue // callers with loads waiting; guarded by mu
	turns   list.List               // of *callerQueue, whose turn is next first; guarded by mu

	queued atomic.Int64 // loads that had to wait, granted or not
	shed   atomic.Int64 // loads refused with ErrOverloaded
}

// callerQueue is one caller's loads waiting, oldest first.
type callerQueue struct {
	name    string
	waiters list.List // of *waiter
	turn    *list.Element
}

type waiter struct {
	q     *callerQueue
	elem  *list.Element
	ready chan struct{} // closed when granted (err nil) or shed (err set)
	err   error
}

// newLoadGate returns the gate of a group config with defaults applied,
// nil when MaxLoads is negative (no bound).
func newLoadGate(cfg GroupConfig) *loadGate {
	if cfg.MaxLoads < 0 {
		return nil
	}
	return &loadGate{
		max:      cfg.MaxLoads,
		queueMax: max(cfg.LoadQueue, 0),
		wait:     cfg.LoadQueueWait,
		byName:   map[string]*callerQueue{},
	}
}

// acquire takes a load slot for caller, waiting in the queue if all are in
// use, and returns the function that gives it back. The error is
// ErrOverloaded, wrapped with the group's name, when the load was shed: the
// queue was full and this caller had the most loads waiting, or the wait
// ran out, or ctx ended.
func (q *loadGate) acquire(ctx context.Context, group, caller string) (release func(), err error) {
	if q == nil {
		return func() {}, nil
	}
	q.mu.Lock()
	if q.running < q.max && q.waiting == 0 {
		q.running++
		q.mu.Unlock()
		return q.release, nil
	}
	w := &waiter{ready: make(chan struct{})}
	q.enqueue(caller, w)
	if q.waiting > q.queueMax {
		q.shedOne(group)
	}
	q.mu.Unlock()
	q.queued.Add(1)

	t := time.NewTimer(q.wait)
	defer t.Stop()
	select {
	case <-w.ready:
	case <-t.C:
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-w.ready: // granted or shed, perhaps while the timer fired
	default:
		q.remove(w)
		w.err = fmt.Errorf("%w: group %q: no load slot within %v", ErrOverloaded, group, q.wait)
		q.shed.Add(1)
	}
	if w.err != nil {
		return nil, w.err
	}
	return q.release, nil
}

// release gives a slot back, to the next caller's oldest load if any waits.
func (q *loadGate) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	front := q.turns.Front()
	if front == nil {
		q.running--
		return
	}
	c := front.Value.(*callerQueue)
	w := c.waiters.Front().Value.(*waiter)
	q.remove(w) // the slot passes to w: running stays the same
	if c.turn != nil {
		q.turns.MoveToBack(c.turn) // a caller with more waiting goes last
	}
	close(w.ready)
}

// enqueue adds w as caller's newest waiting load. Called with mu held.
func (q *loadGate) enqueue(caller string, w *waiter) {
	c, ok := q.byName[caller]
	if !ok {
		c = &callerQueue{name: caller}
		q.byName[caller] = c
		c.turn = q.turns.PushBack(c)
	}
	w.q = c
	w.elem = c.waiters.PushBack(w)
	q.waiting++
}

// remove takes w out of the queue. Called with mu held.
func (q *loadGate) remove(w *waiter) {
	c := w.q
	c.waiters.Remove(w.elem)
	q.waiting--
	if c.waiters.Len() == 0 {
		q.turns.Remove(c.turn)
		c.turn = nil
		delete(q.byName, c.name)
	}
}

// shedOne refuses the newest load of the caller with the most loads
// waiting; among equals, the one whose turn is furthest away. Called with mu
// held. The scan is linear in the callers waiting, which the queue's bound
// bounds.
func (q *loadGate) shedOne(group string) {
	var worst *callerQueue
	for e := q.turns.Back(); e != nil; e = e.Prev() {
		if c := e.Value.(*callerQueue); worst == nil || c.waiters.Len() > worst.waiters.Len() {
			worst = c
		}
	}
	w := worst.waiters.Back().Value.(*waiter)
	q.remove(w)
	w.err = fmt.Errorf("%w: group %q: load queue full (%d waiting)", ErrOverloaded, group, q.queueMax)
	q.shed.Add(1)
	close(w.ready)
}

// usage returns the loads running and waiting now.
func (q *loadGate) usage() (running, waiting int) {
	if q == nil {
		return 0, 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running, q.waiting
}
