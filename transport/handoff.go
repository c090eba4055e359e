package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// Values move with their keys, pushed by the node that holds them, so that
// keys that change owner cost their new owners a lookup rather than the
// origin a load:
//
//   - a node that leaves gracefully pushes the values it owns, and those it
//     kept after earlier changes for their new owners, to their owners by
//     the ring without it (Drain);
//   - after every ring change, a node pushes the values it kept for the keys
//     it no longer owns to their new owners at once (OfferOnChange), so
//     that a node that joins is warm before it is asked, and a value need
//     not wait for a request to move.
//
// Values go most recently used first, in batches of at most
// drainBatchBytes, one POST per batch to <BasePath>_adopt/<group>. The
// receiver keeps a value only if it owns the key (by its ring, or by its ring
// without the sender when the sender still owns it there: the sender is
// leaving), holds no value of it, and no node but the sender wrote it since
// the receiver's last ring change (cache.Group.Adopt): a value handed over
// can never undo a write.

// drainBatchBytes bounds one batch; maxAdoptBody bounds what a receiver
// reads of one.
const (
	drainBatchBytes = 1 << 20
	drainInFlight   = 4
	maxAdoptBody    = 8 << 20
	hdrAdopted      = "X-Ringcache-Adopted"
)

// DrainStats says what a Drain or an offer handed over.
type DrainStats struct {
	Offered int   // values sent to their owners
	Adopted int   // values the owners kept
	Bytes   int64 // bytes of the values sent
	Failed  int   // batches that could not be delivered
}

// Drain offers the main-cache values of node's groups, most recently used
// first, and then the values node kept for keys it no longer owns, to their
// owners by the ring without this node. It stops after maxBytes of values
// (no bound if <= 0) or when ctx ends. Call it while leaving: after the
// others were told that this node leaves and after node.Retire, so that no
// write is applied here meanwhile. It first waits for the writes that were
// in progress (cache.Node.AwaitWrites), so that what they drop elsewhere
// goes before the values it hands over, and they are among those values.
func (p *Pool) Drain(ctx context.Context, node *cache.Node, maxBytes int64) DrainStats {
	node.AwaitWrites(ctx) // on ctx's end, what is left is not acknowledged

	st := p.state.Load()
	// The owners once this node is gone: with explicit arcs its arcs join
	// the ones before them, so this is not simply the next node clockwise.
	after := ringWithout(st.ring, p.cfg.Self)
	if after == nil {
		return DrainStats{}
	}
	return p.push(ctx, st, node, after, func(g *cache.Group) []cache.KeyValue {
		return append(g.Newest(math.MaxInt), g.Kept(math.MaxInt)...)
	}, maxBytes)
}

// OfferOnChange makes the Pool push, after every ring change, the values
// that node kept for keys it no longer owns to their new owners, in the
// background (one offer at a time; a change during an offer starts another
// after it). node must be the cache.Node built on this Pool.
func (p *Pool) OfferOnChange(node *cache.Node) {
	var running, again atomic.Bool
	run := func(ctx context.Context) {
		for {
			again.Store(false)
			st := p.state.Load()
			stats := p.push(ctx, st, node, st.ring, func(g *cache.Group) []cache.KeyValue { return g.Kept(math.MaxInt) }, 0)
			if stats.Offered > 0 {
				p.cfg.Logger.Info("transport: values offered to their new owners",
					"offered", stats.Offered, "adopted", stats.Adopted, "bytes", stats.Bytes, "failed_batches", stats.Failed)
			}
			running.Store(false)
			if !again.Load() || !running.CompareAndSwap(false, true) {
				return
			}
		}
	}
	p.NotifyRing(func() {
		again.Store(true)
		if running.CompareAndSwap(false, true) && !p.goBackground(run) {
			running.Store(false)
		}
	})
}

// push sends the values entries returns, for each of node's groups, to
// their owners by owners (this node's own are skipped).
func (p *Pool) push(ctx context.Context, st *poolState, node *cache.Node, owners ring, entries func(*cache.Group) []cache.KeyValue, maxBytes int64) DrainStats {
	var stats DrainStats
	var mu sync.Mutex // guards stats
	type batch struct {
		group string
		buf   []byte
	}
	send := func(pe *peer, b *batch) {
		adopted, err := pe.adopt(ctx, b.group, b.buf)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			stats.Failed++
			return
		}
		stats.Adopted += adopted
	}
	var wg sync.WaitGroup
	// A few batches in flight at once: enough to keep every receiver busy,
	// few enough that the values sent are not all in memory twice.
	slots := make(chan struct{}, drainInFlight)
	goSend := func(pe *peer, b *batch) {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			send(pe, b)
		})
	}
	var sent int64
	for _, g := range node.Groups() {
		pending := map[string]*batch{}
		for _, kv := range entries(g) {
			if ctx.Err() != nil || maxBytes > 0 && sent >= maxBytes {
				break
			}
			owner := owners.Get(kv.Key)
			pe, ok := st.peers[owner]
			if !ok {
				continue
			}
			b := pending[owner]
			if b == nil {
				b = &batch{group: g.Name()}
				pending[owner] = b
			}
			b.buf = appendRecord(b.buf, kv.Key, kv.Value)
			sent += int64(len(kv.Value.Data))
			mu.Lock()
			stats.Offered++
			stats.Bytes += int64(len(kv.Value.Data))
			mu.Unlock()
			if len(b.buf) >= drainBatchBytes {
				delete(pending, owner)
				goSend(pe, b)
			}
		}
		for owner, b := range pending {
			goSend(st.peers[owner], b)
		}
	}
	wg.Wait()
	return stats
}

// adopt sends one batch and returns how many values the peer kept. It goes
// through an open breaker: handing values over is off the request path, and
// a peer suspected a moment ago (a slow name lookup, say) is worth a try.
func (pe *peer) adopt(ctx context.Context, group string, body []byte) (int, error) {
	adopted := 0
	err := pe.do(ctx, peerRequest{op: "adopt", method: http.MethodPost, path: pe.pool.cfg.BasePath + adoptRoute + escapeSegment(group),
		body: body, write: true, probe: true,
		read: func(res *http.Response) error {
			adopted, _ = strconv.Atoi(res.Header.Get(hdrAdopted))
			return nil
		}})
	return adopted, err
}

// serveAdopt takes a batch of values handed over by a leaving node.
func (h *peerHandler) serveAdopt(w http.ResponseWriter, r *http.Request, escapedGroup string) {
	g, err := h.group(escapedGroup)
	if err != nil {
		writePeerError(w, err)
		return
	}
	sender := r.Header.Get(hdrPeer)
	body, err := h.readBody(w, r, maxAdoptBody)
	if err != nil {
		writePeerError(w, err)
		return
	}
	if r.Header.Get(hdrCopies) != "" {
		kept, err := h.keepCopies(g, sender, body)
		if err != nil {
			writePeerError(w, fmt.Errorf("%w: %v", api.ErrBadRequest, err))
			return
		}
		w.Header().Set(hdrAdopted, strconv.Itoa(kept))
		w.WriteHeader(http.StatusNoContent)
		return
	}
	// Keep only what this node owns, or will own once the sender is gone
	// (a leaving sender that this node's ring has not dropped yet).
	current := h.pool.state.Load().ring
	var without ring
	owner := func(key string) string {
		o := current.Get(key)
		if o == sender {
			if without == nil {
				without = ringWithout(current, sender)
			}
			if without != nil {
				o = without.Get(key)
			}
		}
		return o
	}
	self := h.pool.cfg.Self
	adopted := 0
	for len(body) > 0 {
		key, v, n, err := readRecord(body)
		if err != nil {
			writePeerError(w, fmt.Errorf("%w: %v", api.ErrBadRequest, err))
			return
		}
		body = body[n:]
		if api.CheckKey(key, h.pool.cfg.MaxKeyBytes) != nil || int64(len(v.Data)) > g.Config().MaxValueBytes {
			continue
		}
		if owner(key) == self && g.Adopt(key, v, sender) {
			adopted++
		}
	}
	w.Header().Set(hdrAdopted, strconv.Itoa(adopted))
	w.WriteHeader(http.StatusNoContent)
}

// readBody reads a POST's body of at most limit bytes and checks it against
// the request's signature (a refusal is logged as every refused peer
// request is).
func (h *peerHandler) readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("%w: reading body: %v", api.ErrBadRequest, err)
	}
	if err := h.pool.auth.checkBody(r, body); err != nil {
		h.pool.auth.refused(h.pool.cfg.Logger, r, err, h.pool.now())
		return nil, err
	}
	return body, nil
}

// group returns the group an escaped path segment names.
func (h *peerHandler) group(escaped string) (*cache.Group, error) {
	name, err := url.QueryUnescape(escaped)
	if err != nil {
		return nil, fmt.Errorf("%w: group: %v", api.ErrBadPath, err)
	}
	g, ok := h.node.Group(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", cache.ErrNoSuchGroup, name)
	}
	return g, nil
}

// appendRecord appends one value of a batch: key, content type, expiry
// (Unix nanoseconds, 0 for none) and data, each length-prefixed.
func appendRecord(b []byte, key string, v cache.Value) []byte {
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = appendTypeAndExpiry(b, v)
	b = binary.AppendUvarint(b, uint64(len(v.Data)))
	return append(b, v.Data...)
}

// appendTypeAndExpiry appends what a hand-off record and a batch answer's
// value frame both carry: v's content type, length-prefixed, and its expiry
// (Unix nanoseconds, 0 for none).
func appendTypeAndExpiry(b []byte, v cache.Value) []byte {
	b = binary.AppendUvarint(b, uint64(len(v.ContentType)))
	b = append(b, v.ContentType...)
	var exp int64
	if !v.Expires.IsZero() {
		exp = v.Expires.UnixNano()
	}
	return binary.AppendVarint(b, exp)
}

var errBadRecord = errors.New("bad hand-off record")

// readRecord reads one record from b and returns how many bytes it took.
// The value's data is a copy: the batch's buffer is not kept.
func readRecord(b []byte) (key string, v cache.Value, n int, err error) {
	field := func() ([]byte, bool) {
		l, k := binary.Uvarint(b[n:])
		if k <= 0 || l > uint64(len(b)-n-k) {
			return nil, false
		}
		f := b[n+k : n+k+int(l)]
		n += k + int(l)
		return f, true
	}
	kb, ok := field()
	if !ok {
		return "", v, 0, errBadRecord
	}
	ct, ok := field()
	if !ok {
		return "", v, 0, errBadRecord
	}
	exp, k := binary.Varint(b[n:])
	if k <= 0 {
		return "", v, 0, errBadRecord
	}
	n += k
	data, ok := field()
	if !ok {
		return "", v, 0, errBadRecord
	}
	v = cache.Value{Data: bytes.Clone(data), ContentType: string(ct)}
	if v.Data == nil {
		v.Data = []byte{}
	}
	if exp != 0 {
		v.Expires = time.Unix(0, exp)
	}
	return string(kb), v, n, nil
}

// Copies of values (cache.GroupConfig.Copies > 1, see cache/copies.go) go
// to a key's heirs as a batch of hand-off records, each after its stamp,
// POSTed to the adopt route marked with hdrCopies: one route takes values
// that move between nodes, whether they move for good or as copies.

// hdrCopies marks an adopt batch as copies sent by the keys' owner.
const hdrCopies = "X-Ringcache-Copies"

var copiesMarker = []string{"1"}

var (
	_ cache.CopyPlacer = (*Pool)(nil)
	_ cache.CopyKeeper = (*peer)(nil)
)

// Heirs returns key's heirs by this node's ring (cache.CopyPlacer): the
// n-1 members after its owner in the order they would own it, this node
// left out, and whether this node is one of them.
func (p *Pool) Heirs(key string, n int) (heirs []cache.Peer, self bool) {
	st := p.state.Load()
	names := st.ring.Heirs(key, n)
	if len(names) < 2 {
		return nil, false
	}
	for _, name := range names[1:] {
		if name == p.cfg.Self {
			self = true
		} else if pe, ok := st.peers[name]; ok {
			heirs = append(heirs, pe)
		}
	}
	return heirs, self
}

// isHeir reports whether self is one of key's n-1 heirs on r and from is
// key's owner there.
func isHeir(r ring, key string, n int, from, self string) bool {
	names := r.Heirs(key, n)
	return len(names) > 1 && names[0] == from && slices.Contains(names[1:], self)
}

// KeepCopies sends copies of values this node owns to the peer, an heir of
// their keys (cache.CopyKeeper), and returns how many it kept.
func (pe *peer) KeepCopies(ctx context.Context, group string, copies []cache.Copy) (int, error) {
	var body []byte
	for _, c := range copies {
		body = appendCopy(body, c)
	}
	kept := 0
	err := pe.do(ctx, peerRequest{op: "copy", method: http.MethodPost, path: pe.pool.cfg.BasePath + adoptRoute + escapeSegment(group),
		body: body, write: true,
		header: func(h http.Header) { h[hdrCopies] = copiesMarker },
		read: func(res *http.Response) error {
			kept, _ = strconv.Atoi(res.Header.Get(hdrAdopted))
			return nil
		}})
	return kept, err
}

// appendCopy appends one copy: its stamp, then its hand-off record.
func appendCopy(b []byte, c cache.Copy) []byte {
	b = binary.AppendUvarint(b, c.Stamp)
	return appendRecord(b, c.Key, c.Value)
}

// keepCopies takes a batch of copies from sender (serveAdopt, marked with
// hdrCopies), keeping those whose key sender owns by this node's ring and
// whose heir this node is.
func (h *peerHandler) keepCopies(g *cache.Group, sender string, body []byte) (int, error) {
	r := h.pool.state.Load().ring
	self, n := h.pool.cfg.Self, g.Config().Copies
	kept := 0
	for len(body) > 0 {
		stamp, k := binary.Uvarint(body)
		if k <= 0 {
			return kept, errBadRecord
		}
		key, v, m, err := readRecord(body[k:])
		if err != nil {
			return kept, err
		}
		body = body[k+m:]
		if api.CheckKey(key, h.pool.cfg.MaxKeyBytes) != nil || int64(len(v.Data)) > g.Config().MaxValueBytes {
			continue
		}
		if isHeir(r, key, n, sender, self) && g.KeepCopy(key, v, sender, stamp) {
			kept++
		}
	}
	return kept, nil
}

// RepairOnChange makes the Pool send, after every ring change, copies of
// the values node owns to the heirs that their keys gained since the last
// repair (all of them at the first), in the background, at most
// Config.RepairRate bytes a second (one repair at a time; a change during
// one starts another after it). It does nothing for groups with one copy.
func (p *Pool) RepairOnChange(node *cache.Node) {
	var mu sync.Mutex
	var busy, more bool // guarded by mu
	var last ring       // the ring the last complete repair ran under; only run touches it
	run := func(ctx context.Context) {
		tries := 0
		for {
			mu.Lock()
			more = false
			mu.Unlock()
			st := p.state.Load()
			if p.repair(ctx, st, node, last) {
				last, tries = st.ring, 0
			} else if tries++; tries <= repairRetries {
				// Refused or undelivered: again in a moment, unless a ring
				// change comes first (its run covers this one's keys: last
				// is unchanged).
				select {
				case <-time.After(repairRetryAfter):
				case <-ctx.Done():
					return
				}
				mu.Lock()
				more = true
				mu.Unlock()
			}
			mu.Lock()
			if !more {
				busy = false
				mu.Unlock()
				return
			}
			mu.Unlock()
		}
	}
	p.NotifyRing(func() {
		mu.Lock()
		defer mu.Unlock()
		more = true
		if !busy {
			busy = p.goBackground(run)
		}
	})
}

// A repair that was refused in part (an heir whose ring lagged) or not
// delivered runs again after repairRetryAfter, at most repairRetries times
// before the next ring change. A copy an heir refuses because it holds a
// newer one is refused every time: a few retries bound that.
const (
	repairRetries    = 3
	repairRetryAfter = time.Second
)

// repair sends each group's copies to the heirs that were not heirs of
// their keys on before (every heir if before is nil), batched by heir, and
// reports whether every batch was delivered.
func (p *Pool) repair(ctx context.Context, st *poolState, node *cache.Node, before ring) bool {
	ok := true
	pace := newPacer(p.cfg.RepairRate)
	for _, g := range node.Groups() {
		n := g.Config().Copies
		if n <= 1 {
			continue
		}
		pending := map[*peer][]cache.Copy{}
		size := map[*peer]int{}
		flush := func(pe *peer) {
			cs := pending[pe]
			delete(pending, pe)
			delete(size, pe)
			// An heir whose ring has not caught up with this one refuses
			// copies of keys it is not an heir of yet: not complete, so
			// that the repair runs again.
			if kept, err := pe.KeepCopies(ctx, g.Name(), cs); err != nil || kept < len(cs) {
				ok = false
			}
		}
		g.RepairCopies(math.MaxInt, func(heir cache.Peer, c cache.Copy) bool {
			if ctx.Err() != nil {
				return false
			}
			pe, isPeer := heir.(*peer)
			if !isPeer || before != nil && isHeir(before, c.Key, n, p.cfg.Self, pe.url) {
				return false // an heir of this node's key before: it has the copy
			}
			pending[pe] = append(pending[pe], c)
			size[pe] += len(c.Key) + len(c.Value.Data)
			if size[pe] >= drainBatchBytes {
				pace.wait(ctx, size[pe])
				flush(pe)
			}
			return true
		})
		for pe := range pending {
			pace.wait(ctx, size[pe])
			flush(pe)
		}
	}
	return ok && ctx.Err() == nil
}

// pacer spreads bytes sent over time at a rate (bytes a second; <= 0: no
// bound).
type pacer struct {
	rate  int64
	start time.Time
	sent  int64
}

func newPacer(rate int64) *pacer { return &pacer{rate: rate, start: time.Now()} }

// wait waits until n more bytes fit the rate, or ctx ends.
func (p *pacer) wait(ctx context.Context, n int) {
	if p.rate <= 0 {
		return
	}
	p.sent += int64(n)
	due := p.start.Add(time.Duration(float64(p.sent) / float64(p.rate) * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}
