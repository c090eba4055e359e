package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringcache/ringcache/internal/devcert"
	"github.com/ringcache/ringcache/transport"
	"github.com/ringcache/ringcache/transport/origin"
)

const demoGroupFlag = "name=demo,origin=demo"

// TestProtectedMode checks that a node whose peer routes would listen on an
// address that is not loopback refuses to start without a secret or mutual
// TLS, before it binds anything, and starts with either, or when told
// -insecure-peers. The refusals run the daemon; the acceptances only load
// the security settings, so that no test binds a non-loopback address.
func TestProtectedMode(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-listen", "0.0.0.0:0"},
		{"-listen", ":0"},
		{"-listen", "[::]:0"},
		{"-listen", "127.0.0.1:0", "-peer-listen", "0.0.0.0:0"},
	} {
		err := run(t.Context(), append(append([]string{"serve"}, args...), "-group", demoGroupFlag), env(nil), io.Discard)
		if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), "protected mode") {
			t.Errorf("%v without a secret: %v, want a protected-mode refusal", args, err)
		}
	}

	ca, err := devcert.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	tlsFiles := writeCerts(t, ca, "127.0.0.1")
	secretFile := writeNamed(t, "secret", "0123456789abcdef0123456789abcdef\n")
	log := slog.New(slog.DiscardHandler)
	for _, tt := range []struct {
		name string
		cfg  func(c *Config)
		ok   bool
	}{
		{"all interfaces, no secret", func(c *Config) {}, false},
		{"all interfaces, -insecure-peers", func(c *Config) { c.InsecurePeers = true }, true},
		{"all interfaces, -secret", func(c *Config) { c.Secret = "0123456789abcdef" }, true},
		{"all interfaces, -secret starting with #", func(c *Config) { c.Secret = "#0123456789abcdef" }, true},
		{"all interfaces, -secret-file", func(c *Config) { c.SecretFile = secretFile }, true},
		{"all interfaces, mutual TLS", func(c *Config) {
			c.PeerListen = "0.0.0.0:0"
			c.PeerCA, c.PeerCert, c.PeerKey = tlsFiles[0], tlsFiles[1], tlsFiles[2]
		}, true},
		{"loopback", func(c *Config) { c.Listen = "127.0.0.1:0" }, true},
		{"localhost", func(c *Config) { c.Listen = "localhost:0" }, true},
		{"IPv6 loopback", func(c *Config) { c.Listen = "[::1]:0" }, true},
		{"public side open, peer routes on loopback", func(c *Config) { c.PeerListen = "127.0.0.1:0" }, true},
		{"a name that does not resolve", func(c *Config) { c.Listen = "no-such-host.invalid:0" }, false},
	} {
		cfg := DefaultConfig()
		cfg.Listen = "0.0.0.0:0"
		cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo}}
		tt.cfg(&cfg)
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		s, err := loadPeerSecurity(cfg, log)
		if tt.ok != (err == nil) {
			t.Errorf("%s: loadPeerSecurity = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err == nil {
			s.close()
		}
	}
}

// writeNamed writes content to a new file in the test's directory.
func writeNamed(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeCerts writes ca's certificate and a certificate for hosts with its
// key, and returns the three paths.
func writeCerts(t *testing.T, ca *devcert.CA, hosts ...string) [3]string {
	t.Helper()
	cert, key, err := ca.Issue(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	return [3]string{writeNamed(t, "ca.pem", string(ca.CertPEM)), writeNamed(t, "cert.pem", string(cert)), writeNamed(t, "key.pem", string(key))}
}

func TestParseSecrets(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("s", minSecretBytes)
	for _, tt := range []struct {
		in   string
		want []string // nil: an error
	}{
		{long, []string{long}},
		{long + "\n", []string{long}},
		{"  " + long + " \r\n\n# next one\nB" + long + "\n", []string{long, "B" + long}},
		{"", nil},
		{"# only a comment\n\n", nil},
		{"short\n", nil},
		{long + "\nshort", nil},
		{strings.Repeat(long+"\n", transport.MaxSecrets+1), nil},
	} {
		got, err := parseSecrets([]byte(tt.in))
		if tt.want == nil {
			if err == nil {
				t.Errorf("parseSecrets(%q) = %q, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || len(got) != len(tt.want) {
			t.Errorf("parseSecrets(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			continue
		}
		for i := range got {
			if string(got[i]) != tt.want[i] {
				t.Errorf("parseSecrets(%q)[%d] = %q, want %q", tt.in, i, got[i], tt.want[i])
			}
		}
	}
}

func TestValidateSecurity(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		cfg   func(c *Config)
		field string // "": valid
	}{
		{"secret and secret file", func(c *Config) { c.Secret, c.SecretFile = "0123456789abcdef", "/run/secrets/x" }, "secret-file"},
		{"short secret", func(c *Config) { c.Secret = "s3cret" }, "secret"},
		{"CA alone", func(c *Config) { c.PeerCA = "ca.pem"; c.PeerListen = "127.0.0.1:9000" }, "peer-ca"},
		{"mutual TLS on the public listener", func(c *Config) { c.PeerCA, c.PeerCert, c.PeerKey = "a", "b", "c" }, "peer-listen"},
		{"mutual TLS, http peer URL", func(c *Config) {
			c.PeerCA, c.PeerCert, c.PeerKey, c.PeerListen, c.PeerURL = "a", "b", "c", "127.0.0.1:9000", "http://a:9000"
		}, "peer-url"},
		{"mutual TLS, http static peer", func(c *Config) {
			c.PeerCA, c.PeerCert, c.PeerKey, c.PeerListen, c.Peers = "a", "b", "c", "127.0.0.1:9000", []string{"https://b:9000", "http://c:9000"}
		}, "peers"},
		{"https peer URL without TLS", func(c *Config) { c.PeerURL = "https://a:8080" }, "peer-url"},
		{"mutual TLS, https URLs", func(c *Config) {
			c.PeerCA, c.PeerCert, c.PeerKey, c.PeerListen, c.PeerURL, c.Peers = "a", "b", "c", "127.0.0.1:9000", "https://a:9000", []string{"https://b:9000"}
		}, ""},
	} {
		cfg := DefaultConfig()
		cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo}}
		tt.cfg(&cfg)
		err := cfg.Validate()
		if tt.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), ": "+tt.field+": ") {
			t.Errorf("%s: %v, want an error naming %s", tt.name, err, tt.field)
		}
	}
}

var secretsLoaded = regexp.MustCompile(`msg="cluster secrets loaded".* secrets=(\d+) signing=(\w+)`)
var reloadFailed = regexp.MustCompile(`msg="reloading peer security: keeping`)

// TestSecretFileRotation runs a node with -secret-file and rotates the
// secret as README says, with a peer (a transport.Pool) before and after
// each step: the node accepts old and new during the rollover, picks each
// change up on SIGHUP or by itself, keeps its secrets when the file turns
// bad, and refuses the old secret at the end.
func TestSecretFileRotation(t *testing.T) {
	// Not parallel: it sends SIGHUP to the test process.
	const old, new = "old-secret-0123456789abcdef", "new-secret-0123456789abcdef"
	file := writeNamed(t, "secrets", old+"\n")
	base, out, _ := serveNode(t, "-secret-file", file, "-group", demoGroupFlag)

	fetch := func(secret string) error {
		p, err := transport.NewPool(transport.Config{Self: "http://127.0.0.1:1", Secrets: [][]byte{[]byte(secret)}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.Set(base); err != nil {
			t.Fatal(err)
		}
		v, err := p.Peers()[0].Fetch(t.Context(), "demo", "k")
		if err == nil && string(v.Data) != string(origin.DemoValue("demo", "k", 64)) {
			t.Fatalf("fetch with %q: %q", secret, v.Data)
		}
		return err
	}
	expect := func(step, secret string, ok bool) {
		t.Helper()
		err := fetch(secret)
		if ok && err != nil {
			t.Fatalf("%s: fetch signed with %s: %v", step, secret[:3], err)
		}
		if !ok && !errors.Is(err, transport.ErrUnauthorized) {
			t.Fatalf("%s: fetch signed with %s: %v, want ErrUnauthorized", step, secret[:3], err)
		}
	}
	// Each reload logs a line; wait for the nth.
	loaded := 0
	awaitLoad := func(re *regexp.Regexp, n int) {
		t.Helper()
		out.await(t, regexp.MustCompile(`(?s)(`+re.String()+`.*){`+strconv.Itoa(n)+`}`), nil)
	}
	rewrite := func(content string, hup bool) {
		t.Helper()
		// Write a new file and rename it over the old one, as an operator's
		// tool (or Kubernetes) does: the node never reads half a file.
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
		if hup {
			if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}
	}

	expect("start", old, true)
	expect("start", new, false)

	rewrite(old+"\n"+new+"\n", true) // 1: accept new, old still signs
	loaded++
	awaitLoad(secretsLoaded, loaded)
	expect("accept new", old, true)
	expect("accept new", new, true)

	rewrite(new+"\n"+old+"\n", false) // 2: new signs; no signal: the poll sees it
	loaded++
	awaitLoad(secretsLoaded, loaded)
	expect("sign with new", old, true)
	expect("sign with new", new, true)

	rewrite("# emptied by mistake\n", true) // a bad file changes nothing
	awaitLoad(reloadFailed, 1)
	expect("bad file", old, true)
	expect("bad file", new, true)

	rewrite(new+"\n", true) // 3: drop old
	loaded++
	awaitLoad(secretsLoaded, loaded)
	expect("drop old", new, true)
	expect("drop old", old, false)

	m := secretsLoaded.FindAllStringSubmatch(out.String(), -1)
	if last := m[len(m)-1]; last[1] != "1" || last[2] != fingerprint([]byte(new)) {
		t.Errorf("last reload logged secrets=%s signing=%s, want 1 and %s", last[1], last[2], fingerprint([]byte(new)))
	}
	if strings.Contains(out.String(), old) || strings.Contains(out.String(), new) {
		t.Error("a secret appears in the log")
	}
}

// TestDevTLS runs the dev cluster with mutual TLS: keys load once, at their
// owners, through peers over https; a peer route refuses a client without a
// certificate, and with node1's certificate still wants the cluster secret.
func TestDevTLS(t *testing.T) {
	t.Parallel()
	c, err := startDev(t.Context(), devConfig{Nodes: 3, DemoSize: 64, LogLevel: "warn", TLS: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(10 * time.Second) })
	for _, n := range c.nodes {
		if !strings.HasPrefix(n.self, "https://") {
			t.Fatalf("peer URL %s, want https", n.self)
		}
	}
	urls := c.urls()
	const K = 12
	for k := range K {
		key := fmt.Sprintf("k%d", k)
		for _, base := range urls {
			if status, body := get(t, base+"/cache/demo/"+key); status != 200 || body != string(origin.DemoValue("demo", key, 64)) {
				t.Fatalf("%s: %s = %d %q", base, key, status, body)
			}
		}
	}
	total := int64(0)
	for _, d := range originLoads(t, urls) {
		total += d
	}
	if total != K {
		t.Errorf("%d origin loads for %d keys read through 3 nodes, want %d: peers did not serve each other", total, K, K)
	}

	peerURL := c.nodes[0].self + "/_groupcache/demo/k0"
	ca, err := os.ReadFile(filepath.Join(c.certDir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	noCert := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	defer noCert.CloseIdleConnections()
	if res, err := (&http.Client{Transport: noCert}).Get(peerURL); err == nil {
		res.Body.Close()
		t.Errorf("peer route without a client certificate: %d, want a refused handshake", res.StatusCode)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(c.certDir, "node1.pem"), filepath.Join(c.certDir, "node1-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	withCert := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}}
	defer withCert.CloseIdleConnections()
	res, err := (&http.Client{Transport: withCert}).Get(peerURL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("peer route with a certificate, unsigned: %d, want 401", res.StatusCode)
	}
	dir := c.certDir
	c.stop(10 * time.Second)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("certificates left behind in %s: %v", dir, err)
	}
}

// TestSecuritySettings reads the security settings from flags, the
// environment and YAML: -insecure-peers works alone, as a boolean flag.
func TestSecuritySettings(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig([]string{"-insecure-peers", "-group", demoGroupFlag}, env(map[string]string{
		"RINGCACHE_SECRET_FILE": "/run/secrets/ringcache",
	}), io.Discard)
	if err != nil || !cfg.InsecurePeers || cfg.SecretFile != "/run/secrets/ringcache" {
		t.Fatalf("flags and env: %+v, %v", cfg, err)
	}
	file := writeNamed(t, "ringcached.yaml", "insecure-peers: true\npeer-listen: 127.0.0.1:9000\npeer-ca: ca.pem\npeer-cert: c.pem\npeer-key: k.pem\npeer-url: https://a:9000\n")
	cfg, err = loadConfig([]string{"-config", file, "-group", demoGroupFlag}, env(nil), io.Discard)
	if err != nil || !cfg.InsecurePeers || cfg.PeerCA != "ca.pem" || cfg.PeerKey != "k.pem" {
		t.Fatalf("YAML: %+v, %v", cfg, err)
	}
	if _, err := loadConfig([]string{"-insecure-peers=maybe", "-group", demoGroupFlag}, env(nil), io.Discard); !errors.Is(err, errConfig) {
		t.Errorf("-insecure-peers=maybe: %v, want errConfig", err)
	}
}
