package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testDirect returns a directTransport with the peer defaults, closed when
// the test ends.
func testDirect(t *testing.T) *directTransport {
	t.Helper()
	cfg, err := Config{Self: "http://self.invalid"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	tr := newPeerTransport(cfg, &net.Dialer{Timeout: cfg.DialTimeout}).(*directTransport)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// countingServer serves h and counts the connections it accepts.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// roundTrip sends a GET of url through tr and returns the status and body.
func roundTrip(ctx context.Context, tr http.RoundTripper, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	res, err := tr.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// TestDirectReusesConnections: exchanges in a row share one connection,
// whether the body has a Content-Length, is chunked or is empty, and a PUT's
// body arrives whole.
func TestDirectReusesConnections(t *testing.T) {
	t.Parallel()
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			w.Write([]byte("chunk"))
			w.(http.Flusher).Flush() // no Content-Length: chunked
			w.Write([]byte("ed"))
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/put":
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s", r.Method, b)
		default:
			w.Write([]byte("value of " + r.URL.Path))
		}
	})
	tr := testDirect(t)
	ctx := t.Context()
	for i := range 5 {
		code, body, err := roundTrip(ctx, tr, fmt.Sprintf("%s/k%d", srv.URL, i))
		if err != nil || code != 200 || body != fmt.Sprintf("value of /k%d", i) {
			t.Fatalf("GET %d: %d %q %v", i, code, body, err)
		}
	}
	if code, body, err := roundTrip(ctx, tr, srv.URL+"/chunked"); err != nil || code != 200 || body != "chunked" {
		t.Fatalf("chunked: %d %q %v", code, body, err)
	}
	if code, body, err := roundTrip(ctx, tr, srv.URL+"/empty"); err != nil || code != 204 || body != "" {
		t.Fatalf("204: %d %q %v", code, body, err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/put", strings.NewReader("new value"))
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "PUT new value" {
		t.Fatalf("PUT: %q", b)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 8 exchanges in a row, want 1", n)
	}
}

// TestDirectReadToLength: a body read to its Content-Length but not to EOF
// (as decodeValue reads one) gives its connection back; a body closed
// before its end does not, and the next request still gets its own
// response on a new connection.
func TestDirectReadToLength(t *testing.T) {
	t.Parallel()
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 100) + r.URL.Path))
	})
	tr := testDirect(t)
	get := func(path string, n int) string {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b := make([]byte, n)
		if _, err := io.ReadFull(res.Body, b); err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	get("/a", 102)
	get("/b", 102)
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections after two bodies read to their length, want 1", n)
	}
	get("/c", 10) // closed early: the rest of the body is still on the wire
	if got := get("/d", 102); got != strings.Repeat("x", 100)+"/d" {
		t.Fatalf("after an unfinished body: %q", got)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: an unfinished body's connection must not be reused", n)
	}
}

// TestDirectRetriesClosedIdleConnection: a peer that closes every connection
// after one response, without saying so, makes the next request meet a
// dead connection; it is sent again on a new one, once. A POST is not.
func TestDirectRetriesClosedIdleConnection(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			req, err := http.ReadRequest(bufio.NewReader(c))
			if err == nil {
				b, _ := io.ReadAll(req.Body)
				echo := req.Method + string(b)
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(echo), echo)
			}
			c.Close()
		}
	})
	tr := testDirect(t)
	url := "http://" + ln.Addr().String() + "/k"
	for i := range 3 {
		if code, body, err := roundTrip(t.Context(), tr, url); err != nil || code != 200 || body != "GET" {
			t.Fatalf("GET %d: %d %q %v", i, code, body, err)
		}
	}
	if n := accepted.Load(); n < 3 {
		t.Fatalf("%d connections for 3 requests to a peer that closes each", n)
	}
	// A PUT is sent again with its whole body, and the caller's request is
	// left as it was.
	time.Sleep(10 * time.Millisecond) // for the peer's close to arrive
	put, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, url, strings.NewReader("data"))
	body := put.Body
	res, err := tr.RoundTrip(put)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "PUTdata" || put.Body != body {
		t.Fatalf("PUT on a dead connection: %q (request body replaced: %v)", b, put.Body != body)
	}
	// Leave an idle connection the peer has closed, then POST on it.
	time.Sleep(10 * time.Millisecond) // for the peer's close to arrive
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader("x"))
	res, err = tr.RoundTrip(req)
	if err == nil {
		res.Body.Close()
		t.Fatal("a POST on a dead connection was sent again")
	}
}

// TestDirectPeerRestarted: a peer that restarted has closed every
// connection the pool keeps to it; the next request, a GET or a POST marked
// with an Idempotency-Key (as every peer POST is), fails on one of them and
// is sent again on a new connection, not on the next dead one.
func TestDirectPeerRestarted(t *testing.T) {
	t.Parallel()
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		time.Sleep(20 * time.Millisecond) // so that the first requests overlap
		fmt.Fprint(w, r.Method+string(b))
	})
	tr := testDirect(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, body, err := roundTrip(t.Context(), tr, srv.URL+"/k"); err != nil || body != "GET" {
				t.Errorf("GET: %q %v", body, err)
			}
		})
	}
	wg.Wait()
	if n := conns.Load(); n < 2 {
		t.Fatalf("%d connections for 4 overlapping requests", n)
	}
	srv.CloseClientConnections() // the restart, as the pool sees it
	time.Sleep(10 * time.Millisecond)
	if _, body, err := roundTrip(t.Context(), tr, srv.URL+"/k"); err != nil || body != "GET" {
		t.Fatalf("GET after the restart: %q %v", body, err)
	}
	srv.CloseClientConnections()
	time.Sleep(10 * time.Millisecond)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/k", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "1")
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("POST with an Idempotency-Key after the restart: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "POSTx" {
		t.Fatalf("POST after the restart: %q", b)
	}
}

// TestDirectContextEnds: a canceled request and one past its deadline
// return at once with the context's error while the peer stalls, and the
// transport keeps working.
func TestDirectContextEnds(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.Write([]byte("ok"))
	})
	defer close(release)
	tr := testDirect(t)

	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, _, err := roundTrip(ctx, tr, srv.URL+"/slow")
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the request reach the server
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a canceled request did not return")
	}

	ctx, cancel = context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := roundTrip(ctx, tr, srv.URL+"/slow"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("past the deadline: %v, want context.DeadlineExceeded", err)
	}
	if code, body, err := roundTrip(t.Context(), tr, srv.URL+"/fast"); err != nil || code != 200 || body != "ok" {
		t.Fatalf("after the timeouts: %d %q %v", code, body, err)
	}
}

// TestDirectSendsNothingOnAnEndedContext: a request whose context ended
// before it was sent is not sent, even over an idle connection ready for
// it: it fails with the context's error and the peer never sees it. A drop
// or a copy that its caller gave up on must not be applied after all (the
// context's watcher used to race with the write).
func TestDirectSendsNothingOnAnEndedContext(t *testing.T) {
	t.Parallel()
	var got atomic.Int64
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ended" {
			got.Add(1)
		}
		w.Write([]byte("ok"))
	})
	tr := testDirect(t)
	for range 200 {
		// An idle connection to the peer, then a request on an ended context.
		if code, _, err := roundTrip(t.Context(), tr, srv.URL+"/warm"); err != nil || code != 200 {
			t.Fatalf("warming: %d %v", code, err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, _, err := roundTrip(ctx, tr, srv.URL+"/ended"); !errors.Is(err, context.Canceled) {
			t.Fatalf("on an ended context: %v, want context.Canceled", err)
		}
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("the peer got %d requests sent on an ended context, want none", n)
	}
}

// TestDirectInformational: 1xx responses before the final one go to the
// request's trace, and the final response is returned.
func TestDirectInformational(t *testing.T) {
	t.Parallel()
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Step", "1")
		w.WriteHeader(http.StatusProcessing)
		w.Header().Set("X-Step", "2")
		w.WriteHeader(http.StatusProcessing)
		w.Header().Del("X-Step")
		w.Write([]byte("done"))
	})
	tr := testDirect(t)
	var got []string
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			got = append(got, fmt.Sprint(code, " ", h.Get("X-Step")))
			return nil
		},
	})
	code, body, err := roundTrip(ctx, tr, srv.URL)
	if err != nil || code != 200 || body != "done" {
		t.Fatalf("%d %q %v", code, body, err)
	}
	if strings.Join(got, ",") != "102 1,102 2" {
		t.Fatalf("1xx responses seen: %q", got)
	}
	// Without a trace they are skipped.
	if code, body, err := roundTrip(t.Context(), tr, srv.URL); err != nil || code != 200 || body != "done" {
		t.Fatalf("without a trace: %d %q %v", code, body, err)
	}
}

// TestDirectIdleLimits: at most MaxIdleConnsPerHost connections stay idle,
// and one idle past the idle timeout is closed rather than used.
func TestDirectIdleLimits(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	var arrived sync.WaitGroup
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			arrived.Done()
			<-hold
		}
		w.Write([]byte("ok"))
	})
	tr := testDirect(t)
	tr.maxIdle = 2
	const n = 4
	arrived.Add(n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, _, err := roundTrip(t.Context(), tr, srv.URL+"/hold"); err != nil {
				t.Error(err)
			}
		})
	}
	arrived.Wait() // four requests at once: four connections
	close(hold)
	wg.Wait()
	addr := strings.TrimPrefix(srv.URL, "http://")
	tr.mu.Lock()
	idle := len(tr.idle[addr])
	for _, c := range tr.idle[addr] {
		c.since = c.since.Add(-2 * tr.idleTimeout)
	}
	tr.mu.Unlock()
	if conns.Load() != n || idle != 2 {
		t.Fatalf("%d connections, %d idle; want %d and 2", conns.Load(), idle, n)
	}
	if _, _, err := roundTrip(t.Context(), tr, srv.URL+"/after"); err != nil {
		t.Fatal(err)
	}
	if conns.Load() != n+1 {
		t.Fatalf("%d connections: a connection idle past the timeout was used", conns.Load())
	}
}

// TestDirectAnswerBeforeBody: a peer that refuses a PUT before reading its
// body, and closes the connection, is heard: its 413 is the result.
func TestDirectAnswerBeforeBody(t *testing.T) {
	t.Parallel()
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	})
	tr := testDirect(t)
	body := strings.Repeat("x", 8<<20) // more than the server drains before it closes
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/k", strings.NewReader(body))
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("PUT refused early: %v, want the 413", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", res.StatusCode)
	}
}
