package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringcache/ringcache/internal/devcert"
	"github.com/ringcache/ringcache/internal/listen"
	"github.com/ringcache/ringcache/internal/poll"
	"github.com/ringcache/ringcache/transport/api"
	"github.com/ringcache/ringcache/transport/origin"
)

const testToken = "0123456789abcdef0123456789abcdef"

// do sends one request with an optional bearer token and returns the status,
// the WWW-Authenticate header and the body.
func do(t *testing.T, c *http.Client, method, url, token, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b)
}

func TestLoadConfigPublic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		args  []string
		check func(Config) bool
		err   string // a substring of the error; empty: no error
	}{
		{"defaults", nil, func(c Config) bool {
			return !c.Public.OpenWrites && c.Public.WriteToken == "" && c.Public.MaxConns == listen.DefaultMaxConns &&
				c.Public.MaxConnsPerClient == 0 && c.Public.clientLimits() == nil
		}, ""},
		{"open writes, flag alone", []string{"-open-writes"}, func(c Config) bool { return c.Public.OpenWrites }, ""},
		{"open writes=false", []string{"-open-writes=false"}, func(c Config) bool { return !c.Public.OpenWrites }, ""},
		{"write token", []string{"-write-token", testToken}, func(c Config) bool { return c.Public.WriteToken == testToken }, ""},
		{"limits off", []string{"-client-misses", "off", "-client-miss-rate", "off"}, func(c Config) bool { return c.Public.clientLimits() == nil }, ""},
		{"own rate", []string{"-client-miss-rate", "50"}, func(c Config) bool {
			l := c.Public.clientLimits()
			return l.MissRate == 50 && l.MissBurst == 0 && l.MaxMisses == 0
		}, ""},
		{"misses alone", []string{"-client-misses", "32", "-client-miss-rate", "off"}, func(c Config) bool {
			l := c.Public.clientLimits()
			return l.MissRate == 0 && l.MissBurst == 0 && l.MaxMisses == 32
		}, ""},
		{"rate and burst", []string{"-client-miss-rate", "50", "-client-miss-burst", "7", "-client-misses", "3"}, func(c Config) bool {
			l := c.Public.clientLimits()
			return l.MissRate == 50 && l.MissBurst == 7 && l.MaxMisses == 3
		}, ""},
		{"max conns", []string{"-max-conns", "10", "-idle-timeout", "5s", "-read-header-timeout", "1s"}, func(c Config) bool {
			return c.Public.MaxConns == 10 && c.Public.IdleTimeout == 5*time.Second && c.Public.ReadHeaderTimeout == time.Second
		}, ""},
		{"max conns per client", []string{"-max-conns-per-client", "100"}, func(c Config) bool { return c.Public.MaxConnsPerClient == 100 }, ""},
		{"max conns per client off", []string{"-max-conns-per-client", "100", "-max-conns-per-client", "off"}, func(c Config) bool { return c.Public.MaxConnsPerClient == 0 }, ""},
		{"zero max conns per client", []string{"-max-conns-per-client", "0"}, nil, "max-conns-per-client"},
		{"negative max conns per client", []string{"-max-conns-per-client", "-3"}, nil, "max-conns-per-client"},
		{"short token", []string{"-write-token", "short"}, nil, "write-token: 5 bytes"},
		{"token with a space", []string{"-read-token", "0123456789 abcdefgh"}, nil, "read-token"},
		{"open and a token", []string{"-open-writes", "-write-token", testToken}, nil, "open-writes"},
		{"token and file", []string{"-write-token", testToken, "-write-token-file", filepath.Join(dir, "t")}, nil, "not both"},
		{"cert without key", []string{"-tls-cert", "c.pem", "-peer-listen", "127.0.0.1:0"}, nil, "tls-key"},
		{"TLS without a peer listener", []string{"-tls-cert", "c.pem", "-tls-key", "k.pem"}, nil, "peer-listen"},
		{"fasthttp", []string{"-http-server", "fasthttp", "-peer-listen", "127.0.0.1:0"}, func(c Config) bool { return c.publicServer() == serverFast }, ""},
		{"auto: net/http on one listener", nil, func(c Config) bool { return c.Public.HTTPServer == serverAuto && c.publicServer() == serverNetHTTP }, ""},
		{"auto: fasthttp with a peer listener", []string{"-peer-listen", "127.0.0.1:0"}, func(c Config) bool { return c.publicServer() == serverFast }, ""},
		{"auto: net/http with TLS", []string{"-peer-listen", "127.0.0.1:0", "-tls-cert", "c.pem", "-tls-key", "k.pem"}, func(c Config) bool { return c.publicServer() == serverNetHTTP }, ""},
		{"net/http with a peer listener", []string{"-http-server", "net/http", "-peer-listen", "127.0.0.1:0"}, func(c Config) bool { return c.publicServer() == serverNetHTTP }, ""},
		{"fasthttp without a peer listener", []string{"-http-server", "fasthttp"}, nil, "http-server: fasthttp needs -peer-listen"},
		{"fasthttp with TLS", []string{"-http-server", "fasthttp", "-peer-listen", "127.0.0.1:0", "-tls-cert", "c.pem", "-tls-key", "k.pem"}, nil, "http-server: fasthttp serves plain HTTP/1.1"},
		{"unknown server", []string{"-http-server", "nginx"}, nil, `http-server: "nginx"`},
		{"admin on the public address", []string{"-listen", "127.0.0.1:9000", "-admin-listen", "127.0.0.1:9000"}, nil, "admin-listen"},
		{"bad admin address", []string{"-admin-listen", "nowhere"}, nil, "admin-listen"},
		{"zero client misses", []string{"-client-misses", "0"}, nil, "client-misses"},
		{"negative rate", []string{"-client-miss-rate", "-5"}, nil, "client-miss-rate"},
		{"negative max conns", []string{"-max-conns", "-1"}, nil, "max-conns"},
		{"zero max conns", []string{"-max-conns", "0"}, nil, "max-conns"},
		{"zero idle timeout", []string{"-idle-timeout", "0s"}, nil, "idle-timeout"},
		{"zero burst: twice the rate", []string{"-client-miss-rate", "50", "-client-miss-burst", "0"}, func(c Config) bool {
			l, err := api.NewClientLimiter(*c.Public.clientLimits())
			return err == nil && l.Config().MissBurst == 100
		}, ""},
		{"negative burst", []string{"-client-miss-burst", "-3"}, nil, `client-miss-burst: "-3"`},
		{"short read token", []string{"-read-token", "short"}, nil, "read-token: 5 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadConfig(append(tc.args, "-group", "name=demo,origin=demo"), env(nil), io.Discard)
			switch {
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err != "" && (!errors.Is(err, errConfig) || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v, want errConfig mentioning %q", err, tc.err)
			case tc.check != nil && !tc.check(cfg):
				t.Fatalf("config %+v", cfg)
			}
		})
	}
	// The environment and the YAML file take the same settings.
	file := writeFile(t, "open-writes: true\nmax-conns: 99\nmax-conns-per-client: 9\n")
	cfg, err := loadConfig(nil, env(map[string]string{"RINGCACHE_CONFIG": file, "RINGCACHE_CLIENT_MISSES": "off",
		"RINGCACHE_GROUP": "name=demo,origin=demo"}), io.Discard)
	if err != nil || !cfg.Public.OpenWrites || cfg.Public.MaxConns != 99 || cfg.Public.MaxConnsPerClient != 9 || cfg.Public.ClientMisses != 0 {
		t.Fatalf("from file and environment: %+v, %v", cfg, err)
	}
	cfg, err = loadConfig(nil, env(map[string]string{"RINGCACHE_CONFIG": file, "RINGCACHE_MAX_CONNS_PER_CLIENT": "off",
		"RINGCACHE_GROUP": "name=demo,origin=demo"}), io.Discard)
	if err != nil || cfg.Public.MaxConnsPerClient != 0 {
		t.Fatalf("the environment over the file: max-conns-per-client %d, %v; want 0 (off)", cfg.Public.MaxConnsPerClient, err)
	}
}

// TestPublicWrites runs nodes as the daemon does: writes are refused (403)
// without a token, need the token when one is set (401 otherwise), and are
// open only when asked for.
func TestPublicWrites(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		args        []string
		token       string // sent with the PUT
		want        int
		wantChallng bool
	}{
		{"default: no token configured", nil, testToken, http.StatusForbidden, false},
		{"token configured, none sent", []string{"-write-token", testToken}, "", http.StatusUnauthorized, true},
		{"token configured, wrong one sent", []string{"-write-token", testToken}, strings.Repeat("x", 32), http.StatusUnauthorized, true},
		{"token configured and sent", []string{"-write-token", testToken}, testToken, http.StatusNoContent, false},
		{"open writes", []string{"-open-writes"}, "", http.StatusNoContent, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, _, _ := serveNode(t, append(tc.args, "-group", "name=demo,origin=demo")...)
			u := base + "/cache/demo/k"
			status, challenge, body := do(t, nil, http.MethodPut, u, tc.token, "written")
			if status != tc.want || (challenge != "") != tc.wantChallng {
				t.Fatalf("PUT = %d %q (WWW-Authenticate %q), want %d", status, body, challenge, tc.want)
			}
			want := "written"
			if tc.want != http.StatusNoContent {
				want = string(origin.DemoValue("demo", "k", 64))
			}
			if status, body := get(t, u); status != http.StatusOK || body != want {
				t.Fatalf("GET after the PUT = %d %q, want 200 %q", status, body, want)
			}
			status, _, _ = do(t, nil, http.MethodDelete, u, tc.token, "")
			if status != tc.want {
				t.Fatalf("DELETE = %d, want %d", status, tc.want)
			}
		})
	}
}

// TestTokenFileReload rotates the write token through its file and SIGHUP:
// both tokens work while the file holds both, only the new one after.
func TestTokenFileReload(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "write-token")
	oldTok, newTok := "old-"+testToken, "new-"+testToken
	if err := os.WriteFile(file, []byte("# the public write token\n"+oldTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Public.WriteTokenFile = file
	cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo}}
	n, out := startTestNode(t, cfg)
	stopReload := n.reloadOnHangup()
	defer stopReload()
	u := "http://" + n.addrs[0].String() + "/cache/demo/k"
	put := func(tok string) int {
		status, _, _ := do(t, nil, http.MethodPut, u, tok, "v")
		return status
	}
	if put(oldTok) != http.StatusNoContent || put(newTok) != http.StatusUnauthorized {
		t.Fatal("before the rotation only the old token may work")
	}
	hangup := func(content string, reloads int) {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		// The reloads-th report of a reload, good or bad.
		out.await(t, regexp.MustCompile(fmt.Sprintf(`(?s)(?:msg="(?:tokens reloaded|reload on SIGHUP).*?){%d}`, reloads)), nil)
	}
	hangup(oldTok+"\n"+newTok+"\n", 1)
	if put(oldTok) != http.StatusNoContent || put(newTok) != http.StatusNoContent {
		t.Fatal("during the rotation both tokens must work")
	}
	hangup(newTok+"\n", 2)
	if put(oldTok) != http.StatusUnauthorized || put(newTok) != http.StatusNoContent {
		t.Fatal("after the rotation only the new token may work")
	}
	hangup("# emptied by mistake\n", 3) // refused: the tokens stay
	if !strings.Contains(out.String(), "kept the old tokens") || put(newTok) != http.StatusNoContent {
		t.Fatal("an empty token file must keep the tokens in use")
	}
}

// TestAdminListen moves /metrics, /debug/* and /ui/ to their own listener: the
// public one answers 404 for them and still serves keys and /readyz.
func TestAdminListen(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Public.AdminListen = "127.0.0.1:0"
	cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo}}
	n, _ := startTestNode(t, cfg)
	public, admin := "http://"+n.addrs[0].String(), "http://"+n.adminAddr.String()
	for _, path := range []string{"/metrics", "/debug/ring", "/debug/origin", "/debug/memory", "/ui/", "/ui/state"} {
		if status, _ := get(t, public+path); status != http.StatusNotFound {
			t.Errorf("public %s = %d, want 404", path, status)
		}
		if status, _ := get(t, admin+path); status != http.StatusOK {
			t.Errorf("admin %s = %d, want 200", path, status)
		}
	}
	for _, path := range []string{"/readyz", "/healthz", "/cache/demo/k"} {
		if status, _ := get(t, public+path); status != http.StatusOK {
			t.Errorf("public %s = %d, want 200", path, status)
		}
		if status, _ := get(t, admin+path); status != http.StatusNotFound {
			t.Errorf("admin %s = %d, want 404: the admin listener serves only admin routes", path, status)
		}
	}
}

// TestAdminRoutesFollowReadToken: on the public listener the admin routes,
// which name members and keys, need a token once reads do; on a listener of
// their own they do not (the operator closes that one by its address).
func TestAdminRoutesFollowReadToken(t *testing.T) {
	t.Parallel()
	const readTok = "read-" + testToken
	paths := []string{"/metrics", "/debug/ring", "/debug/origin", "/debug/memory", "/ui/", "/ui/state"}
	t.Run("public listener", func(t *testing.T) {
		t.Parallel()
		base, _, _ := serveNode(t, "-read-token", readTok, "-write-token", testToken, "-group", "name=demo,origin=demo")
		for _, path := range paths {
			if status, challenge, _ := do(t, nil, http.MethodGet, base+path, "", ""); status != http.StatusUnauthorized || challenge == "" {
				t.Errorf("%s without a token = %d (WWW-Authenticate %q), want 401 with a challenge", path, status, challenge)
			}
			for _, tok := range []string{readTok, testToken} {
				if status, _, _ := do(t, nil, http.MethodGet, base+path, tok, ""); status != http.StatusOK {
					t.Errorf("%s with a token = %d, want 200", path, status)
				}
			}
		}
		if status, _, _ := do(t, nil, http.MethodGet, base+"/readyz", "", ""); status != http.StatusOK {
			t.Errorf("/readyz without a token = %d, want 200: health checks carry no token", status)
		}
	})
	t.Run("admin listener", func(t *testing.T) {
		t.Parallel()
		cfg := DefaultConfig()
		cfg.Public.ReadToken = readTok
		cfg.Public.AdminListen = "127.0.0.1:0"
		cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo}}
		n, _ := startTestNode(t, cfg)
		for _, path := range paths {
			if status, _ := get(t, "http://"+n.adminAddr.String()+path); status != http.StatusOK {
				t.Errorf("admin %s without a token = %d, want 200", path, status)
			}
		}
	})
}

// TestMaxConns fills a node's public listener from one address, with the
// per-client cap off: the connection over the cap gets a 503 at once.
func TestMaxConns(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Public.MaxConns = 2
	cfg.Public.MaxConnsPerClient = -1
	cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo}}
	n, _ := startTestNode(t, cfg)
	addr := n.addrs[0].String()
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	poll.Until(t, 5*time.Second, func() (bool, string) {
		return n.limited[0].Open() >= 2, fmt.Sprintf("%d connections open, want 2", n.limited[0].Open())
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET /cache/demo/k HTTP/1.1\r\nHost: x\r\n\r\n")
	reply, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(reply), "HTTP/1.1 503") {
		t.Fatalf("over the cap: %q, want a 503", reply)
	}
	if r, rc := n.limited[0].Refused(), n.limited[0].ClientRefused(); r != 1 || rc != 0 {
		t.Errorf("refused %d at the cap and %d per client, want 1 and 0", r, rc)
	}
}

// TestMaxConnsPerClient holds one address's share of a node's public
// listener: its next connection gets a 503 at once while another address is
// served, and the metrics count the refusal by listener and reason.
func TestMaxConnsPerClient(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Public.MaxConns = 8
	cfg.Public.MaxConnsPerClient = 2
	cfg.Public.AdminListen = "127.0.0.1:0" // scraped from 127.0.0.1, which is at its cap on the public listener
	cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo}}
	n, _ := startTestNode(t, cfg)
	addr := n.addrs[0].String()
	dial := func(ip string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial("127.0.0.1")
	dial("127.0.0.1")
	poll.Until(t, 5*time.Second, func() (bool, string) {
		return n.limited[0].Open() >= 2, fmt.Sprintf("%d connections open, want 2", n.limited[0].Open())
	})
	c := dial("127.0.0.1")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET /cache/demo/k HTTP/1.1\r\nHost: x\r\n\r\n")
	reply, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(reply), "HTTP/1.1 503") || !strings.Contains(string(reply), "Retry-After: 1") {
		t.Fatalf("a third connection from one address: %q, want a 503 with Retry-After", reply)
	}
	other := dial("127.0.0.2")
	other.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(other, "GET /cache/demo/k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if reply, _ := io.ReadAll(other); !strings.HasPrefix(string(reply), "HTTP/1.1 200") {
		t.Fatalf("another address meanwhile: %q, want a 200", reply)
	}
	mfs := scrape(t, "http://"+n.adminAddr.String())
	for _, m := range []struct {
		listener, reason string
		want             float64
	}{{"public", "per_client", 1}, {"public", "max_conns", 0}, {"admin", "per_client", 0}} {
		if got := value(t, mfs, "ringcache_connections_refused_total", "listener", m.listener, "reason", m.reason); got != m.want {
			t.Errorf("ringcache_connections_refused_total{listener=%q,reason=%q} = %v, want %v", m.listener, m.reason, got, m.want)
		}
	}
	if got := value(t, mfs, "ringcache_connections_open", "listener", "public"); got < 2 {
		t.Errorf("ringcache_connections_open{listener=\"public\"} = %v, want at least the 2 held", got)
	}
}

// TestPublicTLS serves the public API over TLS with a certificate made in
// the test, and a renewed one after SIGHUP's reload.
func TestPublicTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca, err := devcert.NewCA("ringcache test CA")
	if err != nil {
		t.Fatal(err)
	}
	first := issueTo(t, ca, certFile, keyFile)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	cfg := DefaultConfig()
	cfg.Public.TLSCert, cfg.Public.TLSKey = certFile, keyFile
	cfg.PeerListen = "127.0.0.1:0"
	cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo}}
	n, _ := startTestNode(t, cfg)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	u := "https://" + n.addrs[0].String() + "/cache/demo/k"
	serial := func() *big.Int {
		t.Helper()
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != string(origin.DemoValue("demo", "k", 64)) {
			t.Fatalf("GET over TLS = %d %q", resp.StatusCode, body)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber
	}
	if s := serial(); s.Cmp(first) != 0 {
		t.Fatalf("serial %v, want %v", s, first)
	}
	second := issueTo(t, ca, certFile, keyFile)
	if err := n.reload(); err != nil {
		t.Fatal(err)
	}
	if s := serial(); s.Cmp(second) != 0 {
		t.Fatalf("after reload: serial %v, want %v", s, second)
	}
	// The image's health check finds the TLS listener by the same settings.
	hc := env(map[string]string{"RINGCACHE_LISTEN": n.addrs[0].String(), "RINGCACHE_TLS_CERT": certFile})
	if err := run(t.Context(), []string{"healthcheck"}, hc, io.Discard); err != nil {
		t.Errorf("healthcheck of the TLS listener: %v", err)
	}
	// The peer listener stays plain HTTP, for the peers.
	if status, _ := get(t, "http://"+n.addrs[1].String()+"/_groupcache/demo/k"); status == 0 {
		t.Fatal("no answer on the peer listener")
	}
}

// issueTo writes a certificate for 127.0.0.1 from ca, and its key, to
// certFile and keyFile, and returns its serial number: what tells a test
// which certificate a server presents.
func issueTo(t *testing.T, ca *devcert.CA, certFile, keyFile string) *big.Int {
	t.Helper()
	cert, err := ca.IssueFiles(certFile, keyFile, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber
}

// TestDevPrintsToken: dev mode generates a write token and prints curl
// lines that use it; the printed line works and the token is required.
func TestDevPrintsToken(t *testing.T) {
	t.Parallel()
	out, _, done := startRun(t, "dev", "-base-port", "0", "-nodes", "1", "-log-level", "warn")
	m := out.await(t, regexp.MustCompile(`curl -i -X PUT -H 'Authorization: Bearer ([0-9a-f]{64})' --data 'my value' (\S+)`), done)
	token, u := m[0][1], m[0][2]
	if status, _, body := do(t, nil, http.MethodPut, u, token, "my value"); status != http.StatusNoContent {
		t.Fatalf("the printed PUT = %d %q, want 204", status, body)
	}
	if status, _, _ := do(t, nil, http.MethodPut, u, "", "forged"); status != http.StatusUnauthorized {
		t.Fatalf("PUT without the token = %d, want 401", status)
	}
	if status, body := get(t, u); status != http.StatusOK || body != "my value" {
		t.Fatalf("GET = %d %q, want the value the printed PUT wrote", status, body)
	}
}
