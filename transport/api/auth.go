package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
)

// Token length bounds. A token shorter than MinTokenBytes is refused by
// NewAuth: a bearer token is the only thing between the network and a
// write, so it must not be guessable. 32 random bytes, hex-encoded, is what
// the daemon generates.
const (
	MinTokenBytes = 16
	MaxTokenBytes = 4096
)

// AuthConfig says who may use the public API.
type AuthConfig struct {
	// WriteTokens are the bearer tokens that authorize PUT and DELETE (and
	// reads). Several may be valid at once, so that a token can be rotated
	// without a moment when neither the old nor the new one works.
	WriteTokens []string

	// OpenWrites lets PUT and DELETE through without a token. It cannot be
	// combined with WriteTokens. With neither, writes are refused (403).
	OpenWrites bool

	// ReadTokens, if not empty, make GET and HEAD need a bearer token too:
	// one of these or one of WriteTokens. If empty, reads are open.
	ReadTokens []string
}

// Auth checks the bearer token of public requests: "Authorization: Bearer
// <token>". Tokens are compared by their SHA-256 digests in constant time,
// against every configured token without stopping at a match, so neither a
// token's bytes nor its length nor which token matched shows in the
// response time. Only digests are kept.
//
// An Auth is safe for concurrent use; Update swaps its tokens atomically.
type Auth struct {
	state atomic.Pointer[authState]
}

type authState struct {
	write, read [][sha256.Size]byte
	openWrites  bool
}

// NewAuth validates cfg and returns an Auth enforcing it.
func NewAuth(cfg AuthConfig) (*Auth, error) {
	a := &Auth{}
	if err := a.Update(cfg); err != nil {
		return nil, err
	}
	return a, nil
}

// Update replaces the tokens and the write policy, for a token file that was
// rewritten. On an invalid cfg the Auth keeps its old state and returns an
// ErrConfig error.
func (a *Auth) Update(cfg AuthConfig) error {
	st, err := newAuthState(cfg)
	if err != nil {
		return err
	}
	a.state.Store(st)
	return nil
}

// Validate reports whether NewAuth would accept c: nil, or a *cache.ConfigError
// naming the field at fault.
func (c AuthConfig) Validate() error {
	if c.OpenWrites && len(c.WriteTokens) > 0 {
		return fieldError("OpenWrites", "true with write tokens: writes are open or need a token, not both")
	}
	for _, set := range []struct {
		field  string
		tokens []string
	}{{"WriteTokens", c.WriteTokens}, {"ReadTokens", c.ReadTokens}} {
		for i, t := range set.tokens {
			if err := checkToken(t); err != nil {
				if len(set.tokens) == 1 {
					return fieldError(set.field, "%v", err)
				}
				return fieldError(set.field, "token #%d: %v", i+1, err)
			}
		}
	}
	return nil
}

func newAuthState(cfg AuthConfig) (*authState, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st := &authState{openWrites: cfg.OpenWrites}
	for _, t := range cfg.WriteTokens {
		st.write = append(st.write, sha256.Sum256([]byte(t)))
	}
	for _, t := range cfg.ReadTokens {
		st.read = append(st.read, sha256.Sum256([]byte(t)))
	}
	return st, nil
}

// checkToken refuses tokens that are too short to resist guessing, too long
// for a header, or that hold bytes a header cannot carry unchanged.
func checkToken(t string) error {
	if len(t) < MinTokenBytes {
		return fmt.Errorf("%d bytes: want at least %d", len(t), MinTokenBytes)
	}
	if len(t) > MaxTokenBytes {
		return fmt.Errorf("%d bytes: want at most %d", len(t), MaxTokenBytes)
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("byte %d is a space, a control or a non-ASCII character", i)
		}
	}
	return nil
}

// WritesOpen reports whether writes need no token.
func (a *Auth) WritesOpen() bool { return a.state.Load().openWrites }

// readsOpen reports whether a GET or HEAD needs no token: with a nil Auth,
// or one without read tokens. It saves the fast path a header lookup.
func (a *Auth) readsOpen() bool { return a == nil || len(a.state.Load().read) == 0 }

// checkRead is Check for a GET or HEAD whose Authorization header is
// authorization; a nil Auth lets every read pass.
func (a *Auth) checkRead(authorization string) error {
	if a == nil {
		return nil
	}
	st := a.state.Load()
	if len(st.read) == 0 {
		return nil
	}
	return st.match(authorization, st.read, st.write)
}

// Check authorizes r by its method and bearer token. It returns nil, or
// ErrNoToken or ErrBadToken (401), or ErrWritesDisabled (403) for a write
// when no write token is configured and writes are not open. A POST is a
// read (a batch of keys). Methods other than GET, HEAD, POST, PUT and
// DELETE pass: the handler refuses them itself.
func (a *Auth) Check(r *http.Request) error {
	st := a.state.Load()
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost:
		return a.checkRead(r.Header.Get("Authorization"))
	case http.MethodPut, http.MethodDelete:
		switch {
		case st.openWrites:
			return nil
		case len(st.write) == 0:
			return ErrWritesDisabled
		}
		return st.match(r.Header.Get("Authorization"), st.write)
	}
	return nil
}

// Guard returns h behind the public API's check (Check), answering a
// refused request as the public API does (401 with its challenge, or 403).
func (a *Auth) Guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := a.Check(r); err != nil {
			challenge(w, err)
			writeError(w, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// match checks r's bearer token against every digest in sets.
func (st *authState) match(authorization string, sets ...[][sha256.Size]byte) error {
	tok, ok := bearer(authorization)
	if !ok {
		return ErrNoToken
	}
	got := sha256.Sum256([]byte(tok))
	found := 0
	for _, set := range sets {
		for i := range set {
			found |= subtle.ConstantTimeCompare(got[:], set[i][:])
		}
	}
	if found != 1 {
		return ErrBadToken
	}
	return nil
}

// bearer returns the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive, RFC 9110 section 11.1).
func bearer(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// challenge sets the WWW-Authenticate header a 401 must carry (RFC 9110
// section 11.6.1), with RFC 6750's error code for a token that was given
// but is wrong.
func challenge(w http.ResponseWriter, err error) {
	if StatusOf(err) != http.StatusUnauthorized {
		return
	}
	v := `Bearer realm="ringcache"`
	if errors.Is(err, ErrBadToken) {
		v += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", v)
}
