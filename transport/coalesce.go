package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// Coalescing: while a fetch to a peer is in flight, the next fetches from
// this node to that peer for one group wait for it and then go together, in
// one POST <BasePath>_fetch/<group> naming their keys (a batch), marked
// hdrLoadMisses. The peer answers at once each key its caches hold, as a
// single GET that hits there would be answered (a value, a remembered
// not-found), then frameLate, then loads the other keys, once each with its
// other callers, and streams each one's frame as its load ends (a value, a
// not-found, a load error, or "miss" for a value too large for a batch),
// with a frameBeat every PeerTimeout/3 meanwhile (fetchmany.go). Each
// caller is answered when its key's frame arrives, so one slow key never
// holds up the others; a key left out or answered "miss" is fetched alone
// with groupcache's GET. A value after frameLate is served but not kept
// as a copy (cache.FetchLeaser): the lease in the answer's headers was
// granted before it was loaded.
//
// When nothing is in flight to the peer a fetch goes alone at once, so
// coalescing adds no latency to a quiet node; under load the keys that
// arrive while one batch waits for the owner's first answer (what it holds)
// share the next (group commit, at most maxBatchKeys to a batch): batches
// are paced by the owner's memory, not by its origin. On a cold fill this
// is one round trip per batch of misses, where a batch that only asked
// what the owner held cost a second round trip per miss.
//
// A peer that does not know the route (a groupcache node, which answers
// without our headers, or an older ringcache node, which answers 405) is
// asked singly from then on; after a batch that failed otherwise (the peer
// fell silent, the connection broke, the answer was malformed), for
// batchPause.
const (
	// batchRoute, under BasePath and followed by a group, takes a POST of
	// keys. No other request to a group's path is a POST but adoptRoute's,
	// so it collides with no key.
	batchRoute = "_fetch/"
	batchType  = "application/x-ringcache-batch"
	// maxBatchKeys bounds the keys of one batch.
	maxBatchKeys = 64
	// batchValueBytes is the largest value, and batchTypeBytes the
	// longest content type, a batch answer carries: a value past either is
	// answered "miss" and fetched alone, where its bytes cost more than the
	// exchange that coalescing saves. So an answer holds at most
	// maxBatchKeys of them.
	batchValueBytes = 64 << 10
	batchTypeBytes  = 1 << 10
	// batchPause is how long fetches to a peer go alone after a batch to
	// it failed (silent, cut, or a broken answer) while its GETs may
	// still be answered: a peer that cannot answer batches costs one
	// PeerTimeout per pause, not per batch.
	batchPause = 10 * time.Second
)

// Frames of a batch answer, one per key, in any order.
const (
	frameValue    = 'v' // index, content type, expiry, flags, age, data
	frameNotFound = 'n' // index: the origin does not have the key
	frameMiss     = 'm' // index: fetch the key alone
	// Only in an answer that loads (hdrLoadMisses):
	frameError = 'e' // index, one of the load errors below
	frameLate  = 'g' // no index: the frames after it were loaded after the lease was granted
	frameBeat  = 'h' // no index: the owner is alive and loading
)

// The errors of a frameError: those a single GET's answer carries as
// final (statusError).
const (
	loadFailed     = 'l' // cache.ErrLoad
	loadTimedOut   = 't' // cache.ErrLoad, context.DeadlineExceeded
	loadOverLimit  = 'b' // cache.ErrLoad, cache.ErrTooLarge
	loadOverloaded = 'o' // cache.ErrOverloaded
	// cache.ErrNotOwner: the requester asks the owner by its own ring, not
	// this node again (a key fetched alone from it would be loaded here as
	// a non-owner's copy). A requester from before the kind takes the answer
	// for a malformed one and fetches its keys alone for a while.
	loadNotOwner = 'n'
)

// Flags of a value frame.
const (
	flagNoStore = 1 << iota
	flagStale
)

// maxFrameOverhead bounds a frame's bytes besides its content type and data.
const maxFrameOverhead = 1 + 3*binary.MaxVarintLen64 + 1 + 2*binary.MaxVarintLen64

// maxBatchAnswer bounds a batch answer's bytes.
const maxBatchAnswer = maxBatchKeys * (maxFrameOverhead + batchTypeBytes + batchValueBytes)

// errBatchAnswer reports a batch answer that breaks the frame format.
var errBatchAnswer = errors.New("malformed batch answer")

// appendKeys encodes a batch's keys, each length-prefixed.
func appendKeys(b []byte, keys []string) []byte {
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
	}
	return b
}

// readKeys decodes a batch's keys: at most limit.
func readKeys(b []byte, limit int) ([]string, error) {
	var keys []string
	for len(b) > 0 {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, errors.New("truncated key")
		}
		if len(keys) == limit {
			return nil, fmt.Errorf("more than %d keys", limit)
		}
		keys = append(keys, string(b[n:n+int(l)]))
		b = b[n+int(l):]
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys")
	}
	return keys, nil
}

// maxBatchBody bounds the body of a batch request of at most keys keys.
func maxBatchBody(keys, maxKeyBytes int) int64 {
	return int64(keys * (binary.MaxVarintLen64 + maxKeyBytes))
}

// appendIndexFrame appends a frame of kind that holds key i's index alone.
func appendIndexFrame(b []byte, kind byte, i int) []byte {
	return binary.AppendUvarint(append(b, kind), uint64(i))
}

// appendValueHead appends key i's value frame but for the value's bytes,
// which follow it.
func appendValueHead(b []byte, i int, v cache.Value) []byte {
	b = append(b, frameValue)
	b = binary.AppendUvarint(b, uint64(i))
	b = appendTypeAndExpiry(b, v)
	var flags byte
	if v.NoStore {
		flags |= flagNoStore
	}
	if v.Stale {
		flags |= flagStale
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(max(v.Age.Milliseconds(), 0)))
	return binary.AppendUvarint(b, uint64(len(v.Data)))
}

// batchResult is one key's answer in a batch. final is false when the key
// must be fetched alone; late is true for an answer loaded after the
// batch's lease was granted (frameLate).
type batchResult struct {
	v     cache.Value
	err   error
	final bool
	late  bool
}

// frameSink is what readEachFrame tells as it reads.
type frameSink struct {
	got   func(i int, br batchResult) // a key's answer ("miss" is not one)
	late  func()                      // at frameLate, if not nil
	alive func()                      // after every whole frame, if not nil
}

// readEachFrame decodes a batch answer of n keys from r, telling s each
// key's answer as its frame arrives. Each value's bytes are read into an
// allocation of their own and exact size, as a single GET's are: the cache
// may keep any of them. A value over maxValue bytes is refused
// (Config.MaxResponseBytes, or batchValueBytes if that is less).
func readEachFrame(r *bufio.Reader, n int, maxValue int64, s frameSink) error {
	seen := make([]bool, n)
	bad := func(what string, err error) error {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%w: %s: %v", errBatchAnswer, what, err)
	}
	field := func(limit int) ([]byte, error) {
		l, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, err
		}
		if l > uint64(limit) {
			return nil, fmt.Errorf("%d bytes, over %d", l, limit)
		}
		f := make([]byte, l)
		_, err = io.ReadFull(r, f)
		return f, err
	}
	isLate := false
	for ; ; s.beat() {
		kind, err := r.ReadByte()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return bad("frame", err)
		}
		switch kind {
		case frameBeat:
			continue
		case frameLate:
			if !isLate && s.late != nil {
				s.late()
			}
			isLate = true
			continue
		}
		u, err := binary.ReadUvarint(r)
		if err != nil {
			return bad("key index", err)
		}
		if u >= uint64(n) || seen[u] {
			return bad("key index", fmt.Errorf("%d of %d keys, or twice", u, n))
		}
		i := int(u)
		seen[i] = true
		switch kind {
		case frameMiss:
			continue
		case frameNotFound:
			s.got(i, batchResult{err: cache.ErrNotFound, final: true, late: isLate})
			continue
		case frameError:
			e, err := r.ReadByte()
			if err != nil {
				return bad("error", err)
			}
			lerr := loadError(e)
			if lerr == nil {
				return bad("error", fmt.Errorf("kind %q", e))
			}
			s.got(i, batchResult{err: lerr, final: true, late: isLate})
			continue
		case frameValue:
		default:
			return bad("frame", fmt.Errorf("kind %q", kind))
		}
		ct, err := field(batchTypeBytes)
		if err != nil {
			return bad("content type", err)
		}
		exp, err := binary.ReadVarint(r)
		if err != nil {
			return bad("expiry", err)
		}
		flags, err := r.ReadByte()
		if err != nil {
			return bad("flags", err)
		}
		age, err := binary.ReadUvarint(r)
		if err != nil {
			return bad("age", err)
		}
		if age > uint64(time.Duration(1<<63-1).Milliseconds()) {
			return bad("age", fmt.Errorf("%d ms", age))
		}
		data, err := field(int(min(maxValue, batchValueBytes)))
		if err != nil {
			return bad("data", err)
		}
		v := cache.Value{Data: data, ContentType: string(ct), NoStore: flags&flagNoStore != 0, Stale: flags&flagStale != 0}
		if exp != 0 {
			v.Expires = time.Unix(0, exp)
		}
		if v.Stale {
			v.Age = time.Duration(age) * time.Millisecond
		}
		s.got(i, batchResult{v: v, final: true, late: isLate})
	}
}

// serveBatch answers a batch of keys from this node's caches (the owner's
// side of coalescing). Keys it would have to load, keys it refuses and
// values too large for a batch are answered "miss": the requester fetches
// them alone.
func (h *peerHandler) serveBatch(w http.ResponseWriter, r *http.Request, escapedGroup string, grant func()) {
	cfg := &h.pool.cfg
	g, err := h.group(escapedGroup)
	if err != nil {
		writePeerError(w, err)
		return
	}
	load := r.Header.Get(hdrLoadMisses) != ""
	limit := maxBatchKeys
	if load {
		limit = maxManyKeys
	}
	body, err := h.readBody(w, r, maxBatchBody(limit, cfg.MaxKeyBytes))
	if err != nil {
		writePeerError(w, err)
		return
	}
	keys, err := readKeys(body, limit)
	if err != nil {
		writePeerError(w, fmt.Errorf("%w: %v", api.ErrBadRequest, err))
		return
	}
	// The frames' heads go in one buffer and the values' bytes are written
	// from the cache as they are, after the length of the whole is known.
	pv := g.PeerView()
	var head []byte
	ends := make([]int, len(keys)) // where each key's head ends in head
	data := make([][]byte, len(keys))
	size := 0
	var pending []int // to load (load mode)
	for i, key := range keys {
		var v cache.Value
		var ok bool
		var err error
		valid := api.CheckKey(key, cfg.MaxKeyBytes) == nil
		if valid {
			v, ok, err = pv.GetCached(key, batchValueBytes)
		}
		switch {
		case ok && err == nil && len(v.ContentType) <= batchTypeBytes && size+len(v.Data) <= api.MaxBatchBytes:
			head = appendValueHead(head, i, v)
			data[i] = v.Data
			size += len(v.Data)
		case ok && errors.Is(err, cache.ErrNotFound):
			head = appendIndexFrame(head, frameNotFound, i)
		case load && valid && !ok:
			pending = append(pending, i)
		default: // a load, a key this node refuses, a value too large
			head = appendIndexFrame(head, frameMiss, i)
		}
		ends[i] = len(head)
	}
	// At the answer, as a single GET's second grant: nothing but the
	// lookups above ran since the request arrived.
	grant()
	w.Header().Set("Content-Type", batchType)
	if len(pending) == 0 {
		w.Header().Set("Content-Length", strconv.Itoa(len(head)+size))
	}
	start := 0
	for i, end := range ends {
		w.Write(head[start:end])
		if len(data[i]) > 0 {
			w.Write(data[i])
		}
		start = end
	}
	if len(pending) > 0 {
		h.streamLoads(w, r, pv, keys, readCallers(r.Header.Get(hdrCallers), len(keys)), pending, api.MaxBatchBytes-size)
	}
}

func (s frameSink) beat() {
	if s.alive != nil {
		s.alive()
	}
}

// coalescer gathers one group's fetches to one peer into batches.
type coalescer struct {
	pe    *peer
	group string

	mu   sync.Mutex
	busy bool   // a batch that will send the next one is in flight
	open *batch // keys waiting for it
}

// batch is one request's keys and their answers: res[i] is set before
// ready[i] is closed.
type batch struct {
	keys    []string
	callers []string // each key's cache.CallerOf
	res     []batchResult
	ready   []chan struct{}
}

// coalescer returns the peer's coalescer of group, or nil when fetches to
// the peer go alone: coalescing is off, the peer does not batch or a batch
// to it failed lately, or nothing is in flight to it.
func (pe *peer) coalescer(group string) *coalescer {
	if pe.pool.cfg.DisableCoalescing || pe.noBatch.Load() || pe.contact.legacy.Load() || pe.fetching.Load() == 0 {
		return nil
	}
	if until := pe.batchPaused.Load(); until != 0 && time.Now().UnixNano() < until {
		return nil // no clock read on the peer hop unless a batch failed
	}
	if c, ok := pe.batches.Load(group); ok {
		return c.(*coalescer)
	}
	c, _ := pe.batches.LoadOrStore(group, &coalescer{pe: pe, group: group})
	return c.(*coalescer)
}

// fetch adds key to the open batch and waits for its answer. final is
// false when the key must be fetched alone; late is true for a value the
// owner loaded after its answer's lease was granted.
func (c *coalescer) fetch(ctx context.Context, key string) (v cache.Value, err error, final, late bool) {
	c.mu.Lock()
	b := c.open
	if b == nil {
		b = &batch{}
		c.open = b
	}
	i := len(b.keys)
	b.keys = append(b.keys, key)
	b.callers = append(b.callers, cache.CallerOf(ctx))
	ready := make(chan struct{})
	b.ready = append(b.ready, ready)
	var send *batch
	chain := false
	switch {
	case !c.busy:
		c.busy, chain, c.open, send = true, true, nil, b
	case len(b.keys) == maxBatchKeys:
		c.open, send = nil, b // another in flight: a full batch need not wait
	}
	c.mu.Unlock()
	if send != nil {
		go c.send(send, chain)
	}
	select {
	case <-ready:
		r := b.res[i]
		return r.v, r.err, r.final, r.late
	case <-ctx.Done():
		return cache.Value{}, ctx.Err(), true, false
	}
}

// send sends b. If chain, the batch that gathers meanwhile goes next, as
// soon as b's owner has answered what its caches hold (its loads may go on
// streaming): the batches are paced by the owner's memory, not its origin.
func (c *coalescer) send(b *batch, chain bool) {
	next := func() {
		if !chain {
			return
		}
		chain = false
		c.mu.Lock()
		n := c.open
		c.open = nil
		if n == nil {
			c.busy = false
		}
		c.mu.Unlock()
		if n != nil {
			go c.send(n, true)
		}
	}
	c.pe.sendBatch(c.group, b, next)
	next() // the answer held no loads, or failed
}

// sendBatch asks the peer for b's keys, marked to load what its caches do
// not hold, and answers each key's waiter as its frame arrives; late is
// called when the owner starts on its loads. On any failure the keys not
// answered are left to be fetched alone: the single GETs then meet the
// same peer with their own rules (an open breaker fails them at once).
func (pe *peer) sendBatch(group string, b *batch, late func()) {
	b.res = make([]batchResult, len(b.keys))
	answered := make([]bool, len(b.keys))
	defer func() {
		for i, ready := range b.ready {
			if !answered[i] {
				close(ready) // res[i] is zero: fetch it alone
			}
		}
	}()
	pe.fetching.Add(1)
	defer pe.fetching.Add(-1)
	// The keys' own callers wait on their contexts; this one ends when the
	// peer falls silent (PeerTimeout; a loading owner beats meanwhile).
	err := pe.do(context.Background(), peerRequest{op: "batch", method: http.MethodPost,
		path: pe.pool.cfg.BasePath + batchRoute + escapeSegment(group), body: appendKeys(nil, b.keys), lease: true, stream: true,
		header: func(h http.Header) {
			h[hdrLoadMisses] = loadMissesYes
			if c := appendCallers(nil, b.callers); c != nil {
				h[hdrCallers] = []string{string(c)}
			}
		},
		read: func(res *http.Response) error {
			if res.Header.Get("Content-Type") != batchType {
				return fmt.Errorf("%w: content type %q", errBatchAnswer, res.Header.Get("Content-Type"))
			}
			if res.ContentLength > maxBatchAnswer {
				return fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrBadResponse, res.ContentLength, int64(maxBatchAnswer))
			}
			r := bufio.NewReader(io.LimitReader(res.Body, maxBatchAnswer+maxBeatBytes))
			return readEachFrame(r, len(b.keys), pe.pool.cfg.MaxResponseBytes, frameSink{
				got: func(i int, br batchResult) {
					b.res[i] = br
					answered[i] = true
					close(b.ready[i])
				},
				late:  late,
				alive: aliveOf(res),
			})
		}})
	if err == nil || pe.refusedBatch(err) {
		return
	}
	if !errors.Is(err, ErrPeerDown) {
		// Not merely sent into an open breaker: this batch failed.
		pe.batchPaused.Store(time.Now().Add(batchPause).UnixNano())
		pe.pool.cfg.Logger.Info("transport: batch failed; fetching from the peer one key at a time for a while",
			"peer", pe.url, "pause", batchPause, "err", err)
	}
}

// refusedBatch reports whether err says that the peer does not take
// batches (a groupcache node, which answers without our headers, or a
// ringcache node from before them, which answers 405), and if so asks it
// one key at a time from then on.
func (pe *peer) refusedBatch(err error) bool {
	perr, ok := errors.AsType[*PeerError](err)
	if !ok || perr.StatusCode != http.StatusMethodNotAllowed && !pe.contact.legacy.Load() {
		return false
	}
	pe.noBatch.Store(true)
	pe.pool.cfg.Logger.Info("transport: peer does not take batches; fetching from it one key at a time", "peer", pe.url)
	return true
}
