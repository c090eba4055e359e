//go:build e2e

package e2e

import (
	"net/http"
	"time"
)

// clientIdleTimeout is how long the suite's clients keep an idle
// connection: below the nodes' 30 s idle timeout, so that the client, not
// the node, closes it, and no write is sent on a connection the node is
// closing (a PUT is not retried on a fresh one).
const clientIdleTimeout = 20 * time.Second

// writeToken is an http.RoundTripper that sends a bearer token with every
// PUT and DELETE, as the nodes' public writes need.
type writeToken struct {
	next  http.RoundTripper
	token string
}

// withWriteToken returns next, sending token with writes; next itself when
// token is empty.
func withWriteToken(next http.RoundTripper, token string) http.RoundTripper {
	if token == "" {
		return next
	}
	return &writeToken{next: next, token: token}
}

// RoundTrip adds the token to a write, on a copy of the request.
func (w *writeToken) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut || r.Method == http.MethodDelete {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+w.token)
	}
	return w.next.RoundTrip(r)
}

// CloseIdleConnections passes on to the wrapped transport, so that
// http.Client.CloseIdleConnections still reaches it.
func (w *writeToken) CloseIdleConnections() {
	if c, ok := w.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
