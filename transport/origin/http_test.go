package origin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
)

func TestNewHTTPRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  HTTPConfig
		want string
	}{
		{"no key placeholder", HTTPConfig{URL: "http://h/{group}"}, "must contain {key}"},
		{"ftp scheme", HTTPConfig{URL: "ftp://h/{key}"}, "scheme must be http or https"},
		{"no scheme", HTTPConfig{URL: "h/{key}"}, "scheme"},
		{"no host", HTTPConfig{URL: "http:///{key}"}, "no host"},
		{"key in host", HTTPConfig{URL: "http://{key}.example/"}, "after the host"},
		{"group in host", HTTPConfig{URL: "http://{group}:80/{key}"}, "after the host"},
		// A fragment is never sent: every key would ask for the same URL.
		{"key in fragment", HTTPConfig{URL: "http://h/x#{key}"}, "fragment"},
		{"negative timeout", HTTPConfig{URL: "http://h/{key}", Timeout: -time.Second}, "timeout"},
		{"negative max bytes", HTTPConfig{URL: "http://h/{key}", MaxBytes: -1}, "max bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewHTTP(tt.cfg)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewHTTP(%+v) = %v, want ErrConfig mentioning %q", tt.cfg, err, tt.want)
			}
		})
	}
}

// TestHTTPEscapesKey checks that every key arrives at the upstream as exactly
// one path segment (or one query value) that decodes to the key itself.
func TestHTTPEscapesKey(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v/{group}/{key}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "path %s|%s", r.PathValue("group"), r.PathValue("key"))
	})
	mux.HandleFunc("GET /q", func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.Query()) != 2 {
			http.Error(w, "query has "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "query %s|%s", r.URL.Query().Get("g"), r.URL.Query().Get("k"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	keys := []string{
		"plain", "a/b", "a b", "../../etc/passwd", "%2F", "?x=1", "#frag", "a&k=evil", "ünïcødé", "a+b", ";,=@$",
	}
	for _, tmpl := range []struct{ url, kind string }{
		{srv.URL + "/v/{group}/{key}", "path"},
		{srv.URL + "/q?g={group}&k={key}", "query"},
	} {
		o, err := NewHTTP(HTTPConfig{URL: tmpl.url, Group: "g/r p"})
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range keys {
			t.Run(tmpl.kind+"/"+key, func(t *testing.T) {
				v, err := o.Get(t.Context(), key)
				if err != nil {
					t.Fatal(err)
				}
				if want := tmpl.kind + " g/r p|" + key; string(v.Data) != want {
					t.Errorf("upstream saw %q, want %q", v.Data, want)
				}
			})
		}
	}
}

// TestHTTPDotKeys checks that a key cannot be a dot segment of the upstream
// path: "/v/{key}" with ".." would be "/v/..", which the upstream (and any
// proxy) resolves to "/", a resource outside the template. In a query the
// dots are plain data.
func TestHTTPDotKeys(t *testing.T) {
	t.Parallel()
	var requests []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.URL.RequestURI())
		mu.Unlock()
		fmt.Fprint(w, "upstream saw "+r.URL.RequestURI())
	}))
	t.Cleanup(srv.Close)
	path, err := NewHTTP(HTTPConfig{URL: srv.URL + "/v/{key}"})
	if err != nil {
		t.Fatal(err)
	}
	query, err := NewHTTP(HTTPConfig{URL: srv.URL + "/q?k={key}"})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{".", ".."} {
		v, err := path.Get(t.Context(), key)
		var ke *KeyError
		if !errors.As(err, &ke) || !errors.Is(err, cache.ErrBadKey) {
			t.Errorf("path template, key %q: got %q, %v; want a *KeyError", key, v.Data, err)
		}
		v, err = query.Get(t.Context(), key)
		if want := "upstream saw /q?k=" + key; err != nil || string(v.Data) != want {
			t.Errorf("query template, key %q: got %q, %v; want %q", key, v.Data, err, want)
		}
	}
	// Dots inside a key are data, and stay in one segment.
	if v, err := path.Get(t.Context(), "..."); err != nil || string(v.Data) != "upstream saw /v/..." {
		t.Errorf(`key "...": got %q, %v`, v.Data, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range requests {
		if !strings.HasPrefix(r, "/v/...") && !strings.HasPrefix(r, "/q?") {
			t.Errorf("the upstream was asked for %q", r)
		}
	}
}

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		var code int
		fmt.Sscan(r.PathValue("code"), &code)
		w.WriteHeader(code)
		fmt.Fprint(w, "body")
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/status/200", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	o, err := NewHTTP(HTTPConfig{URL: srv.URL + "/{key}"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key        string
		notFound   bool
		statusCode int // of a *StatusError; 0: none
	}{
		{key: "status/200"},
		{key: "status/204"},
		{key: "redirect"},
		{key: "status/404", notFound: true},
		{key: "status/410", notFound: true},
		{key: "status/500", statusCode: 500},
		{key: "status/503", statusCode: 503},
		{key: "status/403", statusCode: 403},
		{key: "status/304", statusCode: 304},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel()
			// The template escapes '/', so ask for the path through a
			// template without {key} escaping concerns: one segment per code.
			o := o
			if tt.key != "redirect" {
				var err error
				o, err = NewHTTP(HTTPConfig{URL: srv.URL + "/status/{key}"})
				if err != nil {
					t.Fatal(err)
				}
			}
			key := strings.TrimPrefix(tt.key, "status/")
			_, err := o.Get(t.Context(), key)
			var se *StatusError
			switch {
			case tt.notFound:
				if !errors.Is(err, cache.ErrNotFound) {
					t.Fatalf("err = %v, want cache.ErrNotFound", err)
				}
			case tt.statusCode != 0:
				if !errors.As(err, &se) || se.StatusCode != tt.statusCode {
					t.Fatalf("err = %v, want *StatusError %d", err, tt.statusCode)
				}
				if errors.Is(err, cache.ErrNotFound) {
					t.Fatalf("err = %v is ErrNotFound", err)
				}
			case err != nil:
				t.Fatalf("err = %v, want nil", err)
			}
		})
	}
}

func TestHTTPValue(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != "Bearer t" {
			http.Error(w, "no auth: "+got, http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/fresh":
			w.Header().Set("Cache-Control", "public, max-age=60")
		case "/nostore":
			w.Header().Set("Cache-Control", "no-store")
		}
		w.Header().Set("Content-Type", "application/x-thing")
		fmt.Fprint(w, "value of "+r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	o, err := NewHTTP(HTTPConfig{URL: srv.URL + "/{key}", Header: http.Header{"Authorization": {"Bearer t"}}})
	if err != nil {
		t.Fatal(err)
	}

	before := time.Now()
	v, err := o.Get(t.Context(), "fresh")
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if string(v.Data) != "value of /fresh" || v.ContentType != "application/x-thing" || v.NoStore {
		t.Errorf("fresh: got %+v", v)
	}
	if v.Expires.Before(before.Add(60*time.Second)) || v.Expires.After(after.Add(60*time.Second)) {
		t.Errorf("fresh: Expires = %v, want now+60s (between %v and %v)", v.Expires, before.Add(time.Minute), after.Add(time.Minute))
	}

	v, err = o.Get(t.Context(), "nostore")
	if err != nil {
		t.Fatal(err)
	}
	if !v.NoStore || !v.Expires.IsZero() || string(v.Data) != "value of /nostore" {
		t.Errorf("nostore: got %+v, want NoStore and the data", v)
	}

	v, err = o.Get(t.Context(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	if v.NoStore || !v.Expires.IsZero() {
		t.Errorf("plain: got %+v, want no expiry (the group's TTL applies)", v)
	}
}

func TestFreshness(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	date := now.Add(-time.Hour) // the upstream's clock is an hour behind ours
	tests := []struct {
		name    string
		header  http.Header
		expires time.Time
		noStore bool
	}{
		{"none", http.Header{}, time.Time{}, false},
		{"max-age", http.Header{"Cache-Control": {"max-age=60"}}, now.Add(time.Minute), false},
		{"quoted max-age", http.Header{"Cache-Control": {`max-age="60"`}}, now.Add(time.Minute), false},
		{"upper case", http.Header{"Cache-Control": {"Max-Age=60"}}, now.Add(time.Minute), false},
		{"s-maxage wins", http.Header{"Cache-Control": {"max-age=60, s-maxage=10"}}, now.Add(10 * time.Second), false},
		{"two header lines", http.Header{"Cache-Control": {"public", "max-age=30"}}, now.Add(30 * time.Second), false},
		{"age subtracted", http.Header{"Cache-Control": {"max-age=60"}, "Age": {"20"}}, now.Add(40 * time.Second), false},
		{"older than max-age", http.Header{"Cache-Control": {"max-age=60"}, "Age": {"90"}}, time.Time{}, true},
		{"max-age=0", http.Header{"Cache-Control": {"max-age=0"}}, time.Time{}, true},
		{"no-store", http.Header{"Cache-Control": {"max-age=60, no-store"}}, time.Time{}, true},
		{"no-cache", http.Header{"Cache-Control": {"no-cache"}}, time.Time{}, true},
		{"private", http.Header{"Cache-Control": {"private, max-age=60"}}, time.Time{}, true},
		// RFC 9111 section 4.2.1: invalid freshness information is stale;
		// falling back to the group's TTL (maybe "forever") would keep
		// what the upstream meant not to be kept.
		{"bad max-age is stale", http.Header{"Cache-Control": {"max-age=soon"}}, time.Time{}, true},
		{"negative max-age is stale", http.Header{"Cache-Control": {"max-age=-5"}}, time.Time{}, true},
		{"empty max-age is stale", http.Header{"Cache-Control": {"max-age"}}, time.Time{}, true},
		{"fractional max-age is stale", http.Header{"Cache-Control": {"max-age=1.5"}}, time.Time{}, true},
		{"bad s-maxage is stale", http.Header{"Cache-Control": {"s-maxage=x, max-age=60"}}, time.Time{}, true},
		{"conflicting max-age is stale", http.Header{"Cache-Control": {"max-age=60", "max-age=3600"}}, time.Time{}, true},
		{"repeated equal max-age", http.Header{"Cache-Control": {"max-age=60, max-age=60"}}, now.Add(time.Minute), false},
		{"huge max-age capped", http.Header{"Cache-Control": {"max-age=99999999999999999999"}}, now.Add((1<<31 - 1) * time.Second), false},
		{"expires against date", http.Header{
			"Expires": {date.Add(2 * time.Minute).Format(http.TimeFormat)},
			"Date":    {date.Format(http.TimeFormat)},
		}, now.Add(2 * time.Minute), false},
		{"expires without date", http.Header{"Expires": {now.Add(time.Minute).Format(http.TimeFormat)}}, now.Add(time.Minute), false},
		{"max-age beats expires", http.Header{"Cache-Control": {"max-age=5"}, "Expires": {now.Add(time.Hour).Format(http.TimeFormat)}}, now.Add(5 * time.Second), false},
		{"invalid expires", http.Header{"Expires": {"0"}}, time.Time{}, true},
		{"past expires", http.Header{"Expires": {now.Add(-time.Minute).Format(http.TimeFormat)}}, time.Time{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			expires, noStore := freshness(tt.header, now)
			if !expires.Equal(tt.expires) || noStore != tt.noStore {
				t.Errorf("freshness(%v) = %v, %v; want %v, %v", tt.header, expires, noStore, tt.expires, tt.noStore)
			}
		})
	}
}

func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done() // never answers: the client must give up
	}))
	t.Cleanup(srv.Close)
	o, err := NewHTTP(HTTPConfig{URL: srv.URL + "/{key}", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = o.Get(t.Context(), "slow")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	<-arrived
}

func TestHTTPCallerCancels(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	o, err := NewHTTP(HTTPConfig{URL: srv.URL + "/{key}"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-arrived; cancel() }()
	if _, err = o.Get(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestHTTPMaxBytes(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscan(r.URL.Path[1:], &n)
		if r.URL.Query().Has("chunked") {
			// Flushing first sends no Content-Length: only the read bound
			// can catch the size.
			w.(http.Flusher).Flush()
		}
		w.Write([]byte(strings.Repeat("x", n)))
	}))
	t.Cleanup(srv.Close)
	for _, chunked := range []bool{false, true} {
		tmpl := srv.URL + "/{key}"
		if chunked {
			tmpl += "?chunked=1"
		}
		o, err := NewHTTP(HTTPConfig{URL: tmpl, MaxBytes: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			size    string
			tooBig  bool
			wantLen int
		}{{"10", false, 10}, {"11", true, 0}, {"100000", true, 0}} {
			t.Run(fmt.Sprintf("chunked=%v/size=%s", chunked, tt.size), func(t *testing.T) {
				v, err := o.Get(t.Context(), tt.size)
				if tt.tooBig {
					if !errors.Is(err, ErrTooLarge) || !errors.Is(err, cache.ErrTooLarge) {
						t.Fatalf("err = %v, want ErrTooLarge, which is cache.ErrTooLarge too", err)
					}
					return
				}
				if err != nil || len(v.Data) != tt.wantLen {
					t.Fatalf("got %d bytes, %v; want %d", len(v.Data), err, tt.wantLen)
				}
			})
		}
	}
}

func TestHTTPUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	o, err := NewHTTP(HTTPConfig{URL: url + "/{key}"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = o.Get(t.Context(), "k")
	if err == nil || errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("err = %v, want a connection error that is not ErrNotFound", err)
	}
}
