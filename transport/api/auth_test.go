package api

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ringcache/ringcache/cache"
)

const (
	writeToken = "write-token-0123456789abcdef"
	readToken  = "read-token-0123456789abcdef"
	otherToken = "other-token-0123456789abcdef"
)

func TestAuthConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   AuthConfig
		field string // that the ConfigError names; "": valid
	}{
		{"zero: writes refused", AuthConfig{}, ""},
		{"open writes", AuthConfig{OpenWrites: true}, ""},
		{"write token", AuthConfig{WriteTokens: []string{writeToken}}, ""},
		{"two write tokens", AuthConfig{WriteTokens: []string{writeToken, otherToken}}, ""},
		{"read token, writes refused", AuthConfig{ReadTokens: []string{readToken}}, ""},
		{"open writes and a token", AuthConfig{OpenWrites: true, WriteTokens: []string{writeToken}}, "OpenWrites"},
		{"short token", AuthConfig{WriteTokens: []string{"short"}}, "WriteTokens"},
		{"empty token", AuthConfig{WriteTokens: []string{""}}, "WriteTokens"},
		{"token with a space", AuthConfig{WriteTokens: []string{"0123456789 abcdefgh"}}, "WriteTokens"},
		{"token with a newline", AuthConfig{ReadTokens: []string{"0123456789abcdefgh\n"}}, "ReadTokens"},
		{"non-ASCII token", AuthConfig{ReadTokens: []string{"0123456789abcdefgé"}}, "ReadTokens"},
		{"huge token", AuthConfig{WriteTokens: []string{strings.Repeat("x", MaxTokenBytes+1)}}, "WriteTokens"},
		{"the second token bad", AuthConfig{WriteTokens: []string{writeToken, "short"}}, "WriteTokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewAuth(tc.cfg)
			if verr := tc.cfg.Validate(); (verr == nil) != (err == nil) {
				t.Fatalf("NewAuth = %v but Validate = %v", err, verr)
			}
			if tc.field == "" && err != nil {
				t.Fatalf("NewAuth: %v", err)
			}
			if ce, ok := errors.AsType[*cache.ConfigError](err); tc.field != "" && (!ok || ce.Field != tc.field || !errors.Is(err, ErrConfig)) {
				t.Fatalf("NewAuth = %v, want a ConfigError for %s", err, tc.field)
			}
		})
	}
}

// TestAuthCheck runs every method against every policy, at the level of
// Check and of the status a client sees.
func TestAuthCheck(t *testing.T) {
	t.Parallel()
	tokens := AuthConfig{WriteTokens: []string{writeToken}}
	reads := AuthConfig{WriteTokens: []string{writeToken}, ReadTokens: []string{readToken}}
	for _, tc := range []struct {
		name   string
		cfg    AuthConfig
		method string
		auth   string // the Authorization header, if any
		want   error
	}{
		{"closed: GET open", AuthConfig{}, http.MethodGet, "", nil},
		{"closed: PUT refused", AuthConfig{}, http.MethodPut, "", ErrWritesDisabled},
		{"closed: DELETE refused even with a token", AuthConfig{}, http.MethodDelete, "Bearer " + writeToken, ErrWritesDisabled},
		{"open: PUT", AuthConfig{OpenWrites: true}, http.MethodPut, "", nil},
		{"open: DELETE", AuthConfig{OpenWrites: true}, http.MethodDelete, "", nil},
		{"token: GET open", tokens, http.MethodGet, "", nil},
		{"token: HEAD open", tokens, http.MethodHead, "", nil},
		{"token: PUT without", tokens, http.MethodPut, "", ErrNoToken},
		{"token: PUT right", tokens, http.MethodPut, "Bearer " + writeToken, nil},
		{"token: scheme case-insensitive", tokens, http.MethodPut, "bearer " + writeToken, nil},
		{"token: PUT wrong", tokens, http.MethodPut, "Bearer " + otherToken, ErrBadToken},
		{"token: PUT prefix of the token", tokens, http.MethodPut, "Bearer " + writeToken[:20], ErrBadToken},
		{"token: PUT token plus a byte", tokens, http.MethodPut, "Bearer " + writeToken + "x", ErrBadToken},
		{"token: Basic scheme", tokens, http.MethodPut, "Basic " + writeToken, ErrNoToken},
		{"token: bare token", tokens, http.MethodPut, writeToken, ErrNoToken},
		{"token: empty bearer", tokens, http.MethodPut, "Bearer ", ErrNoToken},
		{"token: DELETE right", tokens, http.MethodDelete, "Bearer " + writeToken, nil},
		{"token: other methods left to the handler", tokens, http.MethodPatch, "", nil},
		{"token: POST (a batch read) open", tokens, http.MethodPost, "", nil},
		{"reads: GET without", reads, http.MethodGet, "", ErrNoToken},
		{"reads: GET read token", reads, http.MethodGet, "Bearer " + readToken, nil},
		{"reads: GET write token", reads, http.MethodGet, "Bearer " + writeToken, nil},
		{"reads: HEAD wrong", reads, http.MethodHead, "Bearer " + otherToken, ErrBadToken},
		{"reads: POST (a batch read) without", reads, http.MethodPost, "", ErrNoToken},
		{"reads: PUT with the read token", reads, http.MethodPut, "Bearer " + readToken, ErrBadToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, err := NewAuth(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(tc.method, "/cache/g/k", nil)
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			if err := a.Check(r); !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Fatalf("Check = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestAuthUpdate rotates a token: during the rollover both are accepted,
// after it only the new one, and an invalid update changes nothing.
func TestAuthUpdate(t *testing.T) {
	t.Parallel()
	a, err := NewAuth(AuthConfig{WriteTokens: []string{writeToken}})
	if err != nil {
		t.Fatal(err)
	}
	put := func(tok string) error {
		r := httptest.NewRequest(http.MethodPut, "/cache/g/k", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		return a.Check(r)
	}
	if err := a.Update(AuthConfig{WriteTokens: []string{writeToken, otherToken}}); err != nil {
		t.Fatal(err)
	}
	if put(writeToken) != nil || put(otherToken) != nil {
		t.Fatal("during the rollover, old and new token must both be accepted")
	}
	if err := a.Update(AuthConfig{WriteTokens: []string{otherToken}}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(put(writeToken), ErrBadToken) || put(otherToken) != nil {
		t.Fatal("after the rollover only the new token may be accepted")
	}
	if err := a.Update(AuthConfig{WriteTokens: []string{"short"}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("Update with a short token = %v, want ErrConfig", err)
	}
	if put(otherToken) != nil {
		t.Fatal("a refused Update changed the tokens")
	}
}

// FuzzBearer checks the Authorization parser and Check on any header: no
// panic, a token is never empty or padded, and only the configured token
// authorizes a write.
func FuzzBearer(f *testing.F) {
	for _, s := range []string{"Bearer " + writeToken, "bearer  x ", "Basic abc", "Bearer", "", " Bearer x", "Bearer \t" + writeToken} {
		f.Add(s)
	}
	a, err := NewAuth(AuthConfig{WriteTokens: []string{writeToken}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok, ok := bearer(header)
		if ok && (tok == "" || strings.TrimSpace(tok) != tok) {
			t.Fatalf("bearer(%q) = %q", header, tok)
		}
		r := httptest.NewRequest(http.MethodPut, "/cache/g/k", nil)
		r.Header["Authorization"] = []string{header}
		if err := a.Check(r); (err == nil) != (ok && tok == writeToken) {
			t.Fatalf("Check with %q = %v", header, err)
		}
	})
}
