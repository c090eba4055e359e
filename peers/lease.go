package peers

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var errLeaseLost = errors.New("peers: lease keepalive ended")

// register grants a lease, puts the key under it and starts its keepalive. ctx bounds the
// grant and the put; the keepalive lives until the returned stop or the registry's end.
func (r *Registry) register(ctx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, context.CancelFunc, error) {
	opCtx, cancel := context.WithTimeout(ctx, r.cfg.TTL)
	defer cancel()
	sent := time.Now()
	g, err := r.client.Grant(opCtx, int64(r.cfg.TTL/time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("grant lease: %w", err)
	}
	// Record the lease before the put: if the put reaches etcd but its answer does not
	// reach us, Close still revokes the lease that holds the key.
	r.mu.Lock()
	r.lease = g.ID
	value := r.value
	r.mu.Unlock()
	// The key's create revision is this node's term: it changes only when
	// the key was deleted (and so this node dropped from the others' rings)
	// in between.
	created, err := r.put(opCtx, g.ID, value)
	if err != nil {
		return nil, nil, fmt.Errorf("put %s: %w", r.key, err)
	}
	kaCtx, stop := context.WithCancel(r.ctx)
	ka, err := r.client.KeepAlive(kaCtx, g.ID)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("keep lease %x alive: %w", int64(g.ID), err)
	}
	// The term first, then the news: whoever wakes on Changed and reads
	// Tenure sees the new registration's term.
	r.tenure.start(uint64(created), sent, time.Duration(g.TTL)*time.Second)
	r.mu.Lock()
	r.registered = true
	r.lastContact = time.Now()
	r.notifyLocked()
	r.mu.Unlock()
	return ka, stop, nil
}

// keepRegistered drains keepalive answers and, when the lease is lost, grants a new one and
// puts the key again, until the registry stops.
func (r *Registry) keepRegistered(ka <-chan *clientv3.LeaseKeepAliveResponse, stop context.CancelFunc) {
	defer r.wg.Done()
	for {
		err := r.keepAlive(ka)
		stop()
		if r.ctx.Err() != nil {
			return
		}
		r.tenure.end()
		r.mu.Lock()
		r.registered = false
		r.notifyLocked()
		r.mu.Unlock()
		r.log.Warn("peers: lease lost; registering again", "err", err)
		var ok bool
		if ka, stop, ok = r.reregister(); !ok {
			return
		}
	}
}

// keepAlive returns when the lease is lost or the registry stops. It also puts the key again
// when the watch reports it missing while the lease lives.
func (r *Registry) keepAlive(ka <-chan *clientv3.LeaseKeepAliveResponse) error {
	for {
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case resp, ok := <-ka:
			if !ok {
				return errLeaseLost
			}
			r.tenure.renew(time.Now(), resp.TTL, r.cfg.TTL)
			r.touch(false)
		case <-r.reput:
			r.mu.Lock()
			lease, value := r.lease, r.value
			r.mu.Unlock()
			ctx, cancel := context.WithTimeout(r.ctx, r.cfg.TTL)
			_, err := r.put(ctx, lease, value)
			cancel()
			if err != nil {
				return fmt.Errorf("put missing key %s: %w", r.key, err)
			}
			r.log.Info("peers: key was missing; put it again", "key", r.key)
		}
	}
}

// reregister retries register with a short backoff until it succeeds (ok) or the registry
// stops.
func (r *Registry) reregister() (<-chan *clientv3.LeaseKeepAliveResponse, context.CancelFunc, bool) {
	delay := minRetry
	for attempt := 1; ; attempt++ {
		// A put requested while the old lease was dying is done by the put in register.
		// Drain before it, not after: 1: register puts the key, 2: someone deletes it,
		// 2: the applier sees the deletion and requests a put, 1: drain. Draining after
		// the put would drop that request and leave the key missing until the next lease
		// loss, so that the others would drop this node after their hold-down. A request
		// that arrives after the put is kept, and costs at most one extra put.
		select {
		case <-r.reput:
		default:
		}
		ka, stop, err := r.register(r.ctx)
		if err == nil {
			r.log.Info("peers: registered again", "key", r.key, "attempts", attempt)
			return ka, stop, true
		}
		if r.ctx.Err() != nil {
			return nil, nil, false
		}
		if attempt == 1 {
			r.log.Warn("peers: register failed; retrying", "err", err)
		}
		if !r.sleep(delay) {
			return nil, nil, false
		}
		delay = min(2*delay, maxRetry)
	}
}

// requestReput asks the registration loop to put the key again, without blocking.
func (r *Registry) requestReput() {
	r.mu.Lock()
	registered := r.registered
	r.mu.Unlock()
	if !registered {
		return // the registration loop puts the key as part of registering again
	}
	select {
	case r.reput <- struct{}{}:
	default:
	}
}
