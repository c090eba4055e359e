package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache/internal/store"
	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine outlives the tests: loads and
// fetches run on their own goroutines, which a test must let finish.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// origin is a fake origin that counts its loads per key and per node.
type origin struct {
	mu    sync.Mutex
	loads map[string][]int // key -> index of the loading node, per load
	total atomic.Int64
}

func newOrigin() *origin { return &origin{loads: make(map[string][]int)} }

// getter returns node i's Getter: value "v:<key>".
func (o *origin) getter(i int) Getter {
	return GetterFunc(func(_ context.Context, key string) (Value, error) {
		o.total.Add(1)
		o.mu.Lock()
		o.loads[key] = append(o.loads[key], i)
		o.mu.Unlock()
		return Value{Data: []byte("v:" + key)}, nil
	})
}

func (o *origin) loadsOf(key string) []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int(nil), o.loads[key]...)
}

// fakePeer is a peer that is another Node of the same process, reached by a
// direct call as the transport would reach it over HTTP: Fetch is the remote
// node's getLocal. Setting fail makes it unreachable.
type fakePeer struct {
	name string
	node *Node

	fail    atomic.Pointer[error] // if set, every call returns it
	lease   atomic.Pointer[leaseState]
	fetches atomic.Int64
	// beforeInvalidate, if set, runs at the start of Invalidate: a test
	// uses it to put a call of its own into the middle of a Remove.
	beforeInvalidate func()
	stores           atomic.Int64
	invalidates      atomic.Int64
}

var errUnreachable = errors.New("fake peer: connection refused")

func (p *fakePeer) String() string { return p.name }

// leaseState is a fakePeer's contact lease, as a test sets it.
type leaseState struct {
	epoch uint64
	ok    bool
}

// Contact makes a fakePeer a Leaser: its lease holds at epoch 0 until a
// test sets another state.
func (p *fakePeer) Contact(time.Time) (uint64, bool) {
	if l := p.lease.Load(); l != nil {
		return l.epoch, l.ok
	}
	return 0, true
}

func (p *fakePeer) setLease(epoch uint64, ok bool) { p.lease.Store(&leaseState{epoch, ok}) }

func (p *fakePeer) err() error {
	if e := p.fail.Load(); e != nil {
		return *e
	}
	return nil
}

func (p *fakePeer) setFail(err error) { p.fail.Store(&err) }

func (p *fakePeer) group(name string) (*Group, error) {
	if err := p.err(); err != nil {
		return nil, err
	}
	g, ok := p.node.Group(name)
	if !ok {
		return nil, ErrNoSuchGroup
	}
	return g, nil
}

func (p *fakePeer) Fetch(ctx context.Context, group, key string) (Value, error) {
	p.fetches.Add(1)
	g, err := p.group(group)
	if err != nil {
		return Value{}, err
	}
	return g.getLocal(ctx, key, "", 0, nil)
}

func (p *fakePeer) Store(ctx context.Context, group, key string, v Value) (WriteResult, error) {
	p.stores.Add(1)
	g, err := p.group(group)
	if err != nil {
		return WriteResult{}, err
	}
	return g.setLocal(ctx, key, v)
}

func (p *fakePeer) Remove(ctx context.Context, group, key string) (WriteResult, error) {
	g, err := p.group(group)
	if err != nil {
		return WriteResult{}, err
	}
	return g.removeLocal(ctx, key)
}

func (p *fakePeer) Drop(_ context.Context, group, key string) error {
	p.invalidates.Add(1)
	if p.beforeInvalidate != nil {
		p.beforeInvalidate()
	}
	g, err := p.group(group)
	if err != nil {
		return err
	}
	g.dropLocal(key, "", false) // the sender is not known: counted as this node's write
	return nil
}

// ring is a PeerPicker over fakePeers: owner(key) is the index of the owning
// node, self is this node's index.
type ring struct {
	self  int
	peers []*fakePeer
	owner func(key string) int
}

func (r ring) PickPeer(key string) (Peer, bool) {
	i := r.owner(key)
	if i == r.self {
		return nil, false
	}
	return r.peers[i], true
}

// DropCopies drops key on every other node, in parallel, and names those
// whose Drop failed (fakes hold no leases, so there is nothing to wait for).
func (r ring) DropCopies(ctx context.Context, group, key string) []string {
	errs := make([]error, len(r.peers))
	var wg sync.WaitGroup
	for i, p := range r.peers {
		if i != r.self {
			wg.Go(func() { errs[i] = p.Drop(ctx, group, key) })
		}
	}
	wg.Wait()
	var unreached []string
	for i, err := range errs {
		if err != nil {
			unreached = append(unreached, r.peers[i].name)
		}
	}
	return unreached
}

// hashOwner spreads keys over n nodes.
func hashOwner(n int) func(string) int {
	return func(key string) int {
		h := fnv.New32a()
		h.Write([]byte(key))
		return int(h.Sum32() % uint32(n))
	}
}

// cluster is n Nodes in one process, wired with fakePeers, each with one
// group "g" made from cfg (Getter taken from getter(i)).
type cluster struct {
	nodes  []*Node
	groups []*Group
	peers  []*fakePeer
	owner  func(string) int
}

func newCluster(t *testing.T, n int, owner func(string) int, cfg GroupConfig, getter func(i int) Getter) *cluster {
	t.Helper()
	c := &cluster{owner: owner}
	for i := range n {
		c.peers = append(c.peers, &fakePeer{name: fmt.Sprintf("node%d", i)})
	}
	for i := range n {
		node := newNode(t, Config{Peers: ring{self: i, peers: c.peers, owner: owner}})
		c.peers[i].node = node
		gc := cfg
		gc.Name = "g"
		gc.Getter = getter(i)
		g, err := node.NewGroup(gc)
		if err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, node)
		c.groups = append(c.groups, g)
	}
	return c
}

// newTestGroup is a single node's group with the given getter.
func newTestGroup(t testing.TB, cfg GroupConfig, getter GetterFunc) *Group {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "g"
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 1 << 20
	}
	cfg.Getter = getter
	g, err := newNode(t, Config{}).NewGroup(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// mustGet fails the test unless g.Get(key) returns want.
func mustGet(t *testing.T, g *Group, key, want string) Value {
	t.Helper()
	v, err := g.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if string(v.Data) != want {
		t.Fatalf("Get(%q) = %q, want %q", key, v.Data, want)
	}
	return v
}

// syncBuffer is a bytes.Buffer safe for a slog handler used concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func bufferLogger(b *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, nil))
}

// runtime_Goexit is runtime.Goexit, named so that the test reads as what it
// simulates: t.FailNow called inside a Getter.
var runtime_Goexit = runtime.Goexit

// assertAccounting fails t if l's invariants do not hold (store.Store.Check).
func assertAccounting(t *testing.T, l *store.Store) {
	t.Helper()
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
}

// newNode returns New(cfg), whose idle load runners end when the test does
// (a testing/synctest bubble waits for every goroutine in it).
func newNode(t testing.TB, cfg Config) *Node {
	n := New(cfg)
	t.Cleanup(n.stopRunners)
	return n
}
