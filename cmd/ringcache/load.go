package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/transport/origin"
)

// loadSpec is what every worker of one phase shares. It is read-only while
// the workers run.
type loadSpec struct {
	client  *http.Client
	nodes   []url.URL // the nodes' base URLs; workers copy them
	prefix  []string  // per node: its base path + "/cache/<group>/<key prefix>"
	keys    keyPicker
	put     bool   // PUT each key once (the fill phase) rather than GET
	valSize int    // PUT: the value size; GET: the expected size, 0 if unknown
	group   string // for the value seeds
	kprefix string
	token   string
	check   checkMode
	demo    bool          // the group's origin is the demo origin
	demoLen *atomic.Int64 // checkDemo: the length of the first demo value seen, -1 before

	stop      *atomic.Bool  // set when the duration is over
	remaining *atomic.Int64 // with -n: requests left to start; nil: until stop
}

type checkMode int

const (
	checkNone  checkMode = iota // an http or dir origin: nothing to compare with
	checkDemo                   // every body must be the demo origin's value
	checkBench                  // bench's own PUT values (or, if evicted since, the demo's)
)

// padded keeps each worker's progress counter on its own cache line, so
// that the progress reader does not slow the workers down.
type padded struct {
	atomic.Int64
	_ [56]byte
}

// worker runs requests one after another. Everything a request needs is
// built once here and reused, so that the loop allocates only what
// net/http itself does (plus the request line's path string).
type worker struct {
	spec   *loadSpec
	rng    *rand.Rand
	urls   []url.URL // a private copy: the request points into it
	node   int
	req    *http.Request
	path   []byte        // scratch for the path
	seed   []byte        // scratch for the value seed
	body   []byte        // the PUT value, or the GET's read buffer
	reader *bytes.Reader // over body, for a PUT
	done   *padded       // requests finished, for the progress line
	fails  *padded       // errors and wrong values, for the progress line
	res    loadResult
}

// loadResult is what one worker, or the sum of them, measured.
type loadResult struct {
	hist      histogram
	status    [600]int64    // by status code; other codes count in 0
	transport int64         // requests that got no answer
	wrong     int64         // bodies that are not the key's value
	other     int64         // bodies with the key's other known value (see phaseReport.Other)
	checked   int64         // bodies compared with their expected value
	bytesIn   int64         // body bytes read
	bytesOut  int64         // body bytes sent
	cpu       time.Duration // the process's CPU time over the phase (set on the sum)
	errs      map[string]int64
}

func (r *loadResult) requests() int64 {
	n := r.transport
	for _, c := range r.status {
		n += c
	}
	return n
}

func (r *loadResult) merge(o *loadResult) {
	r.hist.merge(&o.hist)
	for i, c := range o.status {
		r.status[i] += c
	}
	r.transport += o.transport
	r.wrong += o.wrong
	r.other += o.other
	r.checked += o.checked
	r.bytesIn += o.bytesIn
	r.bytesOut += o.bytesOut
	for k, v := range o.errs {
		if r.errs == nil {
			r.errs = map[string]int64{}
		}
		r.errs[k] += v
	}
}

func newWorker(spec *loadSpec, id int, seed uint64, done, fails *padded) *worker {
	w := &worker{spec: spec, rng: rand.New(rand.NewPCG(seed, uint64(id))),
		node: id % len(spec.nodes), done: done, fails: fails}
	if !spec.put {
		w.body = make([]byte, 0, max(spec.valSize, 4096)) // renew makes a PUT's
	}
	w.renew(context.Background())
	return w
}

// renew gives the worker a request, URLs and body reader of its own. The
// request is reused while requests succeed: net/http allows that once the
// response body is closed. After an error there was no response, and the
// transport may still be writing the request in another goroutine (after
// a response-header timeout, say): the next request must not touch what
// that one uses.
func (w *worker) renew(ctx context.Context) {
	s := w.spec
	w.urls = append([]url.URL(nil), s.nodes...)
	method := http.MethodGet
	if s.put {
		method = http.MethodPut
	}
	w.req, _ = http.NewRequestWithContext(ctx, method, s.nodes[0].String(), nil) // cannot fail: the URL parsed before
	if s.token != "" {
		w.req.Header.Set("Authorization", "Bearer "+s.token)
	}
	if s.put {
		// The old request's body may be read still, too.
		w.body = make([]byte, s.valSize)
		w.reader = &bytes.Reader{}
		body := w.body
		// A replayable body lets the transport retry a PUT on a kept-alive
		// connection that the server closed just before it was reused.
		w.req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
}

// run sends requests until the phase ends: the duration is over, -n
// requests were started, the keys of a PUT fill are done, or ctx ends.
// keys, for a fill, are the indexes this worker PUTs.
func (w *worker) run(ctx context.Context, keys []int) {
	w.renew(ctx)
	for i := 0; ; i++ {
		var k int
		switch {
		case w.spec.put:
			if i >= len(keys) {
				return
			}
			k = keys[i]
		case w.spec.stop.Load():
			return
		default:
			if w.spec.remaining != nil && w.spec.remaining.Add(-1) < 0 {
				return
			}
			k = w.spec.keys.pick(w.rng)
		}
		if w.spec.stop.Load() || ctx.Err() != nil {
			return
		}
		ok := w.one(ctx, k)
		if ctx.Err() != nil {
			return // cut off by Ctrl-C: not the cluster's error, not counted
		}
		w.done.Add(1)
		if !ok {
			w.fails.Add(1)
		}
	}
}

// one sends one request for key index k to the next node and records it.
// It reports whether the request succeeded with a correct value.
func (w *worker) one(ctx context.Context, k int) bool {
	s := w.spec
	w.node = (w.node + 1) % len(w.urls)
	u := &w.urls[w.node]
	w.path = strconv.AppendInt(append(w.path[:0], s.prefix[w.node]...), int64(k), 10)
	u.Opaque = string(w.path) // the path as sent: already escaped
	w.req.URL, w.req.Host = u, u.Host
	if s.put {
		w.fillValue(k)
		w.reader.Reset(w.body)
		w.req.Body = io.NopCloser(w.reader)
		w.req.ContentLength = int64(len(w.body))
	}
	start := time.Now()
	resp, err := s.client.Do(w.req)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		w.res.hist.record(time.Since(start))
		w.res.transport++
		w.noteError(u.Host, err)
		w.renew(ctx)
		return false
	}
	if !s.put {
		w.body = w.body[:0] // the read buffer; for a PUT it holds the value
		err = w.readBody(resp.Body)
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
	w.res.hist.record(time.Since(start))
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		w.res.transport++
		w.noteError(u.Host, err)
		w.renew(ctx)
		return false
	}
	code := resp.StatusCode
	if code < 0 || code >= len(w.res.status) {
		code = 0
	}
	w.res.status[code]++
	if s.put {
		w.res.bytesOut += int64(s.valSize)
		return resp.StatusCode == http.StatusNoContent
	}
	w.res.bytesIn += int64(len(w.body))
	if resp.StatusCode != http.StatusOK {
		return false
	}
	return w.checkValue(k)
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

// setSeed writes prefix + group + "/" + key k's name into w.seed.
func (w *worker) setSeed(prefix string, k int) {
	w.seed = append(w.seed[:0], prefix...)
	w.seed = append(w.seed, w.spec.group...)
	w.seed = append(w.seed, '/')
	w.seed = append(w.seed, w.spec.kprefix...)
	w.seed = strconv.AppendInt(w.seed, int64(k), 10)
}

func (w *worker) fillValue(k int) {
	w.setSeed(benchPrefix, k)
	fill(w.body, w.seed)
}

// checkValue compares a 200's body with key k's value.
func (w *worker) checkValue(k int) bool {
	s := w.spec
	switch s.check {
	case checkNone:
		return true
	case checkBench:
		w.res.checked++
		w.setSeed(benchPrefix, k)
		if len(w.body) == s.valSize && matches(w.body, w.seed) {
			return true
		}
		// The demo origin's value: a PUT lives only in its owner's
		// memory, and an eviction or a change of owner since the fill
		// brings the origin's value back. Not the value we PUT, but not a
		// wrong one.
		if s.demo && len(w.body) > 0 && w.isDemoValue(k) {
			w.res.other++
			return true
		}
	case checkDemo:
		w.res.checked++
		n := int64(len(w.body))
		if n > 0 && w.isDemoValue(k) {
			// Every demo value of a group has the group's size: the first
			// one sets it, and a shorter (cut) or longer one is wrong. Only
			// a demo value may set it: the first body can be another one.
			s.demoLen.CompareAndSwap(-1, n)
			if n == s.demoLen.Load() {
				return true
			}
			break
		}
		// A value an earlier "bench -value-size" PUT: right for the key,
		// though not the origin's.
		w.setSeed(benchPrefix, k)
		if n > 0 && matches(w.body, w.seed) {
			w.res.other++
			return true
		}
	}
	w.res.wrong++
	return false
}

// isDemoValue reports whether the body is key k's value from the demo
// origin, by the origin's own rule. That costs a few small allocations per
// request, next to net/http's dozens, and keeps one definition of the rule.
func (w *worker) isDemoValue(k int) bool {
	w.seed = strconv.AppendInt(append(w.seed[:0], w.spec.kprefix...), int64(k), 10)
	return bytes.Equal(w.body, origin.DemoValue(w.spec.group, string(w.seed), len(w.body)))
}

// noteError counts an error by its short reason; only the first few
// distinct reasons are kept, so a storm of errors cannot grow the map.
func (w *worker) noteError(host string, err error) {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err // its URL, with the path in Opaque, would read oddly
	}
	msg := host + ": " + unreachableReason(err)
	if w.res.errs == nil {
		w.res.errs = map[string]int64{}
	}
	if _, ok := w.res.errs[msg]; ok || len(w.res.errs) < 8 {
		w.res.errs[msg]++
	}
}

// keyPicker draws key indexes in [0, n): uniformly, or with the Zipf law
// P(k) ∝ 1/(k+1)^s, where index 0 is the most popular key. Unlike
// math/rand's Zipf, which needs s > 1, any s > 0 works: 0.99, the skew
// YCSB and memtier use, included. A keyPicker is immutable and safe for
// concurrent use; each worker passes its own *rand.Rand.
type keyPicker struct {
	n   int
	cdf []float64 // Zipf only: cdf[k] = P(index <= k); nil for uniform
}

func newKeyPicker(n int, s float64) keyPicker {
	p := keyPicker{n: n}
	if s <= 0 {
		return p
	}
	p.cdf = make([]float64, n)
	var sum float64
	for k := range n {
		sum += math.Pow(float64(k+1), -s)
		p.cdf[k] = sum
	}
	for k := range p.cdf {
		p.cdf[k] /= sum
	}
	p.cdf[n-1] = 1 // no rounding gap above the last key
	return p
}

// pick returns a key index.
func (p keyPicker) pick(r *rand.Rand) int {
	if p.cdf == nil {
		return r.IntN(p.n)
	}
	i, _ := slices.BinarySearch(p.cdf, r.Float64())
	return min(i, p.n-1)
}

// prob returns the probability of index k: the tests check the draws against it.
func (p keyPicker) prob(k int) float64 {
	if p.cdf == nil {
		return 1 / float64(p.n)
	}
	if k == 0 {
		return p.cdf[0]
	}
	return p.cdf[k] - p.cdf[k-1]
}

// benchPrefix seeds the values bench PUTs: the value of a key is the hex
// SHA-256 of "ringcache-bench/<group>/<key>", repeated and cut to the value
// size (the demo origin's rule with another prefix), so that a GET checks
// what it reads with no table of values and no allocation, and a value
// bench wrote never passes for the demo origin's.
const benchPrefix = "ringcache-bench/"

// digest writes the hex SHA-256 of seed into d.
func digest(d *[2 * sha256.Size]byte, seed []byte) {
	sum := sha256.Sum256(seed)
	hex.Encode(d[:], sum[:])
}

// fill writes the value of seed into v: its digest, repeated and cut.
func fill(v []byte, seed []byte) {
	var d [2 * sha256.Size]byte
	digest(&d, seed)
	for i := 0; i < len(v); i += len(d) {
		copy(v[i:], d[:])
	}
}

// matches reports whether v is the value of seed, of any length: a check
// of the length is the caller's.
func matches(v []byte, seed []byte) bool {
	var d [2 * sha256.Size]byte
	digest(&d, seed)
	for len(v) > 0 {
		n := min(len(v), len(d))
		if !bytes.Equal(v[:n], d[:n]) {
			return false
		}
		v = v[n:]
	}
	return true
}

// histogram records latencies in log-linear buckets, as HdrHistogram does:
// exact below 256ns, then 128 buckets per power of two, so a percentile is
// within 0.4% of the true value. Recording is an increment in a fixed
// array: no allocation and no lock (each worker owns one; merge sums them).
// The zero value is ready to use; a histogram is not safe for concurrent
// use.
type histogram struct {
	counts [histBuckets]int64
	n      int64
	max    time.Duration
}

const (
	histSub     = 128 // buckets per power of two above 256ns
	histMaxExp  = 33  // values are clamped below 1<<(histMaxExp+8) ns, about 36 min
	histBuckets = 256 + histMaxExp*histSub
)

func bucketOf(v uint64) int {
	if v < 256 {
		return int(v)
	}
	v = min(v, 1<<(histMaxExp+8)-1)
	e := bits.Len64(v) - 8 // v>>e is in [128, 255]
	return 256 + (e-1)*histSub + int(v>>e) - histSub
}

// bucketRange returns the smallest and largest value of bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < 256 {
		return uint64(i), uint64(i)
	}
	j := i - 256
	e := uint(j/histSub + 1)
	m := uint64(j%histSub + histSub)
	return m << e, (m+1)<<e - 1
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.n++
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the latency below which a fraction q of the recorded
// ones lie (the middle of its bucket; the maximum itself for q = 1).
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q >= 1 {
		return h.max
	}
	// The nearest rank: the ceil(q*n)-th smallest value.
	rank := min(max(int64(math.Ceil(q*float64(h.n))), 1), h.n)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketRange(i)
			return min(time.Duration(lo+(hi-lo)/2), h.max)
		}
	}
	return h.max
}
