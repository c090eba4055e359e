package transport

import (
	"context"
	"encoding/binary"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ringcache/ringcache/cache"
)

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
		if checkKey(key, h.pool.cfg.MaxKeyBytes) != nil || int64(len(v.Data)) > g.Config().MaxValueBytes {
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
