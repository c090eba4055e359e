package loadgen

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// maxBody bounds the body a worker reads, so that a wrong answer cannot
// exhaust memory.
const maxBody = 256 << 20

// NewClient returns a client for workers requests in flight over targets
// nodes: one keep-alive connection per worker per node (each worker cycles
// through the nodes, and a connection closed for want of an idle slot
// would make a run measure TCP handshakes), and timeout as the bound on
// an answer's head, which needs no timer per request.
func NewClient(workers, targets int, timeout time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          workers * max(targets, 1),
		MaxIdleConnsPerHost:   workers,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: timeout,
		DisableCompression:    true,
	}}
}

// padded keeps a worker's progress counter on its own cache line, so that
// the progress reader does not slow the workers down.
type padded struct {
	atomic.Int64
	_ [56]byte
}

// worker sends requests one after another. Everything a request needs is
// built once and reused.
type worker struct {
	r   *Run
	rng *rand.Rand
	// ts are the targets urls and paths were built for; urls are their
	// parsed URLs (a private copy: the request points into it), paths
	// their base paths + "/cache/<group>/".
	ts     []Target
	urls   []url.URL
	paths  []string
	node   int
	req    *http.Request
	ctype  []string      // the Content-Type header of a Put
	path   []byte        // scratch for the path
	seed   []byte        // scratch for a value's seed
	body   []byte        // the read buffer
	value  []byte        // a Put's value by the value rule
	reader *bytes.Reader // over the value
	done   padded
	fails  padded
	res    Result
}

func newWorker(r *Run, id int) *worker {
	w := &worker{r: r, rng: rand.New(rand.NewPCG(r.cfg.Seed, uint64(id))), node: id - 1,
		body: make([]byte, 0, max(r.cfg.ValueSize, 4096)), reader: &bytes.Reader{}}
	if r.cfg.ContentType != "" {
		w.ctype = []string{r.cfg.ContentType}
	}
	w.renew(context.Background())
	return w
}

// renew gives the worker a request of its own. It is reused while
// requests succeed: net/http allows that once the response body is
// closed. After an error there was no response, and the transport may
// still be writing the request in another goroutine (after a
// response-header timeout, say): the next request must not touch what
// that one uses, its body included.
func (w *worker) renew(ctx context.Context) {
	w.req, _ = http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost/", nil) // cannot fail
	if w.r.cfg.Token != "" {
		w.req.Header.Set("Authorization", "Bearer "+w.r.cfg.Token)
	}
	w.urls = append([]url.URL(nil), w.urls...)
	w.value, w.reader = nil, &bytes.Reader{}
}

// run does operations until the run ends: from jobs in an open loop, from
// the Source in a closed one.
func (w *worker) run(ctx context.Context, jobs <-chan Op) {
	w.renew(ctx)
	if jobs != nil {
		for op := range jobs {
			w.count(ctx, w.do(ctx, &op))
		}
		return
	}
	var op Op
	for !w.r.halted() && ctx.Err() == nil && w.r.take() && w.r.cfg.Source.Next(w.rng, &op) {
		w.count(ctx, w.do(ctx, &op))
	}
}

func (w *worker) count(ctx context.Context, ok bool) {
	if ctx.Err() != nil {
		return // cut off by the caller: not the cluster's failure
	}
	w.done.Add(1)
	if !ok {
		w.fails.Add(1)
	}
}

// do carries out op, with the retries the run asks for, and records it.
// It reports whether it succeeded (with a right value, for a checked GET).
func (w *worker) do(ctx context.Context, op *Op) bool {
	ts := w.r.cfg.Targets.Load()
	rec := Record{At: time.Now(), Op: *op}
	if len(ts) > 0 {
		if len(ts) != len(w.ts) || &ts[0] != &w.ts[0] {
			w.target(ts)
		}
		w.node = (w.node + 1) % len(ts)
		rec.Target = w.ts[w.node].name()
	}
	if w.r.cfg.Before != nil {
		w.r.cfg.Before(&rec)
	}
	if len(ts) == 0 {
		rec.Err = errors.New("no targets")
		w.res.Transport++
		w.observe(&rec)
		return false
	}
	first := w.node
	// One attempt: at the first target, then once at the next when it
	// refused or reset the connection.
	attempt := func() (status int, again bool, err error) {
		i := first
		status, again, err = w.send(ctx, i, op, &rec)
		if err != nil && w.r.cfg.RetryRefused && len(ts) > 1 && retryable(err) && ctx.Err() == nil {
			i = (i + 1) % len(ts)
			rec.Retried = true
			status, again, err = w.send(ctx, i, op, &rec)
		}
		rec.Served = w.ts[i].name()
		return status, again, err
	}
	status, again, err := attempt()
	for again && op.Kind == Get && time.Since(rec.At) < w.r.cfg.RetryAfter {
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			again = false
			continue
		case <-t.C:
		}
		rec.Retried = true
		status, again, err = attempt()
	}
	rec.Dur = time.Since(rec.At)
	rec.Status, rec.Err = status, err
	if ctx.Err() != nil && err != nil {
		w.observe(&rec)
		return false
	}
	w.res.Hist.Record(rec.Dur)
	if err != nil {
		w.res.Transport++
		w.noteError(rec.Served, err)
		w.observe(&rec)
		return false
	}
	code := status
	if code < 0 || code >= len(w.res.Status) {
		code = 0
	}
	w.res.Status[code]++
	ok := status >= 200 && status < 300
	switch {
	case op.Kind != Get:
		w.res.BytesOut += w.req.ContentLength
	case status == http.StatusOK && w.r.cfg.Check != nil:
		w.res.BytesIn += int64(len(w.body))
		rec.Verdict = w.r.cfg.Check(op, w.body)
		switch rec.Verdict {
		case Right:
			w.res.Checked++
		case Other:
			w.res.Checked++
			w.res.Other++
		case Wrong:
			w.res.Checked++
			w.res.Wrong++
			ok = false
		}
	default:
		w.res.BytesIn += int64(len(w.body))
		ok = ok && status == http.StatusOK
	}
	w.observe(&rec)
	return ok
}

func (w *worker) observe(rec *Record) {
	if w.r.cfg.Observe == nil {
		return
	}
	if w.r.cfg.KeepBodies && rec.Err == nil && rec.Op.Kind == Get {
		rec.Body = bytes.Clone(w.body)
	}
	w.r.cfg.Observe(rec)
}

func (t Target) name() string {
	if t.Name != "" {
		return t.Name
	}
	return t.URL
}

// target builds the URLs and paths of ts. A target whose URL does not
// parse keeps an empty URL, which fails every request sent to it.
func (w *worker) target(ts []Target) {
	w.ts, w.urls, w.paths = ts, make([]url.URL, len(ts)), make([]string, len(ts))
	for i, t := range ts {
		u, err := url.Parse(t.URL)
		if err != nil {
			continue
		}
		w.paths[i] = strings.TrimRight(u.EscapedPath(), "/") + "/cache/" + url.PathEscape(w.r.cfg.Group) + "/"
		u.Path, u.RawPath = "", ""
		w.urls[i] = *u
	}
}

// send sends one request for op to target i, reads its answer into
// w.body, and returns its status and whether it was a 503 with
// Retry-After.
func (w *worker) send(ctx context.Context, i int, op *Op, rec *Record) (status int, again bool, err error) {
	u := &w.urls[i]
	w.path = append(w.path[:0], w.paths[i]...)
	if op.Name != "" {
		w.path = append(w.path, url.PathEscape(op.Name)...)
	} else {
		w.path = append(w.path, w.r.cfg.KeyPrefix...)
		w.path = strconv.AppendInt(w.path, int64(op.Key), 10)
	}
	u.Opaque = string(w.path) // the path as sent: already escaped
	w.req.URL, w.req.Host, w.req.Method = u, u.Host, op.Kind.method()
	w.req.Body, w.req.GetBody, w.req.ContentLength = nil, nil, 0
	delete(w.req.Header, "Content-Type")
	if op.Kind == Put {
		v := op.Value
		if v == nil {
			v = w.ruleValue(op.Key)
		}
		w.reader.Reset(v)
		w.req.Body, w.req.ContentLength = io.NopCloser(w.reader), int64(len(v))
		// A replayable body lets the transport retry a PUT on a
		// kept-alive connection that the server closed just before it
		// was reused.
		w.req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(v)), nil }
		if w.ctype != nil {
			w.req.Header["Content-Type"] = w.ctype
		}
	}
	resp, err := w.r.cfg.Client.Do(w.req)
	if err != nil {
		w.renew(ctx)
		return 0, false, err
	}
	w.body = w.body[:0]
	err = w.readBody(resp.Body)
	resp.Body.Close()
	if err != nil {
		w.renew(ctx)
		return 0, false, err
	}
	if op.Kind != Get {
		rec.Unreached = resp.Header.Get("Ringcache-Unreached")
	}
	again = resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != ""
	return resp.StatusCode, again, nil
}

// ruleValue returns key k's value by the value rule, in a buffer of the
// worker's that the next request may reuse.
func (w *worker) ruleValue(k int) []byte {
	if len(w.value) != w.r.cfg.ValueSize {
		w.value = make([]byte, w.r.cfg.ValueSize)
	}
	w.seed = PutSeed(w.seed[:0], w.r.cfg.Group, w.r.cfg.KeyPrefix, k)
	Fill(w.value, w.seed)
	return w.value
}

// readBody reads a whole body into w.body, growing it as needed.
func (w *worker) readBody(r io.Reader) error {
	for {
		if len(w.body) == cap(w.body) {
			if len(w.body) >= maxBody {
				return errors.New("body over 256 MiB")
			}
			w.body = append(w.body, 0)[:len(w.body)]
		}
		n, err := r.Read(w.body[len(w.body):cap(w.body)])
		w.body = w.body[:len(w.body)+n]
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// noteError counts an error by node and short reason; only the first few
// distinct reasons are kept, so a storm of errors cannot grow the map.
func (w *worker) noteError(node string, err error) {
	msg := node + ": " + Reason(err)
	if w.res.Errs == nil {
		w.res.Errs = map[string]int64{}
	}
	if _, ok := w.res.Errs[msg]; ok || len(w.res.Errs) < 8 {
		w.res.Errs[msg]++
	}
}

// NoAnswerInTime is Reason's for a timeout.
const NoAnswerInTime = "no answer in time"

// Reason says in a few words why a request got no answer.
func Reason(err error) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err // its URL, with the path in Opaque, would read oddly
	}
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &dnsErr):
		return "no such host " + dnsErr.Name
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return NoAnswerInTime
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return opErr.Err.Error()
	}
	return err.Error()
}

// retryable reports whether err means the node refused or reset the
// connection. Through Docker's userland proxy (docker-proxy, which
// publishes a container's ports) a refused or reset connection to the
// container arrives as an accepted connection closed before any
// response: io.EOF or io.ErrUnexpectedEOF, or net/http's unexported
// "server closed idle connection" when that happens on a new connection,
// so those count too.
func retryable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "server closed idle connection")
}
