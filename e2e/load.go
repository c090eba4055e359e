//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/internal/loadgen"
)

// Keys returns n keys, "key-0000" onwards.
func Keys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%04d", i)
	}
	return keys
}

// Target is a node the load generator sends requests to.
type Target struct {
	// Node is the node's name, as the Cluster knows it.
	Node string
	// URL is the base URL of its public API.
	URL string
}

// LoadConfig configures a Load.
type LoadConfig struct {
	// Group is the cache group to read; required.
	Group string
	// Keys are the keys to read, picked uniformly at random; required.
	Keys []string
	// Rate is requests per second: if zero, 200.
	Rate int
	// Workers bounds the requests in flight: if zero, 256 (requests for a
	// dead node's keys can stall for seconds until the ring drops it). A tick that finds
	// every worker busy is counted as dropped, so a stalled cluster shows up
	// in the figures instead of in an ever longer queue.
	Workers int
	// Timeout bounds each attempt: if zero, 10s.
	Timeout time.Duration

	// WriteKeys are keys the generator also writes, with PUT and DELETE,
	// round robin over the targets; none: it only reads. Their reads are
	// not checked against the origin's value (a History's Checker does
	// that), and no other writer may write them.
	WriteKeys []string
	// WriteRate is writes per second: if zero, 10.
	WriteRate int
	// WriteShare is the fraction of reads that go to WriteKeys: if zero,
	// 0.25, so that written keys are read often enough on every node to
	// become hot copies on the nodes that do not own them.
	WriteShare float64
	// DeleteShare is the fraction of writes that are DELETEs: if zero, 0.2.
	DeleteShare float64
	// Writer names the generator in the values it writes: if empty, "load".
	// Each value is "<writer> #<sequence> <key>", unique in the run.
	Writer string
	// WriteToken, if not empty, is sent with every write as a bearer token.
	WriteToken string
	// History, if not nil, receives every read and write.
	History *History
}

// Record is one client request as the generator saw it: the node asked
// first, the node whose answer counts (another one after a retry) and what
// came back.
type Record struct {
	// At is when the request was sent.
	At time.Time
	// Key is the key requested.
	Key string
	// Node is the node asked first.
	Node string
	// Served is the node whose answer or error is recorded.
	Served string
	// Retried is true when the first node refused or reset the connection,
	// or answered 503 with Retry-After (asked again, for up to
	// retryAfterFor).
	Retried bool
	// Status is the HTTP status, or 0 when no response came.
	Status int
	// Err is the transport error, if any.
	Err string
	// Body is the response body.
	Body []byte
	// Dur is how long the request took, retry included.
	Dur time.Duration
	// Written is true for a key the generator writes: its value is the
	// History checker's to judge, not the origin's.
	Written bool
}

// Window is what the generator recorded between two calls to Take.
type Window struct {
	// Records holds every request that completed in the window.
	Records []Record
	// Dropped counts ticks at which every worker was busy.
	Dropped int
	// Writes holds every write that completed in the window.
	Writes []Op
	// Start and End bound the window.
	Start, End time.Time
}

// Load sends GET requests for random keys at a steady rate, round robin over
// its targets, and records every response: internal/loadgen's open loop. A
// request whose connection is refused or reset is retried once on the next
// target: that is what a client with a list of nodes does when one of them
// has just died; a 503 with Retry-After is asked again, a second apart, for
// up to retryAfterFor; any other failure is recorded as it is. Load is safe
// for concurrent use.
type Load struct {
	cfg     LoadConfig
	client  *http.Client
	targets *loadgen.Targets
	seq     atomic.Uint64
	paused  atomic.Bool // writes held back
	written map[string]bool

	mu     sync.Mutex
	recs   []Record
	writes []Op
	since  time.Time
	reads  *loadgen.Run
	wrun   *loadgen.Run
	taken  int64 // the reads' dropped ticks already taken

	stopOnce sync.Once
}

// writeWorkers bounds the writes in flight: a write held by a paused node
// must not delay the ones after it, and at WriteRate they cannot pile up
// this far within a request's timeout.
const writeWorkers = 256

// NewLoad returns a generator for cfg; Start sets it going.
func NewLoad(cfg LoadConfig) (*Load, error) {
	if cfg.Group == "" || len(cfg.Keys) == 0 {
		return nil, errors.New("e2e: load needs a group and keys")
	}
	if cfg.Rate == 0 {
		cfg.Rate = 200
	}
	if cfg.Workers == 0 {
		cfg.Workers = 256
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.WriteRate == 0 {
		cfg.WriteRate = 10
	}
	if cfg.WriteShare == 0 {
		cfg.WriteShare = 0.25
	}
	if cfg.DeleteShare == 0 {
		cfg.DeleteShare = 0.2
	}
	if cfg.Writer == "" {
		cfg.Writer = "load"
	}
	if cfg.Rate < 0 || cfg.Workers < 0 || cfg.Timeout < 0 || cfg.WriteRate < 0 {
		return nil, fmt.Errorf("e2e: negative load setting in %+v", cfg)
	}
	if cfg.WriteShare < 0 || cfg.WriteShare > 1 || cfg.DeleteShare < 0 || cfg.DeleteShare > 1 {
		return nil, fmt.Errorf("e2e: WriteShare and DeleteShare must be in [0, 1]: %v, %v", cfg.WriteShare, cfg.DeleteShare)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = cfg.Workers
	tr.IdleConnTimeout = clientIdleTimeout
	l := &Load{
		cfg:     cfg,
		client:  &http.Client{Timeout: cfg.Timeout, Transport: withWriteToken(tr, cfg.WriteToken)},
		targets: loadgen.NewTargets(),
	}
	l.written = make(map[string]bool, len(cfg.WriteKeys))
	for _, k := range cfg.WriteKeys {
		l.written[k] = true
	}
	return l, nil
}

// SetTargets replaces the nodes requests go to.
func (l *Load) SetTargets(ts []Target) {
	lts := make([]loadgen.Target, len(ts))
	for i, t := range ts {
		lts[i] = loadgen.Target{Name: t.Node, URL: t.URL}
	}
	l.targets.Set(lts)
}

// Targets returns the nodes requests go to.
func (l *Load) Targets() []Target {
	lts := l.targets.Load()
	ts := make([]Target, len(lts))
	for i, t := range lts {
		ts[i] = Target{Node: t.Name, URL: t.URL}
	}
	return ts
}

// Start sends requests until Stop is called or ctx ends.
func (l *Load) Start(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.since = time.Now()
	base := loadgen.Config{Client: l.client, Targets: l.targets, Group: l.cfg.Group, RetryRefused: true,
		Seed: rand.Uint64()}
	reads := base
	reads.Workers, reads.Rate = l.cfg.Workers, float64(l.cfg.Rate)
	reads.RetryAfter, reads.KeepBodies, reads.Observe = retryAfterFor, true, l.record
	reads.Source = loadgen.SourceFunc(func(r *rand.Rand, op *loadgen.Op) bool {
		key := l.cfg.Keys[r.IntN(len(l.cfg.Keys))]
		if len(l.cfg.WriteKeys) > 0 && r.Float64() < l.cfg.WriteShare {
			key = l.cfg.WriteKeys[r.IntN(len(l.cfg.WriteKeys))]
		}
		*op = loadgen.Op{Kind: loadgen.Get, Name: key}
		return true
	})
	l.reads = mustStart(ctx, reads)
	if len(l.cfg.WriteKeys) == 0 || l.cfg.WriteRate <= 0 {
		return
	}
	writes := base
	writes.Workers, writes.Rate = writeWorkers, float64(l.cfg.WriteRate)
	writes.ContentType = "text/plain; charset=utf-8"
	writes.Source = loadgen.SourceFunc(func(r *rand.Rand, op *loadgen.Op) bool {
		if l.paused.Load() {
			return false
		}
		key := l.cfg.WriteKeys[r.IntN(len(l.cfg.WriteKeys))]
		*op = loadgen.Op{Kind: loadgen.Delete, Name: key}
		if r.Float64() >= l.cfg.DeleteShare {
			// A retried PUT writes the same value, so applying it twice
			// is applying it once.
			*op = loadgen.Op{Kind: loadgen.Put, Name: key, Value: fmt.Appendf(nil, "%s #%d %s", l.cfg.Writer, l.seq.Add(1), key)}
		}
		return true
	})
	writes.Before = func(r *loadgen.Record) {
		r.Note = l.history().Begin(kindOf(r.Op.Kind), r.Op.Name, r.Target, r.Op.Value)
	}
	writes.Observe = func(r *loadgen.Record) {
		op := r.Note.(*Pending).End(r.Served, r.Status, r.Err, r.Unreached)
		l.mu.Lock()
		l.writes = append(l.writes, op)
		l.mu.Unlock()
	}
	l.wrun = mustStart(ctx, writes)
}

// mustStart starts cfg, which Start built valid.
func mustStart(ctx context.Context, cfg loadgen.Config) *loadgen.Run {
	r, err := loadgen.Start(ctx, cfg)
	if err != nil {
		panic(err)
	}
	return r
}

// history is where the writes are announced: the configured History, or
// one nobody reads, which keeps one code path.
func (l *Load) history() *History {
	if l.cfg.History != nil {
		return l.cfg.History
	}
	return NewHistory()
}

func kindOf(k loadgen.Kind) Kind {
	switch k {
	case loadgen.Put:
		return Put
	case loadgen.Delete:
		return Delete
	}
	return Read
}

// Write sends one PUT (of value) or DELETE of key through the node at base
// and returns the status and the Ringcache-Unreached header.
func Write(ctx context.Context, client *http.Client, kind Kind, base, group, key string, value []byte) (int, string, error) {
	method := http.MethodPut
	if kind == Delete {
		method, value = http.MethodDelete, nil
	}
	req, err := http.NewRequestWithContext(ctx, method,
		base+"/cache/"+url.PathEscape(group)+"/"+url.PathEscape(key), bytes.NewReader(value))
	if err != nil {
		return 0, "", err
	}
	if kind == Put {
		req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		req.Body, req.ContentLength = nil, 0
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, "", err
	}
	return resp.StatusCode, resp.Header.Get("Ringcache-Unreached"), nil
}

// SetWriting starts (true) or holds back (false) the writes; they run from
// Start unless held back.
func (l *Load) SetWriting(on bool) { l.paused.Store(!on) }

// Stop stops sending and waits for the requests in flight. Calling it
// again does nothing.
func (l *Load) Stop() {
	l.stopOnce.Do(func() {
		l.mu.Lock()
		reads, writes := l.reads, l.wrun
		l.mu.Unlock()
		for _, r := range []*loadgen.Run{reads, writes} {
			if r != nil {
				r.Stop()
			}
		}
		l.client.CloseIdleConnections()
	})
}

// Take returns what was recorded since the last Take (or Start) and starts a
// new window.
func (l *Load) Take() Window {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	w := Window{Records: l.recs, Writes: l.writes, Start: l.since, End: now}
	if l.reads != nil {
		d := l.reads.Dropped()
		w.Dropped, l.taken = int(d-l.taken), d
	}
	l.recs, l.writes, l.since = nil, nil, now
	return w
}

// record records a read.
func (l *Load) record(lr *loadgen.Record) {
	r := Record{At: lr.At, Key: lr.Op.Name, Node: lr.Target, Served: lr.Served, Retried: lr.Retried,
		Status: lr.Status, Body: lr.Body, Dur: lr.Dur, Written: l.written[lr.Op.Name]}
	if lr.Err != nil {
		r.Err = lr.Err.Error()
	}
	if h := l.cfg.History; h != nil {
		h.Add(r.Op())
	}
	l.mu.Lock()
	l.recs = append(l.recs, r)
	l.mu.Unlock()
}

// Op returns the read as a History holds it; its Value shares r.Body.
func (r Record) Op() Op {
	return Op{Kind: Read, Key: r.Key, Node: r.Served, Start: r.At, End: r.At.Add(r.Dur),
		Status: r.Status, Err: r.Err, Value: r.Body}
}

// retryAfterFor bounds how long a read answered 503 with Retry-After is
// asked again: longer than the rings take to drop a dead or paused node
// (its lease, the hold-down), after which the key has another owner.
const retryAfterFor = 15 * time.Second
