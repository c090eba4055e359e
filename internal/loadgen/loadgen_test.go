package loadgen

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/internal/freeport"
	"github.com/ringcache/ringcache/transport/origin"
)

// kvServer is a node's public API in miniature: PUT stores, DELETE drops,
// GET answers what was stored or the demo origin's value of size bytes.
type kvServer struct {
	mu      sync.Mutex
	vals    map[string][]byte
	size    int
	corrupt string // a key whose GET answers a byte off
	gets    atomic.Int64
}

func (s *kvServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	group, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/cache/"), "/")
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodPut:
		v, _ := io.ReadAll(r.Body)
		s.vals[key] = v
		w.Header().Set("Ringcache-Unreached", "none")
		w.WriteHeader(http.StatusNoContent)
	case http.MethodDelete:
		delete(s.vals, key)
		w.WriteHeader(http.StatusNoContent)
	default:
		s.gets.Add(1)
		v, ok := s.vals[key]
		if !ok {
			v = origin.DemoValue(group, key, s.size)
		}
		if key == s.corrupt {
			v = append([]byte(nil), v...)
			v[0] ^= 1
		}
		w.Write(v)
	}
}

func newKV(t *testing.T, size int) (*kvServer, string) {
	t.Helper()
	kv := &kvServer{vals: map[string][]byte{}, size: size}
	s := httptest.NewServer(kv)
	t.Cleanup(s.Close)
	return kv, s.URL
}

// TestFillThenRead: a closed loop PUTs every key once, then reads random
// keys, each checked against the value written; a node that answers one
// key wrongly fails exactly the reads of that key.
func TestFillThenRead(t *testing.T) {
	t.Parallel()
	kv, url := newKV(t, 64)
	ctx := context.Background()
	cfg := Config{Targets: URLs(url), Group: "g", KeyPrefix: "k-", Workers: 4, ValueSize: 100}
	fill := cfg
	fill.Source = Each(Put, 50)
	res, err := Do(ctx, fill)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status[http.StatusNoContent] != 50 || res.Requests() != 50 || res.BytesOut != 50*100 {
		t.Fatalf("fill: %d answers, %d of them 204, %d bytes sent; want 50 PUTs of 100 bytes", res.Requests(), res.Status[204], res.BytesOut)
	}
	kv.corrupt = "k-7"
	read := cfg
	read.Source, read.Requests = Reads(NewPicker(50, 0)), 1000
	read.Check = PutCheck("g", "k-", 100, true)
	r, err := Start(ctx, read)
	if err != nil {
		t.Fatal(err)
	}
	res = r.Wait()
	done, failed := r.Progress()
	if res.Requests() != 1000 || done != 1000 || res.Checked != 1000 {
		t.Fatalf("%d answers, %d done, %d checked; want 1000 each", res.Requests(), done, res.Checked)
	}
	if res.Wrong == 0 || res.Wrong != failed || res.Wrong > 100 {
		t.Errorf("%d wrong values, %d failures: want the reads of one key of 50, and only those", res.Wrong, failed)
	}
	if q := res.Hist.Quantile(0.5); q <= 0 || q > res.Hist.Max() {
		t.Errorf("median latency %v, max %v", q, res.Hist.Max())
	}
}

// TestDemoCheck: a demo group's values are right, a value an earlier fill
// wrote is the key's other value, anything else is wrong, and so is a
// demo value cut short.
func TestDemoCheck(t *testing.T) {
	t.Parallel()
	check := DemoCheck("g", "k-", 0)
	op := &Op{Key: 3}
	put := make([]byte, 32)
	Fill(put, PutSeed(nil, "g", "k-", 3))
	demo := origin.DemoValue("g", "k-3", 64)
	for _, tc := range []struct {
		name string
		body []byte
		want Verdict
	}{
		{"the origin's value", demo, Right},
		{"an earlier fill's value", put, Other},
		{"another key's value", origin.DemoValue("g", "k-4", 64), Wrong},
		{"the origin's value cut short", demo[:40], Wrong},
		{"empty", nil, Wrong},
	} {
		if got := check(op, tc.body); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := check(&Op{Name: "named"}, origin.DemoValue("g", "named", 64)); got != Right {
		t.Errorf("a named key's origin value: %v, want Right", got)
	}
	sized := DemoCheck("g", "k-", 32)
	if got := sized(op, demo); got != Wrong {
		t.Errorf("a demo value of 64 bytes where 32 were asked for: %v, want Wrong", got)
	}
	if got := sized(op, origin.DemoValue("g", "k-3", 32)); got != Right {
		t.Errorf("the demo value of the size asked for: %v, want Right", got)
	}
}

// TestOpenLoopDropsWhenBusy: an open loop hands each tick's operation to
// an idle worker, and counts a tick as dropped when none is, rather than
// queueing it.
func TestOpenLoopDropsWhenBusy(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var inFlight, most atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		inFlight.Add(-1)
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	r, err := Start(context.Background(), Config{Targets: URLs(s.URL), Group: "g", Workers: 2, Rate: 200,
		Source: Reads(NewPicker(10, 0))})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	close(release)
	res := r.Stop()
	if res.Dropped == 0 || most.Load() > 2 {
		t.Errorf("%d ticks dropped, at most %d requests in flight: want ticks dropped while both workers waited, and never 3 in flight", res.Dropped, most.Load())
	}
}

// TestRetry: a refused or reset connection is asked again once at the
// next target, a 503 with Retry-After again at the same one; other
// failures are recorded as they came.
func TestRetry(t *testing.T) {
	t.Parallel()
	_, good := newKV(t, 64)
	tests := []struct {
		name        string
		first       string
		wantRetried bool
		wantStatus  int
		wantServed  string
	}{
		{"refused is retried on the next node", "http://" + freeport.Addr(t), true, 200, "b"},
		{"closed without a response is retried", closingURL(t), true, 200, "b"},
		{"an HTTP error is not retried", statusURL(t, http.StatusBadGateway), false, 502, "a"},
		{"a 503 without Retry-After is not retried", statusURL(t, http.StatusServiceUnavailable), false, 503, "a"},
		{"a 503 with Retry-After is asked again", retryAfterURL(t, good), true, 200, "a"},
		{"a healthy node answers", good, false, 200, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got Record
			_, err := Do(context.Background(), Config{
				Targets: NewTargets(Target{"a", tt.first}, Target{"b", good}), Group: "demo", Workers: 1,
				Source: SourceFunc(func(_ *rand.Rand, op *Op) bool {
					*op = Op{Name: "key-0003"}
					return true
				}),
				Requests: 1, RetryRefused: true, RetryAfter: 15 * time.Second,
				Observe: func(r *Record) { got = *r },
			})
			if err != nil {
				t.Fatal(err)
			}
			if got.Retried != tt.wantRetried || got.Status != tt.wantStatus || got.Served != tt.wantServed || got.Target != "a" {
				t.Errorf("record = target %s served %s retried %v status %d err %v; want target a served %s retried %v status %d",
					got.Target, got.Served, got.Retried, got.Status, got.Err, tt.wantServed, tt.wantRetried, tt.wantStatus)
			}
		})
	}
}

// TestObserve: Before sees each operation before it is sent and Observe
// after, with what Before noted, the answer's Ringcache-Unreached header
// for a write, and a copy of the body the next request cannot change.
func TestObserve(t *testing.T) {
	t.Parallel()
	_, url := newKV(t, 64)
	var seq atomic.Int64
	var mu sync.Mutex
	var recs []Record
	_, err := Do(context.Background(), Config{
		Targets: URLs(url), Group: "g", Workers: 1, Requests: 20, ContentType: "text/plain", KeepBodies: true,
		Source: SourceFunc(func(_ *rand.Rand, op *Op) bool {
			n := seq.Add(1)
			if n%2 == 1 {
				*op = Op{Kind: Put, Name: "key", Value: []byte("v" + string(rune('a'+n/2)))}
			} else {
				*op = Op{Kind: Get, Name: "key"}
			}
			return true
		}),
		Before: func(r *Record) { r.Note = r.At },
		Observe: func(r *Record) {
			mu.Lock()
			recs = append(recs, *r)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 20 {
		t.Fatalf("%d records, want 20", len(recs))
	}
	for i, r := range recs {
		if r.Note != r.At {
			t.Errorf("record %d: Before's note %v, want its start %v", i, r.Note, r.At)
		}
		switch r.Op.Kind {
		case Put:
			if r.Status != http.StatusNoContent || r.Unreached != "none" {
				t.Errorf("record %d: PUT answered %d, Unreached %q", i, r.Status, r.Unreached)
			}
		case Get:
			if want := string(recs[i-1].Op.Value); string(r.Body) != want {
				t.Errorf("record %d: GET read %q, want %q, the PUT before it", i, r.Body, want)
			}
		}
	}
}

// TestTargetsChange: requests follow the targets as they change.
func TestTargetsChange(t *testing.T) {
	t.Parallel()
	a, urlA := newKV(t, 64)
	b, urlB := newKV(t, 64)
	targets := URLs(urlA)
	var n atomic.Int64
	_, err := Do(context.Background(), Config{Targets: targets, Group: "g", Workers: 2, Requests: 200,
		Source: SourceFunc(func(r *rand.Rand, op *Op) bool {
			if n.Add(1) == 100 {
				targets.Set([]Target{{URL: urlB}})
			}
			*op = Op{Key: r.IntN(10)}
			return true
		})})
	if err != nil {
		t.Fatal(err)
	}
	if ga, gb := a.gets.Load(), b.gets.Load(); ga+gb != 200 || ga < 90 || gb < 90 {
		t.Errorf("%d GETs to the first target, %d to the second; want about 100 each, 200 in all", ga, gb)
	}
}

// closingURL returns the URL of a server that accepts connections and
// closes them without a word, as docker-proxy does when its container is
// gone.
func closingURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return "http://" + l.Addr().String()
}

// statusURL returns the URL of a server that answers every request with
// code.
func statusURL(t *testing.T, code int) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", code)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// retryAfterURL answers 503 with Retry-After the first time, then
// redirects to good: a node whose key's owner answers again.
func retryAfterURL(t *testing.T, good string) string {
	t.Helper()
	var n atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "key owner unreachable", http.StatusServiceUnavailable)
			return
		}
		http.Redirect(w, r, good+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(s.Close)
	return s.URL
}
