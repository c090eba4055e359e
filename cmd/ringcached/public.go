package main

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/internal/listen"
	"github.com/ringcache/ringcache/transport"
	"github.com/ringcache/ringcache/transport/api"
	"github.com/ringcache/ringcache/transport/fast"
)

// validatePublic checks the daemon's own rules for the public API's access,
// TLS and limits: which settings go together, and the server timeouts it
// insists on (a zero in http.Server would mean none). The transport's rules
// for tokens and limits are checked by validateComponents; token files are
// read when the node starts, not here.
func (c *Config) validatePublic() error {
	p := &c.Public
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", errConfig, field, fmt.Sprintf(format, args...))
	}
	if p.AdminListen != "" {
		if err := checkAddr(p.AdminListen); err != nil {
			return bad("admin-listen", "%v", err)
		}
		if (p.AdminListen == c.Listen || p.AdminListen == c.PeerListen) && !strings.HasSuffix(p.AdminListen, ":0") {
			return bad("admin-listen", "same address as listen or peer-listen")
		}
	}
	if (p.TLSCert == "") != (p.TLSKey == "") {
		return bad("tls-cert", "give both -tls-cert and -tls-key, or neither")
	}
	// Peers speak plain HTTP to each other's peer routes: on a TLS public
	// listener they could not reach them.
	if p.TLSCert != "" && c.PeerListen == "" {
		return bad("tls-cert", "needs -peer-listen: peers do not speak TLS to the public listener")
	}
	if p.WriteToken != "" && p.WriteTokenFile != "" {
		return bad("write-token", "give -write-token or -write-token-file, not both")
	}
	if p.ReadToken != "" && p.ReadTokenFile != "" {
		return bad("read-token", "give -read-token or -read-token-file, not both")
	}
	switch p.HTTPServer {
	case serverAuto, serverNetHTTP:
	case serverFast:
		// Peer requests need what net/http gives and fasthttpadaptor
		// does not: informational responses (102 Processing) while the
		// owner loads.
		if c.PeerListen == "" {
			return bad("http-server", "fasthttp needs -peer-listen: the peer routes stay on net/http")
		}
		if p.TLSCert != "" {
			return bad("http-server", "fasthttp serves plain HTTP/1.1: with -tls-cert use net/http")
		}
	default:
		return bad("http-server", "%q: want %s, %s or %s", p.HTTPServer, serverAuto, serverFast, serverNetHTTP)
	}
	switch {
	case p.IdleTimeout <= 0:
		return bad("idle-timeout", "%v: must be > 0", p.IdleTimeout)
	case p.ReadHeaderTimeout <= 0:
		return bad("read-header-timeout", "%v: must be > 0", p.ReadHeaderTimeout)
	}
	return nil
}

// authConfig returns who may use the public API, reading the token files.
func (c *PublicConfig) authConfig() (api.AuthConfig, error) {
	ac := api.AuthConfig{OpenWrites: c.OpenWrites}
	var err error
	if ac.WriteTokens, err = tokens(c.WriteToken, c.WriteTokenFile); err != nil {
		return ac, fmt.Errorf("%w: write-token-file: %v", errConfig, err)
	}
	if ac.ReadTokens, err = tokens(c.ReadToken, c.ReadTokenFile); err != nil {
		return ac, fmt.Errorf("%w: read-token-file: %v", errConfig, err)
	}
	return ac, nil
}

// tokens returns the inline token, or the tokens of file: one a line,
// blank lines and lines starting with # skipped, so that a rotation writes
// the new token under the old one and later removes the old.
func tokens(inline, file string) ([]string, error) {
	if inline != "" {
		return []string{inline}, nil
	}
	if file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no token in the file", file)
	}
	return out, nil
}

// warnReadable warns when a secret's file can be read by every user of the
// host.
func warnReadable(log *slog.Logger, field, file string) {
	if file == "" {
		return
	}
	if st, err := os.Stat(file); err == nil && st.Mode().Perm()&fs.FileMode(0o004) != 0 {
		log.Warn("a secret's file is readable by every user of this host: chmod o-r it", "setting", field, "file", file)
	}
}

// limitConfig returns the connection caps of every listener, one that
// answers a refused connection with a 503 if plainHTTP.
func (c *PublicConfig) limitConfig(plainHTTP bool) listen.LimitConfig {
	return listen.LimitConfig{Max: c.MaxConns, MaxPerClient: c.MaxConnsPerClient, PlainHTTP: plainHTTP}
}

// clientLimits returns the per-client bounds, nil when both are off.
func (c *PublicConfig) clientLimits() *api.ClientLimitConfig {
	l := api.ClientLimitConfig{MaxMisses: max(0, c.ClientMisses), MissRate: max(0, c.ClientMissRate)}
	if l.MissRate > 0 {
		l.MissBurst = c.ClientMissBurst
	}
	if l.MaxMisses == 0 && l.MissRate == 0 {
		return nil
	}
	return &l
}

// parseLimit parses a positive count, or "off", stored as off.
func parseLimit(n *int, v string, off int) error {
	if v == "off" {
		*n = off
		return nil
	}
	if err := parseInt(n, v); err != nil || *n <= 0 {
		return fmt.Errorf("%q: want a count > 0, or off", v)
	}
	return nil
}

// parseRate parses a positive rate per second, or "off" (stored as -1).
func parseRate(r *float64, v string) error {
	if v == "off" {
		*r = 0
		return nil
	}
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || !(x > 0) || x > 1e9 {
		return fmt.Errorf("%q: want a rate per second > 0, or off", v)
	}
	*r = x
	return nil
}

// The public listener's HTTP servers (-http-server).
const (
	serverAuto    = "auto"
	serverNetHTTP = "net/http"
	serverFast    = "fasthttp"
)

// publicServer returns the public listener's server: -http-server, where
// auto is fasthttp when the peers have a listener of their own and the
// public one speaks plain HTTP (what fasthttp needs), else net/http.
func (c *Config) publicServer() string {
	if c.Public.HTTPServer != serverAuto {
		return c.Public.HTTPServer
	}
	if c.PeerListen != "" && c.Public.TLSCert == "" {
		return serverFast
	}
	return serverNetHTTP
}

// setupPublic builds the public API's access rules, TLS certificate and
// client limits from the configuration, and says at start what they are.
func (n *node) setupPublic() error {
	cfg := &n.cfg.Public
	ac, err := cfg.authConfig()
	if err != nil {
		return err
	}
	if n.auth, err = api.NewAuth(ac); err != nil {
		return libError(err)
	}
	warnReadable(n.log, "write-token-file", cfg.WriteTokenFile)
	warnReadable(n.log, "read-token-file", cfg.ReadTokenFile)
	warnReadable(n.log, "tls-key", cfg.TLSKey)
	switch {
	case ac.OpenWrites:
		n.log.Warn("public writes are open: anyone who reaches the public API can PUT and DELETE", "listen", n.cfg.Listen)
	case len(ac.WriteTokens) == 0:
		n.log.Info("public writes are disabled (403): give -write-token or -write-token-file to enable them")
	}
	if cfg.TLSCert != "" {
		if n.cert, err = listen.LoadCertificate(cfg.TLSCert, cfg.TLSKey); err != nil {
			return fmt.Errorf("%w: %v", errConfig, err)
		}
	}
	if l := cfg.clientLimits(); l != nil {
		if n.clients, err = api.NewClientLimiter(*l); err != nil {
			return libError(err)
		}
	}
	return nil
}

// served is one listener and what it serves.
type served struct {
	name      string // public, peer or admin, for the metrics
	ln        net.Listener
	h         http.Handler
	plainHTTP bool // refused connections get a plain HTTP 503
	publicTLS bool // served with the public certificate
}

// capListeners caps each listener at the connection limits.
func (n *node) capListeners(ls []served) error {
	for i := range ls {
		ln, err := listen.NewLimitListener(ls[i].ln, n.cfg.Public.limitConfig(ls[i].plainHTTP))
		if err != nil {
			return libError(err)
		}
		n.limited = append(n.limited, capped{ls[i].name, ln})
		ls[i].ln = ln
	}
	return nil
}

// startServers serves each listener with its handler and the public
// timeouts, with the public certificate where publicTLS says so.
func (n *node) startServers(ls []served) error {
	srvs := make([]transport.Server, len(ls))
	serves := make([]func(net.Listener) error, len(ls))
	for i, l := range ls {
		var err error
		if srvs[i], serves[i], err = n.newServer(l); err != nil {
			return err
		}
	}
	for i, l := range ls {
		if err := n.tn.AddServer(srvs[i]); err != nil {
			l.ln.Close() // the node is stopping already
			continue
		}
		n.served.Add(1)
		go func() {
			defer n.served.Done()
			if err := serves[i](l.ln); !errors.Is(err, http.ErrServerClosed) {
				n.errc <- fmt.Errorf("ringcached: serving %s: %w", l.ln.Addr(), err)
			}
		}()
	}
	return nil
}

// newServer returns the server of l and the function that serves l's
// listener with it: net/http's, or fasthttp's for the public listener when
// -http-server says so (publicServer); the peer and admin listeners stay on
// net/http.
func (n *node) newServer(l served) (transport.Server, func(net.Listener) error, error) {
	p := &n.cfg.Public
	if l.name == "public" && n.cfg.publicServer() == serverFast {
		var maxBody int64
		for _, g := range n.cfg.Groups {
			maxBody = max(maxBody, cmp.Or(g.MaxValueBytes, cache.DefaultMaxValueBytes))
		}
		srv, err := fast.New(n.tn, fast.Config{
			Handler:           l.h,
			ReadHeaderTimeout: p.ReadHeaderTimeout,
			IdleTimeout:       p.IdleTimeout,
			MaxBodyBytes:      int(min(maxBody, math.MaxInt32)),
			Logger:            n.log,
		})
		if err != nil {
			return nil, nil, libError(err)
		}
		return srv, srv.Serve, nil
	}
	srv := listen.NewServer(l.ln.Addr().String(), l.h)
	srv.ErrorLog = slog.NewLogLogger(n.log.Handler(), slog.LevelWarn)
	srv.IdleTimeout = p.IdleTimeout
	srv.ReadHeaderTimeout = p.ReadHeaderTimeout
	if l.publicTLS {
		srv.TLSConfig = listen.ServerTLSConfig(n.cert)
		return srv, func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }, nil
	}
	return srv, srv.Serve, nil
}

// reload reads the token files and the TLS certificate again (on SIGHUP).
// What fails to load is reported and the old state kept: a half-written
// file must not lock every client out.
func (n *node) reload() error {
	var errs []error
	if p := &n.cfg.Public; p.WriteTokenFile != "" || p.ReadTokenFile != "" {
		ac, err := p.authConfig()
		if err == nil {
			err = n.auth.Update(ac)
		}
		if err != nil {
			errs = append(errs, err)
		} else {
			n.log.Info("tokens reloaded", "write_tokens", len(ac.WriteTokens), "read_tokens", len(ac.ReadTokens))
		}
	}
	if n.cert != nil {
		if err := n.cert.Reload(); err != nil {
			errs = append(errs, err)
		} else {
			n.log.Info("TLS certificate reloaded", "not_after", n.cert.Leaf().NotAfter)
		}
	}
	return errors.Join(errs...)
}

// reloadOnHangup reloads token files and certificate on each SIGHUP until
// the returned function is called.
func (n *node) reloadOnHangup() (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-hup:
				if err := n.reload(); err != nil {
					n.log.Error("reload on SIGHUP: kept the old tokens or certificate", "err", err)
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-exited
	}
}

// newToken returns a random bearer token: 32 bytes from crypto/rand, in hex.
func newToken() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b[:])
}
