// Package loadgen is ringcache's one load generator: workers that send
// GET, PUT and DELETE requests to the public API of a set of nodes, round
// robin, check what comes back, and measure it. `ringcache bench` runs it
// in a closed loop (each worker sends its next request when the last one
// is answered) to measure a cluster; the e2e suite runs it in an open loop
// (a steady rate, whatever the answers take) and records every operation
// for its history checker; deploy/bench's memload and scale fill and read
// through it.
//
// A worker reuses its request, its read buffer and the scratch it builds
// paths in, so that a request allocates only what net/http itself does:
// the generator must not be what limits a benchmark on the same machine.
package loadgen

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is what a request does.
type Kind uint8

// Kinds of request.
const (
	Get Kind = iota
	Put
	Delete
)

func (k Kind) String() string {
	switch k {
	case Put:
		return "PUT"
	case Delete:
		return "DELETE"
	}
	return "GET"
}

func (k Kind) method() string {
	switch k {
	case Put:
		return http.MethodPut
	case Delete:
		return http.MethodDelete
	}
	return http.MethodGet
}

// Op is one request.
type Op struct {
	Kind Kind
	// Key is the key's index: its name is Config.KeyPrefix and the index
	// in decimal, unless Name is set.
	Key int
	// Name, if set, is the key's name (escaped for the path as needed).
	Name string
	// Value is what a Put writes; nil: the value of Key by the value rule
	// (Fill), Config.ValueSize bytes.
	Value []byte
}

// A Source gives a run its operations: Next sets *op and reports whether
// there is one. In a closed loop each worker calls it with its own r, and
// false ends that worker; in an open loop the pacer calls it once a tick,
// and false skips the tick. A Source is called concurrently.
type Source interface {
	Next(r *rand.Rand, op *Op) bool
}

// SourceFunc is a Source.
type SourceFunc func(r *rand.Rand, op *Op) bool

// Next calls f.
func (f SourceFunc) Next(r *rand.Rand, op *Op) bool { return f(r, op) }

// Reads returns a Source of GETs of the keys p draws.
func Reads(p Picker) Source {
	return SourceFunc(func(r *rand.Rand, op *Op) bool {
		*op = Op{Kind: Get, Key: p.Pick(r)}
		return true
	})
}

// Each returns a Source that gives kind for every key of [0, n) once, in
// order, shared by all the workers: a fill, or a sweep over the keys.
func Each(kind Kind, n int) Source {
	var next atomic.Int64
	return SourceFunc(func(_ *rand.Rand, op *Op) bool {
		k := next.Add(1) - 1
		if k >= int64(n) {
			return false
		}
		*op = Op{Kind: kind, Key: int(k)}
		return true
	})
}

// Target is a node requests go to.
type Target struct {
	// Name names it in records; if empty, URL does.
	Name string
	// URL is the base URL of its public API.
	URL string
}

// Targets is the set of nodes a run sends to, which may change while it
// runs. It is safe for concurrent use.
type Targets struct{ p atomic.Pointer[[]Target] }

// NewTargets returns ts as Targets.
func NewTargets(ts ...Target) *Targets {
	t := new(Targets)
	t.Set(ts)
	return t
}

// URLs returns Targets of the base URLs us, each named by its host.
func URLs(us ...string) *Targets {
	ts := make([]Target, len(us))
	for i, u := range us {
		ts[i] = Target{URL: u}
		if p, err := url.Parse(u); err == nil && p.Host != "" {
			ts[i].Name = p.Host
		}
	}
	return NewTargets(ts...)
}

// Set replaces the targets; requests under way keep theirs.
func (t *Targets) Set(ts []Target) {
	ts = append([]Target(nil), ts...)
	t.p.Store(&ts)
}

// Load returns the targets. The caller must not change the slice.
func (t *Targets) Load() []Target {
	if p := t.p.Load(); p != nil {
		return *p
	}
	return nil
}

// Config is one run of load.
type Config struct {
	// Client sends the requests; nil: NewClient(Workers, targets, 30s).
	Client *http.Client
	// Targets are the nodes, asked round robin by each worker; required.
	Targets *Targets
	// Group is the cache group; KeyPrefix the names of indexed keys (it
	// must need no escaping in a path).
	Group, KeyPrefix string
	// Token, if set, is sent with every request as a bearer token.
	Token string
	// Source gives the operations; required.
	Source Source
	// Workers is how many requests may be in flight; at least 1.
	Workers int
	// Rate, if positive, makes the run an open loop: Rate operations a
	// second, each handed to an idle worker, and counted as dropped when
	// every worker is busy (so a stalled cluster shows in the figures
	// rather than in an ever longer queue). Zero: a closed loop.
	Rate float64
	// Duration ends the run, if positive; Requests bounds the operations
	// started, if positive. Either way a run also ends when its Source
	// does (closed loop), at Stop, or when its context does.
	Duration time.Duration
	Requests int64
	// ValueSize is the size of a Put's value by the value rule.
	ValueSize int
	// ContentType, if set, is sent with every Put.
	ContentType string
	// Check judges a 200's body; nil: not checked.
	Check Check
	// RetryRefused asks the next target, once, when one refused or reset
	// the connection (or, through Docker's proxy, closed it unanswered):
	// what a client with a list of nodes does when one has just died.
	RetryRefused bool
	// RetryAfter, if positive, is how long a GET answered 503 with
	// Retry-After is asked again, a second apart, as a client should.
	RetryAfter time.Duration
	// Before, if set, is called for each operation before its first
	// request, with At, Op and Target set; it may set Note, which Observe
	// sees.
	Before func(*Record)
	// Observe, if set, is called with each operation once it is done, on
	// the worker's goroutine. Record.Body holds the body only with
	// KeepBodies.
	Observe    func(*Record)
	KeepBodies bool
	// Seed seeds the workers' random sequences, for repeatable runs.
	Seed uint64
}

// Verdict is what a Check says of a body.
type Verdict uint8

// Verdicts.
const (
	Unchecked Verdict = iota
	Right             // the key's value
	Other             // another value known to be the key's (Result.Other)
	Wrong             // not the key's value
)

// Check judges the body of a 200 to op.
type Check func(op *Op, body []byte) Verdict

// Record is one operation as the generator saw it.
type Record struct {
	// At is when it was sent; Dur how long it took, retries included.
	At  time.Time
	Dur time.Duration
	Op  Op
	// Target is the node asked first; Served the one whose answer or
	// error counts (another after a retry). Each is the Target's Name, or
	// its URL.
	Target, Served string
	// Retried is true when another request was sent for the operation.
	Retried bool
	// Status is the HTTP status; 0 with Err when no answer came.
	Status int
	Err    error
	// Body is the body, with Config.KeepBodies.
	Body []byte
	// Unreached is a write's Ringcache-Unreached header.
	Unreached string
	// Verdict is Check's, for a 200 to a GET.
	Verdict Verdict
	// Note is what Before left.
	Note any
}

// Run is a run of load under way.
type Run struct {
	cfg     Config
	workers []*worker
	stop    chan struct{}
	stopped sync.Once
	done    sync.WaitGroup
	dropped atomic.Int64
	started atomic.Int64 // operations started, against Requests
	start   time.Time
	timer   *time.Timer // ends a run of a Duration
}

// Start starts cfg's workers.
func Start(ctx context.Context, cfg Config) (*Run, error) {
	ts := cfg.Targets
	switch {
	case cfg.Targets == nil || cfg.Source == nil:
		return nil, errors.New("loadgen: a run needs targets and a source")
	case cfg.Workers < 1:
		return nil, errors.New("loadgen: a run needs a worker")
	case cfg.Rate < 0 || cfg.Duration < 0 || cfg.Requests < 0 || cfg.ValueSize < 0 || cfg.RetryAfter < 0:
		return nil, errors.New("loadgen: negative setting")
	}
	if cfg.Client == nil {
		cfg.Client = NewClient(cfg.Workers, len(ts.Load()), 30*time.Second)
	}
	r := &Run{cfg: cfg, stop: make(chan struct{}), start: time.Now()}
	if cfg.Duration > 0 {
		r.timer = time.AfterFunc(cfg.Duration, r.halt)
	}
	var jobs chan Op
	if cfg.Rate > 0 {
		jobs = make(chan Op)
	}
	for i := range cfg.Workers {
		w := newWorker(r, i)
		r.workers = append(r.workers, w)
		r.done.Go(func() { w.run(ctx, jobs) })
	}
	if jobs != nil {
		// Once the workers are there: a tick before would find none idle.
		r.done.Go(func() {
			defer close(jobs)
			r.pace(ctx, jobs)
		})
	}
	return r, nil
}

// Do runs cfg to its end and returns what it measured.
func Do(ctx context.Context, cfg Config) (Result, error) {
	r, err := Start(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	return r.Wait(), nil
}

// pace hands an operation to an idle worker Rate times a second.
func (r *Run) pace(ctx context.Context, jobs chan<- Op) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 1<<32))
	tick := time.NewTicker(time.Duration(float64(time.Second) / r.cfg.Rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.stop:
			return
		case <-tick.C:
		}
		if !r.take() {
			return
		}
		var op Op
		if !r.cfg.Source.Next(rng, &op) {
			continue
		}
		select {
		case jobs <- op:
		default:
			r.dropped.Add(1)
		}
	}
}

// take counts an operation against Requests, and reports whether it may
// start.
func (r *Run) take() bool {
	return r.cfg.Requests <= 0 || r.started.Add(1) <= r.cfg.Requests
}

func (r *Run) halt() { r.stopped.Do(func() { close(r.stop) }) }

func (r *Run) halted() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// Stop ends the run: no operation starts after it. It waits for those in
// flight and returns what the run measured.
func (r *Run) Stop() Result {
	r.halt()
	return r.Wait()
}

// Wait waits for the run to end and returns what it measured.
func (r *Run) Wait() Result {
	r.done.Wait()
	if r.timer != nil {
		r.timer.Stop()
	}
	var total Result
	for _, w := range r.workers {
		total.Merge(&w.res)
	}
	total.Dropped = r.dropped.Load()
	total.Elapsed = time.Since(r.start)
	return total
}

// Progress returns the operations done so far and how many of them failed
// (no answer, an unexpected status, a wrong value).
func (r *Run) Progress() (done, failed int64) {
	for _, w := range r.workers {
		done += w.done.Load()
		failed += w.fails.Load()
	}
	return done, failed
}

// Dropped returns the ticks of an open loop that found every worker busy.
func (r *Run) Dropped() int64 { return r.dropped.Load() }
