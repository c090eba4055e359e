package transport

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ringcache/ringcache/cache"
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
	// hdrNoStore marks a value the origin asked not to cache.
	hdrNoStore = "X-Ringcache-No-Store"
	// hdrNotFound marks a 404 that means "the origin does not have the key",
	// as opposed to an unknown group or route (also 404 in groupcache).
	hdrNotFound = "X-Ringcache-Not-Found"
	// hdrLoadError marks an error answer caused by the origin failing at
	// the owner (cache.ErrLoad), which the requester must not retry itself.
	hdrLoadError = "X-Ringcache-Load-Error"
	// hdrLease asks for a contact lease (on a request) and grants one (on a
	// response: the grantor's incarnation and revocation count); see lease.go.
	hdrLease = "X-Ringcache-Lease"
	// hdrScope "copy" on a DELETE asks a node to drop its own copies of a
	// key only; without it a DELETE is a removal applied by the key's owner.
	hdrScope = "X-Ringcache-Scope"
	// hdrUnreached, on the owner's answer to a write, lists the base URLs of
	// the nodes it could not tell to drop their copy (they expired by lease).
	hdrUnreached = "X-Ringcache-Unreached"
	// hdrHandoff marks a GET from a key's new owner to its previous one,
	// answered from the caches only (never loaded, never forwarded).
	hdrHandoff = "X-Ringcache-Handoff"
	// hdrDate and hdrSignature authenticate a peer request (Config.Secret).
	hdrDate      = "X-Ringcache-Date"
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
	scopeCopy     = []string{"copy"}
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
		return "", "", fmt.Errorf("%w: not under %s", ErrBadPath, basePath)
	}
	eg, ek, ok := strings.Cut(rest, "/")
	if !ok || eg == "" {
		return "", "", fmt.Errorf("%w: want %s<group>/<key>", ErrBadPath, basePath)
	}
	if group, err = url.QueryUnescape(eg); err != nil {
		return "", "", fmt.Errorf("%w: group: %v", ErrBadPath, err)
	}
	if key, err = url.QueryUnescape(ek); err != nil {
		return "", "", fmt.Errorf("%w: key: %v", ErrBadPath, err)
	}
	if err := checkKey(key, maxKey); err != nil {
		return "", "", err
	}
	return group, key, nil
}

// checkKey applies the rules both routes share: not empty, at most max bytes.
func checkKey(key string, max int) error {
	if key == "" {
		return fmt.Errorf("%w: empty", cache.ErrBadKey)
	}
	if len(key) > max {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLong, len(key), max)
	}
	return nil
}

// signature returns the hex HMAC-SHA256 of a peer request: method, escaped
// path and the Unix time in seconds, newline-separated so that no field can
// run into the next (a path never holds a raw newline).
func signature(secret []byte, method, escapedPath string, unix int64) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(method))
	m.Write([]byte{'\n'})
	m.Write([]byte(escapedPath))
	m.Write([]byte{'\n'})
	m.Write(strconv.AppendInt(nil, unix, 10))
	return hex.EncodeToString(m.Sum(nil))
}

// verifySignature checks a peer request's date and signature headers at
// time now, accepting a date within window either side (clocks of a cluster
// drift a little; a captured request stays replayable only that long).
func verifySignature(secret []byte, method, escapedPath, date, sig string, now time.Time, window time.Duration) error {
	if date == "" || sig == "" {
		return fmt.Errorf("%w: no signature", ErrUnauthorized)
	}
	unix, err := strconv.ParseInt(date, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: bad date", ErrUnauthorized)
	}
	if d := now.Sub(time.Unix(unix, 0)); d > window || d < -window {
		return fmt.Errorf("%w: date outside the %v window", ErrUnauthorized, window)
	}
	want := signature(secret, method, escapedPath, unix)
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return fmt.Errorf("%w: bad signature", ErrUnauthorized)
	}
	return nil
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
