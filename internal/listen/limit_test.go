package listen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/poll"
	"github.com/ringcache/ringcache/transport/api"
)

// limitedServer serves h on a loopback listener capped as cfg says and
// counts the connections it hands the server, in all and per client IP: a
// check of the caps that does not trust the listener's counters.
type limitedServer struct {
	url string
	ln  *LimitListener
	srv *http.Server

	mu     sync.Mutex
	open   int
	peak   int
	byIP   map[string]int // open connections per client IP
	peakIP map[string]int // the most byIP held at once
}

func newLimitedServer(t *testing.T, cfg LimitConfig, h http.Handler, tune func(*http.Server)) *limitedServer {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := NewLimitListener(raw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &limitedServer{url: "http://" + raw.Addr().String(), ln: ln, srv: NewServer("", h),
		byIP: map[string]int{}, peakIP: map[string]int{}}
	if tune != nil {
		tune(s.srv)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.srv.Serve(countingListener{ln, s})
	}()
	t.Cleanup(func() {
		s.srv.Close()
		<-done
	})
	return s
}

// countingListener counts the connections ln hands out until the server
// closes them. A connection counts from after ln admitted it to before its
// Close reaches ln, so the count is never behind what ln holds: if ln ever
// admitted one over a cap, the count shows it. (The server's ConnState
// hook would not do: it reports a close after the slot is free again.)
type countingListener struct {
	*LimitListener
	s *limitedServer
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.LimitListener.Accept()
	if err != nil {
		return nil, err
	}
	ip, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	l.s.count(ip, 1)
	return &countedConn{Conn: c, s: l.s, ip: ip}, nil
}

type countedConn struct {
	net.Conn
	s    *limitedServer
	ip   string
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.s.count(c.ip, -1) })
	return c.Conn.Close()
}

// CloseWrite passes net/http's half-close on to the limited connection.
func (c *countedConn) CloseWrite() error {
	return c.Conn.(interface{ CloseWrite() error }).CloseWrite()
}

func (s *limitedServer) count(ip string, d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open += d
	s.peak = max(s.peak, s.open)
	s.byIP[ip] += d
	s.peakIP[ip] = max(s.peakIP[ip], s.byIP[ip])
}

// peakOpen returns the most connections the server had open at once.
func (s *limitedServer) peakOpen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// peakOf returns the most connections the server had open at once from ip.
func (s *limitedServer) peakOf(ip string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakIP[ip]
}

// awaitOpen waits until the listener holds n connections.
func (s *limitedServer) awaitOpen(t *testing.T, n int) {
	t.Helper()
	poll.Until(t, 5*time.Second, func() (bool, string) {
		return s.ln.Open() == n, fmt.Sprintf("listener holds %d connections, want %d", s.ln.Open(), n)
	})
}

// fromIP returns a dialer whose connections come from the loopback address
// ip (any of 127.0.0.0/8 on Linux): a client of its own to the listener.
func fromIP(ip string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
}

// dialFrom opens a connection to addr from the loopback address ip.
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	c, err := fromIP(ip).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// getFrom sends one GET / on a new connection from ip and returns its
// status, or an error.
func getFrom(ip, url string) (int, error) {
	tr := &http.Transport{DialContext: fromIP(ip).DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// expectRefused sends a request on c and checks that the listener refused
// it at once: a 503 with Connection: close and Retry-After on plain HTTP,
// a close without a byte on TLS, and no wait for either.
func expectRefused(t *testing.T, c net.Conn, plain bool) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	reply, err := io.ReadAll(c)
	c.Close()
	if plain {
		resp, perr := http.ReadResponse(bufio.NewReader(strings.NewReader(string(reply))), nil)
		if perr != nil || resp.StatusCode != http.StatusServiceUnavailable || !resp.Close || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("refused: %q, %v; want a 503 with Connection: close and Retry-After: 1", reply, err)
		}
	}
	if !plain && len(reply) != 0 {
		t.Errorf("refused by a TLS listener: %q; want the connection closed without a byte", reply)
	}
	if isTimeout(err) {
		t.Error("the connection waited instead of being refused")
	}
}

func TestNewLimitListener(t *testing.T) {
	t.Parallel()
	for _, max := range []int{0, -1} {
		if ce, ok := errors.AsType[*cache.ConfigError](LimitConfig{Max: max}.Validate()); !ok || ce.Field != "Max" {
			t.Errorf("Validate(max %d) = %v, want a ConfigError for Max", max, ce)
		}
		if _, err := NewLimitListener(nil, LimitConfig{Max: max}); !errors.Is(err, api.ErrConfig) {
			t.Errorf("NewLimitListener(max %d) = %v, want api.ErrConfig", max, err)
		}
	}
	if err := (LimitConfig{Max: 1, MaxPerClient: -1}).Validate(); err != nil {
		t.Errorf("Validate(max 1, no per-client cap) = %v", err)
	}
	for _, tc := range []struct {
		name                 string
		max, perClient, want int
	}{
		{"none by default", DefaultMaxConns, 0, 0},
		{"given", DefaultMaxConns, 7, 7},
		{"given above the cap", 10, 20, 20},
		{"off", DefaultMaxConns, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := NewLimitListener(nil, LimitConfig{Max: tc.max, MaxPerClient: tc.perClient})
			if err != nil {
				t.Fatal(err)
			}
			if got := ln.MaxPerClient(); got != tc.want {
				t.Errorf("max %d, per client %d: MaxPerClient() = %d, want %d", tc.max, tc.perClient, got, tc.want)
			}
			if (ln.clients == nil) != (tc.want == 0) {
				t.Errorf("per-client limiter %v with MaxPerClient() = %d", ln.clients, tc.want)
			}
		})
	}
}

// TestLimitListenerRefuses fills a listener's cap with idle connections
// from one address, with the per-client cap off: the next connection gets
// a 503 at once (not a wait), and once a slot is free a new connection is
// served again.
func TestLimitListenerRefuses(t *testing.T) {
	t.Parallel()
	for _, plain := range []bool{true, false} {
		t.Run(fmt.Sprintf("plainHTTP=%v", plain), func(t *testing.T) {
			t.Parallel()
			s := newLimitedServer(t, LimitConfig{Max: 2, MaxPerClient: -1, PlainHTTP: plain}, okHandler(), nil)
			addr := strings.TrimPrefix(s.url, "http://")
			held := []net.Conn{dialFrom(t, "127.0.0.1", addr), dialFrom(t, "127.0.0.1", addr)}
			s.awaitOpen(t, 2)

			expectRefused(t, dialFrom(t, "127.0.0.1", addr), plain)
			if s.ln.Refused() != 1 || s.ln.ClientRefused() != 0 || s.ln.Open() != 2 {
				t.Errorf("refused %d at the cap and %d per client, open %d; want 1, 0 and 2", s.ln.Refused(), s.ln.ClientRefused(), s.ln.Open())
			}

			held[0].Close()
			s.awaitOpen(t, 1)
			if status, err := getFrom("127.0.0.1", s.url+"/"); err != nil || status != http.StatusOK {
				t.Fatalf("with a free slot: %d, %v; want 200", status, err)
			}
		})
	}
}

// TestLimitListenerPerClient: one address gets MaxPerClient connections
// and is refused beyond them, the same way as over the listener's cap,
// while another address is still served; the listener's cap still holds
// over all addresses; a closed connection gives its address a slot back;
// and once every connection is closed the listener remembers no client.
func TestLimitListenerPerClient(t *testing.T) {
	t.Parallel()
	for _, plain := range []bool{true, false} {
		t.Run(fmt.Sprintf("plainHTTP=%v", plain), func(t *testing.T) {
			t.Parallel()
			s := newLimitedServer(t, LimitConfig{Max: 4, MaxPerClient: 2, PlainHTTP: plain}, okHandler(), nil)
			addr := strings.TrimPrefix(s.url, "http://")
			a := []net.Conn{dialFrom(t, "127.0.0.1", addr), dialFrom(t, "127.0.0.1", addr)}
			s.awaitOpen(t, 2)

			expectRefused(t, dialFrom(t, "127.0.0.1", addr), plain)
			if s.ln.ClientRefused() != 1 || s.ln.Refused() != 0 {
				t.Errorf("a third connection from one address: refused %d per client and %d at the cap; want 1 and 0", s.ln.ClientRefused(), s.ln.Refused())
			}
			if status, err := getFrom("127.0.0.2", s.url+"/"); err != nil || status != http.StatusOK {
				t.Errorf("another address while the first is at its cap: %d, %v; want 200", status, err)
			}
			// The server closes that connection after answering, maybe after
			// the client has gone: until then it holds one of 127.0.0.2's slots.
			s.awaitOpen(t, 2)

			b := []net.Conn{dialFrom(t, "127.0.0.2", addr), dialFrom(t, "127.0.0.2", addr)}
			s.awaitOpen(t, 4)
			expectRefused(t, dialFrom(t, "127.0.0.3", addr), plain)
			if s.ln.Refused() != 1 || s.ln.ClientRefused() != 1 {
				t.Errorf("a third address with the listener full: refused %d at the cap and %d per client; want 1 and 1", s.ln.Refused(), s.ln.ClientRefused())
			}
			if p := s.peakOf("127.0.0.1"); p > 2 {
				t.Errorf("the server had %d connections from 127.0.0.1 open at once, over the per-client cap of 2", p)
			}

			a[0].Close()
			s.awaitOpen(t, 3)
			if status, err := getFrom("127.0.0.1", s.url+"/"); err != nil || status != http.StatusOK {
				t.Errorf("the first address after one of its connections closed: %d, %v; want 200", status, err)
			}
			for _, c := range append(a, b...) {
				c.Close()
			}
			s.awaitOpen(t, 0)
			if n := s.ln.clients.Tracked(); n != 0 {
				t.Errorf("%d clients remembered with no connection open, want 0", n)
			}
		})
	}
}

// TestLimitListenerPerClientConcurrent races many connections from one
// address against its cap: exactly the cap's worth are served (each is held
// open until all have their answer), the rest refused, and every slot is
// given back when they close.
func TestLimitListenerPerClientConcurrent(t *testing.T) {
	t.Parallel()
	const perClient, tries = 5, 40
	s := newLimitedServer(t, LimitConfig{Max: 100, MaxPerClient: perClient, PlainHTTP: true}, okHandler(), nil)
	addr := strings.TrimPrefix(s.url, "http://")
	var served, refused atomic.Int64
	var answered, held sync.WaitGroup
	release := make(chan struct{})
	for range tries {
		answered.Add(1)
		held.Go(func() {
			c, err := fromIP("127.0.0.1").Dial("tcp", addr)
			if err != nil {
				answered.Done()
				t.Error(err)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			switch {
			case err == nil && resp.StatusCode == http.StatusOK:
				served.Add(1)
			case err == nil && resp.StatusCode == http.StatusServiceUnavailable, err != nil && !isTimeout(err):
				refused.Add(1)
			default:
				t.Errorf("neither served nor refused: %v", err)
			}
			answered.Done()
			<-release // a served connection stays open, idle, until all are answered
		})
	}
	answered.Wait()
	close(release)
	held.Wait()
	if served.Load() != perClient || refused.Load() != tries-perClient || s.ln.ClientRefused() != tries-perClient {
		t.Errorf("%d connections from one address: %d served, %d refused (listener: %d); want %d and %d",
			tries, served.Load(), refused.Load(), s.ln.ClientRefused(), perClient, tries-perClient)
	}
	if p := s.peakOf("127.0.0.1"); p > perClient {
		t.Errorf("the server had %d connections from one address open at once, over its cap of %d", p, perClient)
	}
	s.awaitOpen(t, 0)
	if n := s.ln.clients.Tracked(); n != 0 {
		t.Errorf("%d clients remembered with no connection open, want 0", n)
	}
}

// testGroup is the group the flood test's node serves.
const testGroup = "g"

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
}

// TestFloodAndSlowloris attacks one node's public listener with a
// connection flood and slowloris connections (headers trickled a byte at a
// time) while a normal client, from an address of its own, keeps reading
// cached keys over its keep-alive connections, at a steady rate. The
// attacker is another process (this test binary, as TestAttacker). Quiet
// and attack windows alternate, so that both see the same machine (its
// load moves a lot). Two attackers: one spread over eight addresses, each
// under the per-client cap, so that the listener's cap is what holds; and
// one from a single address, which the per-client cap holds to its share.
// It asserts that the caps hold (counted from the server's connection
// states), that connections over them are refused at once, that the
// slowloris connections are cut at the header timeout, and that every
// normal request succeeds; it reports the normal requests' latencies in
// the quiet and in the attack windows.
func TestFloodAndSlowloris(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test of a few seconds")
	}
	t.Parallel()
	const maxConns, perClient = 64, 16
	var spread []string
	for i := range 8 {
		spread = append(spread, fmt.Sprintf("127.0.0.%d", 10+i))
	}
	// One after the other: each measures the machine while it runs.
	t.Run("listener-cap", func(t *testing.T) {
		st := floodAndSlowloris(t, LimitConfig{Max: maxConns, MaxPerClient: perClient, PlainHTTP: true}, spread)
		if st.ln.Refused() == 0 || st.attack.FloodRefused == 0 {
			t.Errorf("nothing was refused at the listener's cap (listener %d, flood %d): the attack did not reach it", st.ln.Refused(), st.attack.FloodRefused)
		}
	})
	t.Run("per-client-cap", func(t *testing.T) {
		st := floodAndSlowloris(t, LimitConfig{Max: maxConns, MaxPerClient: perClient, PlainHTTP: true}, spread[:1])
		if st.ln.ClientRefused() == 0 || st.attack.FloodRefused == 0 {
			t.Errorf("nothing was refused at the per-client cap (listener %d, flood %d): the attack did not reach it", st.ln.ClientRefused(), st.attack.FloodRefused)
		}
		// The attacker's share and the normal client's connections leave
		// the listener room: nobody else is refused.
		if st.ln.Refused() != 0 {
			t.Errorf("%d connections refused at the listener's cap: one address filled more than its share", st.ln.Refused())
		}
	})
}

// floodResult is what floodAndSlowloris leaves for its caller to check.
type floodResult struct {
	ln     *LimitListener
	attack attackStats
}

// floodAndSlowloris runs the attack of TestFloodAndSlowloris against a
// listener capped as cfg says, the attacker's connections coming from the
// loopback addresses sources and the normal client's from 127.0.0.2.
func floodAndSlowloris(t *testing.T, cfg LimitConfig, sources []string) floodResult {
	t.Helper()
	const (
		normalConns   = 4
		normalIP      = "127.0.0.2"
		headerTimeout = 500 * time.Millisecond
		window        = 500 * time.Millisecond
		windows       = 8 // quiet, attack, quiet, attack, ...
		// The attacker (another process) and the client share this
		// machine's two cores with the server, so both are paced: a flood
		// as fast as a loop can spin measures the CPU, not the cap.
		normalEvery = 2 * time.Millisecond // per connection: 2,000 requests/s in all
		floodEvery  = 5 * time.Millisecond // per flooder: 1,600 connections/s in all
		flooders    = 8
		trickle     = 100 * time.Millisecond // slowloris: a header byte per this
	)
	cn := cache.New(cache.Config{})
	g, err := cn.NewGroup(cache.GroupConfig{Name: testGroup, MaxBytes: 1 << 20,
		Getter: cache.GetterFunc(func(_ context.Context, key string) (cache.Value, error) {
			return cache.Value{Data: []byte("v:" + key)}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.NewHandler(cn, api.HandlerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s := newLimitedServer(t, cfg, h, func(srv *http.Server) { srv.ReadHeaderTimeout = headerTimeout })
	addr := strings.TrimPrefix(s.url, "http://")
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		if _, err := g.Get(t.Context(), keys[i]); err != nil {
			t.Fatal(err)
		}
	}

	attacker := startAttacker(t, addr, attackConfig{
		MaxConns: cfg.Max, HeaderTimeout: headerTimeout, FloodEvery: floodEvery, Flooders: flooders, Trickle: trickle, Sources: sources,
	})
	var attacking atomic.Bool
	setAttack := func(on bool) {
		attacking.Store(on)
		attacker.set(t, on)
	}

	// The normal client's connections are open before the attack starts,
	// as a real client's pool is: one per worker, each with a transport of
	// its own, so that none is dialled later, during an attack.
	// It counts its dials: a normal connection dialled during an attack
	// is a new client, which a full listener refuses.
	var dials, warmed atomic.Int64
	normal := make([]*http.Client, normalConns)
	for i := range normal {
		dial := fromIP(normalIP).DialContext
		tr := &http.Transport{MaxConnsPerHost: 1, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dial(ctx, network, addr)
		}}
		t.Cleanup(tr.CloseIdleConnections)
		normal[i] = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	var (
		mu          sync.Mutex
		quiet, hard []time.Duration
		failed      int
		firstErr    error
	)
	var clients sync.WaitGroup
	end := time.Now().Add(window * (windows + 1))
	for w := range normalConns {
		clients.Go(func() {
			tick := time.NewTicker(normalEvery)
			defer tick.Stop()
			for i := w; time.Now().Before(end); i++ {
				<-tick.C
				during := attacking.Load()
				start := time.Now()
				resp, err := normal[w].Get(s.url + api.PublicPrefix + testGroup + "/" + keys[i%len(keys)])
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = errors.New(resp.Status)
					}
				}
				d := time.Since(start)
				if err == nil && i == w {
					warmed.Add(1) // this worker's connection is open
				}
				mu.Lock()
				switch {
				case err != nil:
					failed++
					if firstErr == nil {
						firstErr = err
					}
				case during != attacking.Load(): // straddled a switch: neither
				case during:
					hard = append(hard, d)
				case time.Now().After(end.Add(-window * windows)): // after the warm-up window
					quiet = append(quiet, d)
				}
				mu.Unlock()
			}
		})
	}
	// Warm up: every worker's connection is open and has served a request.
	time.Sleep(window)
	poll.Until(t, 5*time.Second, func() (bool, string) {
		return warmed.Load() >= normalConns, fmt.Sprintf("%d of %d normal workers served after the warm-up", warmed.Load(), normalConns)
	})
	for i := range windows {
		setAttack(i%2 == 1)
		time.Sleep(window)
	}
	setAttack(false)
	clients.Wait()
	st := attacker.stop(t)

	if p := s.peakOpen(); p > cfg.Max {
		t.Errorf("the server had %d connections open at once, over the cap of %d", p, cfg.Max)
	}
	peaks := make([]int, len(sources))
	for i, ip := range sources {
		if peaks[i] = s.peakOf(ip); peaks[i] > s.ln.MaxPerClient() {
			t.Errorf("the server had %d connections from %s open at once, over the per-client cap of %d", peaks[i], ip, s.ln.MaxPerClient())
		}
	}
	if st.FloodWaited > 0 {
		t.Errorf("%d flood connections waited over a second instead of being refused or served", st.FloodWaited)
	}
	if st.SlowCut == 0 {
		t.Error("no slowloris connection was cut at the header timeout")
	}
	if failed > 0 {
		t.Errorf("%d normal requests failed (the client dialled %d connections for its %d workers); the first: %v", failed, dials.Load(), normalConns, firstErr)
	}
	q50, q99 := percentile(quiet, 50), percentile(quiet, 99)
	a50, a99 := percentile(hard, 50), percentile(hard, 99)
	t.Logf("cap %d, %d per client; attacker on %d address(es): peak open %d, per attacker address %v; refused %d connections at the cap and %d per client (flood: %d tries, %d refused, %d served, %d waited >1s); slowloris: %d cut at the %v header timeout, %d open when their window ended",
		cfg.Max, s.ln.MaxPerClient(), len(sources), s.peakOpen(), peaks, s.ln.Refused(), s.ln.ClientRefused(), st.FloodTries, st.FloodRefused, st.FloodServed, st.FloodWaited, st.SlowCut, headerTimeout, st.SlowLeft)
	t.Logf("normal requests over %d keep-alive connections (%d dialled): quiet %d (p50 %v, p99 %v), under attack %d (p50 %v, p99 %v): p99 ratio %.2f",
		normalConns, dials.Load(), len(quiet), q50, q99, len(hard), a50, a99, float64(a99)/float64(q99))
	return floodResult{ln: s.ln, attack: st}
}

// attackConfig paces the attacker process of TestFloodAndSlowloris.
type attackConfig struct {
	MaxConns      int           // slowloris connections to try to hold
	HeaderTimeout time.Duration // the server's: a cut after half of it counts as one
	FloodEvery    time.Duration // per flooder, between new connections
	Flooders      int
	Trickle       time.Duration // slowloris: a header byte per this
	Sources       []string      // loopback addresses to dial from, in turn; empty: the system's choice
}

// attackStats is what the attacker saw.
type attackStats struct {
	SlowCut, SlowLeft int64 // slowloris connections cut by the server / open when their window ended
	FloodTries        int64
	FloodRefused      int64 // got a 503 or were closed at once
	FloodWaited       int64 // waited more than a second for anything
	FloodServed       int64 // got a 200: there was a free slot
}

// attack runs slowloris connections and a connection flood against addr
// while attacking is true, until ctx ends.
func attack(ctx context.Context, addr string, cfg attackConfig, attacking *atomic.Bool) attackStats {
	var (
		wg                sync.WaitGroup
		slowCut, slowLeft atomic.Int64
		floodTries        atomic.Int64
		floodRefused      atomic.Int64
		floodWaited       atomic.Int64
		floodServed       atomic.Int64
	)
	// Each slowloris and flood goroutine dials from one of the sources.
	var next atomic.Int64
	dialer := func() *net.Dialer {
		if len(cfg.Sources) == 0 {
			return &net.Dialer{}
		}
		return fromIP(cfg.Sources[int(next.Add(1)-1)%len(cfg.Sources)])
	}
	idle := func() bool {
		if attacking.Load() {
			return false
		}
		time.Sleep(10 * time.Millisecond)
		return true
	}
	// Slowloris: hold as many connections as possible, trickling headers.
	for range cfg.MaxConns {
		d := dialer()
		wg.Go(func() {
			for ctx.Err() == nil {
				if idle() {
					continue
				}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue
				}
				opened := time.Now()
				io.WriteString(c, "GET /cache/g/k0 HTTP/1.1\r\nHost: x\r\n")
				cut := false
				for attacking.Load() && !cut {
					c.SetWriteDeadline(time.Now().Add(time.Second))
					if _, err := io.WriteString(c, "X"); err != nil {
						cut = true
						break
					}
					// A refused or cut connection shows as a reply or EOF.
					c.SetReadDeadline(time.Now().Add(cfg.Trickle))
					var b [1]byte
					if _, err := c.Read(b[:]); err == nil || !isTimeout(err) {
						cut = true
					}
				}
				if cut && time.Since(opened) > cfg.HeaderTimeout/2 {
					slowCut.Add(1)
				} else if !cut {
					slowLeft.Add(1)
				}
				c.Close()
				time.Sleep(cfg.Trickle) // a refused attacker comes back, but not in a spin
			}
		})
	}
	// Flood: new connections, one request each.
	for range cfg.Flooders {
		d := dialer()
		wg.Go(func() {
			for ctx.Err() == nil {
				if idle() {
					continue
				}
				time.Sleep(cfg.FloodEvery)
				floodTries.Add(1)
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue
				}
				start := time.Now()
				c.SetDeadline(start.Add(3 * time.Second))
				io.WriteString(c, "GET /cache/g/k1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
				line, err := bufio.NewReader(c).ReadString('\n')
				switch {
				case time.Since(start) > time.Second:
					floodWaited.Add(1)
				case strings.HasPrefix(line, "HTTP/1.1 200"):
					floodServed.Add(1)
				case strings.HasPrefix(line, "HTTP/1.1 503"), err != nil:
					floodRefused.Add(1)
				}
				c.Close()
			}
		})
	}

	wg.Wait()
	return attackStats{SlowCut: slowCut.Load(), SlowLeft: slowLeft.Load(), FloodTries: floodTries.Load(),
		FloodRefused: floodRefused.Load(), FloodWaited: floodWaited.Load(), FloodServed: floodServed.Load()}
}

// attackerEnv carries the attack's address and configuration to the
// attacker process, which is this test binary run for TestAttacker.
const attackerEnv = "RINGCACHE_TEST_ATTACKER"

// attacker is the attacker process: a separate process, so that its
// goroutines do not queue in the server's scheduler (an attacker is
// another machine), though it shares this machine's cores.
type attacker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startAttacker(t *testing.T, addr string, cfg attackConfig) *attacker {
	t.Helper()
	spec, err := json.Marshal(struct {
		Addr string
		Cfg  attackConfig
	}{addr, cfg})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttacker$", "-test.count=1")
	cmd.Env = append(os.Environ(), attackerEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &attacker{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	a.expect(t, "ready")
	return a
}

// expect reads the attacker's output up to a line starting with prefix and
// returns the rest of that line.
func (a *attacker) expect(t *testing.T, prefix string) string {
	t.Helper()
	for a.out.Scan() {
		if rest, ok := strings.CutPrefix(a.out.Text(), prefix); ok {
			return rest
		}
	}
	t.Fatalf("the attacker ended before saying %q: %v", prefix, a.out.Err())
	return ""
}

// set turns the attack on or off and waits until the attacker has it.
func (a *attacker) set(t *testing.T, on bool) {
	t.Helper()
	cmd := "off"
	if on {
		cmd = "on"
	}
	fmt.Fprintln(a.stdin, cmd)
	a.expect(t, cmd)
}

// stop ends the attack and returns what the attacker saw.
func (a *attacker) stop(t *testing.T) attackStats {
	t.Helper()
	a.stdin.Close()
	var st attackStats
	if err := json.Unmarshal([]byte(a.expect(t, "stats ")), &st); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Wait(); err != nil {
		t.Fatalf("attacker: %v", err)
	}
	return st
}

// TestAttacker is the attacker process of TestFloodAndSlowloris; run
// directly, it does nothing. It reads "on" and "off" lines, echoing each
// once it applies, and prints its stats when its input ends.
func TestAttacker(t *testing.T) {
	raw := os.Getenv(attackerEnv)
	if raw == "" {
		t.Skip("the attacker process of TestFloodAndSlowloris")
	}
	var spec struct {
		Addr string
		Cfg  attackConfig
	}
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	var attacking atomic.Bool
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan attackStats)
	go func() { done <- attack(ctx, spec.Addr, spec.Cfg, &attacking) }()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		attacking.Store(in.Text() == "on")
		fmt.Println(in.Text())
	}
	attacking.Store(false)
	cancel()
	st, err := json.Marshal(<-done)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("stats %s\n", st)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// percentile returns the p-th percentile of d (sorted in place).
func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, len(d)*p/100)]
}
