//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Kind is what an operation did to a key.
type Kind uint8

// The kinds of operation a history holds.
const (
	// Read is a GET.
	Read Kind = iota
	// Put is a PUT of a value unique to that operation.
	Put
	// Delete is a DELETE.
	Delete
)

func (k Kind) String() string {
	switch k {
	case Read:
		return "GET"
	case Put:
		return "PUT"
	case Delete:
		return "DELETE"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Op is one client operation as the client saw it: when it was sent, when
// its answer (or error) came, and what the answer was.
type Op struct {
	// Kind is what the operation did.
	Kind Kind
	// Key is the key operated on.
	Key string
	// Node is the node whose answer counts (after a retry, the second one).
	Node string
	// Start is when the request was sent; End is when its answer or error came.
	Start, End time.Time
	// Status is the HTTP status, or 0 when no answer came.
	Status int
	// Err is the transport error, if any.
	Err string
	// Value is the body: what a Put wrote, or what a Read got.
	Value []byte
	// Unreached is a write's Ringcache-Unreached header: the peers the owner
	// could not tell about the write.
	Unreached string
}

// Outcome is what a client can know about whether a write took effect.
type Outcome uint8

const (
	// Acked writes were answered 2xx: applied.
	Acked Outcome = iota
	// Failed writes were answered 4xx: refused, never applied.
	Failed
	// Unknown writes got a 5xx or no answer: they may or may not have
	// applied, and may still apply later (a request held by a paused node
	// is served when it resumes).
	Unknown
)

// Outcome classifies a write's answer.
func (o Op) Outcome() Outcome {
	switch {
	case o.Status >= 200 && o.Status < 300:
		return Acked
	case o.Status >= 400 && o.Status < 500:
		return Failed
	}
	return Unknown
}

func (o Op) String() string {
	s := fmt.Sprintf("%s %s via %s [%s, %s] status %d", o.Kind, o.Key, o.Node,
		o.Start.Format("15:04:05.000"), o.End.Format("15:04:05.000"), o.Status)
	if o.Err != "" {
		s += fmt.Sprintf(" err %q", o.Err)
	}
	if o.Kind != Delete {
		s += fmt.Sprintf(" value %.60q", o.Value)
	}
	return s
}

// History records operations from many goroutines. A write is announced
// with Begin before its request is sent, so that Take can say up to when
// the recorded writes are complete: a read that ended before every write
// still in flight began can be checked now, since no write it may see is
// missing. History is safe for concurrent use.
type History struct {
	mu       sync.Mutex
	ops      []Op
	inflight map[uint64]time.Time // write id -> start
	next     uint64
}

// NewHistory returns an empty history.
func NewHistory() *History {
	return &History{inflight: map[uint64]time.Time{}}
}

// Pending is a write that has begun and not yet ended.
type Pending struct {
	h  *History
	id uint64
	op Op
}

// Begin announces a write that is about to be sent and returns the handle
// its End records it with. value is what a Put writes.
func (h *History) Begin(kind Kind, key, node string, value []byte) *Pending {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	p := &Pending{h: h, id: h.next, op: Op{Kind: kind, Key: key, Node: node, Start: time.Now(), Value: value}}
	h.inflight[p.id] = p.op.Start
	return p
}

// End records the write's answer: node is the node whose answer counts,
// status 0 with err when none came.
func (p *Pending) End(node string, status int, err error, unreached string) Op {
	op := p.op
	op.End = time.Now()
	op.Node, op.Status, op.Unreached = node, status, unreached
	if err != nil {
		op.Err = err.Error()
	}
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	delete(p.h.inflight, p.id)
	p.h.ops = append(p.h.ops, op)
	return op
}

// Add records a finished operation (a read, or a write that was never
// announced because nothing can read it while it runs).
func (h *History) Add(op Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
}

// Take returns the operations recorded since the last Take and the time up
// to which the recorded writes are complete: every write that began before
// it has ended and is among the operations returned now or before.
func (h *History) Take() (ops []Op, complete time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	complete = time.Now()
	for _, start := range h.inflight {
		if start.Before(complete) {
			complete = start
		}
	}
	ops, h.ops = h.ops, nil
	return ops, complete
}

// Origin says what the origin holds for a key: its value, or ok == false
// when it has none (then a node answers 404).
type Origin func(key string) (value []byte, ok bool)

// Interval is a span of time, both ends included.
type Interval struct{ From, To time.Time }

// Checker checks reads against the writes of a history, key by key. A
// read is allowed to return:
//   - the value of a write W that was acknowledged before the read began and
//     not followed, before the read began, by another acknowledged write that
//     began after W ended (W is one of the "last" writes);
//   - the value of any write that overlapped the read, or whose outcome is
//     unknown (5xx, no answer) and that began before the read ended;
//   - the origin's value (or 404 if the origin has none) when one of those
//     allowed writes is a DELETE, or no write was acknowledged before.
//
// The origin's value in place of every last write's PUT value is a revert:
// the write was lost. It is within the documented bound when the key's
// ownership may have moved between the write's acknowledgement and the end
// of the read (a membership interval, given with Moved), and counted apart
// otherwise. Anything else is a violation: the value of a PUT overwritten
// or deleted before the read began (a stale read), of a refused PUT, of a
// PUT that began after the read ended, or a value no one wrote.
//
// Checker keeps every write it was given; reads are checked once and
// dropped. It is not safe for concurrent use.
type Checker struct {
	origin  Origin
	writes  map[string][]Op // key -> writes, in order of End
	byValue map[string]int  // Put value -> index into writes[key]
	pending []Op            // reads not yet checked
	moved   []Interval
	// seen holds, by key, the reads that returned a PUT's value: when each
	// ended, and when the latest-begun such PUT read by then began.
	seen map[string][]seenRead
}

// seenRead is a read that returned a PUT's value: it ended at end; newest
// is the latest Start of the PUTs whose values reads ending by then
// returned (a running maximum over seen's order).
type seenRead struct{ end, newest time.Time }

// NewChecker returns a checker for keys whose unwritten value origin gives.
func NewChecker(origin Origin) *Checker {
	return &Checker{origin: origin, writes: map[string][]Op{}, byValue: map[string]int{}, seen: map[string][]seenRead{}}
}

// Moved records that keys' ownership may have moved during iv: a node
// died, stopped, paused past its lease, left, joined or rejoined.
func (c *Checker) Moved(iv Interval) { c.moved = append(c.moved, iv) }

// Add takes operations from a history: writes are kept, reads wait for Check.
func (c *Checker) Add(ops []Op) {
	for _, op := range ops {
		if op.Kind == Read {
			c.pending = append(c.pending, op)
			continue
		}
		ws := c.writes[op.Key]
		// Writes arrive nearly in order of End; insert keeps them sorted.
		i, _ := slices.BinarySearchFunc(ws, op.End, func(w Op, t time.Time) int { return w.End.Compare(t) })
		i = max(i, 0)
		for i < len(ws) && !ws[i].End.After(op.End) {
			i++
		}
		ws = slices.Insert(ws, i, op)
		c.writes[op.Key] = ws
		for j := i; j < len(ws); j++ {
			if ws[j].Kind == Put {
				c.byValue[valueKey(op.Key, ws[j].Value)] = j
			}
		}
	}
}

func valueKey(key string, v []byte) string { return key + "\x00" + string(v) }

// Report is what Check found.
type Report struct {
	// Reads is the number of reads checked (answers 200, or 404).
	Reads int
	// Writes counts the writes recorded with Add since the last Check.
	Writes int
	// Violations counts reads that returned a value they must not.
	Violations int
	// Reverts counts reads that returned the origin's value in place of a
	// write's, while the key's ownership may have moved: the documented bound.
	Reverts int
	// UnexplainedReverts counts reverts with no membership change to explain them.
	UnexplainedReverts int
	// Samples describes the first violations (at most five).
	Samples []string
	// RevertSamples describes the first unexplained reverts (at most three).
	RevertSamples []string
}

// Plus adds o's counts to r.
func (r Report) Plus(o Report) Report {
	r.Reads += o.Reads
	r.Writes += o.Writes
	r.Violations += o.Violations
	r.Reverts += o.Reverts
	r.UnexplainedReverts += o.UnexplainedReverts
	r.Samples = append(r.Samples, o.Samples...)[:min(5, len(r.Samples)+len(o.Samples))]
	r.RevertSamples = append(r.RevertSamples, o.RevertSamples...)[:min(3, len(r.RevertSamples)+len(o.RevertSamples))]
	return r
}

// Check checks the reads that ended before complete (Take's second result:
// every write they may see is known) and keeps the others for a later
// Check. Other statuses than 200 and 404 are not reads of a value and are
// dropped unchecked.
func (c *Checker) Check(complete time.Time) Report {
	var r Report
	c.see(complete)
	keep := c.pending[:0]
	for _, op := range c.pending {
		if !op.End.Before(complete) {
			keep = append(keep, op)
			continue
		}
		if op.Status != http.StatusOK && op.Status != http.StatusNotFound {
			continue
		}
		r.Reads++
		c.check(op, &r)
	}
	clear(c.pending[len(keep):])
	c.pending = keep
	return r
}

// Writes returns the number of writes the checker holds.
func (c *Checker) Writes() int {
	n := 0
	for _, ws := range c.writes {
		n += len(ws)
	}
	return n
}

func (c *Checker) check(g Op, r *Report) {
	ws := c.writes[g.Key]
	// last: acknowledged before g began and not superseded before g began.
	// allowed: last, plus writes overlapping g, plus unknown writes begun
	// before g ended.
	var last []int
	allowed := map[int]bool{}
	for i, w := range ws {
		if !w.Start.Before(g.End) {
			continue // began after the read ended: never allowed
		}
		switch w.Outcome() {
		case Failed:
			continue
		case Unknown:
			allowed[i] = true
			continue
		}
		if !w.End.Before(g.Start) {
			allowed[i] = true // overlaps the read
			continue
		}
		last = append(last, i)
	}
	// An acknowledged write is superseded if another one acknowledged before
	// the read began started after it ended: if the latest such start is
	// after its end.
	var latestStart time.Time
	for _, i := range last {
		if ws[i].Start.After(latestStart) {
			latestStart = ws[i].Start
		}
	}
	var live []int
	for _, i := range last {
		if !latestStart.After(ws[i].End) {
			live = append(live, i)
		}
	}
	for _, i := range live {
		allowed[i] = true
	}

	absent := g.Status == http.StatusNotFound
	if !absent {
		if i, ok := c.putOf(g); ok {
			w := ws[i]
			if newer, ok := c.wentBack(g, w); ok {
				c.violate(r, g, "went back: returned "+w.String()+" after an earlier read returned a PUT begun at "+
					newer.Format("15:04:05.000")+", after it ended")
				return
			}
			switch {
			case allowed[i]:
				return
			case w.Outcome() == Failed:
				c.violate(r, g, "returned the value of a refused write: "+w.String())
			case !w.Start.Before(g.End):
				c.violate(r, g, "returned the value of a write that began after the read ended: "+w.String())
			default:
				c.violate(r, g, "stale read: returned the value of a write overwritten before the read began: "+
					w.String()+"; last acknowledged: "+c.describe(ws, live))
			}
			return
		}
	}
	ov, has := c.origin(g.Key)
	isOrigin := absent && !has || !absent && has && bytes.Equal(g.Value, ov)
	if !isOrigin {
		if absent {
			c.violate(r, g, "not found, but the origin holds the key")
		} else {
			c.violate(r, g, "returned a value no one wrote")
		}
		return
	}
	if len(live) == 0 {
		return // no write acknowledged before the read: the origin's value
	}
	for i := range allowed {
		if ws[i].Kind == Delete {
			return
		}
	}
	// Every last write is a PUT and the read saw the origin: the write was
	// lost. Within the bound if ownership may have moved since it was acked.
	earliest := ws[live[0]].End
	for _, i := range live {
		if ws[i].End.Before(earliest) {
			earliest = ws[i].End
		}
	}
	for _, iv := range c.moved {
		if !iv.To.Before(earliest) && !iv.From.After(g.End) {
			r.Reverts++
			return
		}
	}
	r.UnexplainedReverts++
	if len(r.RevertSamples) < 3 {
		r.RevertSamples = append(r.RevertSamples, g.String()+": the origin's value, though no membership change since "+c.describe(ws, live))
	}
}

// see records the reads ended before complete that returned a PUT's value,
// for the rule that reads do not go back in time (wentBack).
func (c *Checker) see(complete time.Time) {
	touched := map[string]bool{}
	for _, g := range c.pending {
		if !g.End.Before(complete) || g.Status != http.StatusOK {
			continue
		}
		if i, ok := c.putOf(g); ok {
			c.seen[g.Key] = append(c.seen[g.Key], seenRead{end: g.End, newest: c.writes[g.Key][i].Start})
			touched[g.Key] = true
		}
	}
	for key := range touched {
		s := c.seen[key]
		slices.SortFunc(s, func(a, b seenRead) int { return a.end.Compare(b.end) })
		for i := 1; i < len(s); i++ {
			if s[i-1].newest.After(s[i].newest) {
				s[i].newest = s[i-1].newest
			}
		}
	}
}

// putOf returns the index in c.writes[g.Key] of the PUT whose value read g
// returned, if any.
func (c *Checker) putOf(g Op) (int, bool) {
	ws := c.writes[g.Key]
	if i, ok := c.byValue[valueKey(g.Key, g.Value)]; ok && i < len(ws) && ws[i].Kind == Put && bytes.Equal(ws[i].Value, g.Value) {
		return i, true
	}
	return 0, false
}

// wentBack returns the start of a PUT that a read ended before g began
// returned, when w, the acknowledged PUT whose value g returned, had ended
// before it began: once a node served the newer value, no read may return
// the older (issue 31's monotonic reads). A write of unknown outcome may
// apply late, so it is never the older one.
func (c *Checker) wentBack(g, w Op) (time.Time, bool) {
	if w.Outcome() != Acked {
		return time.Time{}, false
	}
	s := c.seen[g.Key]
	i, _ := slices.BinarySearchFunc(s, g.Start, func(r seenRead, t time.Time) int {
		if r.end.Before(t) {
			return -1
		}
		return 1
	})
	if i == 0 || !s[i-1].newest.After(w.End) {
		return time.Time{}, false
	}
	return s[i-1].newest, true
}

func (c *Checker) describe(ws []Op, idx []int) string {
	var s []string
	for _, i := range idx {
		s = append(s, ws[i].String())
	}
	if len(s) == 0 {
		return "none"
	}
	return fmt.Sprint(s)
}

func (c *Checker) violate(r *Report, g Op, why string) {
	r.Violations++
	if len(r.Samples) < 5 {
		r.Samples = append(r.Samples, g.String()+": "+why)
	}
}
