//go:build e2e

package e2e

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestWriteToken: the API's writes carry the token, its reads do not.
func TestWriteToken(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Method] = r.Header.Get("Authorization")
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	api := NewAPI(5 * time.Second)
	api.SetWriteToken("tok-0123456789abcdef")
	t.Cleanup(api.Close)
	for _, kind := range []Kind{Put, Delete} {
		if _, _, err := api.Write(t.Context(), kind, srv.URL, "demo", "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := api.Get(t.Context(), srv.URL, "demo", "k"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{http.MethodPut: "Bearer tok-0123456789abcdef", http.MethodDelete: "Bearer tok-0123456789abcdef", http.MethodGet: ""}
	for m, w := range want {
		if seen[m] != w {
			t.Errorf("%s sent Authorization %q, want %q", m, seen[m], w)
		}
	}
}
