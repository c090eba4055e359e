package transport

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang/groupcache/groupcachepb"
	// groupcachepb is generated for the APIv1 of protobuf; its proto
	// package is what groupcache itself marshals with, so tests compare
	// against exactly that.
	"github.com/golang/protobuf/proto" //lint:ignore SA1019 see above

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// awkwardKeys are keys whose bytes must survive every hop exactly.
var awkwardKeys = []string{
	"plain",
	"a/b/c",
	"/leading",
	"trailing/",
	"a//b",
	"a/./b",
	"a/../b",
	".",
	"..",
	"...",
	"100%",
	"%2F",
	"%zz",
	"a b",
	"a+b",
	"+",
	"q?x=1&y=2",
	"frag#ment",
	"semi;colon",
	"tab\tnewline\n",
	"ключ",
	"日本語/キー",
	"emoji 🙂",
	"\x00\x01\xff\xfe",
	"\\back\\slash",
	`"quoted"`,
	"~tilde_under-score.dot",
}

func TestEscapeSegment(t *testing.T) {
	t.Parallel()
	for _, key := range awkwardKeys {
		t.Run(fmt.Sprintf("%q", key), func(t *testing.T) {
			t.Parallel()
			esc := escapeSegment(key)
			if strings.ContainsAny(esc, "/+ ?#") {
				t.Fatalf("escapeSegment(%q) = %q: holds a byte that is not a plain segment byte", key, esc)
			}
			if esc == "." || esc == ".." {
				t.Fatalf("escapeSegment(%q) = %q: a dot segment, which path cleaning removes", key, esc)
			}
			// groupcache's server path-unescapes, ours query-unescapes:
			// both must read the key back.
			if got, err := url.PathUnescape(esc); err != nil || got != key {
				t.Errorf("PathUnescape(%q) = %q, %v; want %q", esc, got, err, key)
			}
			if got, err := url.QueryUnescape(esc); err != nil || got != key {
				t.Errorf("QueryUnescape(%q) = %q, %v; want %q", esc, got, err, key)
			}
		})
	}
}

func TestParsePeerPath(t *testing.T) {
	t.Parallel()
	const base = "/_groupcache/"
	tests := []struct {
		name      string
		path      string
		group     string
		key       string
		wantErr   error
		wantCode  int
		maxKeyLen int
	}{
		{name: "plain", path: "/_groupcache/g/k", group: "g", key: "k"},
		{name: "escaped slash", path: "/_groupcache/g/a%2Fb", group: "g", key: "a/b"},
		{name: "raw slashes stay in key", path: "/_groupcache/g/a/b/c", group: "g", key: "a/b/c"},
		{name: "groupcache plus is space", path: "/_groupcache/my+group/a+b", group: "my group", key: "a b"},
		{name: "escaped plus", path: "/_groupcache/g/a%2Bb", group: "g", key: "a+b"},
		{name: "escaped slash in group", path: "/_groupcache/a%2Fb/k", group: "a/b", key: "k"},
		{name: "raw bytes", path: "/_groupcache/g/%00%FF", group: "g", key: "\x00\xff"},
		{name: "other base", path: "/other/g/k", wantErr: api.ErrBadPath},
		{name: "base only", path: "/_groupcache/", wantErr: api.ErrBadPath},
		{name: "no key separator", path: "/_groupcache/g", wantErr: api.ErrBadPath},
		{name: "empty group", path: "/_groupcache//k", wantErr: api.ErrBadPath},
		{name: "empty key", path: "/_groupcache/g/", wantErr: cache.ErrBadKey},
		{name: "bad escape in key", path: "/_groupcache/g/%zz", wantErr: api.ErrBadPath},
		{name: "bad escape in group", path: "/_groupcache/%g/k", wantErr: api.ErrBadPath},
		{name: "key at limit", path: "/_groupcache/g/" + strings.Repeat("k", 8), maxKeyLen: 8, group: "g", key: strings.Repeat("k", 8)},
		{name: "key over limit", path: "/_groupcache/g/" + strings.Repeat("k", 9), maxKeyLen: 8, wantErr: api.ErrKeyTooLong},
		{name: "escaped key over limit", path: "/_groupcache/g/" + strings.Repeat("%41", 9), maxKeyLen: 8, wantErr: api.ErrKeyTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			max := tt.maxKeyLen
			if max == 0 {
				max = api.DefaultMaxKeyBytes
			}
			group, key, err := parsePeerPath(tt.path, base, max)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("parsePeerPath(%q) error = %v, want %v", tt.path, err, tt.wantErr)
				}
				if api.StatusOf(err) != http.StatusBadRequest {
					t.Errorf("StatusOf(%v) = %d, want 400", err, api.StatusOf(err))
				}
				return
			}
			if err != nil || group != tt.group || key != tt.key {
				t.Fatalf("parsePeerPath(%q) = %q, %q, %v; want %q, %q", tt.path, group, key, err, tt.group, tt.key)
			}
		})
	}
}

// FuzzPeerPath checks that parsing any path never panics, that what our
// client writes parses back to the same group and key, and that what
// groupcache's client writes (url.QueryEscape) does too.
func FuzzPeerPath(f *testing.F) {
	for _, k := range awkwardKeys {
		f.Add("g", k)
	}
	f.Add("my group", "k")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, group, key string) {
		const base = "/_groupcache/"
		// Arbitrary input: no panic, and success only with a non-empty
		// key within the limit.
		if _, k, err := parsePeerPath(base+group+"/"+key, base, api.DefaultMaxKeyBytes); err == nil {
			if k == "" || len(k) > api.DefaultMaxKeyBytes {
				t.Fatalf("accepted key %q", k)
			}
		}
		if group == "" || key == "" || len(key) > api.DefaultMaxKeyBytes {
			return
		}
		for _, path := range []string{
			peerPath(base, group, key),
			base + url.QueryEscape(group) + "/" + url.QueryEscape(key), // groupcache's client
		} {
			g, k, err := parsePeerPath(path, base, api.DefaultMaxKeyBytes)
			if err != nil || g != group || k != key {
				t.Fatalf("parsePeerPath(%q) = %q, %q, %v; want %q, %q", path, g, k, err, group, key)
			}
		}
	})
}

// TestVerifySignature changes each field a signature covers, and checks
// that the signature then fails, while the date window and the secret list
// accept what they should.
func TestVerifySignature(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	now := time.UnixMilli(1_700_000_000_123)
	base := signedRequest{
		Method:   "PUT",
		Audience: "http://10.0.0.1:8080",
		Path:     "/_groupcache/g/a%2Fb",
		Date:     now.UnixMilli(),
		Nonce:    strings.Repeat("ab", nonceLen),
		BodyHash: bodyHash([]byte("v")),
		Header:   http.Header{hdrContentType: {"text/plain"}, hdrExpires: {"2030-01-01T00:00:00Z"}},
	}
	sig := signature(secret, base)
	tests := []struct {
		name    string
		change  func(s *signedRequest)
		secrets [][]byte
		sig     string
		ok      bool
	}{
		{name: "valid", ok: true},
		{name: "29s old", change: func(s *signedRequest) { s.Date -= 29_000 }, ok: true},
		{name: "29s ahead", change: func(s *signedRequest) { s.Date += 29_000 }, ok: true},
		{name: "31s old", change: func(s *signedRequest) { s.Date -= 31_000 }},
		{name: "31s ahead", change: func(s *signedRequest) { s.Date += 31_000 }},
		{name: "other secret", secrets: [][]byte{[]byte("other")}},
		{name: "second of two secrets", secrets: [][]byte{[]byte("new"), secret}, ok: true},
		{name: "no signature", sig: "-"},
	}
	// Every covered field, changed after signing, must break the signature.
	for name, change := range map[string]func(s *signedRequest){
		"method":    func(s *signedRequest) { s.Method = "DELETE" },
		"audience":  func(s *signedRequest) { s.Audience = "http://10.0.0.2:8080" },
		"path":      func(s *signedRequest) { s.Path = "/_groupcache/g/a/b" },
		"date":      func(s *signedRequest) { s.Date++ },
		"nonce":     func(s *signedRequest) { s.Nonce = strings.Repeat("cd", nonceLen) },
		"body hash": func(s *signedRequest) { s.BodyHash = bodyHash([]byte("w")) },
		"content type": func(s *signedRequest) {
			s.Header = http.Header{hdrContentType: {"text/html"}, hdrExpires: base.Header[hdrExpires]}
		},
		"expiry":        func(s *signedRequest) { s.Header = http.Header{hdrContentType: base.Header[hdrContentType]} },
		"no-store":      func(s *signedRequest) { s.Header = base.Header.Clone(); s.Header.Set(hdrNoStore, "1") },
		"sender header": func(s *signedRequest) { s.Header = base.Header.Clone(); s.Header.Set(hdrPeer, "http://evil") },
		"scope":         func(s *signedRequest) { s.Header = base.Header.Clone(); s.Header.Set(hdrScope, "copy") },
		"stale age":     func(s *signedRequest) { s.Header = base.Header.Clone(); s.Header.Set(hdrStale, "1000") },
		"hand-off":      func(s *signedRequest) { s.Header = base.Header.Clone(); s.Header.Set(hdrHandoff, "1") },
		"lease request": func(s *signedRequest) { s.Header = base.Header.Clone(); s.Header.Set(hdrLease, "1") },
		"member since":  func(s *signedRequest) { s.Header = base.Header.Clone(); s.Header.Set(hdrMemberSince, "7") },
		"load misses":   func(s *signedRequest) { s.Header = base.Header.Clone(); s.Header.Set(hdrLoadMisses, "1") },
	} {
		tests = append(tests, struct {
			name    string
			change  func(s *signedRequest)
			secrets [][]byte
			sig     string
			ok      bool
		}{name: "changed " + name, change: change})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, sg := base, sig
			if tt.change != nil {
				tt.change(&s)
				if strings.HasSuffix(tt.name, "s old") || strings.HasSuffix(tt.name, "s ahead") { // a genuine signature of that date
					sg = signature(secret, s)
				}
			}
			if tt.sig == "-" {
				sg = ""
			}
			secrets := tt.secrets
			if secrets == nil {
				secrets = [][]byte{secret}
			}
			err := verifySignature(secrets, s, sg, now, DefaultSignatureWindow)
			if tt.ok != (err == nil) {
				t.Fatalf("verifySignature = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && (!errors.Is(err, ErrUnauthorized) || peerStatus(err) != http.StatusUnauthorized) {
				t.Fatalf("verifySignature = %v (status %d), want ErrUnauthorized (401)", err, peerStatus(err))
			}
		})
	}
}

// TestPeerStatus: the peer route's status codes, which are api.StatusOf's
// but for its own refusals (401, 421).
func TestPeerStatus(t *testing.T) {
	t.Parallel()
	load := func(err error) error { return fmt.Errorf("%w: %w", cache.ErrLoad, err) }
	tests := []struct {
		err  error
		want int
	}{
		{nil, 200},
		{api.ErrBadPath, 400},
		{api.ErrBadRequest, 400},
		{api.ErrKeyTooLong, 400},
		{cache.ErrBadKey, 400},
		{load(fmt.Errorf("origin refused: %w", cache.ErrBadKey)), 400},
		{ErrUnauthorized, 401},
		{api.ErrNoToken, 401},
		{api.ErrWritesDisabled, 403},
		{cache.ErrNoSuchGroup, 404},
		{fmt.Errorf("wrapped: %w", cache.ErrNotFound), 404},
		{api.ErrNoRoute, 404},
		{api.ErrMethodNotAllowed, 405},
		{cache.ErrTooLarge, 413},
		{&PeerError{Peer: "http://p", Op: "set", StatusCode: 413, Err: cache.ErrTooLarge}, 413},
		{load(errors.New("boom")), 502},
		{load(context.DeadlineExceeded), 504},
		{context.DeadlineExceeded, 504},
		{&PeerError{Peer: "http://p", Op: "set", Err: errors.New("connection refused")}, 502},
		{&PeerError{Peer: "http://p", Op: "set", StatusCode: 401, Err: ErrUnauthorized}, 502},
		{&PeerError{Peer: "http://p", Op: "get", StatusCode: 504, Err: fmt.Errorf("%w: %w", cache.ErrLoad, context.DeadlineExceeded)}, 504},
		{&PeerError{Peer: "http://p", Op: "get", StatusCode: 404, Err: cache.ErrNotFound}, 404},
		{api.ErrTooManyRequests, 429},
		{cache.ErrNotOwner, 421},
		{&PeerError{Peer: "http://p", Op: "set", StatusCode: 421, Err: cache.ErrNotOwner}, 503},
		{cache.ErrPurgeNotRecorded, 503},
		{cache.ErrOwnerUnreachable, 503},
		{context.Canceled, 503},
		{fmt.Errorf("wrapped: %w", cache.ErrOverloaded), 503},
		{&PeerError{Peer: "http://p", Op: "get", StatusCode: 503, Err: cache.ErrOverloaded}, 503},
		{errors.New("unknown"), 500},
	}
	for _, tt := range tests {
		if got := peerStatus(tt.err); got != tt.want {
			t.Errorf("peerStatus(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

// TestEncodeGetResponse checks that the peer handler's hand-written body is
// byte for byte what groupcache's proto.Marshal writes, and that groupcache's
// decoder reads the value back.
func TestEncodeGetResponse(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 127, 128, 300, 1 << 14, 1<<20 + 3} {
		data := bytes.Repeat([]byte{0xab}, n)
		got := append(getResponsePrefix(n), data...)
		want, err := proto.Marshal(&groupcachepb.GetResponse{Value: data})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: encoded %x..., proto.Marshal %x...", n, got[:min(8, len(got))], want[:min(8, len(want))])
		}
		var msg groupcachepb.GetResponse
		if err := proto.Unmarshal(got, &msg); err != nil || !bytes.Equal(msg.Value, data) {
			t.Fatalf("%d bytes: decoded %d bytes, %v", n, len(msg.Value), err)
		}
	}
}

// TestGetResponseValue: the hand decoder reads what proto.Marshal writes,
// with groupcache's other field and with repeated values, and refuses
// truncated or malformed messages as proto.Unmarshal does.
func TestGetResponseValue(t *testing.T) {
	t.Parallel()
	qps := 12.5
	for _, msg := range []*groupcachepb.GetResponse{
		{},
		{Value: []byte{}},
		{Value: []byte("v")},
		{Value: bytes.Repeat([]byte{0xcd}, 70000)},
		{Value: []byte("with qps"), MinuteQps: &qps},
	} {
		enc, err := proto.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := getResponseValue(enc)
		if err != nil || !bytes.Equal(got, msg.Value) {
			t.Fatalf("%d-byte value: got %d bytes, %v", len(msg.Value), len(got), err)
		}
		if len(got) > 0 && cap(got) != len(got) {
			t.Fatalf("value has spare capacity %d > %d: appending would write into the body", cap(got), len(got))
		}
	}
	// The last of repeated value fields wins, as in proto.Unmarshal.
	two := append(append(getResponsePrefix(3), "one"...), append(getResponsePrefix(3), "two"...)...)
	if got, err := getResponseValue(two); err != nil || string(got) != "two" {
		t.Fatalf("repeated value: %q, %v", got, err)
	}
	good, _ := proto.Marshal(&groupcachepb.GetResponse{Value: []byte("value")})
	for _, bad := range [][]byte{
		good[:len(good)-1], // truncated value
		good[:1],           // tag without a length
		{0x0a, 0xff},       // unterminated length varint
		{0xff, 0xff, 0xff}, // unterminated tag
		{0x0b},             // a start-group tag with no end
	} {
		if _, err := getResponseValue(bad); err == nil {
			t.Fatalf("%x: no error", bad)
		}
		var msg groupcachepb.GetResponse
		if proto.Unmarshal(bad, &msg) == nil {
			t.Fatalf("%x: proto.Unmarshal accepts it, so the hand decoder should too", bad)
		}
	}
}

// FuzzGetResponseValue: the hand decoder and proto.Unmarshal agree on every
// input, value and error alike.
func FuzzGetResponseValue(f *testing.F) {
	qps := 1.0
	for _, m := range []*groupcachepb.GetResponse{{Value: []byte("seed")}, {Value: []byte("q"), MinuteQps: &qps}} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := getResponseValue(b)
		var msg groupcachepb.GetResponse
		perr := proto.Unmarshal(b, &msg)
		if (err == nil) != (perr == nil) {
			t.Fatalf("%x: hand decoder err %v, proto.Unmarshal err %v", b, err, perr)
		}
		if err == nil && !bytes.Equal(got, msg.Value) {
			t.Fatalf("%x: hand decoder %x, proto.Unmarshal %x", b, got, msg.Value)
		}
	})
}

// TestSignatureText computes a signature from the layout README gives, by
// hand, so that a client in another language can rely on it.
func TestSignatureText(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef")
	s := signedRequest{
		Method:   "PUT",
		Audience: "http://node2:8080",
		Path:     "/_groupcache/demo/a%2Fb",
		Date:     1_700_000_000_123,
		Nonce:    strings.Repeat("0f", nonceLen),
		BodyHash: bodyHash([]byte("v")),
		Header:   http.Header{hdrPeer: {"http://node1:8080"}, hdrContentType: {"text/plain"}},
	}
	text := strings.Join([]string{
		"RINGCACHE-HMAC-SHA256-2", "PUT", "http://node2:8080", "/_groupcache/demo/a%2Fb", "1700000000123",
		strings.Repeat("0f", nonceLen), bodyHash([]byte("v")),
		"X-Ringcache-Peer:http://node1:8080", "X-Ringcache-Content-Type:text/plain", "X-Ringcache-Expires:",
		"X-Ringcache-No-Store:", "X-Ringcache-Stale:", "X-Ringcache-Scope:", "X-Ringcache-Lease:", "X-Ringcache-Handoff:",
	}, "\n")
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(text))
	if want := hex.EncodeToString(m.Sum(nil)); signature(secret, s) != want {
		t.Fatalf("signature = %s, want the HMAC of README's layout, %s", signature(secret, s), want)
	}
}

// TestOverloadCrossesThePeerHop checks both ends of an owner's shed load:
// the peer route answers cache.ErrOverloaded with a marked 503 and
// Retry-After, the peer client reads that back as cache.ErrOverloaded (the
// owner answered: no local load follows), and a 503 without the marker,
// such as a proxy's, stays a failure of the peer.
func TestOverloadCrossesThePeerHop(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	writePeerError(rec, fmt.Errorf("group %q: %w", "g", cache.ErrOverloaded))
	res := rec.Result()
	if res.StatusCode != 503 || res.Header.Get(hdrOverloaded) == "" || res.Header.Get("Retry-After") == "" {
		t.Fatalf("peer answer: %d, headers %v; want a 503 with %s and Retry-After", res.StatusCode, res.Header, hdrOverloaded)
	}
	if err := statusError(res); !errors.Is(err, cache.ErrOverloaded) {
		t.Errorf("statusError(marked 503) = %v, want cache.ErrOverloaded", err)
	}
	plain := &http.Response{StatusCode: 503, Header: http.Header{}}
	if err := statusError(plain); errors.Is(err, cache.ErrOverloaded) || !errors.Is(err, ErrPeerStatus) {
		t.Errorf("statusError(unmarked 503) = %v, want ErrPeerStatus", err)
	}
	pub := httptest.NewRecorder()
	api.WriteError(pub, api.StatusOf(cache.ErrOverloaded), cache.ErrOverloaded)
	if pub.Code != 503 || pub.Header().Get("Retry-After") != "1" || !strings.Contains(pub.Body.String(), "origin busy") {
		t.Errorf("public answer: %d %q, Retry-After %q; want 503 origin busy with Retry-After: 1", pub.Code, pub.Body.String(), pub.Header().Get("Retry-After"))
	}
}

// TestWrittenKeyRefusalCrossesThePeerHop: the peer route answers
// cache.ErrOwnerUnreachable (an owner whose tenure is in doubt, for a key
// written there) with a marked 503 and Retry-After, and the peer client
// reads it back as cache.ErrOwnerUnreachable: the owner answered, so the
// requester does not load the origin's older value itself.
func TestWrittenKeyRefusalCrossesThePeerHop(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	writePeerError(rec, fmt.Errorf("%w: %q", cache.ErrOwnerUnreachable, "k"))
	res := rec.Result()
	if res.StatusCode != 503 || res.Header.Get(hdrWritten) == "" || res.Header.Get("Retry-After") == "" {
		t.Fatalf("peer answer: %d, headers %v; want a 503 with %s and Retry-After", res.StatusCode, res.Header, hdrWritten)
	}
	if err := statusError(res); !errors.Is(err, cache.ErrOwnerUnreachable) {
		t.Errorf("statusError(marked 503) = %v, want cache.ErrOwnerUnreachable", err)
	}
}
