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
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/cache"
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
			writePeerError(w, fmt.Errorf("%w: %v", ErrBadRequest, err))
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
			writePeerError(w, fmt.Errorf("%w: %v", ErrBadRequest, err))
			return
		}
		body = body[n:]
		if checkKey(key, h.pool.cfg.MaxKeyBytes) != nil || int64(len(v.Data)) > g.Config().MaxValueBytes {
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
		return nil, fmt.Errorf("%w: reading body: %v", ErrBadRequest, err)
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
		return nil, fmt.Errorf("%w: group: %v", ErrBadPath, err)
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
