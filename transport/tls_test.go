package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/devcert"
	"github.com/ringcache/ringcache/internal/listen"
)

// newCA returns a throwaway CA for a test.
func newCA(t testing.TB, name string) *devcert.CA {
	t.Helper()
	ca, err := devcert.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// peerTLS returns a PeerTLS for a node named by hosts, its certificate
// issued by issuer and its peers verified against trust.
func peerTLS(t testing.TB, trust, issuer *devcert.CA, hosts ...string) *PeerTLS {
	t.Helper()
	cert, key, err := issuer.Issue(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := NewPeerTLS(trust.CertPEM, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return pt
}

// tlsNode is a node of newTLSCluster.
type tlsNode struct {
	url   string
	tls   *PeerTLS
	pool  *Pool
	group *cache.Group
}

// newTLSCluster starts n nodes on loopback whose peer routes speak mutual
// TLS with certificates from ca.
func newTLSCluster(t testing.TB, ca *devcert.CA, n int, loads *loadLog) []*tlsNode {
	return newTLSClusterOpts(t, ca, n, loads, defaultOrigin, nil)
}

// newTLSClusterOpts is newTLSCluster with an origin and a secret (nil: none).
func newTLSClusterOpts(t testing.TB, ca *devcert.CA, n int, loads *loadLog, value origin, secret []byte) []*tlsNode {
	t.Helper()
	nodes := make([]*tlsNode, n)
	urls := make([]string, n)
	for i := range nodes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pt := peerTLS(t, ca, ca, "127.0.0.1")
		tn := &tlsNode{url: "https://" + ln.Addr().String(), tls: pt}
		cfg := Config{Self: tn.url, TLS: pt, Secrets: secretsOf(secret)}
		if _, ok := t.(*testing.B); ok {
			cfg.PeerTimeout = benchPeerTimeout
		}
		node, err := NewNode(NodeConfig{Pool: cfg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Shutdown(context.Background()) })
		tn.pool = node.Pool()
		tn.group, err = node.NewGroup(cache.GroupConfig{Name: testGroup, MaxBytes: 1 << 20,
			Getter: cache.GetterFunc(func(ctx context.Context, key string) (cache.Value, error) {
				loads.add(tn.url, key)
				return value(ctx, tn.url, key)
			})})
		if err != nil {
			t.Fatal(err)
		}
		srv := listen.NewServer("", RequireClientCert(node.PeerHandler()))
		srv.ErrorLog = discardLog
		go srv.Serve(tls.NewListener(ln, pt.ServerConfig()))
		t.Cleanup(func() { srv.Close() })
		nodes[i], urls[i] = tn, tn.url
	}
	for _, tn := range nodes {
		if err := tn.pool.Set(urls...); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// TestPeerMutualTLS runs three nodes whose peers talk mutual TLS: keys load
// once, at their owners, through peers; then a client with a certificate
// from another CA, a client without a certificate, a plain HTTP client and a
// node whose own certificate comes from another CA all fail to reach a
// node, and none of them makes it serve or load anything.
func TestPeerMutualTLS(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "cluster CA")
	loads := &loadLog{}
	nodes := newTLSCluster(t, ca, 3, loads)
	ctx := t.Context()
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, n := range nodes {
		for _, k := range keys {
			v, err := n.group.Get(ctx, k)
			if err != nil || string(v.Data) != string(valueOf(k)) {
				t.Fatalf("Get(%q) at %s = %q, %v", k, n.url, v.Data, err)
			}
		}
	}
	peerLoads := int64(0)
	for _, k := range keys {
		if got := loads.of(k); !slices.Equal(got, []string{nodes[0].pool.Owner(k)}) {
			t.Errorf("loads of %q = %v, want one at its owner", k, got)
		}
	}
	for _, n := range nodes {
		s := n.group.Stats()
		peerLoads += s.PeerLoads
		if s.PeerErrors != 0 {
			t.Errorf("%s: %d peer errors", n.url, s.PeerErrors)
		}
	}
	if peerLoads == 0 {
		t.Fatal("no key went through a peer: the test proves nothing about TLS")
	}

	target := nodes[0]
	gets := func() int64 { return target.group.Stats().PeerGets }
	before := gets()
	other := newCA(t, "another CA")

	// A node of another cluster: certificate from another CA. Its Pool
	// sends no certificate the server did not ask for (the server names
	// its CA), so the handshake fails for want of one.
	stranger := mustPool(t, Config{Self: "https://127.0.0.1:1", TLS: peerTLS(t, bundle2(ca, other), other, "127.0.0.1")})
	if err := stranger.Set(target.url); err != nil {
		t.Fatal(err)
	}
	if _, err := stranger.Peers()[0].Fetch(ctx, testGroup, "a"); err == nil {
		t.Error("a peer with a certificate from another CA fetched a value")
	}
	// A client that presents the foreign certificate regardless: the
	// server verifies it and refuses it.
	foreignCert, foreignKey, err := other.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := tls.X509KeyPair(foreignCert, foreignKey)
	if err != nil {
		t.Fatal(err)
	}
	pushy := &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:              mustRoots(t, ca),
		MinVersion:           tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &foreign, nil },
	}}
	t.Cleanup(pushy.CloseIdleConnections)
	res, err := (&http.Client{Transport: pushy}).Get(target.url + peerPath(DefaultBasePath, testGroup, "a"))
	if err == nil {
		res.Body.Close()
		t.Errorf("a client with a certificate from another CA got status %d", res.StatusCode)
	} else if !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Errorf("a client with a certificate from another CA: %v, want the server to refuse its authority", err)
	}

	// A client that trusts our CA but has no certificate.
	bare := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: mustRoots(t, ca), MinVersion: tls.VersionTLS13}}
	t.Cleanup(bare.CloseIdleConnections)
	if res, err := (&http.Client{Transport: bare}).Get(target.url + peerPath(DefaultBasePath, testGroup, "a")); err == nil {
		res.Body.Close()
		t.Errorf("a client without a certificate got status %d", res.StatusCode)
	}

	// Plain HTTP to the TLS port.
	plain := &http.Transport{}
	t.Cleanup(plain.CloseIdleConnections)
	if res, err := (&http.Client{Transport: plain}).Get("http://" + target.url[len("https://"):] + peerPath(DefaultBasePath, testGroup, "a")); err == nil {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Error("plain HTTP to the peer port got a value")
		}
	}

	// One of our nodes dialling a server whose certificate comes from
	// another CA: our side refuses it.
	imposterLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	imposterTLS := peerTLS(t, other, other, "127.0.0.1")
	served := make(chan struct{}, 1)
	imposter := listen.NewServer("", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served <- struct{}{} }))
	imposter.ErrorLog = discardLog
	go imposter.Serve(tls.NewListener(imposterLn, imposterTLS.ServerConfig()))
	t.Cleanup(func() { imposter.Close() })
	if err := target.pool.Set(target.url, "https://"+imposterLn.Addr().String()); err != nil {
		t.Fatal(err)
	}
	var imp cache.Peer
	for _, p := range target.pool.Peers() {
		if p.(fmt.Stringer).String() == "https://"+imposterLn.Addr().String() {
			imp = p
		}
	}
	if _, err := imp.Fetch(ctx, testGroup, "a"); err == nil {
		t.Error("a node fetched from a server whose certificate comes from another CA")
	} else if !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("fetch from a server with a certificate from another CA: %v, want an unknown authority", err)
	}
	select {
	case <-served:
		t.Error("the imposter received a request")
	default:
	}

	// Config.TLS set: an http member gets nothing, not even a connection.
	plainLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer plainLn.Close()
	httpURL := "http://" + plainLn.Addr().String()
	if err := target.pool.Set(target.url, httpURL); err != nil {
		t.Fatal(err)
	}
	if _, err := target.pool.Peers()[0].Fetch(ctx, testGroup, "a"); !errors.Is(err, ErrTLS) {
		t.Errorf("fetch from an http peer with TLS on: %v, want ErrTLS", err)
	}

	if after := gets(); after != before {
		t.Errorf("refused clients reached the group: %d peer gets, want %d", after, before)
	}
}

// TestRequireClientCert checks that the peer handler, mounted on a plain
// listener by mistake, refuses everything.
func TestRequireClientCert(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 1, clusterOpts{wrapPeer: func(_ int, h http.Handler) http.Handler { return RequireClientCert(h) }})
	r := mustDo(t, testClient(t), "GET", nodes[0].url+peerPath(DefaultBasePath, testGroup, "k"), nil)
	if r.status != http.StatusUnauthorized || loads.count() != 0 {
		t.Fatalf("peer GET without TLS: %d %q, %d loads; want 401 and none", r.status, r.body, loads.count())
	}
}

// TestPeerTLSUpdate rotates the cluster's CA node by node without a
// restart: first every node trusts both CAs, then each takes a certificate
// from the new CA, then every node trusts only the new one. New connections
// work after every single step; at the end a certificate from the old CA is
// refused. Update refuses what cannot work and keeps what it had.
func TestPeerTLSUpdate(t *testing.T) {
	t.Parallel()
	oldCA, newCA := newCA(t, "old CA"), newCA(t, "new CA")
	nodes := newTLSCluster(t, oldCA, 2, &loadLog{})
	check := func(step string) {
		t.Helper()
		for _, n := range nodes {
			n.pool.Close() // new handshakes, under the new state
			if _, err := n.pool.Peers()[0].Fetch(t.Context(), testGroup, "k"); err != nil {
				t.Fatalf("%s: %s: %v", step, n.url, err)
			}
		}
	}
	check("before")
	bundle := append(append([]byte(nil), oldCA.CertPEM...), newCA.CertPEM...)
	certs := make([][2][]byte, len(nodes))
	for i, n := range nodes {
		oldCert, oldKey, _ := oldCA.Issue("127.0.0.1")
		if err := n.tls.Update(bundle, oldCert, oldKey); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("node %d trusts both CAs", i))
		cert, key, err := newCA.Issue("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		certs[i] = [2][]byte{cert, key}
	}
	for i, n := range nodes {
		if err := n.tls.Update(bundle, certs[i][0], certs[i][1]); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("node %d has a certificate from the new CA", i))
	}
	for i, n := range nodes {
		if err := n.tls.Update(newCA.CertPEM, certs[i][0], certs[i][1]); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("node %d trusts only the new CA", i))
	}
	stale := mustPool(t, Config{Self: "https://127.0.0.1:1", TLS: peerTLS(t, bundle2(oldCA, newCA), oldCA, "127.0.0.1")})
	if err := stale.Set(nodes[0].url); err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Peers()[0].Fetch(t.Context(), testGroup, "k"); err == nil {
		t.Error("a certificate from the old CA was accepted after the rotation")
	}

	pt := nodes[0].tls
	cert, key := certs[0][0], certs[0][1]
	if err := pt.Update(oldCA.CertPEM, cert, key); !errors.Is(err, ErrTLS) {
		t.Errorf("Update with a certificate the CA did not issue: %v, want ErrTLS", err)
	}
	if err := pt.Update([]byte("not PEM"), cert, key); !errors.Is(err, ErrTLS) {
		t.Errorf("Update without a CA: %v, want ErrTLS", err)
	}
	if err := pt.Update(newCA.CertPEM, cert, []byte("not a key")); !errors.Is(err, ErrTLS) {
		t.Errorf("Update with a bad key: %v, want ErrTLS", err)
	}
	check("after refused updates")
}

// bundle2 is a CA whose PEM holds two CAs' certificates, for a stale node
// that trusts both.
func bundle2(a, b *devcert.CA) *devcert.CA {
	return &devcert.CA{CertPEM: append(append([]byte(nil), a.CertPEM...), b.CertPEM...)}
}

var discardLog = log.New(io.Discard, "", 0)

func mustRoots(t *testing.T, ca *devcert.CA) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(ca.CertPEM) {
		t.Fatal("bad CA PEM")
	}
	return p
}
