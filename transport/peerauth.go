package transport

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// MaxSecrets bounds Config.Secrets: a rotation needs two, and each extra one
// costs an HMAC on every refused request.
const MaxSecrets = 8

// peerAuth signs this node's peer requests and checks the ones it receives.
// The secrets are swapped whole (Pool.SetSecrets); a request reads them once.
// A peerAuth is safe for concurrent use.
type peerAuth struct {
	self    string // this node's base URL: the audience of requests it receives
	window  time.Duration
	secrets atomic.Pointer[[][]byte] // the first signs; any verifies; nil or empty: unsigned
	nonces  *nonceCache

	// Refusals are logged at Warn at most once per refusedLogEvery, with
	// the number refused since, so that a flood of forged requests cannot
	// flood the log; every one is logged at Debug.
	lastWarn atomic.Int64 // Unix ns
	refusedN atomic.Int64
}

// refusedLogEvery spaces the Warn lines about refused peer requests.
const refusedLogEvery = 10 * time.Second

func newPeerAuth(cfg Config) *peerAuth {
	a := &peerAuth{
		self:   cfg.Self,
		window: cfg.SignatureWindow,
		nonces: newNonceCache(cfg.MaxNonces, cfg.SignatureWindow.Milliseconds()),
	}
	secrets := cfg.Secrets
	a.secrets.Store(&secrets)
	return a
}

// signed reports whether peer requests are signed.
func (a *peerAuth) signed() bool { return len(*a.secrets.Load()) > 0 }

// checkSecrets validates a list of secrets for Config.Secrets or SetSecrets
// and returns a copy, so that a caller reusing its slices cannot change them.
// MinSecretBytes is the shortest cluster secret a Pool accepts: 128 bits,
// if it is random. A shorter one could be guessed from a signed request.
const MinSecretBytes = 16

func checkSecrets(secrets [][]byte) ([][]byte, error) {
	if len(secrets) > MaxSecrets {
		return nil, fieldError("Secrets", "%d secrets: want at most %d", len(secrets), MaxSecrets)
	}
	out := make([][]byte, len(secrets))
	for i, s := range secrets {
		if len(s) < MinSecretBytes {
			return nil, fieldError("Secrets", "secret #%d has %d bytes; at least %d (openssl rand -hex 32 gives 64)", i+1, len(s), MinSecretBytes)
		}
		out[i] = append([]byte(nil), s...)
	}
	return out, nil
}

// SetSecrets replaces the cluster secrets at once, for a rotation without a
// restart: the first signs this node's requests, and a request signed with
// any of them is accepted. Requests in flight finish under the secrets they
// started with. A rotation, done on every node in turn and each step
// finished everywhere before the next starts:
//
//  1. SetSecrets(old, new): new is accepted everywhere, old still signs;
//  2. SetSecrets(new, old): new signs, old is still accepted;
//  3. SetSecrets(new): old is refused.
//
// A Pool built without secrets cannot gain them, nor one built with secrets
// lose them all (ErrConfig): turning signing on or off is a change of the
// whole cluster's protocol, which a restart makes, and an emptied secret
// file must not open a signed cluster.
func (p *Pool) SetSecrets(secrets ...[]byte) error {
	s, err := checkSecrets(secrets)
	if err != nil {
		return err
	}
	if (len(s) > 0) != p.auth.signed() {
		return fmt.Errorf("%w: SetSecrets cannot turn signing on or off; restart for that", ErrConfig)
	}
	p.auth.secrets.Store(&s)
	return nil
}

// sign adds the date, nonce, body hash and signature headers to a request
// for the peer at audience, whose body is body, at now. Without secrets it
// does nothing.
func (a *peerAuth) sign(req *http.Request, audience string, body []byte, now time.Time) {
	secrets := *a.secrets.Load()
	if len(secrets) == 0 {
		return
	}
	var nb [nonceLen]byte
	rand.Read(nb[:]) // never fails (crypto/rand, Go 1.24+)
	s := signedRequest{
		Method:   req.Method,
		Audience: audience,
		Path:     req.URL.EscapedPath(),
		Date:     now.UnixMilli(),
		Nonce:    hex.EncodeToString(nb[:]),
		Header:   req.Header,
	}
	if hasBody(req.Method) {
		s.BodyHash = bodyHash(body)
		req.Header.Set(hdrBodyHash, s.BodyHash)
	}
	req.Header.Set(hdrDate, strconv.FormatInt(s.Date, 10))
	req.Header.Set(hdrNonce, s.Nonce)
	req.Header.Set(hdrSignature, signature(secrets[0], s))
}

// verify checks a received peer request's signature, date and nonce, at
// now. The signature goes first: only a request signed with a cluster
// secret can take a place in the nonce memory. A PUT's or POST's body is
// checked later, once read (checkBody). Without secrets every request passes.
func (a *peerAuth) verify(r *http.Request, now time.Time) error {
	secrets := *a.secrets.Load()
	if len(secrets) == 0 {
		return nil
	}
	if r.Header.Get(hdrSignature) == "" {
		return fmt.Errorf("%w: no signature", ErrUnauthorized)
	}
	date, err := strconv.ParseInt(r.Header.Get(hdrDate), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: no or bad date", ErrUnauthorized)
	}
	n, err := parseNonce(r.Header.Get(hdrNonce))
	if err != nil {
		return err
	}
	s := signedRequest{
		Method:   r.Method,
		Audience: a.self,
		Path:     r.URL.EscapedPath(),
		Date:     date,
		Nonce:    r.Header.Get(hdrNonce),
		BodyHash: r.Header.Get(hdrBodyHash),
		Header:   r.Header,
	}
	if err := verifySignature(secrets, s, r.Header.Get(hdrSignature), now, a.window); err != nil {
		return err
	}
	return a.nonces.check(n, date, now.UnixMilli())
}

// hasBody reports whether requests of method carry a body that the
// signature covers: a PUT's value, a POST's batch of handed-over values.
func hasBody(method string) bool { return method == http.MethodPut || method == http.MethodPost }

// checkBody checks that a PUT's or POST's body is the one its signature
// covers. Without secrets it passes.
func (a *peerAuth) checkBody(r *http.Request, body []byte) error {
	if !a.signed() {
		return nil
	}
	if subtle.ConstantTimeCompare([]byte(bodyHash(body)), []byte(r.Header.Get(hdrBodyHash))) != 1 {
		return fmt.Errorf("%w: body does not match its signed hash", ErrUnauthorized)
	}
	return nil
}

// refused logs a refused peer request: at Debug always, at Warn (an
// operator should look: a misconfigured node, or someone forging or
// replaying requests) at most once per refusedLogEvery.
func (a *peerAuth) refused(log *slog.Logger, r *http.Request, err error, now time.Time) {
	n := a.refusedN.Add(1)
	last := a.lastWarn.Load()
	if now.UnixNano()-last >= int64(refusedLogEvery) && a.lastWarn.CompareAndSwap(last, now.UnixNano()) {
		a.refusedN.Add(-n)
		log.Warn("transport: refused peer requests", "count", n, "peer", r.Header.Get(hdrPeer), "remote", r.RemoteAddr, "err", err)
		return
	}
	log.Debug("transport: refused peer request", "peer", r.Header.Get(hdrPeer), "remote", r.RemoteAddr, "err", err)
}

func bodyHash(body []byte) string {
	h := sha256.Sum256(body)
	return hex.EncodeToString(h[:])
}

// nonceLen is the length of a request nonce in bytes: 128 random bits, so
// that two honest requests never share one.
const nonceLen = 16

type nonce [nonceLen]byte

// parseNonce reads a nonce header: exactly 2*nonceLen hex digits.
func parseNonce(s string) (nonce, error) {
	var n nonce
	if len(s) != 2*nonceLen {
		return n, fmt.Errorf("%w: bad nonce", ErrUnauthorized)
	}
	if _, err := hex.Decode(n[:], []byte(s)); err != nil {
		return n, fmt.Errorf("%w: bad nonce", ErrUnauthorized)
	}
	return n, nil
}

// nonceEntry is a remembered nonce and the date (Unix ms) of its request.
type nonceEntry struct {
	n    nonce
	date int64
}

// nonceCache remembers the nonces of accepted peer requests so that none is
// accepted twice, in at most max entries.
//
// The rule it keeps: every nonce accepted with a date after floor is in
// seen. A nonce leaves seen only from the front of the arrival queue, and
// its leaving raises floor to its date; a request dated at or before floor
// is refused. So a forgotten nonce can never come back:
//   - expiry: an entry goes once its date is more than window old, when its
//     request is outside the signature window anyway; floor then lies a
//     window behind now and refuses nothing the window would accept, even if
//     the clock later steps back;
//   - the bound: when max entries are remembered, the oldest arrival goes
//     early. floor then moves closer to now, which narrows the window on its
//     old side: a request from a peer whose clock lags by more than
//     now-floor is refused (401) until the rate drops. Replays stay refused
//     either way; what the bound costs is tolerance of clock skew, never
//     safety.
//
// A nonceCache is safe for concurrent use.
type nonceCache struct {
	mu     sync.Mutex
	max    int
	window int64 // ms
	seen   map[nonce]struct{}
	// queue holds the entries in arrival order: a ring buffer of q entries
	// from head, grown by doubling up to max.
	queue []nonceEntry
	head  int
	q     int
	floor int64
}

func newNonceCache(max int, windowMillis int64) *nonceCache {
	return &nonceCache{max: max, window: windowMillis, seen: make(map[nonce]struct{}), floor: -1 << 63}
}

// check records n, of a request dated date, at now (both Unix ms), and
// returns an ErrUnauthorized if a request with n was accepted before or may
// have been (its date is at or before the floor).
func (c *nonceCache) check(n nonce, date, now int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.q > 0 && c.queue[c.head].date+c.window < now {
		c.pop()
	}
	if date <= c.floor {
		return fmt.Errorf("%w: dated before the replay floor (the nonce memory is full or the date is stale)", ErrUnauthorized)
	}
	if _, ok := c.seen[n]; ok {
		return fmt.Errorf("%w: replayed request (nonce seen before)", ErrUnauthorized)
	}
	if c.q == c.max {
		c.pop()
	}
	if c.q == len(c.queue) {
		c.grow()
	}
	c.queue[(c.head+c.q)%len(c.queue)] = nonceEntry{n, date}
	c.q++
	c.seen[n] = struct{}{}
	return nil
}

// pop forgets the oldest arrival and raises the floor to its date.
func (c *nonceCache) pop() {
	e := c.queue[c.head]
	delete(c.seen, e.n)
	c.floor = max(c.floor, e.date)
	c.head = (c.head + 1) % len(c.queue)
	c.q--
}

// grow doubles the queue, up to max, keeping the arrival order.
func (c *nonceCache) grow() {
	size := min(max(2*len(c.queue), 64), c.max)
	q := make([]nonceEntry, size)
	for i := range c.q {
		q[i] = c.queue[(c.head+i)%len(c.queue)]
	}
	c.queue, c.head = q, 0
}

// len returns the number of remembered nonces.
func (c *nonceCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.q
}

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
			writePeerError(w, fmt.Errorf("%w: no verified client certificate", ErrUnauthorized))
			return
		}
		h.ServeHTTP(w, r)
	})
}
