package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
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
	"time"

	"github.com/ringcache/ringcache/cache"
)

func TestNewServer(t *testing.T) {
	t.Parallel()
	h := http.NotFoundHandler()
	s := NewServer("127.0.0.1:0", h)
	if s.Addr != "127.0.0.1:0" || s.Handler == nil || s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 ||
		s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Fatalf("NewServer left a limit unset: %+v", s)
	}
	if s.WriteTimeout <= 30e9 {
		t.Errorf("WriteTimeout %v does not outlast a group's default 30s LoadTimeout", s.WriteTimeout)
	}
	if s.IdleTimeout <= PeerIdleConnTimeout {
		t.Errorf("IdleTimeout %v does not outlast the peer client's %v idle timeout", s.IdleTimeout, PeerIdleConnTimeout)
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

// testCA is a certificate authority made in the test, which signs server
// certificates for 127.0.0.1.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ringcache test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue writes a server certificate for 127.0.0.1 with the given serial
// number, signed by the CA, to certFile and keyFile.
func (ca *testCA) issue(t *testing.T, serial int64, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
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
	ca := newTestCA(t)
	ca.issue(t, 100, certFile, keyFile)
	cert, err := LoadCertificate(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	nodes, _ := newCluster(t, 1, clusterOpts{})
	h, err := NewHandler(nodes[0].node, HandlerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer("", h)
	srv.TLSConfig = ServerTLSConfig(cert)
	srv.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below
	done := make(chan struct{})
	go func() { defer close(done); srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { srv.Close(); <-done })
	base := "https://" + ln.Addr().String()

	// fetch reads key over a new connection and returns the serial number
	// of the certificate the server showed.
	fetch := func(roots *x509.CertPool) (int64, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(publicURL(base, testGroup, "k"))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != string(valueOf("k")) {
			return 0, fmt.Errorf("%d %q", resp.StatusCode, body)
		}
		if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
			return 0, fmt.Errorf("connection state %+v: want TLS 1.2 or later", resp.TLS)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64(), nil
	}
	if serial, err := fetch(ca.pool); err != nil || serial != 100 {
		t.Fatalf("GET over TLS: serial %d, %v; want 100", serial, err)
	}
	var unknown *tls.CertificateVerificationError
	if _, err := fetch(newTestCA(t).pool); !errors.As(err, &unknown) {
		t.Fatalf("GET trusting another CA: %v, want a certificate verification error", err)
	}
	plain, err := http.Get("http://" + ln.Addr().String() + PublicPrefix + testGroup + "/k")
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Fatal("a plain HTTP request to the TLS listener got a value")
		}
	}

	ca.issue(t, 200, certFile, keyFile)
	if err := cert.Reload(); err != nil {
		t.Fatal(err)
	}
	if serial, err := fetch(ca.pool); err != nil || serial != 200 {
		t.Fatalf("after Reload: serial %d, %v; want 200", serial, err)
	}
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cert.Reload(); !errors.Is(err, ErrConfig) {
		t.Fatalf("Reload of a broken key = %v, want ErrConfig", err)
	}
	if serial, err := fetch(ca.pool); err != nil || serial != 200 {
		t.Fatalf("after a failed Reload: serial %d, %v; want the old 200", serial, err)
	}
	if _, err := LoadCertificate(certFile, keyFile); !errors.Is(err, ErrConfig) {
		t.Fatalf("LoadCertificate of a broken pair = %v, want ErrConfig", err)
	}
}
