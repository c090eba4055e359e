// Package listen is the daemon's plumbing for a listener that faces a
// network: an http.Server with the timeouts and header limits it needs
// (NewServer), a cap on open connections in all and per client address
// that refuses the ones beyond it at once (LimitListener), and a TLS
// certificate that reloads its files without a restart (Certificate).
package listen

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ringcache/ringcache/transport/api"
)

// Limits set by NewServer, and the peer client's idle timeout they are
// measured against.
const (
	ServerReadHeaderTimeout = 5 * time.Second
	ServerReadTimeout       = 60 * time.Second
	ServerWriteTimeout      = 60 * time.Second
	ServerIdleTimeout       = 30 * time.Second
	ServerMaxHeaderBytes    = 64 << 10

	// PeerIdleConnTimeout is how long the peer client keeps an idle
	// keep-alive connection. It is below ServerIdleTimeout so that the
	// client, not the server, closes an idle connection: a server that
	// closes first races the client's next request on it, and a PUT or
	// DELETE lost that way is not retried.
	PeerIdleConnTimeout = 20 * time.Second
)

// NewServer returns an http.Server for h on addr with the limits a node
// reachable from a network needs: ReadHeaderTimeout (5s) against clients
// that trickle headers (slowloris), ReadTimeout and WriteTimeout (60s, above
// a group's default 30s LoadTimeout, so a slow origin load is not cut off
// mid-way), IdleTimeout (30s: an idle keep-alive connection holds a slot
// of the listener's connection cap, so it must not hold it for long; above
// PeerIdleConnTimeout, so that peers close theirs first) and MaxHeaderBytes
// (64 KiB: a 250-byte key is at most 750 bytes escaped). Adjust the fields
// before serving if a deployment needs other values; cap the listener's
// connections with NewLimitListener.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ServerReadHeaderTimeout,
		ReadTimeout:       ServerReadTimeout,
		WriteTimeout:      ServerWriteTimeout,
		IdleTimeout:       ServerIdleTimeout,
		MaxHeaderBytes:    ServerMaxHeaderBytes,
	}
}

// Certificate is a TLS certificate chain and private key read from two PEM
// files, which Reload reads again: a renewed certificate is served from the
// next handshake on, without a restart and without dropping connections.
// A Certificate is safe for concurrent use.
type Certificate struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
}

// LoadCertificate reads the PEM files certFile (the chain, leaf first) and
// keyFile.
func LoadCertificate(certFile, keyFile string) (*Certificate, error) {
	c := &Certificate{certFile: certFile, keyFile: keyFile}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the files again. If they do not hold a valid pair, the
// certificate in use stays and the error says why.
func (c *Certificate) Reload() error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("%w: TLS certificate %s, key %s: %v", api.ErrConfig, c.certFile, c.keyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("%w: TLS certificate %s: %v", api.ErrConfig, c.certFile, err)
		}
	}
	c.cur.Store(&cert)
	return nil
}

// Leaf returns the certificate being served.
func (c *Certificate) Leaf() *x509.Certificate { return c.cur.Load().Leaf }

// GetCertificate returns the certificate being served, for
// tls.Config.GetCertificate.
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cur.Load(), nil
}

// ServerTLSConfig returns the TLS configuration of a public listener that
// serves cert: TLS 1.2 or later with Go's default cipher suites (all with
// forward secrecy and AEAD), and HTTP/2 and HTTP/1.1 offered by ALPN.
func ServerTLSConfig(cert *Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: cert.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	}
}
