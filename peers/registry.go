package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Retry delays for granting a lease again and listing again while etcd is out of reach:
// short, so that a node is back in the ring well inside the hold-down once etcd answers.
const (
	minRetry = 100 * time.Millisecond
	maxRetry = time.Second
)

var (
	errLeaseLost   = errors.New("peers: lease keepalive ended")
	errCompacted   = errors.New("peers: watch revision compacted")
	errWatchClosed = errors.New("peers: watch closed")
)

// Registry keeps this node registered in etcd and the Setter fed with the member set. It is
// shaped like etcd's concurrency.Session: a lease kept alive in the background, Done, and a
// bounded Close that revokes the lease. Unlike a Session it outlives its lease: when a
// keepalive fails, it grants a new lease and puts its key again, so a node never drops out of
// the ring because etcd blinked. All methods are safe for concurrent use.
type Registry struct {
	cfg        Config
	client     *clientv3.Client
	ownsClient bool
	key        string
	self       Member
	value      string // guarded by mu once New returns (Leave changes it)
	leaving    bool   // guarded by mu: Leave was called
	log        *slog.Logger

	ctx       context.Context // ends at Close or when the client is closed
	cancel    context.CancelFunc
	wg        sync.WaitGroup // the three loops
	done      chan struct{}
	reput     chan struct{} // asks the registration loop to put the key again
	closeOnce sync.Once
	closeErr  error

	compactions    atomic.Int64 // watches that ended on a compacted revision
	claimConflicts atomic.Int64 // join transactions that lost a race (placement.go)

	tenure tenure // read by Tenure without the lock

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced at every change of State
	lease       clientv3.LeaseID
	ready       bool
	registered  bool
	watching    bool
	lastContact time.Time
	lastChange  time.Time
	members     []Member
	pending     []Member
	peers       []string
	weights     map[string]int
	positions   map[string][]uint32 // with a Placer: what the RangesSetter last received
	claimed     []uint32            // with a Placer: this node's positions, once claimed
}

// State is a snapshot of what a Registry knows, for an operator's status page (it marshals to
// JSON) and for tests. The ring version is not here: it belongs to the ring that the Setter
// builds from Peers (consistenthash.Map.Version).
type State struct {
	// NodeID is this node's ID.
	NodeID string `json:"node_id"`
	// Registered reports whether this node's key is in etcd under a lease that is kept alive,
	// as far as the node can tell: it turns false when a keepalive goes unanswered for a TTL.
	Registered bool `json:"registered"`
	// Connected reports whether the node is registered and its watch on the members is
	// established. While false, Members is the last good member set, not an empty one.
	Connected bool `json:"connected"`
	// LastContact is when etcd last answered a keepalive or sent a watch response.
	LastContact time.Time `json:"last_contact"`
	// LastChange is when the Setter last received a new member set.
	LastChange time.Time `json:"last_change"`
	// Members is the member set in use, sorted by ID.
	Members []Member `json:"members"`
	// Pending lists the Members that etcd no longer holds and that wait out the hold-down
	// or the confirmation delay before they leave the ring.
	Pending []Member `json:"pending"`
	// Peers is the sorted peer URLs of Members: what the Setter last received.
	Peers []string `json:"peers"`
	// Weights maps each of Peers to its member's weight (the larger one if two members
	// share a URL), as in use now: what a WeightedSetter last received. A plain Setter is
	// not called when only a weight changes.
	Weights map[string]int `json:"weights"`
}

// New registers the node described by cfg, lists the members, hands them to cfg.Setter, and
// keeps both up to date in the background until Close. ctx bounds this first registration
// only; each etcd call is also bounded by the TTL, so New fails rather than hangs when etcd is
// unreachable.
func New(ctx context.Context, cfg Config) (*Registry, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	self := Member{
		ID:      cfg.NodeID,
		PeerURL: cfg.PeerURL,
		Weight:  cfg.Weight,
		Version: cfg.Version,
		Started: time.Now().UTC().Truncate(time.Millisecond),
	}
	value, err := self.encode()
	if err != nil {
		return nil, err
	}
	client, owns := cfg.Client, false
	if client == nil {
		client, err = clientv3.New(clientv3.Config{
			Endpoints:   cfg.Endpoints,
			DialTimeout: cfg.DialTimeout,
			// Pings find a connection that died without a word (a node cut
			// off from the network): without them the client waits on TCP
			// retransmissions, which back off to many seconds, and a node
			// back from a 20 s partition took 14 s to register again. Lease
			// keepalives keep the connection busy, so a ping goes out only
			// when nothing arrived for 6 s; etcd refuses pings more often
			// than every 5 s (too_many_pings).
			DialKeepAliveTime:    6 * time.Second,
			DialKeepAliveTimeout: 2 * time.Second,
			Logger:               zap.NewNop(),
			// gRPC's default reconnect backoff grows to two minutes; after an outage the
			// node must be back well inside a TTL.
			DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: minRetry, Multiplier: 1.6, Jitter: 0.2, MaxDelay: maxRetry},
				MinConnectTimeout: cfg.TTL,
			})},
		})
		if err != nil {
			return nil, fmt.Errorf("peers: connect to etcd %v: %w", cfg.Endpoints, err)
		}
		owns = true
	}
	r := &Registry{
		cfg:        cfg,
		client:     client,
		ownsClient: owns,
		key:        cfg.Prefix + cfg.NodeID,
		self:       self,
		value:      value,
		log:        cfg.Logger.With("node", cfg.NodeID),
		done:       make(chan struct{}),
		reput:      make(chan struct{}, 1),
		changed:    make(chan struct{}),
		tenure:     tenure{born: time.Now()},
	}
	r.ctx, r.cancel = context.WithCancel(client.Ctx())

	ka, stopKA, err := r.register(ctx)
	if err != nil {
		r.abort()
		return nil, fmt.Errorf("peers: register %s: %w", r.key, err)
	}
	rev, first, err := r.list(ctx)
	if err != nil {
		stopKA()
		r.abort()
		return nil, fmt.Errorf("peers: list %s: %w", cfg.Prefix, err)
	}
	m := newMembership(cfg.NodeID, cfg.HoldDown, cfg.ConfirmDelay)
	m.observe(first)
	now := time.Now()
	m.settle(now)
	r.publish(m.members(), m.pending(), now)
	r.mu.Lock()
	r.ready, r.watching = true, true
	r.notifyLocked()
	r.mu.Unlock()

	updates := make(chan update)
	r.wg.Add(3)
	go r.keepRegistered(ka, stopKA)
	go r.watch(rev+1, updates)
	go func() {
		defer r.wg.Done()
		follow(r.ctx, m, updates, r.publish, r.requestReput)
	}()
	go func() {
		<-r.ctx.Done()
		r.wg.Wait()
		close(r.done)
	}()
	r.log.Info("peers: registered", "key", r.key, "peer", cfg.PeerURL, "ttl", cfg.TTL)
	return r, nil
}

// abort undoes a failed New: it revokes a lease granted on the way and closes an owned client.
func (r *Registry) abort() {
	r.cancel()
	r.mu.Lock()
	lease := r.lease
	r.mu.Unlock()
	if lease != clientv3.NoLease {
		// Best effort and brief: New is failing already, and the lease expires by itself.
		ctx, cancel := context.WithTimeout(context.Background(), min(r.cfg.TTL, time.Second))
		_, _ = r.client.Revoke(ctx, lease)
		cancel()
	}
	if r.ownsClient {
		_ = r.client.Close() // nothing was started on it that could report an error
	}
}

// Done returns a channel that is closed once the registry has stopped keeping its lease alive
// and watching: when Close begins, or when its etcd client was closed. Lost leases do not
// close it, since the registry registers again by itself.
func (r *Registry) Done() <-chan struct{} { return r.done }

// Changed returns a channel that is closed at the next change of State, so that a status
// page can follow the member set without polling: take the channel, read State, then wait.
func (r *Registry) Changed() <-chan struct{} { return r.stateChanged() }

// Ready reports whether the node registered and handed its first member set to the Setter,
// and has not been closed. It stays true during an etcd outage, because the node keeps
// serving with its last member set; State tells whether etcd is reachable.
func (r *Registry) Ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready
}

// State returns a snapshot of the registry's view of etcd and of the member set.
func (r *Registry) State() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return State{
		NodeID:      r.cfg.NodeID,
		Registered:  r.registered,
		Connected:   r.registered && r.watching,
		LastContact: r.lastContact,
		LastChange:  r.lastChange,
		Members:     slices.Clone(r.members),
		Pending:     slices.Clone(r.pending),
		Peers:       slices.Clone(r.peers),
		Weights:     maps.Clone(r.weights),
	}
}

// Leave marks this node as leaving in etcd, so that the other nodes drop it
// from their rings at once, while it stays registered: its lease is kept
// alive (and its Tenure holds) until Close. A node calls it first when it
// stops gracefully, to hand its values to their next owners while it still
// serves them. Close does the same if Leave was not called.
func (r *Registry) Leave(ctx context.Context) error {
	r.mu.Lock()
	leaving := r.self
	leaving.Leaving = true
	leaving.Positions = r.claimed
	v, err := leaving.encode()
	if err != nil {
		r.mu.Unlock()
		return err
	}
	lease := r.lease
	// A put of the key again (the keepalive loop's, when the key went
	// missing, or a new claim of positions) must keep the mark.
	r.leaving, r.value = true, v
	r.mu.Unlock()
	if _, err := r.client.Put(ctx, r.key, v, clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("peers: mark %s leaving: %w", r.key, err)
	}
	return nil
}

// Close stops the registry, marks the node as leaving, revokes its lease so that the other
// nodes drop it at once, and closes the etcd client if New opened it. It waits at most a
// TTL for etcd (after that the lease has expired anyway). Close is idempotent.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() { r.closeErr = r.close() })
	return r.closeErr
}

func (r *Registry) close() error {
	r.stop()
	r.mu.Lock()
	lease := r.lease
	r.ready, r.registered, r.watching = false, false, false
	r.notifyLocked()
	r.mu.Unlock()

	var err error
	if r.client.Ctx().Err() == nil && lease != clientv3.NoLease {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.TTL)
		defer cancel()
		// A deletion by revoke looks the same as a deletion by expiry, which the others
		// hold down. Marking the key first tells them this one is a leave. The put fails
		// harmlessly if the key is already gone.
		leaving := r.self
		leaving.Leaving = true
		if v, encErr := leaving.encode(); encErr == nil {
			_, _ = r.client.Put(ctx, r.key, v, clientv3.WithIgnoreLease())
		}
		if _, rerr := r.client.Revoke(ctx, lease); rerr != nil && !errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
			err = fmt.Errorf("peers: revoke lease %x: %w", int64(lease), rerr)
		}
	}
	if r.ownsClient {
		if cerr := r.client.Close(); cerr != nil && !errors.Is(cerr, context.Canceled) && err == nil {
			err = fmt.Errorf("peers: close etcd client: %w", cerr)
		}
	}
	r.log.Info("peers: left", "key", r.key, "err", err)
	return err
}

// stop ends the background loops and waits for them.
func (r *Registry) stop() {
	r.cancel()
	<-r.done
}

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
	r.mu.Lock()
	r.registered = true
	r.lastContact = time.Now()
	r.notifyLocked()
	r.mu.Unlock()
	r.tenure.start(uint64(created), sent, time.Duration(g.TTL)*time.Second)
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

// watch follows the members prefix from revision rev, listing again whenever a watch ends
// (its revision was compacted, etcd lost its leader, or the stream failed).
func (r *Registry) watch(rev int64, out chan<- update) {
	defer r.wg.Done()
	for {
		err := r.watchFrom(rev, out)
		if r.ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.watching = false
		r.notifyLocked()
		r.mu.Unlock()
		if errors.Is(err, errCompacted) {
			r.compactions.Add(1)
			r.log.Info("peers: watch revision compacted; listing again", "err", err)
		} else {
			r.log.Warn("peers: watch ended; listing again", "err", err)
		}
		delay := minRetry
		for {
			var u update
			rev, u, err = r.list(r.ctx)
			if err == nil {
				select {
				case out <- u:
				case <-r.ctx.Done():
					return
				}
				break
			}
			if r.ctx.Err() != nil || !r.sleep(delay) {
				return
			}
			delay = min(2*delay, maxRetry)
		}
		// The list is complete at rev, so watching from rev+1 loses nothing in between.
		rev++
	}
}

// watchFrom watches the prefix from rev and forwards every response until the watch ends.
func (r *Registry) watchFrom(rev int64, out chan<- update) error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(r.ctx))
	defer cancel()
	wch := r.client.Watch(ctx, r.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithCreatedNotify())
	for wresp := range wch {
		if wresp.CompactRevision != 0 {
			return fmt.Errorf("%w: wanted %d, compacted up to %d", errCompacted, rev, wresp.CompactRevision)
		}
		if err := wresp.Err(); err != nil {
			return err
		}
		r.touch(true)
		if wresp.Created || wresp.IsProgressNotify() {
			continue
		}
		var u update
		for _, ev := range wresp.Events {
			if c, ok := r.decodeChange(ev.Kv.Key, ev.Kv.Value, ev.Type == clientv3.EventTypeDelete); ok {
				u.changes = append(u.changes, c)
			}
		}
		if len(u.changes) == 0 {
			continue
		}
		if r.log.Enabled(r.ctx, slog.LevelDebug) {
			r.log.Debug("peers: watch events", "rev", wresp.Header.Revision, "changes", describe(u.changes))
		}
		select {
		case out <- u:
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
	return errWatchClosed
}

// describe renders changes for a debug log line.
func describe(cs []change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		switch {
		case c.deleted:
			out[i] = "-" + c.id
		case c.member.Leaving:
			out[i] = "~" + c.id
		default:
			out[i] = "+" + c.id
		}
	}
	return out
}

// list reads the whole prefix: the complete member set at the returned revision.
func (r *Registry) list(ctx context.Context) (int64, update, error) {
	opCtx, cancel := context.WithTimeout(ctx, r.cfg.TTL)
	defer cancel()
	resp, err := r.client.Get(opCtx, r.cfg.Prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, update{}, err
	}
	u := update{reset: true}
	for _, kv := range resp.Kvs {
		if c, ok := r.decodeChange(kv.Key, kv.Value, false); ok {
			u.changes = append(u.changes, c)
		}
	}
	return resp.Header.Revision, u, nil
}

// decodeChange turns one key under the prefix into a change. Keys that are not a member ID
// (deeper paths, bad characters) are not ours and are skipped; a value that does not decode
// makes the member count as absent.
func (r *Registry) decodeChange(key, value []byte, deleted bool) (change, bool) {
	id, ok := strings.CutPrefix(string(key), r.cfg.Prefix)
	if !ok || !checkID(id) {
		return change{}, false
	}
	if deleted {
		return change{id: id, deleted: true}, true
	}
	m, err := decodeMember(id, value)
	if err != nil {
		r.log.Warn("peers: member ignored", "peer", id, "err", err)
		return change{id: id, deleted: true}, true
	}
	return change{id: id, member: m}, true
}

// publish records the applied member set and, if what the Setter receives changed (the peer
// URLs, or for a WeightedSetter the URLs or their weights), hands it over. Only New (before
// the loops start) and the applier call it, so Setter calls never overlap; it calls the
// Setter without holding r.mu.
func (r *Registry) publish(members, pending []Member, now time.Time) {
	peers := peerURLs(members)
	weights := peerWeights(members)
	ws, weighted := r.cfg.Setter.(WeightedSetter)
	rs, ranged := r.cfg.Setter.(RangesSetter)
	ranged = ranged && r.cfg.Placer != nil
	positions := peerPositions(members)
	r.mu.Lock()
	old, oldWeights := r.peers, r.weights
	changed := !slices.Equal(old, peers) || (weighted && !maps.Equal(oldWeights, weights)) ||
		(ranged && !samePositions(r.positions, positions))
	r.members, r.pending, r.weights = members, pending, weights
	if changed {
		r.peers, r.positions = peers, positions
		r.lastChange = now
	}
	r.notifyLocked()
	r.mu.Unlock()
	if !changed {
		return
	}
	r.log.Info("peers: membership changed", "peers", peers, "weights", weights,
		"added", missingFrom(peers, old), "removed", missingFrom(old, peers))
	var err error
	switch {
	case ranged:
		err = rs.SetRanges(peerPositions(members))
	case weighted:
		err = ws.SetWeighted(maps.Clone(weights))
	case r.cfg.Setter != nil:
		err = r.cfg.Setter.Set(slices.Clone(peers)...)
	}
	if err != nil {
		r.log.Error("peers: the setter refused the member set; its ring is unchanged", "peers", peers, "err", err)
	}
}

// missingFrom returns the elements of sorted a that are not in sorted b.
func missingFrom(a, b []string) []string {
	var out []string
	for _, s := range a {
		if _, ok := slices.BinarySearch(b, s); !ok {
			out = append(out, s)
		}
	}
	return out
}

// touch records an answer from etcd; fromWatch also marks the watch as established.
func (r *Registry) touch(fromWatch bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastContact = time.Now()
	if fromWatch {
		r.watching = true
	}
	r.notifyLocked()
}

// notifyLocked wakes whoever waits on stateChanged. r.mu must be held.
func (r *Registry) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// stateChanged returns a channel closed at the next change of State, so that a caller can
// wait for a condition without polling: take the channel, read State, then wait.
func (r *Registry) stateChanged() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// sleep waits d or until the registry stops; it reports whether the registry still runs.
func (r *Registry) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
		return false
	}
}
