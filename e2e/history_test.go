//go:build e2e

package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The tests in this file check the history checker on histories built by
// hand, and the load generator's writes against small servers on loopback;
// none needs Docker.

// t0 is the origin of the synthetic timelines: at(n) is n ms after it.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func put(key, value string, from, to, status int) Op {
	return Op{Kind: Put, Key: key, Node: "a", Start: at(from), End: at(to), Status: status, Value: []byte(value)}
}

func del(key string, from, to, status int) Op {
	return Op{Kind: Delete, Key: key, Node: "a", Start: at(from), End: at(to), Status: status}
}

func get(key, value string, from, to int) Op {
	return Op{Kind: Read, Key: key, Node: "b", Start: at(from), End: at(to), Status: 200, Value: []byte(value)}
}

func notFound(key string, from, to int) Op {
	return Op{Kind: Read, Key: key, Node: "b", Start: at(from), End: at(to), Status: 404}
}

// testOrigin holds "origin-<key>" for every key but those starting with "none".
func testOrigin(key string) ([]byte, bool) {
	if strings.HasPrefix(key, "none") {
		return nil, false
	}
	return []byte("origin-" + key), true
}

func TestChecker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		ops   []Op
		moved []Interval
		// want: violations, explained reverts, unexplained reverts
		violations, reverts, unexplained int
	}{
		{"unwritten key, origin's value", []Op{get("k", "origin-k", 0, 1)}, nil, 0, 0, 0},
		{"unwritten key, another value", []Op{get("k", "origin-x", 0, 1)}, nil, 1, 0, 0},
		{"unwritten key, not found though the origin has it", []Op{notFound("k", 0, 1)}, nil, 1, 0, 0},
		{"read your write", []Op{put("k", "v1", 0, 10, 204), get("k", "v1", 20, 30)}, nil, 0, 0, 0},
		{"stale: older of two sequential writes", []Op{
			put("k", "v1", 0, 10, 204), put("k", "v2", 20, 30, 204), get("k", "v1", 40, 50),
		}, nil, 1, 0, 0},
		{"newer of two sequential writes", []Op{
			put("k", "v1", 0, 10, 204), put("k", "v2", 20, 30, 204), get("k", "v2", 40, 50),
		}, nil, 0, 0, 0},
		{"write overlapping the read: old value", []Op{
			put("k", "v1", 0, 10, 204), put("k", "v2", 35, 60, 204), get("k", "v1", 40, 50),
		}, nil, 0, 0, 0},
		{"write overlapping the read: new value", []Op{
			put("k", "v1", 0, 10, 204), put("k", "v2", 35, 60, 204), get("k", "v2", 40, 50),
		}, nil, 0, 0, 0},
		{"two overlapping acknowledged writes: either", []Op{
			put("k", "v1", 0, 20, 204), put("k", "v2", 5, 15, 204), get("k", "v1", 40, 50), get("k", "v2", 60, 70),
		}, nil, 0, 0, 0},
		{"value of a write begun after the read ended", []Op{
			put("k", "v1", 60, 70, 204), get("k", "v1", 40, 50),
		}, nil, 1, 0, 0},
		{"value of a refused write", []Op{
			put("k", "v1", 0, 10, 204), put("k", "bad", 20, 30, 413), get("k", "bad", 40, 50),
		}, nil, 1, 0, 0},
		{"a refused write leaves the one before", []Op{
			put("k", "v1", 0, 10, 204), put("k", "bad", 20, 30, 413), get("k", "v1", 40, 50),
		}, nil, 0, 0, 0},
		{"value of a write with unknown outcome, even after a later write", []Op{
			put("k", "v1", 0, 10, 503), put("k", "v2", 20, 30, 204), get("k", "v1", 40, 50),
		}, nil, 0, 0, 0},
		{"no answer at all is unknown too", []Op{
			put("k", "v1", 0, 10, 0), get("k", "v1", 40, 50),
		}, nil, 0, 0, 0},
		{"deleted: the origin's value", []Op{
			put("k", "v1", 0, 10, 204), del("k", 20, 30, 204), get("k", "origin-k", 40, 50),
		}, nil, 0, 0, 0},
		{"deleted: the value before the delete is stale", []Op{
			put("k", "v1", 0, 10, 204), del("k", 20, 30, 204), get("k", "v1", 40, 50),
		}, nil, 1, 0, 0},
		{"deleted, origin has none: 404", []Op{
			put("none-k", "v1", 0, 10, 204), del("none-k", 20, 30, 204), notFound("none-k", 40, 50),
		}, nil, 0, 0, 0},
		{"delete overlapping the read: origin's value", []Op{
			put("k", "v1", 0, 10, 204), del("k", 35, 60, 204), get("k", "origin-k", 40, 50),
		}, nil, 0, 0, 0},
		{"lost write without a membership change", []Op{
			put("k", "v1", 0, 10, 204), get("k", "origin-k", 40, 50),
		}, nil, 0, 0, 1},
		{"lost write while ownership moved", []Op{
			put("k", "v1", 0, 10, 204), get("k", "origin-k", 40, 50),
		}, []Interval{{at(20), at(30)}}, 0, 1, 0},
		{"a membership change before the write explains nothing", []Op{
			put("k", "v1", 0, 10, 204), get("k", "origin-k", 40, 50),
		}, []Interval{{at(-20), at(-5)}}, 0, 0, 1},
		{"a membership change after the read explains nothing", []Op{
			put("k", "v1", 0, 10, 204), get("k", "origin-k", 40, 50),
		}, []Interval{{at(60), at(70)}}, 0, 0, 1},
		{"the paused owner's old value after it rejoins is stale, membership or not", []Op{
			put("k", "v1", 0, 10, 204), put("k", "v2", 100, 110, 204), get("k", "v1", 200, 210),
		}, []Interval{{at(20), at(300)}}, 1, 0, 0},
		{"went back: an older acknowledged PUT after a read of a newer one in progress", []Op{
			put("k", "v1", 0, 10, 204), put("k", "v2", 20, 100, 204), get("k", "v2", 30, 40), get("k", "v1", 50, 60),
		}, nil, 1, 0, 0},
		{"reads that overlap may see the older and the newer in either order", []Op{
			put("k", "v1", 0, 10, 204), put("k", "v2", 20, 100, 204), get("k", "v2", 30, 55), get("k", "v1", 50, 60),
		}, nil, 0, 0, 0},
		{"a PUT that overlapped the newer one is not older", []Op{
			put("k", "v1", 0, 25, 204), put("k", "v2", 20, 100, 204), get("k", "v2", 30, 40), get("k", "v1", 50, 60),
		}, nil, 0, 0, 0},
		{"a PUT of unknown outcome may apply late", []Op{
			put("k", "v1", 0, 10, 503), put("k", "v2", 20, 100, 204), get("k", "v2", 30, 40), get("k", "v1", 50, 60),
		}, nil, 0, 0, 0},
		{"a value no one wrote", []Op{
			put("k", "v1", 0, 10, 204), get("k", "v9", 40, 50),
		}, nil, 1, 0, 0},
		{"another key's value", []Op{
			put("j", "v1", 0, 10, 204), get("k", "v1", 40, 50),
		}, nil, 1, 0, 0},
		{"errors are not reads", []Op{
			put("k", "v1", 0, 10, 204), {Kind: Read, Key: "k", Start: at(40), End: at(50), Status: 502, Value: []byte("bad gateway")},
		}, nil, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := NewChecker(testOrigin)
			for _, iv := range tt.moved {
				c.Moved(iv)
			}
			c.Add(tt.ops)
			r := c.Check(at(1000))
			if r.Violations != tt.violations || r.Reverts != tt.reverts || r.UnexplainedReverts != tt.unexplained {
				t.Errorf("Check = %d violations, %d reverts, %d unexplained reverts (samples %q %q); want %d, %d, %d",
					r.Violations, r.Reverts, r.UnexplainedReverts, r.Samples, r.RevertSamples,
					tt.violations, tt.reverts, tt.unexplained)
			}
			if r.Violations > 0 && len(r.Samples) == 0 {
				t.Error("violations without a sample")
			}
		})
	}
}

// TestCheckerWaitsForWrites checks that a read is checked only once every
// write begun before it ended is known, and that writes are kept across
// Checks while reads are checked once.
func TestCheckerWaitsForWrites(t *testing.T) {
	t.Parallel()
	c := NewChecker(testOrigin)
	c.Add([]Op{put("k", "v1", 0, 10, 204), get("k", "v2", 40, 50)})
	// A write of v2 began at 30 and has not ended: the read must wait.
	if r := c.Check(at(30)); r.Reads != 0 || r.Violations != 0 {
		t.Fatalf("Check(30) = %+v; want the read kept for later", r)
	}
	c.Add([]Op{put("k", "v2", 30, 60, 204)})
	if r := c.Check(at(100)); r.Reads != 1 || r.Violations != 0 {
		t.Fatalf("Check(100) = %+v; want 1 read, no violation", r)
	}
	// The writes stay: a later stale read of v1 is still caught.
	c.Add([]Op{get("k", "v1", 200, 210)})
	if r := c.Check(at(300)); r.Reads != 1 || r.Violations != 1 {
		t.Fatalf("Check(300) = %+v; want 1 read, 1 violation", r)
	}
	if r := c.Check(at(400)); r.Reads != 0 {
		t.Fatalf("Check(400) = %+v; want nothing left", r)
	}
	if n := c.Writes(); n != 2 {
		t.Errorf("Writes() = %d; want 2", n)
	}
}

// TestCheckerOutOfOrder checks that writes given out of order of their end
// are judged as if given in order.
func TestCheckerOutOfOrder(t *testing.T) {
	t.Parallel()
	c := NewChecker(testOrigin)
	c.Add([]Op{put("k", "v2", 20, 30, 204)})
	c.Add([]Op{put("k", "v3", 40, 45, 204), put("k", "v1", 0, 10, 204)})
	c.Add([]Op{get("k", "v1", 50, 60), get("k", "v2", 50, 60), get("k", "v3", 50, 60)})
	if r := c.Check(at(100)); r.Reads != 3 || r.Violations != 2 {
		t.Errorf("Check = %+v; want 3 reads, 2 violations (v1 and v2 were overwritten by v3)", r)
	}
}

func TestHistoryTake(t *testing.T) {
	t.Parallel()
	h := NewHistory()
	h.Add(Op{Kind: Read, Key: "k"})
	p := h.Begin(Put, "k", "a", []byte("v"))
	ops, complete := h.Take()
	if len(ops) != 1 || complete.After(p.op.Start) {
		t.Fatalf("Take = %d ops, complete %s; want 1 op and complete by the write's start %s", len(ops), complete, p.op.Start)
	}
	op := p.End("b", 204, nil, "http://node3:8080")
	ops, complete = h.Take()
	if len(ops) != 1 || ops[0].Node != "b" || ops[0].Unreached != "http://node3:8080" || complete.Before(op.End) {
		t.Fatalf("Take = %+v, complete %s; want the ended write, complete after it", ops, complete)
	}
}

// store is a small key-value server on loopback: every node is one store
// (correct), or a node keeps its own copy of what it read, which writes
// through other nodes do not drop (the hot-copy bug the checker must see).
type store struct {
	origin Origin
	mu     sync.Mutex
	values map[string][]byte
	copies map[string]map[string][]byte // node -> key -> copy; nil: no copies
	writes atomic.Int64
}

func (s *store) handler(node string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, "/cache/demo/")
		s.mu.Lock()
		defer s.mu.Unlock()
		switch r.Method {
		case http.MethodGet:
			if c, ok := s.copies[node][key]; ok {
				w.Write(c)
				return
			}
			v, ok := s.values[key]
			if !ok {
				v, _ = s.origin(key)
			}
			if s.copies != nil {
				s.copies[node][key] = v
			}
			w.Write(v)
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			s.values[key] = b
			delete(s.copies[node], key)
			s.writes.Add(1)
			w.WriteHeader(http.StatusNoContent)
		case http.MethodDelete:
			delete(s.values, key)
			delete(s.copies[node], key)
			s.writes.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}
	})
}

func (s *store) targets(t *testing.T) []Target {
	t.Helper()
	var ts []Target
	for _, n := range []string{"a", "b"} {
		srv := httptest.NewServer(s.handler(n))
		t.Cleanup(srv.Close)
		ts = append(ts, Target{Node: n, URL: srv.URL})
	}
	return ts
}

// readOp reads key through a target and records it.
func readOp(t *testing.T, h *History, tg Target, key string) {
	t.Helper()
	api := NewAPI(5 * time.Second)
	defer api.Close()
	start := time.Now()
	status, body, err := api.Get(t.Context(), tg.URL, "demo", key)
	if err != nil {
		t.Fatal(err)
	}
	h.Add(Op{Kind: Read, Key: key, Node: tg.Node, Start: start, End: time.Now(), Status: status, Value: body})
}

// writeOp writes key through a target and records it.
func writeOp(t *testing.T, h *History, tg Target, kind Kind, key, value string) {
	t.Helper()
	p := h.Begin(kind, key, tg.Node, []byte(value))
	status, unreached, err := Write(t.Context(), http.DefaultClient, kind, tg.URL, "demo", key, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	p.End(tg.Node, status, nil, unreached)
}

func TestCheckerOnServers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		copies     bool
		violations int
	}{
		{"one store behind both nodes", false, 0},
		{"node b keeps copies writes through a do not drop", true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &store{origin: testOrigin, values: map[string][]byte{}}
			if tt.copies {
				s.copies = map[string]map[string][]byte{"a": {}, "b": {}}
			}
			ts := s.targets(t)
			a, b := ts[0], ts[1]
			h := NewHistory()
			writeOp(t, h, a, Put, "k", "v1")
			readOp(t, h, b, "k") // b holds v1 from here on, with copies
			writeOp(t, h, a, Put, "k", "v2")
			readOp(t, h, b, "k") // stale with copies
			readOp(t, h, a, "k")
			writeOp(t, h, a, Delete, "k", "")
			readOp(t, h, a, "k")
			readOp(t, h, b, "k") // stale with copies
			c := NewChecker(testOrigin)
			ops, complete := h.Take()
			c.Add(ops)
			r := c.Check(complete)
			if r.Reads != 5 || r.Violations != tt.violations || r.UnexplainedReverts != 0 {
				t.Errorf("Check = %d reads, %d violations, %d unexplained reverts (%q); want 5 reads, %d violations, no reverts",
					r.Reads, r.Violations, r.UnexplainedReverts, r.Samples, tt.violations)
			}
		})
	}
}

// TestLoadWrites runs the generator with writes against one correct store
// until it has written enough, and checks that every write was recorded
// with a unique value, that reads went to the written keys too, and that the
// checker finds nothing wrong.
func TestLoadWrites(t *testing.T) {
	t.Parallel()
	demo := func(key string) ([]byte, bool) { return DemoValue("demo", key, 64), true }
	s := &store{origin: demo, values: map[string][]byte{}}
	ts := s.targets(t)
	enough := make(chan struct{})
	var once sync.Once
	inner := s.handler("a")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(w, r)
		if s.writes.Load() >= 30 {
			once.Do(func() { close(enough) })
		}
	}))
	t.Cleanup(srv.Close)
	ts[0].URL = srv.URL
	h := NewHistory()
	l, err := NewLoad(LoadConfig{Group: "demo", Keys: Keys(20), Rate: 400, WriteRate: 100,
		WriteKeys: []string{"w-0", "w-1", "w-2"}, WriteShare: 0.5, History: h, Writer: "test"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetTargets(ts)
	l.Start(t.Context())
	select {
	case <-enough:
	case <-t.Context().Done():
		t.Fatal("test ended before 30 writes")
	}
	l.Stop()
	w := l.Take()
	ops, complete := h.Take()
	var writes, writtenReads, puts int
	values := map[string]bool{}
	for _, op := range ops {
		switch op.Kind {
		case Put:
			puts++
			if values[string(op.Value)] || !strings.HasPrefix(string(op.Value), "test #") {
				t.Errorf("PUT value %q repeated or not named for its writer", op.Value)
			}
			values[string(op.Value)] = true
			fallthrough
		case Delete:
			writes++
			if op.Status != http.StatusNoContent || op.Node == "" {
				t.Errorf("write %s: want 204 from a named node", op)
			}
		case Read:
			if strings.HasPrefix(op.Key, "w-") {
				writtenReads++
			}
		}
	}
	if writes < 30 || puts == 0 || writes == puts || len(w.Writes) != writes {
		t.Errorf("%d writes (%d PUTs) in the history, %d in the window; want at least 30, both kinds, the same in both", writes, puts, len(w.Writes))
	}
	if writtenReads == 0 {
		t.Error("no read of a written key")
	}
	c := NewChecker(demo)
	c.Add(ops)
	r := c.Check(complete)
	if r.Violations != 0 || r.UnexplainedReverts != 0 || r.Reads == 0 {
		t.Errorf("Check = %+v; want reads and no violations", r)
	}
	// Written keys are the checker's: Check must not call their values wrong.
	st := Check(&w, "demo", 64)
	if st.Wrong != 0 {
		t.Errorf("Check counted %d wrong values (%q); want none", st.Wrong, st.Samples)
	}
	ws := CheckWrites(w.Writes, time.Minute)
	if ws.Writes != writes || ws.Acked != writes || ws.Slow != 0 {
		t.Errorf("CheckWrites = %+v; want %d writes, all acknowledged, none slow", ws, writes)
	}
}

func TestCheckWrites(t *testing.T) {
	t.Parallel()
	ops := []Op{
		put("k", "v1", 0, 10, 204),
		put("k", "v2", 0, 3000, 204), // slow
		del("k", 0, 10, 502),
		put("k", "v3", 0, 10, 0),
		put("k", "v4", 0, 10, 413),
		{Kind: Delete, Key: "k", Start: at(0), End: at(10), Status: 204, Unreached: "http://node2:8080"},
	}
	s := CheckWrites(ops, time.Second)
	if s.Writes != 6 || s.Acked != 3 || s.Failed != 1 || s.Unknown != 2 || s.Slow != 1 || s.Unreached != 1 || s.Max != 3*time.Second {
		t.Errorf("CheckWrites = %+v; want 6 writes: 3 acked, 1 failed, 2 unknown, 1 slow, 1 unreached, max 3s", s)
	}
}

func TestSlowness(t *testing.T) {
	t.Parallel()
	rec := func(node string, atMS int, dur time.Duration) Record {
		return Record{Node: node, At: at(atMS), Dur: dur}
	}
	recs := []Record{
		rec("a", 0, time.Millisecond),
		rec("a", 100, 2*time.Second),
		rec("b", 200, 100*time.Millisecond),
		rec("b", 5000, 3*time.Second), // outside the window
	}
	slow, overSecond, n, p99 := slowness(recs, at(0), at(1000))
	if slow["a"] != 1 || slow["b"] != 1 || overSecond["a"] != 1 || overSecond["b"] != 0 || n != 3 || p99 != 2*time.Second {
		t.Errorf("slowness = %v, %v, %d, %s; want a:1 b:1 slowed, a:1 over 1s, 3 requests, p99 2s", slow, overSecond, n, p99)
	}
}

func TestMetric(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "# HELP x\nringcache_hot_promotions_total{group=\"other\"} 9\nringcache_hot_promotions_total{group=\"demo\"} 3\n")
	}))
	t.Cleanup(srv.Close)
	api := NewAPI(5 * time.Second)
	t.Cleanup(api.Close)
	v, err := api.Metric(t.Context(), srv.URL, `ringcache_hot_promotions_total{group="demo"}`)
	if err != nil || v != 3 {
		t.Errorf("Metric = %v, %v; want 3", v, err)
	}
	if _, err := api.Metric(t.Context(), srv.URL, `ringcache_items{group="demo"}`); err == nil {
		t.Error("Metric of a missing sample: no error")
	}
}
