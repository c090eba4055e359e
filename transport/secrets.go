package transport

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
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
