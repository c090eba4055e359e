package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
)

// ErrTLS is returned by NewPeerTLS and PeerTLS.Update for certificates that
// cannot be used, and by the peer client for a peer URL that is not https
// while Config.TLS is set.
var ErrTLS = errors.New("transport: peer TLS")

// PeerTLS is mutual TLS between the nodes of a cluster: every node has a
// certificate issued by the cluster's CA, for both server and client
// authentication, with the host of its peer URL among its names. A node
// accepts a peer connection only from a client that presents a certificate
// from that CA, and dials only peers whose certificate verifies against it
// for the host it dialled. TLS 1.3 only: both ends are ours.
//
// Update swaps the CA and the node's certificate at once; new connections
// use them, connections already open keep theirs. Use a CA of the cluster's
// own: every certificate it issues is a peer.
//
// A PeerTLS is safe for concurrent use.
type PeerTLS struct {
	state atomic.Pointer[tlsState]
}

type tlsState struct {
	server *tls.Config // what the peer listener uses for each handshake
	client *tls.Config // what the peer client dials with
}

// NewPeerTLS returns the mutual TLS of a node from PEM data: caPEM holds
// the CA certificate(s) peers are verified against (several during a CA
// rotation), certPEM this node's certificate (then any intermediates) and
// keyPEM its private key.
func NewPeerTLS(caPEM, certPEM, keyPEM []byte) (*PeerTLS, error) {
	t := &PeerTLS{}
	if err := t.Update(caPEM, certPEM, keyPEM); err != nil {
		return nil, err
	}
	return t, nil
}

// Update replaces the CA and the certificate, as NewPeerTLS reads them. On
// error nothing changes.
func (t *PeerTLS) Update(caPEM, certPEM, keyPEM []byte) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%w: no CA certificate in the CA PEM", ErrTLS)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("%w: certificate and key: %v", ErrTLS, err)
	}
	// Refuse a certificate its own CA does not vouch for now, rather than
	// find out at the first handshake of every peer.
	leaf := cert.Leaf
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return fmt.Errorf("%w: this node's certificate does not verify against the CA for server and client use: %v", ErrTLS, err)
	}
	st := &tlsState{
		server: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    roots,
		},
		client: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{cert},
			RootCAs:      roots,
		},
	}
	t.state.Store(st)
	return nil
}

// ServerConfig returns the tls.Config of a peer listener
// (tls.NewListener(ln, t.ServerConfig())): it requires a client certificate
// from the CA, and picks up each Update at the next handshake.
func (t *PeerTLS) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.state.Load().server, nil
		},
	}
}

// transport returns the RoundTripper of the Pool's client over tr: tr
// itself without TLS; with it, tr dialling https peers with the current
// client config, and a refusal of any request that is not https, so that a
// member registered with an http URL never receives a value or a signed
// request in clear text.
func (t *PeerTLS) transport(tr *http.Transport, dialer *net.Dialer) http.RoundTripper {
	if t == nil {
		return tr
	}
	tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		// The connect alone is bounded by the dial timeout, which is about
		// finding a dead peer quickly (and a failure there opens its
		// breaker); the handshake needs the peer's CPU, like a request,
		// and has what the request has (Config.PeerTimeout of silence).
		conn, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			conn.Close()
			return nil, err
		}
		cfg := t.state.Load().client.Clone()
		cfg.ServerName = host // the certificate must name the host dialled
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		return tc, nil
	}
	return httpsOnly{tr}
}

type httpsOnly struct{ next http.RoundTripper }

func (h httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%w: %s is not an https URL", ErrTLS, req.URL.Redacted())
	}
	return h.next.RoundTrip(req)
}

// RequireClientCert wraps a peer handler so that it answers 401 to any
// request that did not come over TLS with a verified client certificate. The
// peer listener's TLS already refuses such connections; this keeps the peer
// routes closed if the handler is ever mounted on another listener.
func RequireClientCert(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			writeError(w, fmt.Errorf("%w: no verified client certificate", ErrUnauthorized))
			return
		}
		h.ServeHTTP(w, r)
	})
}
