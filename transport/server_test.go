package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/devcert"
	"github.com/ringcache/ringcache/internal/listen"
	"github.com/ringcache/ringcache/transport/api"
)

func TestNewServer(t *testing.T) {
	t.Parallel()
	h := http.NotFoundHandler()
	s := listen.NewServer("127.0.0.1:0", h)
	if s.Addr != "127.0.0.1:0" || s.Handler == nil || s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 ||
		s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Fatalf("NewServer left a limit unset: %+v", s)
	}
	if s.WriteTimeout <= 30e9 {
		t.Errorf("WriteTimeout %v does not outlast a group's default 30s LoadTimeout", s.WriteTimeout)
	}
	if s.IdleTimeout <= listen.PeerIdleConnTimeout {
		t.Errorf("IdleTimeout %v does not outlast the peer client's %v idle timeout", s.IdleTimeout, listen.PeerIdleConnTimeout)
	}
}

// TestSeparateListeners serves the peer routes and the public API on two
// listeners per node, the peer handler mounted without a mux: the public
// listener does not serve peers, the peer listener does not serve clients,
// and keys still cross between nodes (dot keys too: nothing cleans paths).
func TestSeparateListeners(t *testing.T) {
	t.Parallel()
	type node struct {
		public, peer *httptest.Server
		pool         *Pool
	}
	var loads loadLog
	var nodes []node
	var peerURLs []string
	for range 2 {
		peerSrv := httptest.NewUnstartedServer(nil)
		self := "http://" + peerSrv.Listener.Addr().String()
		tn, err := NewNode(NodeConfig{Pool: Config{Self: self}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tn.Shutdown(context.Background()) })
		pool := tn.Pool()
		if _, err := tn.NewGroup(cache.GroupConfig{Name: testGroup, MaxBytes: 1 << 20,
			Getter: cache.GetterFunc(func(_ context.Context, key string) (cache.Value, error) {
				loads.add(self, key)
				return cache.Value{Data: valueOf(key)}, nil
			})}); err != nil {
			t.Fatal(err)
		}
		peerSrv.Config.Handler = tn.PeerHandler()
		peerSrv.Start()
		t.Cleanup(peerSrv.Close)
		pub := httptest.NewServer(tn.PublicHandler())
		t.Cleanup(pub.Close)
		nodes = append(nodes, node{public: pub, peer: peerSrv, pool: pool})
		peerURLs = append(peerURLs, self)
	}
	for _, n := range nodes {
		if err := n.pool.Set(peerURLs...); err != nil {
			t.Fatal(err)
		}
	}
	c := testClient(t)
	for _, key := range []string{".", "..", "a/../b", "k"} {
		for _, n := range nodes {
			r := mustDo(t, c, http.MethodGet, publicURL(n.public.URL, testGroup, key), nil)
			if r.status != http.StatusOK || r.body != string(valueOf(key)) {
				t.Errorf("GET %q at %s: %d %q", key, n.public.URL, r.status, r.body)
			}
		}
		if got := loads.of(key); len(got) != 1 || got[0] != nodes[0].pool.Owner(key) {
			t.Errorf("loads of %q = %v, want one by its owner", key, got)
		}
		// groupcache's client would send dots unescaped; without a mux in
		// front, they arrive as they are.
		r := mustDo(t, c, http.MethodGet, nodes[0].peer.URL+DefaultBasePath+testGroup+"/"+key, nil)
		if r.status != http.StatusOK {
			t.Errorf("raw peer GET %q: %d %q", key, r.status, r.body)
		}
	}
	if r := mustDo(t, c, http.MethodGet, nodes[0].public.URL+peerPath(DefaultBasePath, testGroup, "k"), nil); r.status != http.StatusNotFound {
		t.Errorf("peer route on the public listener: %d, want 404", r.status)
	}
	if r := mustDo(t, c, http.MethodGet, nodes[0].peer.URL+"/cache/g/k", nil); r.status != http.StatusNotFound {
		t.Errorf("public route on the peer listener: %d, want 404", r.status)
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

// TestServeTLS serves the public API over TLS with a certificate made in
// the test: a client that trusts the CA reads a value over TLS 1.2 or
// later, one that does not is refused, a plain HTTP request gets no value,
// and Reload serves a renewed certificate from the next handshake on while
// a broken renewal keeps the old one.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca := newCA(t, "ringcache test CA")
	first := issueTo(t, ca, certFile, keyFile)
	cert, err := listen.LoadCertificate(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	nodes, _ := newCluster(t, 1, clusterOpts{})
	h, err := api.NewHandler(nodes[0].node, api.HandlerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := listen.NewServer("", h)
	srv.TLSConfig = listen.ServerTLSConfig(cert)
	srv.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below
	done := make(chan struct{})
	go func() { defer close(done); srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { srv.Close(); <-done })
	base := "https://" + ln.Addr().String()

	// fetch reads key over a new connection and returns the serial number
	// of the certificate the server showed.
	fetch := func(roots *x509.CertPool) (*big.Int, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(publicURL(base, testGroup, "k"))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != string(valueOf("k")) {
			return nil, fmt.Errorf("%d %q", resp.StatusCode, body)
		}
		if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
			return nil, fmt.Errorf("connection state %+v: want TLS 1.2 or later", resp.TLS)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber, nil
	}
	roots := mustRoots(t, ca)
	if serial, err := fetch(roots); err != nil || serial.Cmp(first) != 0 {
		t.Fatalf("GET over TLS: serial %v, %v; want %v", serial, err, first)
	}
	var unknown *tls.CertificateVerificationError
	if _, err := fetch(mustRoots(t, newCA(t, "another CA"))); !errors.As(err, &unknown) {
		t.Fatalf("GET trusting another CA: %v, want a certificate verification error", err)
	}
	plain, err := http.Get("http://" + ln.Addr().String() + api.PublicPrefix + testGroup + "/k")
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Fatal("a plain HTTP request to the TLS listener got a value")
		}
	}

	second := issueTo(t, ca, certFile, keyFile)
	if err := cert.Reload(); err != nil {
		t.Fatal(err)
	}
	if serial, err := fetch(roots); err != nil || serial.Cmp(second) != 0 {
		t.Fatalf("after Reload: serial %v, %v; want %v", serial, err, second)
	}
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cert.Reload(); !errors.Is(err, ErrConfig) {
		t.Fatalf("Reload of a broken key = %v, want ErrConfig", err)
	}
	if serial, err := fetch(roots); err != nil || serial.Cmp(second) != 0 {
		t.Fatalf("after a failed Reload: serial %v, %v; want the old %v", serial, err, second)
	}
	if _, err := listen.LoadCertificate(certFile, keyFile); !errors.Is(err, ErrConfig) {
		t.Fatalf("LoadCertificate of a broken pair = %v, want ErrConfig", err)
	}
}
