package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache"
)

// TestETag: the tag is a quoted function of the bytes alone, and any change
// of one byte, anywhere, or of the length changes it.
func TestETag(t *testing.T) {
	t.Parallel()
	data := []byte(strings.Repeat("ringcache value ", 300))
	tag := ETag(data)
	if tag != ETag(bytes.Clone(data)) || !strings.HasPrefix(tag, `"`) || !strings.HasSuffix(tag, `"`) || strings.Contains(tag[1:len(tag)-1], `"`) {
		t.Fatalf("etag = %s: not a quoted function of the bytes", tag)
	}
	seen := map[string]int{tag: -1}
	for i := range data {
		d := bytes.Clone(data)
		d[i] ^= 1
		if j, dup := seen[ETag(d)]; dup {
			t.Fatalf("flipping a bit of byte %d gives the tag of change %d", i, j)
		}
		seen[ETag(d)] = i
	}
	if ETag(data[:len(data)-1]) == tag || ETag(nil) == ETag([]byte{0}) {
		t.Fatal("the length is not in the tag")
	}
	// Every node must compute the same tag, across versions too: pin the
	// format (CRC-32C, CRC-32 IEEE, length, in lowercase hex).
	for in, want := range map[string]string{"value": `"e1e003631d775834-5"`, "": `"0000000000000000-0"`} {
		if got := ETag([]byte(in)); got != want {
			t.Errorf("ETag(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestETagMatch(t *testing.T) {
	t.Parallel()
	tag := ETag([]byte("value"))
	if tag != ETag([]byte("value")) || tag == ETag([]byte("other")) {
		t.Fatalf("etag is not a function of the bytes alone")
	}
	tests := []struct {
		header string
		want   bool
	}{
		{"", false},
		{tag, true},
		{"W/" + tag, true},
		{`"x", ` + tag, true},
		{"*", true},
		{`"x"`, false},
		{strings.Trim(tag, `"`), false},
	}
	for _, tt := range tests {
		if got := etagMatch(tt.header, tag); got != tt.want {
			t.Errorf("etagMatch(%q, %s) = %v, want %v", tt.header, tag, got, tt.want)
		}
	}
}

func TestParseMaxAge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header string
		want   time.Duration
		ok     bool
	}{
		{"", 0, false},
		{"max-age=60", time.Minute, true},
		{"public, MAX-AGE=5", 5 * time.Second, true},
		{`max-age="7"`, 7 * time.Second, true},
		{"max-age=-1", 0, false},
		{"max-age=abc", 0, false},
		{"max-age=99999999999999999999", 0, false},
		{"no-cache", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseMaxAge(tt.header)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseMaxAge(%q) = %v, %v; want %v, %v", tt.header, got, ok, tt.want, tt.ok)
		}
	}
}

// remoteErr is another node's failure, as transport.PeerError is one.
type remoteErr struct{ err error }

func (e remoteErr) Error() string      { return "node http://p: " + e.err.Error() }
func (e remoteErr) Unwrap() error      { return e.err }
func (e remoteErr) RemoteNode() string { return "http://p" }

// TestStatusOfRemoteError: another node's failure is a 502 whose text
// names nothing of that node, unless what it wraps says otherwise: the
// owner's not-found is a 404, its origin's timeout a 504.
func TestStatusOfRemoteError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{remoteErr{errors.New("connection refused")}, http.StatusBadGateway},
		{remoteErr{cache.ErrNotFound}, http.StatusNotFound},
		{remoteErr{fmt.Errorf("%w: %w", cache.ErrLoad, context.DeadlineExceeded)}, http.StatusGatewayTimeout},
		{errors.New("connection refused"), http.StatusInternalServerError},
	} {
		code := StatusOf(tc.err)
		if code != tc.code {
			t.Errorf("StatusOf(%v) = %d, want %d", tc.err, code, tc.code)
		}
		if text := errorText(tc.err, code); strings.Contains(text, "http://p") {
			t.Errorf("%v: the answer %q names the remote node", tc.err, text)
		}
	}
}
