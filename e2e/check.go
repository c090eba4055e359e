//go:build e2e

package e2e

import (
	"bytes"
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// Stats sums up a window.
type Stats struct {
	// Requests counts client requests (a retry is part of its request).
	Requests int
	// Errors counts requests that ended without a 200.
	Errors int
	// ErrorsByNode counts errors by the node asked first.
	ErrorsByNode map[string]int
	// Wrong counts 200 answers whose body is not the origin's value.
	Wrong int
	// Retries counts requests retried on another node.
	Retries int
	// Dropped counts ticks at which every worker was busy.
	Dropped int
	// Rate is requests per second over the window.
	Rate float64
	// P99 is the 99th percentile of the requests' latency.
	P99 time.Duration
	// MaxLatency is the slowest request.
	MaxLatency time.Duration
	// MaxFirstTry is the slowest request answered by the first node asked:
	// set against MaxLatency, it tells the cluster's stalls from the time a
	// client lost on a dead node before retrying.
	MaxFirstTry time.Duration
	// Samples holds up to five error or wrong-value descriptions.
	Samples []string
	// Slowest describes the three slowest requests (when, key, the node
	// asked, the node that answered, how long), to tell where a stall was.
	Slowest []string
	// Writes sums up the window's writes, slow meaning over WriteBound.
	Writes WriteStats
}

// WriteBound is how long a PUT or DELETE may take, even with a paused peer:
// the owner gives up on a silent peer after about a second (its copies then
// expire by lease), and a silent owner is noticed in about a second too.
const WriteBound = 2500 * time.Millisecond

// Check verifies every 200 body in w against the demo value rule and sums the
// window up. It drops the bodies it checked, to bound memory over a long run.
func Check(w *Window, group string, size int) Stats {
	s := Stats{Requests: len(w.Records), ErrorsByNode: map[string]int{}, Dropped: w.Dropped,
		Writes: CheckWrites(w.Writes, WriteBound)}
	if d := w.End.Sub(w.Start); d > 0 {
		s.Rate = float64(len(w.Records)) / d.Seconds()
	}
	sample := func(format string, args ...any) {
		if len(s.Samples) < 5 {
			s.Samples = append(s.Samples, fmt.Sprintf(format, args...))
		}
	}
	durs := make([]time.Duration, 0, len(w.Records))
	for i := range w.Records {
		r := &w.Records[i]
		durs = append(durs, r.Dur)
		s.MaxLatency = max(s.MaxLatency, r.Dur)
		if r.Retried {
			s.Retries++
		} else {
			s.MaxFirstTry = max(s.MaxFirstTry, r.Dur)
		}
		switch {
		case r.Status != http.StatusOK:
			s.Errors++
			s.ErrorsByNode[r.Node]++
			sample("%s %s via %s->%s: status %d err %q body %.80q", r.At.Format("15:04:05.000"),
				r.Key, r.Node, r.Served, r.Status, r.Err, r.Body)
		case !r.Written && !bytes.Equal(r.Body, DemoValue(group, r.Key, size)):
			s.Wrong++
			sample("%s %s via %s->%s: wrong value %.80q", r.At.Format("15:04:05.000"), r.Key, r.Node, r.Served, r.Body)
		}
		r.Body = nil
	}
	if len(durs) > 0 {
		slices.Sort(durs)
		s.P99 = durs[len(durs)*99/100]
	}
	slow := slices.Clone(w.Records)
	slices.SortFunc(slow, func(a, b Record) int { return cmp.Compare(b.Dur, a.Dur) })
	for _, r := range slow[:min(3, len(slow))] {
		s.Slowest = append(s.Slowest, fmt.Sprintf("%s %s via %s->%s %s", r.At.Format("15:04:05.000"),
			r.Key, r.Node, r.Served, r.Dur.Round(time.Millisecond)))
	}
	return s
}

// WriteStats sums up the writes of a window.
type WriteStats struct {
	// Writes counts PUTs and DELETEs.
	Writes int
	// Acked, Failed and Unknown count them by outcome (2xx, 4xx, 5xx or no answer).
	Acked, Failed, Unknown int
	// Slow counts writes that took longer than the bound given to CheckWrites.
	Slow int
	// Unreached counts answers with a Ringcache-Unreached header.
	Unreached int
	// Max is the slowest write.
	Max time.Duration
	// Samples describes up to five writes that were not acknowledged or
	// were slow.
	Samples []string
	// UnreachedSamples describes up to three writes answered with a
	// Ringcache-Unreached header.
	UnreachedSamples []string
}

// CheckWrites sums up writes, counting those slower than bound as slow.
func CheckWrites(writes []Op, bound time.Duration) WriteStats {
	var s WriteStats
	for _, w := range writes {
		s.Writes++
		d := w.End.Sub(w.Start)
		s.Max = max(s.Max, d)
		switch w.Outcome() {
		case Acked:
			s.Acked++
		case Failed:
			s.Failed++
		default:
			s.Unknown++
		}
		if d > bound {
			s.Slow++
		}
		if (w.Outcome() != Acked || d > bound) && len(s.Samples) < 5 {
			s.Samples = append(s.Samples, fmt.Sprintf("%s took %s", w, d.Round(time.Millisecond)))
		}
		if w.Unreached != "" {
			s.Unreached++
			if len(s.UnreachedSamples) < 3 {
				s.UnreachedSamples = append(s.UnreachedSamples, fmt.Sprintf("%s: Ringcache-Unreached: %s", w, w.Unreached))
			}
		}
	}
	return s
}
