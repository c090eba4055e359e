package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Retry delays for granting a lease again and listing again while etcd is out of reach:
// short, so that a node is back in the ring well inside the hold-down once etcd answers.
const (
	minRetry = 100 * time.Millisecond
	maxRetry = time.Second
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
	claimed     []uint32 // with a Placer: this node's positions, once claimed

	// members is the one owner of member state: the applier goroutine (follow) changes it,
	// and State reads its latest view.
	members *membership
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
	// Term is the create revision of this node's key in etcd (0 before it is first put). It
	// changes only when the key was deleted and put again, when the others may have dropped
	// this node meanwhile; the cache then stops serving what it stored under the old term.
	Term uint64 `json:"term"`
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
	r, err := newRegistry(cfg)
	if err != nil {
		return nil, err
	}
	ka, stopKA, err := r.register(ctx)
	if err != nil {
		r.abort()
		return nil, fmt.Errorf("peers: register %s: %w", r.key, err)
	}
	rev, err := r.listMembers(ctx)
	if err != nil {
		stopKA()
		r.abort()
		return nil, fmt.Errorf("peers: list %s: %w", cfg.Prefix, err)
	}
	r.start(rev, ka, stopKA)
	r.log.Info("peers: registered", "key", r.key, "peer", cfg.PeerURL, "ttl", cfg.TTL)
	return r, nil
}

// newRegistry returns the Registry of cfg, connected to etcd (through cfg.Client, or a client
// of its own dialled to cfg.Endpoints) but not registered yet.
func newRegistry(cfg Config) (*Registry, error) {
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
		if client, err = dial(cfg); err != nil {
			return nil, err
		}
		owns = true
	}
	m := newMembership(cfg.NodeID, cfg.HoldDown, cfg.ConfirmDelay)
	_, m.weighted = cfg.Setter.(WeightedSetter)
	_, ranged := cfg.Setter.(RangesSetter)
	m.ranged = ranged && cfg.Placer != nil
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
		members:    m,
	}
	r.ctx, r.cancel = context.WithCancel(client.Ctx())
	return r, nil
}

// listMembers lists the members, hands the first member set to the Setter and makes the
// registry ready. It returns the revision at which the list is complete, for the watch to
// follow from.
func (r *Registry) listMembers(ctx context.Context) (rev int64, err error) {
	rev, first, err := r.list(ctx)
	if err != nil {
		return 0, err
	}
	r.members.observe(first)
	now := time.Now()
	r.members.settle(now)
	r.publish(r.members.snapshot(now))
	r.mu.Lock()
	r.ready, r.watching = true, true
	r.notifyLocked()
	r.mu.Unlock()
	return rev, nil
}

// start runs the registry's loops until Close: the keepalive of the lease that register
// granted (ka, ended by stopKA), the watch from the revision after the first list, and the
// applier between the two. Done closes once all three have returned.
func (r *Registry) start(rev int64, ka <-chan *clientv3.LeaseKeepAliveResponse, stopKA context.CancelFunc) {
	updates := make(chan update)
	r.wg.Add(3)
	go r.keepRegistered(ka, stopKA)
	go r.watch(rev+1, updates)
	go func() {
		defer r.wg.Done()
		follow(r.ctx, r.members, updates, r.publish, r.requestReput)
	}()
	go func() {
		<-r.ctx.Done()
		r.wg.Wait()
		close(r.done)
	}()
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
func (r *Registry) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

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
	v := r.members.current()
	r.mu.Lock()
	defer r.mu.Unlock()
	return State{
		NodeID:      r.cfg.NodeID,
		Registered:  r.registered,
		Connected:   r.registered && r.watching,
		Term:        r.tenure.term.Load(),
		LastContact: r.lastContact,
		LastChange:  v.changed,
		Members:     slices.Clone(v.members),
		Pending:     slices.Clone(v.pending),
		Peers:       slices.Clone(v.peers),
		Weights:     maps.Clone(v.weights),
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
// nodes drop it at once, and closes the etcd client if New opened it. With a Placer, the key
// marked leaving is kept for a minute under a lease of its own, with the node's positions and
// a fingerprint of the others': a process with the same ID that registers within the minute,
// while the other members hold exactly the positions they held, takes the same positions
// back. It waits at most a TTL for etcd (after that the lease has expired anyway). Close is
// idempotent.
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
		// hold down. Marking the key first tells them this one is a leave. With explicit
		// arcs the marked key moves to a lease of its own and keeps the positions for a
		// while (park); else, or if that fails, it stays on the lease and goes with it.
		// The put fails harmlessly if the key is already gone.
		r.mu.Lock()
		claimed := r.claimed
		r.mu.Unlock()
		if r.cfg.Placer == nil || len(claimed) == 0 || r.park(ctx, claimed) != nil {
			leaving := r.self
			leaving.Leaving = true
			if v, encErr := leaving.encode(); encErr == nil {
				_, _ = r.client.Put(ctx, r.key, v, clientv3.WithIgnoreLease())
			}
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

// publish tells State's waiters that the membership's view changed from prev to v and, if what
// the Setter receives changed, hands it over. Only New (before the loops start) and the
// applier call it, so Setter calls never overlap; it calls the Setter without holding r.mu.
func (r *Registry) publish(prev, v *view, changed bool) {
	r.mu.Lock()
	r.notifyLocked()
	r.mu.Unlock()
	if !changed {
		return
	}
	var oldPeers []string
	if prev != nil {
		oldPeers = prev.peers
	}
	r.log.Info("peers: membership changed", "peers", v.peers, "weights", v.weights,
		"added", missingFrom(v.peers, oldPeers), "removed", missingFrom(oldPeers, v.peers))
	var err error
	ws, weighted := r.cfg.Setter.(WeightedSetter)
	rs, _ := r.cfg.Setter.(RangesSetter)
	switch {
	case rs != nil && r.cfg.Placer != nil:
		err = rs.SetRanges(peerPositions(v.members))
	case weighted:
		err = ws.SetWeighted(maps.Clone(v.weights))
	case r.cfg.Setter != nil:
		err = r.cfg.Setter.Set(slices.Clone(v.peers)...)
	}
	if err != nil {
		r.log.Error("peers: the setter refused the member set; its ring is unchanged", "peers", v.peers, "err", err)
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

// notifyLocked wakes whoever waits on Changed. r.mu must be held.
func (r *Registry) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
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
