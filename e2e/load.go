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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
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
// its targets, and records every response. A request whose connection is
// refused or reset is retried once on the next target: that is what a client
// with a list of nodes does when one of them has just died; any other failure
// is recorded as it is. Load is safe for concurrent use.
type Load struct {
	cfg     LoadConfig
	client  *http.Client
	targets atomic.Pointer[[]Target]
	next    atomic.Uint64
	nextW   atomic.Uint64
	seq     atomic.Uint64
	dropped atomic.Int64
	paused  atomic.Bool // writes held back
	written map[string]bool

	mu     sync.Mutex
	recs   []Record
	writes []Op
	since  time.Time

	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup
}

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
		cfg:    cfg,
		client: &http.Client{Timeout: cfg.Timeout, Transport: withWriteToken(tr, cfg.WriteToken)},
		stop:   make(chan struct{}),
	}
	l.written = make(map[string]bool, len(cfg.WriteKeys))
	for _, k := range cfg.WriteKeys {
		l.written[k] = true
	}
	l.targets.Store(&[]Target{})
	return l, nil
}

// SetTargets replaces the nodes requests go to.
func (l *Load) SetTargets(ts []Target) {
	ts = slices.Clone(ts)
	l.targets.Store(&ts)
}

// Targets returns the nodes requests go to.
func (l *Load) Targets() []Target { return slices.Clone(*l.targets.Load()) }

// Start sends requests until Stop is called or ctx ends.
func (l *Load) Start(ctx context.Context) {
	l.mu.Lock()
	l.since = time.Now()
	l.mu.Unlock()
	jobs := make(chan string)
	for range l.cfg.Workers {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			for key := range jobs {
				l.record(l.do(ctx, key))
			}
		}()
	}
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		defer close(jobs)
		tick := time.NewTicker(time.Second / time.Duration(l.cfg.Rate))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.stop:
				return
			case <-tick.C:
			}
			key := l.cfg.Keys[rand.IntN(len(l.cfg.Keys))]
			if len(l.cfg.WriteKeys) > 0 && rand.Float64() < l.cfg.WriteShare {
				key = l.cfg.WriteKeys[rand.IntN(len(l.cfg.WriteKeys))]
			}
			select {
			case jobs <- key:
			default:
				l.dropped.Add(1)
			}
		}
	}()
	if len(l.cfg.WriteKeys) > 0 && l.cfg.WriteRate > 0 {
		l.startWrites(ctx)
	}
}

// startWrites sends writes at WriteRate, each on its own goroutine: a
// write held by a paused node must not delay the ones after it, and the
// rate is low enough that they cannot pile up beyond the timeout.
func (l *Load) startWrites(ctx context.Context) {
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		tick := time.NewTicker(time.Second / time.Duration(l.cfg.WriteRate))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.stop:
				return
			case <-tick.C:
			}
			if l.paused.Load() {
				continue
			}
			key := l.cfg.WriteKeys[rand.IntN(len(l.cfg.WriteKeys))]
			kind := Put
			if rand.Float64() < l.cfg.DeleteShare {
				kind = Delete
			}
			l.done.Add(1)
			go func() {
				defer l.done.Done()
				op := l.write(ctx, kind, key)
				l.mu.Lock()
				l.writes = append(l.writes, op)
				l.mu.Unlock()
			}()
		}
	}()
}

// write sends one PUT or DELETE through the next target, retried once on
// the one after when the first refused or reset the connection: a retried
// PUT writes the same value, so applying it twice is applying it once.
func (l *Load) write(ctx context.Context, kind Kind, key string) Op {
	ts := *l.targets.Load()
	var value []byte
	if kind == Put {
		value = fmt.Appendf(nil, "%s #%d %s", l.cfg.Writer, l.seq.Add(1), key)
	}
	h := l.cfg.History
	if h == nil {
		h = NewHistory() // records nothing anyone reads; keeps one code path
	}
	if len(ts) == 0 {
		return h.Begin(kind, key, "", value).End("", 0, errors.New("no targets"), "")
	}
	i := int(l.nextW.Add(1) % uint64(len(ts)))
	p := h.Begin(kind, key, ts[i].Node, value)
	status, unreached, err := Write(ctx, l.client, kind, ts[i].URL, l.cfg.Group, key, value)
	node := ts[i].Node
	if err != nil && len(ts) > 1 && Retryable(err) {
		j := (i + 1) % len(ts)
		node = ts[j].Node
		status, unreached, err = Write(ctx, l.client, kind, ts[j].URL, l.cfg.Group, key, value)
	}
	return p.End(node, status, err, unreached)
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
		close(l.stop)
		l.done.Wait()
		l.client.CloseIdleConnections()
	})
}

// Take returns what was recorded since the last Take (or Start) and starts a
// new window.
func (l *Load) Take() Window {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	w := Window{Records: l.recs, Writes: l.writes, Dropped: int(l.dropped.Swap(0)), Start: l.since, End: now}
	l.recs, l.writes, l.since = nil, nil, now
	return w
}

func (l *Load) record(r Record) {
	r.Written = l.written[r.Key]
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

// do sends one request, retrying once on the next target when the first one
// refused or reset the connection.
func (l *Load) do(ctx context.Context, key string) Record {
	ts := *l.targets.Load()
	rec := Record{At: time.Now(), Key: key}
	if len(ts) == 0 {
		rec.Err = "no targets"
		return rec
	}
	i := int(l.next.Add(1) % uint64(len(ts)))
	rec.Node = ts[i].Node
	// One attempt: at ts[i], then once at the next target when ts[i]
	// refused or reset the connection.
	attempt := func() (int, []byte, bool, error) {
		rec.Served = ts[i].Node
		status, body, again, err := l.get(ctx, ts[i].URL, key)
		if err != nil && len(ts) > 1 && Retryable(err) {
			j := (i + 1) % len(ts)
			rec.Retried = true
			rec.Served = ts[j].Node
			status, body, again, err = l.get(ctx, ts[j].URL, key)
		}
		return status, body, again, err
	}
	status, body, again, err := attempt()
	// A 503 with Retry-After asks the client to come back: the generator
	// does, as a client should, for up to retryAfterFor.
	for again && time.Since(rec.At) < retryAfterFor {
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			again = false
			continue
		case <-t.C:
		}
		rec.Retried = true
		status, body, again, err = attempt()
	}
	rec.Status, rec.Body = status, body
	if err != nil {
		rec.Err = err.Error()
	}
	rec.Dur = time.Since(rec.At)
	return rec
}

// retryAfterFor bounds how long a read answered 503 with Retry-After is
// asked again: longer than the rings take to drop a dead or paused node
// (its lease, the hold-down), after which the key has another owner.
const retryAfterFor = 15 * time.Second

// get sends one attempt; a body cut short is an error like a failed dial.
// again reports a 503 with Retry-After.
func (l *Load) get(ctx context.Context, base, key string) (status int, body []byte, again bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		base+"/cache/"+url.PathEscape(l.cfg.Group)+"/"+url.PathEscape(key), nil)
	if err != nil {
		return 0, nil, false, err
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, nil, false, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, false, err
	}
	again = resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != ""
	return resp.StatusCode, body, again, nil
}

// Retryable reports whether err means the node refused or reset the
// connection. Through Docker's userland proxy (docker-proxy, which publishes
// the ports here) a refused or reset connection to the container arrives as
// an accepted connection closed before any response: io.EOF or
// io.ErrUnexpectedEOF, or net/http's unexported "server closed idle
// connection" when that happens on a new connection, so those count too.
func Retryable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "server closed idle connection")
}
