package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ringcache/ringcache/transport"
)

// minSecretBytes is the shortest cluster secret the daemon accepts: the
// library's own rule (transport.MinSecretBytes), checked here to name the
// flag. `openssl rand -hex 32` gives 64 characters.
const minSecretBytes = transport.MinSecretBytes

// reloadInterval is how often the secret file and the TLS files are read
// again to look for a change (besides on SIGHUP). Reading three small files
// every few seconds costs nothing, and comparing contents rather than times
// also sees Kubernetes' swap of a secret volume's symlink.
const reloadInterval = 2 * time.Second

// validateSecurity checks the settings of the peer routes' protection; a
// part of Validate.
func (c *Config) validateSecurity() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", errConfig, field, fmt.Sprintf(format, args...))
	}
	if c.Secret != "" && c.SecretFile != "" {
		return bad("secret-file", "set -secret or -secret-file, not both")
	}
	if c.Secret != "" && len(strings.TrimSpace(c.Secret)) < minSecretBytes {
		return bad("secret", "%d bytes; at least %d (openssl rand -hex 32)", len(strings.TrimSpace(c.Secret)), minSecretBytes)
	}
	n := 0
	for _, f := range []string{c.PeerCA, c.PeerCert, c.PeerKey} {
		if f != "" {
			n++
		}
	}
	if n != 0 && n != 3 {
		return bad("peer-ca", "mutual TLS needs all three of -peer-ca, -peer-cert and -peer-key")
	}
	tlsOn := n == 3
	if tlsOn && c.PeerListen == "" {
		// One listener cannot ask peers for a certificate and clients for
		// none: the peer routes get their own.
		return bad("peer-listen", "mutual TLS between peers needs a separate -peer-listen")
	}
	want := "http"
	if tlsOn {
		want = "https"
	}
	for field, urls := range map[string][]string{"peer-url": {c.PeerURL}, "peers": c.Peers} {
		for _, u := range urls {
			if u == "" {
				continue
			}
			if pu, err := url.Parse(u); err == nil && pu.Scheme != want {
				if tlsOn {
					return bad(field, "%q: with -peer-ca, peer URLs are https", u)
				}
				return bad(field, "%q: an https peer URL needs -peer-ca, -peer-cert and -peer-key", u)
			}
		}
	}
	return nil
}

// parseSecrets reads the cluster secrets from a secret file's contents, or
// from -secret: one per line, surrounding spaces trimmed, blank lines and
// lines starting with # skipped. The first signs; all are accepted.
func parseSecrets(data []byte) ([][]byte, error) {
	var out [][]byte
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if len(line) < minSecretBytes {
			return nil, fmt.Errorf("line %d: a secret of %d bytes; at least %d (openssl rand -hex 32)", i+1, len(line), minSecretBytes)
		}
		out = append(out, line)
	}
	if len(out) == 0 {
		return nil, errors.New("no secret in it")
	}
	if len(out) > transport.MaxSecrets {
		return nil, fmt.Errorf("%d secrets, at most %d", len(out), transport.MaxSecrets)
	}
	return out, nil
}

// fingerprint names a secret in logs without revealing it: the first 8 hex
// digits of its SHA-256. Operators compare it across nodes during a
// rotation.
func fingerprint(secret []byte) string {
	h := sha256.Sum256(secret)
	return hex.EncodeToString(h[:4])
}

// peerSecurity is what protects a node's peer routes: the cluster secrets
// and mutual TLS, loaded from the configuration, and a watcher that reloads
// them on SIGHUP and when their files change.
type peerSecurity struct {
	cfg     Config
	log     *slog.Logger
	secrets [][]byte           // as loaded at start
	tls     *transport.PeerTLS // nil without mutual TLS

	// Set by watch.
	setSecrets func(...[]byte) error // the Pool's SetSecrets
	stop       context.CancelFunc
	done       chan struct{}
	closeOnce  sync.Once

	mu       sync.Mutex // serializes reloads: a SIGHUP during a poll
	lastSec  []byte     // the secret file's contents last applied
	lastTLS  [3][]byte  // the CA, certificate and key files' contents last applied
	badSec   []byte     // contents refused last, not tried again until they change
	badTLS   [3][]byte
	reloaded func(error) // if set (tests), called after every reload attempt
}

// loadPeerSecurity reads the secrets and the TLS files and enforces
// protected mode: a node whose peer routes listen on an address that is not
// loopback needs a secret or mutual TLS, or -insecure-peers.
func loadPeerSecurity(cfg Config, log *slog.Logger) (*peerSecurity, error) {
	s := &peerSecurity{cfg: cfg, log: log}
	switch {
	case cfg.Secret != "":
		// One secret, taken whole: the file's comment and line rules do not
		// apply to a value given directly.
		s.secrets = [][]byte{[]byte(strings.TrimSpace(cfg.Secret))}
	case cfg.SecretFile != "":
		data, err := os.ReadFile(cfg.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("%w: secret-file: %v", errConfig, err)
		}
		if s.secrets, err = parseSecrets(data); err != nil {
			return nil, fmt.Errorf("%w: secret-file %s: %v", errConfig, cfg.SecretFile, err)
		}
		s.lastSec = data
	}
	if cfg.PeerCA != "" {
		files, err := readTLSFiles(cfg)
		if err != nil {
			return nil, err
		}
		if s.tls, err = transport.NewPeerTLS(files[0], files[1], files[2]); err != nil {
			return nil, fmt.Errorf("%w: peer-ca, peer-cert, peer-key: %v", errConfig, err)
		}
		s.lastTLS = files
	}
	if len(s.secrets) == 0 && s.tls == nil {
		addr := cfg.Listen
		if cfg.PeerListen != "" {
			addr = cfg.PeerListen
		}
		if cfg.InsecurePeers {
			log.Warn("peer routes are open: no secret, no mutual TLS (-insecure-peers)", "addr", addr)
		} else if !loopbackAddr(addr) {
			return nil, fmt.Errorf("%w: protected mode: the peer routes listen on %s, which is not loopback, without a secret or mutual TLS; "+
				"anyone who reaches it could read, write and invalidate the cache. Set -secret-file (or RINGCACHE_SECRET), or -peer-ca, -peer-cert "+
				"and -peer-key; or -insecure-peers to run open on a network you trust (groupcache peers need it)", errConfig, addr)
		}
	}
	if len(s.secrets) > 0 {
		log.Info("peer requests are signed", "secrets", len(s.secrets), "signing", fingerprint(s.secrets[0]))
	}
	return s, nil
}

// readTLSFiles reads the CA, certificate and key files.
func readTLSFiles(cfg Config) ([3][]byte, error) {
	var out [3][]byte
	for i, f := range []struct{ name, path string }{{"peer-ca", cfg.PeerCA}, {"peer-cert", cfg.PeerCert}, {"peer-key", cfg.PeerKey}} {
		data, err := os.ReadFile(f.path)
		if err != nil {
			return out, fmt.Errorf("%w: %s: %v", errConfig, f.name, err)
		}
		out[i] = data
	}
	return out, nil
}

// loopbackAddr reports whether a listen address binds loopback only: an IP
// that is loopback, or a name whose every address is. An empty host (every
// interface) or a name that does not resolve is not.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ips, err := net.DefaultResolver.LookupIPAddr(context.Background(), host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return false
		}
	}
	return true
}

// scheme is the scheme of this node's peer URL.
func (s *peerSecurity) scheme() string {
	if s.tls != nil {
		return "https"
	}
	return "http"
}

// peerListener wraps the peer routes' own listener in mutual TLS, if any.
func (s *peerSecurity) peerListener(ln net.Listener) net.Listener {
	if s.tls == nil {
		return ln
	}
	return tls.NewListener(ln, s.tls.ServerConfig())
}

// peerHandler guards the peer routes' handler: with mutual TLS, a request
// without a verified client certificate gets 401.
func (s *peerSecurity) peerHandler(h http.Handler) http.Handler {
	if s.tls == nil {
		return h
	}
	return transport.RequireClientCert(h)
}

// watch starts reloading the secret file and the TLS files, on SIGHUP and
// every reloadInterval, into setSecrets and the PeerTLS, until close. It
// does nothing when there is no file to watch.
func (s *peerSecurity) watch(setSecrets func(...[]byte) error) {
	if s.cfg.SecretFile == "" && s.tls == nil {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	s.startWatch(ctx, cancel, setSecrets, hup, func() { signal.Stop(hup) })
}

// startWatch is watch with the signal channel given, for tests.
func (s *peerSecurity) startWatch(ctx context.Context, cancel context.CancelFunc, setSecrets func(...[]byte) error, hup <-chan os.Signal, cleanup func()) {
	s.setSecrets, s.stop, s.done = setSecrets, cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		defer cleanup()
		t := time.NewTicker(reloadInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				s.log.Info("SIGHUP: reloading the cluster secrets and peer certificates")
				s.reload(true)
			case <-t.C:
				s.reload(false)
			}
		}
	}()
}

// close stops the watcher and waits for it. It is idempotent.
func (s *peerSecurity) close() {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			s.stop()
			<-s.done
		}
	})
}

// reload reads the files again and applies what changed (everything, if
// forced). A file that cannot be read or used is logged and leaves the node
// on what it had: a half-written file must not cut the node off its peers.
func (s *peerSecurity) reload(force bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if f := s.cfg.SecretFile; f != "" {
		data, err := os.ReadFile(f)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("secret-file: %v", err))
		case force || !bytes.Equal(data, s.lastSec) && !bytes.Equal(data, s.badSec):
			secrets, err := parseSecrets(data)
			if err == nil {
				err = s.setSecrets(secrets...)
			}
			if err != nil {
				s.badSec = data
				errs = append(errs, fmt.Errorf("secret-file %s: %v", f, err))
				break
			}
			s.lastSec = data
			s.log.Info("cluster secrets loaded", "file", f, "secrets", len(secrets), "signing", fingerprint(secrets[0]))
		}
	}
	if s.tls != nil {
		files, err := readTLSFiles(s.cfg)
		switch {
		case err != nil:
			errs = append(errs, err)
		case force || !sameFiles(files, s.lastTLS) && !sameFiles(files, s.badTLS):
			if err := s.tls.Update(files[0], files[1], files[2]); err != nil {
				// A certificate and its key are two files: between the two
				// writes the pair does not match. The next change retries.
				s.badTLS = files
				errs = append(errs, err)
				break
			}
			s.lastTLS = files
			s.log.Info("peer certificates loaded", "ca", s.cfg.PeerCA, "cert", s.cfg.PeerCert)
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		s.log.Error("reloading peer security: keeping the previous secrets and certificates", "err", err)
	}
	if s.reloaded != nil {
		s.reloaded(err)
	}
}

func sameFiles(a, b [3][]byte) bool {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// describeSecurity summarizes the protection for the start log line.
func (c *Config) describeSecurity() string {
	var parts []string
	switch {
	case c.Secret != "":
		parts = append(parts, "signed")
	case c.SecretFile != "":
		parts = append(parts, "signed (secret file)")
	}
	if c.PeerCA != "" {
		parts = append(parts, "mutual TLS")
	}
	if len(parts) == 0 {
		return "open"
	}
	return strings.Join(parts, ", ")
}
