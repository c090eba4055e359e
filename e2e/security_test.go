//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The security scenario's cluster settings: a write token, the admin routes
// on their own listener (published on loopback for the harness and this
// test), and a connection cap low enough to reach from one test.
//
// Every connection from the host reaches a container from the Docker
// bridge's gateway address, so the whole test is one client to the nodes'
// per-client connection cap. The per-client caps are off by default (one
// address is often a whole application); node3 runs with the connection
// cap an internet-facing node would set (secPerClient), which the
// per-client probe fills while node1, from an address of its own, still
// gets its connections to node3 served. node1 runs with the miss limit
// such a node would set (secClientMisses), and node2 with the defaults, so
// that the host can reach its listener's cap.
const (
	secMaxConns      = 256
	secPerClient     = 64               // node3's -max-conns-per-client (off by default)
	secIdleTimeout   = 30 * time.Second // the daemon's default
	secHeaderTimeout = 5 * time.Second  // the daemon's default
	secClientMisses  = 32               // node1's -client-misses (off by default)
	secDemoLatency   = 200 * time.Millisecond
	// publicSecret is a secret anyone can read in this repository, so
	// anyone can sign with it: no node may accept it.
	publicSecret = "change-me-ringcache-demo-secret"
)

// TestSecurity repeats, from the host, the probes of an attacker on the
// same machine against the compose cluster, and finds each one closed:
// forged peer requests, public writes without the token, /debug and
// /metrics on the public port, idle and slow connections held open, and
// one client making a node load distinct keys without bound.
func TestSecurity(t *testing.T) {
	deployDir := prepareDeploy(t)
	ctx := t.Context()
	token := randomHex(32)
	adminPorts, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	// The admin listener is published on loopback through an extra
	// Compose file, as an operator would publish it on an internal address.
	var override strings.Builder
	override.WriteString("services:\n")
	env := []string{
		"RINGCACHE_ADMIN_LISTEN=:9090",
		"RINGCACHE_MAX_CONNS=" + strconv.Itoa(secMaxConns),
	}
	for i, p := range adminPorts {
		fmt.Fprintf(&override, "  node%d:\n    ports: [\"127.0.0.1:%d:9090\"]\n", i+1, p)
		switch i {
		case 0:
			fmt.Fprintf(&override, "    environment:\n      RINGCACHE_CLIENT_MISSES: \"%d\"\n", secClientMisses)
		case 2:
			fmt.Fprintf(&override, "    environment:\n      RINGCACHE_MAX_CONNS_PER_CLIENT: \"%d\"\n", secPerClient)
		}
		env = append(env, fmt.Sprintf("RINGCACHE_NODE%d_ADMIN_PORT=%d", i+1, p))
	}
	overrideFile := filepath.Join(t.TempDir(), "admin.yml")
	if err := os.WriteFile(overrideFile, []byte(override.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	env = append(env, "RINGCACHE_COMPOSE_FILES="+overrideFile)

	c, err := NewCompose(ctx, ComposeConfig{
		DeployDir:  deployDir,
		WriteToken: token,
		Groups:     fmt.Sprintf("name=demo,origin=demo,demo-latency=%s", secDemoLatency),
		Env:        env,
		Log:        t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.Close(cctx); err != nil {
			t.Errorf("bringing the cluster down: %v", err)
		}
	})
	admin := func(node string) string {
		i, _ := strconv.Atoi(strings.TrimPrefix(node, "node"))
		return "http://127.0.0.1:" + strconv.Itoa(adminPorts[i-1])
	}
	nodes := c.Nodes()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}}
	t.Cleanup(client.CloseIdleConnections)
	do := func(method, u, auth, body string, hdr ...string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	key := fmt.Sprintf("sec-%d", time.Now().UnixNano())
	keyURL := func(node, key string) string { return c.URL(node) + "/cache/demo/" + url.PathEscape(key) }
	servesEverywhere := func(key, want string) {
		t.Helper()
		for _, n := range nodes {
			if status, _, body := do(http.MethodGet, keyURL(n, key), "", ""); status != http.StatusOK || body != want {
				t.Fatalf("GET %s at %s = %d %q, want 200 %q", key, n, status, body, want)
			}
		}
	}
	demo := string(DemoValue("demo", key, 64))
	servesEverywhere(key, demo)

	var report []string
	row := func(probe, outcome string) { report = append(report, fmt.Sprintf("| %s | %s |", probe, outcome)) }

	t.Run("forged-peer-requests", func(t *testing.T) {
		// Signed with a secret that anyone can know.
		for _, method := range []string{http.MethodGet, http.MethodPut} {
			for _, n := range nodes {
				path := "/_groupcache/demo/" + url.PathEscape(key)
				now := time.Now().Unix()
				status, _, _ := do(method, c.PeerURL(n)+path, "", "forged",
					"X-Ringcache-Date", strconv.FormatInt(now, 10),
					"X-Ringcache-Signature", sign(publicSecret, method, path, now))
				if status != http.StatusUnauthorized {
					t.Errorf("peer %s at %s signed with a public secret = %d, want 401", method, n, status)
				}
			}
		}
		servesEverywhere(key, demo)
		row("peer GET and PUT signed with the old default secret", "401 on every node; values unchanged")
	})

	t.Run("public-writes", func(t *testing.T) {
		for _, tc := range []struct{ method, auth string }{
			{http.MethodPut, ""},
			{http.MethodPut, "Bearer " + randomHex(32)},
			{http.MethodPut, "Basic " + token},
			{http.MethodDelete, ""},
			{http.MethodDelete, "Bearer " + randomHex(32)},
		} {
			for _, n := range nodes {
				status, hdr, _ := do(tc.method, keyURL(n, key), tc.auth, "forged")
				if status != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s at %s with %q = %d (WWW-Authenticate %q), want 401 with a Bearer challenge",
						tc.method, n, tc.auth, status, hdr.Get("WWW-Authenticate"))
				}
			}
		}
		servesEverywhere(key, demo)
		// With the token, on a key no node holds a copy of yet: a PUT
		// replaces the owner's value, which every node then reads from it.
		written := key + "-written"
		if status, _, body := do(http.MethodPut, keyURL("node1", written), "Bearer "+token, "written"); status != http.StatusNoContent {
			t.Fatalf("PUT with the token = %d %q, want 204", status, body)
		}
		servesEverywhere(written, "written")
		if status, _, body := do(http.MethodDelete, keyURL("node2", written), "Bearer "+token, ""); status != http.StatusNoContent {
			t.Fatalf("DELETE with the token = %d %q, want 204", status, body)
		}
		servesEverywhere(written, string(DemoValue("demo", written, 64)))
		row("public PUT and DELETE without the token, with a wrong one, with Basic", "401 with `WWW-Authenticate: Bearer`; values unchanged; with the token 204")
	})

	t.Run("debug-and-metrics", func(t *testing.T) {
		for _, n := range nodes {
			for _, path := range []string{"/debug/ring", "/debug/origin", "/metrics", "/ui/"} {
				if status, _, _ := do(http.MethodGet, c.URL(n)+path, "", ""); status != http.StatusNotFound {
					t.Errorf("public %s at %s = %d, want 404", path, n, status)
				}
				if status, _, _ := do(http.MethodGet, admin(n)+path, "", ""); status != http.StatusOK {
					t.Errorf("admin %s at %s = %d, want 200", path, n, status)
				}
			}
		}
		row("`/debug/ring`, `/debug/origin`, `/metrics`, `/ui/` on the public port", "404; served on the admin listener (`-admin-listen`) only")
	})

	t.Run("connection-cap-and-idle-timeout", func(t *testing.T) {
		const tries = secMaxConns + 100
		conns, served, refused, answered := holdConns(c.URL("node2"), tries)
		if served > secMaxConns || refused < tries-secMaxConns {
			t.Errorf("%d keep-alive connections served, %d refused: want at most %d served", served, refused, secMaxConns)
		}
		if answered > 10*time.Second {
			t.Errorf("the %d connections took %v to be served or refused: some waited", tries, answered)
		}
		api := &API{client: client}
		atCap, err := api.Metric(ctx, admin("node2"), `ringcache_connections_refused_total{listener="public",reason="max_conns"}`)
		if err != nil {
			t.Fatal(err)
		}
		if atCap < float64(refused) {
			t.Errorf("node2's metrics: %v connections refused at the listener's cap, want at least the %d refused", atCap, refused)
		}
		// Every kept connection is now idle; the server must close it.
		idleStart := time.Now()
		closed := 0
		var closedBy time.Duration
		for _, cn := range conns {
			if !cn.served {
				continue
			}
			cn.c.SetReadDeadline(idleStart.Add(secIdleTimeout + 15*time.Second))
			var b [1]byte
			if _, err := cn.c.Read(b[:]); err != nil && !isNetTimeout(err) {
				closed++
				closedBy = time.Since(idleStart)
			}
			cn.c.Close()
		}
		if closed != served {
			t.Errorf("%d of %d idle keep-alive connections still open %v after their last request", served-closed, served, secIdleTimeout+15*time.Second)
		}
		t.Logf("%d connections: %d served, %d refused within %v; the served ones closed by the server %v after going idle",
			tries, served, refused, answered.Round(time.Millisecond), closedBy.Round(time.Second))
		row(fmt.Sprintf("%d keep-alive connections to one node (cap set to %d, per-client cap off)", tries, secMaxConns),
			fmt.Sprintf("%d served, %d refused at once (503); idle ones closed after %v (default idle timeout %v)", served, refused, closedBy.Round(time.Second), secIdleTimeout))
	})

	t.Run("slowloris", func(t *testing.T) {
		const slow = 20
		addr := strings.TrimPrefix(c.URL("node3"), "http://")
		cut := make(chan time.Duration, slow)
		for range slow {
			go func() {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					cut <- 0
					return
				}
				defer nc.Close()
				opened := time.Now()
				io.WriteString(nc, "GET /cache/demo/x HTTP/1.1\r\nHost: x\r\n")
				for time.Since(opened) < 3*secHeaderTimeout {
					if _, err := io.WriteString(nc, "X"); err != nil {
						break
					}
					nc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
					var b [1]byte
					if _, err := nc.Read(b[:]); err == nil || !isNetTimeout(err) {
						break
					}
				}
				cut <- time.Since(opened)
			}()
		}
		var longest time.Duration
		for range slow {
			d := <-cut
			longest = max(longest, d)
			if d >= 3*secHeaderTimeout {
				t.Errorf("a slowloris connection was still open after %v", d)
			}
		}
		t.Logf("%d slowloris connections: the last cut after %v", slow, longest.Round(100*time.Millisecond))
		row(fmt.Sprintf("%d slowloris connections (a header byte every 0.5 s)", slow), fmt.Sprintf("all cut within %v (read-header timeout %v)", longest.Round(100*time.Millisecond), secHeaderTimeout))
	})

	t.Run("per-client-connection-cap", func(t *testing.T) {
		const tries, fetches = secPerClient + 40, 16
		api := &API{client: client}
		// Keys node3 owns, which node1 fetches from it over connections of
		// its own address.
		self, err := api.Ring(ctx, admin("node3"), "")
		if err != nil {
			t.Fatal(err)
		}
		base := time.Now().UnixNano()
		var owned []string
		for i := 0; len(owned) < fetches; i++ {
			k := fmt.Sprintf("share-%d-%d", base, i)
			r, err := api.Ring(ctx, admin("node1"), k)
			if err != nil {
				t.Fatal(err)
			}
			if r.Owner == self.Self {
				owned = append(owned, k)
			}
		}

		conns, served, refused, answered := holdConns(c.URL("node3"), tries)
		defer func() {
			for _, cn := range conns {
				if cn.c != nil {
					cn.c.Close()
				}
			}
		}()
		// The harness's own idle connections to node3 count too, so the
		// test's share may be a little under the cap.
		if served > secPerClient || refused < tries-secPerClient {
			t.Errorf("%d connections from the host to node3: %d served, %d refused; want at most %d served", tries, served, refused, secPerClient)
		}
		if answered > 10*time.Second {
			t.Errorf("the %d connections took %v to be served or refused: some waited", tries, answered)
		}

		// Meanwhile node1 reads node3's keys: concurrent misses, loaded
		// once each by node3, so node1 opens connections to node3 from its
		// own address. Were they refused, node1 would load the keys itself.
		loads := func(n string) int64 {
			g, err := api.Origin(ctx, admin(n), "demo")
			if err != nil {
				t.Fatal(err)
			}
			return g.Loads
		}
		before1, before3 := loads("node1"), loads("node3")
		tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: fetches}
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
		var wg sync.WaitGroup
		for _, k := range owned {
			wg.Go(func() {
				resp, err := hc.Get(keyURL("node1", k))
				if err != nil {
					t.Errorf("GET %s at node1: %v", k, err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(b) != string(DemoValue("demo", k, 64)) {
					t.Errorf("GET %s at node1 = %d %q", k, resp.StatusCode, b)
				}
			})
		}
		wg.Wait()
		loaded1, loaded3 := loads("node1")-before1, loads("node3")-before3
		if loaded3 != fetches || loaded1 != 0 {
			t.Errorf("%d misses at node1 for node3's keys: node3 loaded %d, node1 %d; want %d and 0 (node1's connections to node3 served)", fetches, loaded3, loaded1, fetches)
		}

		// The host is still over its share, and the listener is not full.
		extra, _, refusedAfter, _ := holdConns(c.URL("node3"), 1)
		for _, cn := range extra {
			if cn.c != nil {
				cn.c.Close()
			}
		}
		if refusedAfter != 1 {
			t.Error("a new connection from the host after node1's fetches was served: the host's share was not held")
		}
		perClient, err := api.Metric(ctx, admin("node3"), `ringcache_connections_refused_total{listener="public",reason="per_client"}`)
		if err != nil {
			t.Fatal(err)
		}
		atCap, err := api.Metric(ctx, admin("node3"), `ringcache_connections_refused_total{listener="public",reason="max_conns"}`)
		if err != nil {
			t.Fatal(err)
		}
		if perClient < float64(refused+1) || atCap != 0 {
			t.Errorf("node3's metrics: %v refused per client, %v at the listener's cap; want at least %d and 0", perClient, atCap, refused+1)
		}
		t.Logf("%d connections from the host to node3 (per-client cap %d, listener cap %d): %d served, %d refused within %v; meanwhile node1's %d misses for node3's keys loaded by node3 (%d loads) and node1 (%d); metrics: %v refused per client, %v at the cap",
			tries, secPerClient, secMaxConns, served, refused, answered.Round(time.Millisecond), fetches, loaded3, loaded1, perClient, atCap)
		row(fmt.Sprintf("%d keep-alive connections from the host to one node (per-client cap set to %d, listener cap %d)", tries, secPerClient, secMaxConns),
			fmt.Sprintf("%d served, %d refused at once (503), counted as `per_client`; meanwhile %d concurrent misses through another node, whose peer connections come from its own address, all served by the owner (%d loads there, %d at the other node)", served, refused, fetches, loaded3, loaded1))
	})

	t.Run("client-miss-limit", func(t *testing.T) {
		const misses = 200
		base := time.Now().UnixNano()
		before := originLoads(t, client, admin, nodes)
		counts := map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: misses}
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
		for i := range misses {
			wg.Go(func() {
				status := 0
				resp, err := hc.Get(keyURL("node1", fmt.Sprintf("flood-%d-%d", base, i)))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				mu.Lock()
				counts[status]++
				mu.Unlock()
			})
		}
		wg.Wait()
		loads := originLoads(t, client, admin, nodes) - before
		if counts[http.StatusTooManyRequests] == 0 || counts[http.StatusOK]+counts[http.StatusTooManyRequests] != misses {
			t.Errorf("%d concurrent misses from one client: statuses %v; want only 200 and 429, some 429", misses, counts)
		}
		if loads != int64(counts[http.StatusOK]) {
			t.Errorf("%d origin loads for %d admitted misses: a refused miss reached the origin", loads, counts[http.StatusOK])
		}
		t.Logf("%d concurrent misses for distinct keys from one client: %v; %d origin loads", misses, counts, loads)
		row(fmt.Sprintf("%d concurrent misses for distinct keys from one client", misses),
			fmt.Sprintf("%d admitted, %d refused with 429 (limit %d in flight per client per node); %d origin loads", counts[http.StatusOK], counts[http.StatusTooManyRequests], secClientMisses, loads))
	})

	t.Logf("security probes against %s:\n| probe | outcome |\n| --- | --- |\n%s", c.Project(), strings.Join(report, "\n"))
}

// heldConn is one connection of holdConns: served, it is open and idle.
type heldConn struct {
	c      net.Conn
	served bool
}

// holdConns opens tries connections to base at once, each sending one
// keep-alive GET /healthz, and returns them with how many were served (and
// are still open) and refused (and closed), and how long that took.
func holdConns(base string, tries int) (conns []heldConn, served, refused int, answered time.Duration) {
	addr := strings.TrimPrefix(base, "http://")
	conns = make([]heldConn, tries)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range conns {
		wg.Go(func() {
			nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return // refused by the port proxy: refused all the same
			}
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(nc, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			br := bufio.NewReader(nc)
			resp, err := http.ReadResponse(br, nil)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			conns[i] = heldConn{c: nc, served: err == nil && resp.StatusCode == http.StatusOK}
		})
	}
	wg.Wait()
	answered = time.Since(start)
	for i, cn := range conns {
		if cn.served {
			served++
			continue
		}
		refused++
		if cn.c != nil {
			cn.c.Close()
			conns[i].c = nil
		}
	}
	return conns, served, refused, answered
}

// originLoads returns the demo origin's loads summed over nodes, from their
// admin listeners.
func originLoads(t *testing.T, client *http.Client, admin func(string) string, nodes []string) int64 {
	t.Helper()
	api := &API{client: client}
	var sum int64
	for _, n := range nodes {
		g, err := api.Origin(t.Context(), admin(n), "demo")
		if err != nil {
			t.Fatal(err)
		}
		sum += g.Loads
	}
	return sum
}

// sign returns the peer signature the daemon checks: hex HMAC-SHA256 over
// method, escaped path and Unix time, newline-separated.
func sign(secret, method, path string, unix int64) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%s\n%s\n%d", method, path, unix)
	return hex.EncodeToString(m.Sum(nil))
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
