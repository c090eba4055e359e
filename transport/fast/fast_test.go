package fast

import (
	"context"
	"net/http/httptest"
	"testing"
)

// TestOwnRequestHasItsOwnContext: the request a handler gets carries none
// of the adaptor's context, which is the *fasthttp.RequestCtx that fasthttp
// reuses for the next request while a load that outlived this one may still
// ask its context for values.
func TestOwnRequestHasItsOwnContext(t *testing.T) {
	type key struct{}
	r := httptest.NewRequest("GET", "/cache/g/k", nil)
	r = r.WithContext(context.WithValue(context.Background(), key{}, "the next request's"))
	c := ownRequest(r)
	if v := c.Context().Value(key{}); v != nil {
		t.Fatalf("the handler's request carries the adaptor's context value %v", v)
	}
	if c.URL.Path != "/cache/g/k" || c.Method != "GET" {
		t.Fatalf("ownRequest = %s %s, want GET /cache/g/k", c.Method, c.URL.Path)
	}
}
