package transport

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ringcache/ringcache/transport/api"
)

const (
	writeToken = "write-token-0123456789abcdef"
	readToken  = "read-token-0123456789abcdef"
	otherToken = "other-token-0123456789abcdef"
)

// TestPublicWritesNeedToken runs a three-node cluster whose public API needs
// a write token: writes without it or with a wrong one get 401 with a
// Bearer challenge and change nothing any node serves; with it they are
// applied cluster-wide; reads stay open.
func TestPublicWritesNeedToken(t *testing.T) {
	t.Parallel()
	auth, err := api.NewAuth(api.AuthConfig{WriteTokens: []string{writeToken}})
	if err != nil {
		t.Fatal(err)
	}
	nodes, _ := newCluster(t, 3, clusterOpts{handler: func(_ int, c *api.HandlerConfig) { c.Auth = auth }})
	c := testClient(t)
	const key = "k"
	readAll := func(want string) {
		t.Helper()
		for _, n := range nodes {
			r := mustDo(t, c, http.MethodGet, publicURL(n.url, testGroup, key), nil)
			if r.status != http.StatusOK || r.body != want {
				t.Fatalf("GET at %s = %d %q, want 200 %q", n.url, r.status, r.body, want)
			}
		}
	}
	readAll(string(valueOf(key)))

	for _, tc := range []struct {
		name, method, auth, challenge string
	}{
		{"PUT without a token", http.MethodPut, "", `Bearer realm="ringcache"`},
		{"PUT with a wrong token", http.MethodPut, "Bearer " + otherToken, `Bearer realm="ringcache", error="invalid_token"`},
		{"PUT with Basic", http.MethodPut, "Basic " + writeToken, `Bearer realm="ringcache"`},
		{"DELETE without a token", http.MethodDelete, "", `Bearer realm="ringcache"`},
		{"DELETE with a wrong token", http.MethodDelete, "Bearer " + otherToken, `Bearer realm="ringcache", error="invalid_token"`},
	} {
		for _, n := range nodes {
			var hdr []string
			if tc.auth != "" {
				hdr = []string{"Authorization", tc.auth}
			}
			r := mustDo(t, c, tc.method, publicURL(n.url, testGroup, key), strings.NewReader("forged"), hdr...)
			if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") != tc.challenge {
				t.Errorf("%s at %s: %d, WWW-Authenticate %q; want 401, %q", tc.name, n.url, r.status, r.header.Get("WWW-Authenticate"), tc.challenge)
			}
		}
	}
	readAll(string(valueOf(key))) // nothing changed anywhere

	r := mustDo(t, c, http.MethodPut, publicURL(nodes[0].url, testGroup, key), strings.NewReader("new"), "Authorization", "Bearer "+writeToken)
	if r.status != http.StatusNoContent {
		t.Fatalf("PUT with the token = %d %q, want 204", r.status, r.body)
	}
	readAll("new")
	r = mustDo(t, c, http.MethodDelete, publicURL(nodes[1].url, testGroup, key), nil, "Authorization", "Bearer "+writeToken)
	if r.status != http.StatusNoContent {
		t.Fatalf("DELETE with the token = %d %q, want 204", r.status, r.body)
	}
	readAll(string(valueOf(key))) // from the origin again
}

// TestPublicWritesDisabled: with no token and writes not opened, PUT and
// DELETE are 403 (no challenge: no token would help) and reads work.
func TestPublicWritesDisabled(t *testing.T) {
	t.Parallel()
	auth, err := api.NewAuth(api.AuthConfig{})
	if err != nil {
		t.Fatal(err)
	}
	nodes, _ := newCluster(t, 2, clusterOpts{handler: func(_ int, c *api.HandlerConfig) { c.Auth = auth }})
	c := testClient(t)
	for _, method := range []string{http.MethodPut, http.MethodDelete} {
		r := mustDo(t, c, method, publicURL(nodes[0].url, testGroup, "k"), strings.NewReader("x"), "Authorization", "Bearer "+writeToken)
		if r.status != http.StatusForbidden || r.header.Get("WWW-Authenticate") != "" || !strings.Contains(r.body, "disabled") {
			t.Errorf("%s = %d %q (WWW-Authenticate %q), want 403 without a challenge", method, r.status, r.body, r.header.Get("WWW-Authenticate"))
		}
	}
	if err := get(t, c, nodes[1], "k"); err != nil {
		t.Fatal(err)
	}
}

// TestPublicReadToken: with a read token, reads need it (or a write token).
func TestPublicReadToken(t *testing.T) {
	t.Parallel()
	auth, err := api.NewAuth(api.AuthConfig{WriteTokens: []string{writeToken}, ReadTokens: []string{readToken}})
	if err != nil {
		t.Fatal(err)
	}
	nodes, loads := newCluster(t, 2, clusterOpts{handler: func(_ int, c *api.HandlerConfig) { c.Auth = auth }})
	c := testClient(t)
	u := publicURL(nodes[0].url, testGroup, "k")
	if r := mustDo(t, c, http.MethodGet, u, nil); r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
		t.Fatalf("GET without a token = %d, want 401 with a challenge", r.status)
	}
	// Refused before the group is looked up: an unknown group is 401 too.
	if r := mustDo(t, c, http.MethodGet, publicURL(nodes[0].url, "nosuch", "k"), nil); r.status != http.StatusUnauthorized {
		t.Fatalf("GET of an unknown group without a token = %d, want 401", r.status)
	}
	if n := loads.count(); n != 0 {
		t.Fatalf("refused reads caused %d origin loads", n)
	}
	for _, tok := range []string{readToken, writeToken} {
		if r := mustDo(t, c, http.MethodGet, u, nil, "Authorization", "Bearer "+tok); r.status != http.StatusOK {
			t.Fatalf("GET with %q = %d, want 200", tok, r.status)
		}
	}
}
