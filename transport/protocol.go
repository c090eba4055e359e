package transport

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// Headers of the peer protocol. groupcache ignores them, which is what keeps
// the protocol compatible: a groupcache peer sees a plain GET and answers a
// plain GetResponse.
const (
	// hdrPeer marks a request as coming from a peer (the one-hop marker) and
	// names the sender's base URL for the receiver's logs. The peer route
	// never forwards, marker or not: a groupcache peer does not send it.
	hdrPeer = "X-Ringcache-Peer"
	// hdrRingVersion carries the sender's ring version, on requests and
	// responses, so an operator can see two nodes disagreeing.
	hdrRingVersion = "X-Ringcache-Ring-Version"
	// hdrContentType carries the value's content type; Content-Type itself
	// says application/x-protobuf, as groupcache's does.
	hdrContentType = "X-Ringcache-Content-Type"
	// hdrExpires carries the value's expiry (RFC 3339, nanoseconds).
	hdrExpires = "X-Ringcache-Expires"
	// hdrStale marks a value served past its expiry (a stale window) and
	// carries its age in milliseconds.
	hdrStale = "X-Ringcache-Stale"
	// hdrNoStore marks a value the origin asked not to cache.
	hdrNoStore = "X-Ringcache-No-Store"
	// hdrNotFound marks a 404 that means "the origin does not have the key",
	// as opposed to an unknown group or route (also 404 in groupcache).
	hdrNotFound = "X-Ringcache-Not-Found"
	// hdrLoadError marks an error answer caused by the origin failing at
	// the owner (cache.ErrLoad), which the requester must not retry itself.
	hdrLoadError = "X-Ringcache-Load-Error"

	// hdrOverloaded marks a 503 as the owner's load queue shedding the
	// load: the owner answered, and the requester must not load the key
	// itself (that would only add to the origin's load).
	hdrOverloaded = "X-Ringcache-Overloaded"

	// hdrWritten marks a 503 as the owner's cache.ErrOwnerUnreachable: the
	// key was written there and its value cannot be read now (its tenure
	// is in doubt). The owner answered, and the requester must not load the
	// origin's older value itself.
	hdrWritten = "X-Ringcache-Written"

	// hdrCaller names, on a GET, the client the requesting node serves
	// (cache.WithCaller), so that the owner's load queue shares its slots
	// between clients rather than between the nodes they come through. It
	// is a scheduling hint only and is not signed: a peer that could alter
	// it could only reorder the loads of the owner's queue.
	hdrCaller = "X-Ringcache-Caller"
	// hdrLease asks for a contact lease (on a request) and grants one (on a
	// response: the grantor's incarnation and revocation count); see tenure.go.
	hdrLease = "X-Ringcache-Lease"
	// hdrScope "copy" on a DELETE asks a node to drop its own copies of a
	// key only; without it a DELETE is a removal applied by the key's owner.
	hdrScope = "X-Ringcache-Scope"
	// hdrUnreached, on the owner's answer to a write, lists the base URLs of
	// the nodes it could not tell to drop their copy (they expired by lease).
	hdrUnreached = "X-Ringcache-Unreached"
	// hdrMember, on the answer to a GET that asked for a lease, says
	// whether the answering node counts the sender as a member of its ring.
	hdrMember = "X-Ringcache-Member"
	// hdrHandoff marks a GET from a key's new owner to its previous one,
	// answered from the caches only (never loaded, never forwarded). On a
	// drop (hdrScope "copy") its value "replaced" says the write was a PUT:
	// an heir keeps its copy for the write's own to replace (cache
	// Replacer). It is a signed header every version reads, so a node from
	// before the value checks the signature and drops the copy, as for any
	// drop.
	hdrHandoff = "X-Ringcache-Handoff"
	// hdrLoadMisses, on a batch, asks the owner to load the keys its
	// caches do not hold and to stream their frames as the loads end
	// (Group.GetMany's one request per owner; see fetchmany.go).
	hdrLoadMisses = "X-Ringcache-Load-Misses"
	// hdrCallers, on a coalesced batch, names each key's caller (as
	// hdrCaller names a GET's), so that the owner's load queue shares its
	// slots between the clients whose keys share a batch: query-escaped,
	// comma-separated, one a key, an empty one the same as the one before
	// (so a key without a caller after one with a caller counts as its).
	// A scheduling hint, not signed, as hdrCaller.
	hdrCallers = "X-Ringcache-Callers"
	// hdrIdempotencyKey marks a POST that may be sent again (net/http's
	// convention: its presence makes a request retryable).
	hdrIdempotencyKey = "Idempotency-Key"
	// hdrDate (Unix milliseconds), hdrNonce (random, once per request),
	// hdrBodyHash (a PUT's hex SHA-256) and hdrSignature authenticate a
	// peer request (Config.Secrets).
	hdrDate      = "X-Ringcache-Date"
	hdrNonce     = "X-Ringcache-Nonce"
	hdrBodyHash  = "X-Ringcache-Content-Sha256"
	hdrSignature = "X-Ringcache-Signature"

	protobufType = "application/x-protobuf"

	// leaseRoute, under BasePath, answers a lease ping. A path without a
	// "/" after the group cannot name a key, so it collides with no group.
	leaseRoute = "_lease"
	// adoptRoute, under BasePath and followed by a group, takes a POST of
	// values a leaving node hands over. No other request to a group's path
	// is a POST, so it collides with no key.
	adoptRoute = "_adopt/"
	// loadTooLarge is hdrLoadError's value when the origin's value was
	// over the group's MaxValueBytes.
	loadTooLarge = "too-large"
)

// Header values shared by every request, built once.
var (
	leaseWanted   = []string{"1"}
	handoffMarker = []string{"1"}
	loadMissesYes = []string{"1"}
	memberYes     = []string{"1"}
	idempotentYes = []string{"1"}
	memberNo      = []string{"0"}
	scopeCopy     = []string{"copy"}
	replacedValue = []string{"replaced"}
)

// escapeSegment escapes s for one path segment of a peer URL. Every byte but
// the unreserved ones (RFC 3986: A-Z a-z 0-9 - . _ ~) becomes %XX, so
//   - both decoders in play read it back exactly: groupcache's server
//     path-unescapes (r.URL.Path), ours query-unescapes (to read groupcache's
//     own client, which uses url.QueryEscape and so sends a space as "+");
//     with no "+" and no space in the output the two agree;
//   - "/" is escaped, so a key is one segment, and http.ServeMux's path
//     cleaning can only touch a segment that is exactly "." or "..", which
//     is therefore escaped as well.
func escapeSegment(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !unreserved(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hexUpper = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hexUpper[c>>4], hexUpper[c&15])
	}
	return string(b)
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// peerPath returns the escaped path of key in group under basePath.
func peerPath(basePath, group, key string) string {
	return basePath + escapeSegment(group) + "/" + escapeSegment(key)
}

// parsePeerPath splits an escaped request path (r.URL.EscapedPath()) into
// group and key. It reads the escaped form, not r.URL.Path, so that a %2F in
// a group name stays in the group, and it query-unescapes, so that
// groupcache's client (url.QueryEscape, a space sent as "+") is read right;
// our client never sends a literal "+". A key is everything after the first
// "/" that follows the group, slashes included, as groupcache reads it.
func parsePeerPath(escapedPath, basePath string, maxKey int) (group, key string, err error) {
	rest, ok := strings.CutPrefix(escapedPath, basePath)
	if !ok {
		return "", "", fmt.Errorf("%w: not under %s", api.ErrBadPath, basePath)
	}
	eg, ek, ok := strings.Cut(rest, "/")
	if !ok || eg == "" {
		return "", "", fmt.Errorf("%w: want %s<group>/<key>", api.ErrBadPath, basePath)
	}
	if group, err = url.QueryUnescape(eg); err != nil {
		return "", "", fmt.Errorf("%w: group: %v", api.ErrBadPath, err)
	}
	if key, err = url.QueryUnescape(ek); err != nil {
		return "", "", fmt.Errorf("%w: key: %v", api.ErrBadPath, err)
	}
	if err := api.CheckKey(key, maxKey); err != nil {
		return "", "", err
	}
	return group, key, nil
}

// signedHeaders are the request headers a peer request's signature covers
// besides its method, target, path, date, nonce and body hash: everything
// the receiver acts on. Their order is part of the signature.
var signedHeaders = []string{hdrPeer, hdrContentType, hdrExpires, hdrNoStore, hdrStale, hdrScope, hdrLease, hdrHandoff}

// laterSignedHeaders are signed only when present, name and value: a node
// of an earlier version neither sends nor signs them, and its signatures
// still verify. One added to a request signed without it fails the check.
var laterSignedHeaders = []string{hdrMemberSince, hdrLoadMisses}

// signingVersion starts the signed text, so that a signature made under
// another layout can never verify under this one.
const signingVersion = "RINGCACHE-HMAC-SHA256-2"

// signedRequest is what the signature of a peer request covers.
type signedRequest struct {
	Method   string
	Audience string // the receiver's base URL (Config.Self), so a request for one node cannot be replayed to another
	Path     string // escaped, as on the wire
	Date     int64  // Unix milliseconds
	Nonce    string // hex, unique per request
	BodyHash string // hex SHA-256 of the body, PUT and POST only; empty otherwise
	Header   http.Header
}

// signature returns the hex HMAC-SHA256 of s: its fields newline-separated,
// so that no field can run into the next (none holds a raw newline: paths
// are escaped, header values cannot hold one), then the signed headers as
// name:value lines.
func signature(secret []byte, s signedRequest) string {
	m := hmac.New(sha256.New, secret)
	var b []byte
	b = append(b, signingVersion...)
	for _, f := range [...]string{s.Method, s.Audience, s.Path} {
		b = append(b, '\n')
		b = append(b, f...)
	}
	b = append(b, '\n')
	b = strconv.AppendInt(b, s.Date, 10)
	for _, f := range [...]string{s.Nonce, s.BodyHash} {
		b = append(b, '\n')
		b = append(b, f...)
	}
	for _, h := range signedHeaders {
		b = append(b, '\n')
		b = append(b, h...)
		b = append(b, ':')
		b = append(b, s.Header.Get(h)...)
	}
	for _, h := range laterSignedHeaders {
		if v := s.Header.Get(h); v != "" {
			b = append(b, '\n')
			b = append(b, h...)
			b = append(b, ':')
			b = append(b, v...)
		}
	}
	m.Write(b)
	return hex.EncodeToString(m.Sum(nil))
}

// verifySignature checks that sig signs s under one of secrets and that s's
// date lies within window of now either side (clocks of a cluster drift a
// little). It does not check the nonce: the caller does that once the
// signature is known to be good, so that a sender without the secret cannot
// fill the nonce memory.
func verifySignature(secrets [][]byte, s signedRequest, sig string, now time.Time, window time.Duration) error {
	if sig == "" {
		return fmt.Errorf("%w: no signature", ErrUnauthorized)
	}
	if d := time.Duration(now.UnixMilli()-s.Date) * time.Millisecond; d > window || d < -window {
		return fmt.Errorf("%w: date outside the %v window", ErrUnauthorized, window)
	}
	for _, secret := range secrets {
		if hmac.Equal([]byte(signature(secret, s)), []byte(sig)) {
			return nil
		}
	}
	return fmt.Errorf("%w: bad signature", ErrUnauthorized)
}

// formatExpires and parseExpires carry a Value's expiry in hdrExpires.
func formatExpires(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func parseExpires(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %v", hdrExpires, err)
	}
	return t, nil
}

// Errors returned by the transport. The peer client's failures are
// *PeerError values; errors.Is sees through them to these sentinels and to
// the cache's, which say that the owner answered: cache.ErrNotFound (its
// origin has no such key), cache.ErrLoad (its origin failed; with
// context.DeadlineExceeded when it timed out), cache.ErrBadKey and
// cache.ErrTooLarge (it refused the key or the value).
var (
	// ErrConfig is returned by NewPool, NewNode, api.NewHandler and the other
	// constructors for an invalid config. The errors of Config.Validate,
	// ClientLimitConfig.Validate and AuthConfig.Validate are *ConfigError
	// values, which match it and name the field.
	ErrConfig = api.ErrConfig

	// ErrBadPeer is returned by Pool.Set for a peer that is not an
	// http(s) base URL.
	ErrBadPeer = errors.New("transport: bad peer URL")

	// ErrUnauthorized is returned for a peer request without a valid
	// signature, and by the peer client when a peer answered 401.
	ErrUnauthorized = errors.New("transport: unauthorized peer request")

	// ErrPeerStatus is returned by the peer client when a peer answered
	// with an unexpected status code.
	ErrPeerStatus = errors.New("transport: unexpected peer status")

	// ErrPeerDown is returned by the peer client, without a request, for a
	// suspected peer: one that could not be dialled or fell silent, and has
	// not answered a probe since.
	ErrPeerDown = errors.New("transport: peer unreachable")

	// ErrPeerSilent is returned by the peer client for a request that got
	// no byte of an answer within Config.PeerTimeout: a hung or paused
	// process, whose kernel still accepts connections.
	ErrPeerSilent = errors.New("transport: peer silent")

	// ErrBadResponse is returned by the peer client for a response it
	// cannot decode.
	ErrBadResponse = errors.New("transport: bad peer response")
)

// A PeerError reports a failed request to a peer. Err is what went wrong: a
// network error, a context error (Config.PeerTimeout), ErrUnauthorized,
// ErrPeerStatus, ErrBadResponse, or one of the cache's errors listed above
// when the peer answered with it.
type PeerError struct {
	Peer       string // the peer's base URL
	Op         string // "get", "batch", "handoff", "set", "remove", "drop", "adopt" or "lease"
	StatusCode int    // the peer's status code, or 0 if none arrived
	Err        error
}

// Error returns a message naming the peer, the operation and the cause.
func (e *PeerError) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("transport: %s %s: status %d: %v", e.Op, e.Peer, e.StatusCode, e.Err)
	}
	return fmt.Sprintf("transport: %s %s: %v", e.Op, e.Peer, e.Err)
}

// Unwrap returns the cause.
func (e *PeerError) Unwrap() error { return e.Err }

// RemoteNode returns Peer: a PeerError is an api.RemoteError, which the
// public API answers with 502 Bad Gateway.
func (e *PeerError) RemoteNode() string { return e.Peer }

// A ConfigError reports the field of a config that its Validate method
// refused (cache.ConfigError, the one config error type), so that a
// program that fills the config from its own settings (a daemon's flags)
// can name the setting at fault. This package's match ErrConfig.
type ConfigError = cache.ConfigError

// fieldError returns a *ConfigError for field, its reason formatted as by
// fmt.Sprintf.
func fieldError(field, format string, args ...any) error {
	return &ConfigError{Err: ErrConfig, Field: field, Reason: fmt.Sprintf(format, args...)}
}
