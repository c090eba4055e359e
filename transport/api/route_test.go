package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// muxRoute is the oracle for route: what a ServeMux with the public
// pattern does with a GET of target. served is false when the mux would
// redirect or not match the pattern.
func muxRoute(target string) (group, key string, served bool) {
	mux := http.NewServeMux()
	mux.HandleFunc(PublicPrefix+"{group}/{key...}", func(w http.ResponseWriter, r *http.Request) {
		group, key, served = r.PathValue("group"), r.PathValue("key"), true
	})
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, target, nil))
	return group, key, served
}

// checkRoute fails t if route takes target's fast path with another group
// or key than the mux would give the handler.
func checkRoute(t *testing.T, target string) (fast bool) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	group, key, ok := route(r)
	if !ok {
		return false
	}
	mg, mk, served := muxRoute(target)
	if !served || mg != group || mk != key {
		t.Errorf("%q: route gives (%q, %q), the mux (%q, %q, served %v)", target, group, key, mg, mk, served)
	}
	return true
}

// TestRoute: the fast path agrees with the mux, and takes every ordinary
// path, escapes included; paths the mux cleans or redirects are left to it.
func TestRoute(t *testing.T) {
	t.Parallel()
	fast := []string{
		"/cache/g/k", "/cache/g/a/b/c", "/cache/g/trailing/", "/cache/g/a%2Fb", "/cache/g/%2E%2E",
		"/cache/g/%25", "/cache/g%2Fx/k", "/cache/g/caf%C3%A9", "/cache/g/k?x=1", "/cache/g/a%2F%2Fb",
	}
	for _, p := range fast {
		if !checkRoute(t, p) {
			t.Errorf("%q: not on the fast path", p)
		}
	}
	slow := []string{
		"/cache/", "/cache/g", "/cache/g/", "/cache//k", "/cache/g//k", "/cache/g/./k", "/cache/g/../k",
		"/cache/g/k/..", "/cache/g/k/.", "/other/g/k", "/cache",
	}
	for _, p := range slow {
		if checkRoute(t, p) {
			t.Errorf("%q: on the fast path, want the mux", p)
		}
	}
}

// FuzzRoute: for any path, the fast path either declines or routes as the
// mux does.
func FuzzRoute(f *testing.F) {
	for _, p := range []string{"/cache/g/k", "/cache/g/a/../b", "/cache/g/%2e", "/cache/g/a%zz", "/cache/%20/x/"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if len(p) == 0 || p[0] != '/' {
			return
		}
		r, err := http.NewRequest(http.MethodGet, "http://node"+p, nil)
		if err != nil || r.URL.Host != "node" {
			return // not a request path a server would see
		}
		target := r.URL.RequestURI()
		for i := range len(target) {
			if target[i] <= ' ' || target[i] == 0x7f {
				return // not a valid request line
			}
		}
		checkRoute(t, target)
	})
}
