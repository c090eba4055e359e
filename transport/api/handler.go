// Package api is ringcache's public HTTP API: Handler serves
// /cache/{group}/{key...} (GET, HEAD, PUT, DELETE), batches of keys and
// purges over a cache.Node, Auth decides which requests need a bearer
// token, ClientLimiter bounds each client's misses, and StatusOf maps every
// error to its status code in one place. Any HTTP client can use it; the
// answers are documented on Handler.
//
// A transport.Node mounts a Handler beside the peer routes
// (transport.NodeConfig.Public configures it), and transport/fast answers
// its cached hits (Handler.CachedHit) without net/http.
package api

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/ringcache/ringcache/cache"
)

// PublicPrefix is the path prefix of the public API.
const PublicPrefix = "/cache/"

// DefaultMaxKeyBytes bounds a key, after unescaping, where a config leaves
// it zero: on the public route and on the peer route
// (transport.Config.MaxKeyBytes), which must agree.
const DefaultMaxKeyBytes = 250

// maxPurgeAnswer is how long a purge's answer may take: a minute more than
// the longest a purge waits for a node it cannot reach.
const maxPurgeAnswer = cache.MaxPurgeLease + time.Minute

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// MaxKeyBytes bounds a key, after unescaping. If zero, 250.
	MaxKeyBytes int
	// Logger receives unexpected failures (500s). If nil, logs are discarded.
	Logger *slog.Logger
	// Auth decides which requests need a bearer token. If nil, none does
	// and writes are open: the embedding program guards the handler.
	Auth *Auth
	// Clients bounds each client's requests that miss the cache (429 over
	// the bound). If nil, there is no bound.
	Clients *ClientLimiter
}

// Handler serves the public API of a node, under /cache/:
//
//	GET    /cache/{group}/{key...}  the value's bytes; 200, or 304 for a
//	                                matching If-None-Match
//	HEAD   /cache/{group}/{key...}  the same headers, no body
//	PUT    /cache/{group}/{key...}  set the value to the body (at the key's
//	                                owner); 204. Content-Type is kept;
//	                                "Cache-Control: max-age=N" sets the expiry
//	DELETE /cache/{group}/{key...}  drop the key cluster-wide; 204
//	GET    /cache/{group}?key=K...  many keys in one answer (also POST of a
//	                                form of keys); see serveBatch
//	DELETE /cache/{group}[?prefix=P] purge the group (or the keys under P)
//	                                on every node; see servePurge
//
// A 200 carries ETag, Content-Type (application/octet-stream unless the
// origin or the PUT said otherwise), Content-Length and, for a value that
// expires, Cache-Control: max-age. Errors are a status code with a short
// text body, as StatusOf documents: 400 for an empty or over-long key, 401
// (with a Bearer challenge) or 403 when HandlerConfig.Auth refuses the
// request, 404 for an unknown group or a key the origin does not have, 405
// (with Allow), 413 for a value over the group's MaxValueBytes, 429 (with
// Retry-After) for a miss over HandlerConfig.Clients' bounds (none by
// default), 502 when the origin fails, 503 (with Retry-After) when the
// group's load queue sheds the miss (cache.ErrOverloaded) or the key was
// written at an owner out of reach (cache.ErrOwnerUnreachable), 504 when
// the origin times out.
//
// The key is the rest of the path after the group, unescaped once, so it may
// contain "/" and, percent-encoded, any byte. Escape "/" as %2F where the key
// has empty or dot segments ("a//b", "a/./b"): net/http cleans such paths
// and redirects before a handler sees them.
//
// Handler does not serve the peer routes (transport.Pool.PeerHandler), so the two can
// listen on different addresses. A Handler is safe for concurrent use.
type Handler struct {
	node *cache.Node
	cfg  HandlerConfig
	mux  *http.ServeMux
	now  func() time.Time
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns the public API of node.
func NewHandler(node *cache.Node, cfg HandlerConfig) (*Handler, error) {
	if node == nil {
		return nil, fmt.Errorf("%w: nil node", ErrConfig)
	}
	if cfg.MaxKeyBytes == 0 {
		cfg.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if cfg.MaxKeyBytes < 0 {
		return nil, fmt.Errorf("%w: MaxKeyBytes %d < 0", ErrConfig, cfg.MaxKeyBytes)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{node: node, cfg: cfg, mux: http.NewServeMux(), now: time.Now}
	// The mux serves what the fast path in ServeHTTP leaves to it, such as
	// paths to clean (it redirects). One pattern for every method, so that
	// 405 goes through StatusOf like every other error; a second one
	// catches /cache/ paths without a key.
	h.mux.HandleFunc(PublicPrefix+"{group}/{key...}", func(w http.ResponseWriter, r *http.Request) {
		h.serveKey(w, r, r.PathValue("group"), r.PathValue("key"))
	})
	// The routes of a whole group, behind the same check as a key's.
	guard := func(f http.HandlerFunc) http.Handler {
		if cfg.Auth == nil {
			return f
		}
		return cfg.Auth.Guard(f)
	}
	h.mux.Handle("DELETE "+PublicPrefix+"{group}", guard(func(w http.ResponseWriter, r *http.Request) {
		h.servePurge(w, r, r.PathValue("group"))
	}))
	batch := guard(func(w http.ResponseWriter, r *http.Request) { h.serveBatch(w, r, r.PathValue("group")) })
	h.mux.Handle("GET "+PublicPrefix+"{group}", batch)
	h.mux.Handle("POST "+PublicPrefix+"{group}", batch)
	h.mux.HandleFunc(PublicPrefix, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, fmt.Errorf("%w: want %s{group}/{key}", ErrBadPath, PublicPrefix))
	})
	return h, nil
}

// ServeHTTP serves the public API. A clean path with a group and a key is
// routed here, as the mux would route it, without the mux's matching and its
// per-request allocations; anything else goes to the mux.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if group, key, ok := route(r); ok {
		h.serveKey(w, r, group, key)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// route splits a request's path into the group and the key exactly as the
// pattern "/cache/{group}/{key...}" of a ServeMux does (each unescaped once),
// when the mux would serve the path as it is: ok is false for a path the mux
// would clean and redirect, an empty group or key, or an escape it would
// leave alone. It does not allocate unless the path holds escapes.
func route(r *http.Request) (group, key string, ok bool) {
	if r.Method == http.MethodConnect {
		return "", "", false // the mux does not clean CONNECT paths
	}
	return routePath(r.URL.EscapedPath())
}

// routePath is route for an escaped path p.
func routePath(p string) (group, key string, ok bool) {
	rest, ok := strings.CutPrefix(p, PublicPrefix)
	if !ok || !isClean(p) {
		return "", "", false
	}
	group, key, ok = strings.Cut(rest, "/")
	if !ok || group == "" || key == "" {
		return "", "", false
	}
	var err1, err2 error
	if strings.IndexByte(group, '%') >= 0 {
		group, err1 = url.PathUnescape(group)
	}
	if strings.IndexByte(key, '%') >= 0 {
		key, err2 = url.PathUnescape(key)
	}
	return group, key, err1 == nil && err2 == nil
}

// isClean reports whether the mux would serve p without redirecting: p is
// its own path.Clean, but for a trailing slash, which the mux keeps.
func isClean(p string) bool {
	c := path.Clean(p)
	return c == p || len(p) == len(c)+1 && p[len(c)] == '/' && strings.HasPrefix(p, c)
}

const allowPublic = "GET, HEAD, PUT, DELETE"

func (h *Handler) serveKey(w http.ResponseWriter, r *http.Request, name, key string) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete:
	default:
		w.Header().Set("Allow", allowPublic)
		writeError(w, ErrMethodNotAllowed)
		return
	}
	if h.cfg.Auth != nil {
		if err := h.cfg.Auth.Check(r); err != nil {
			challenge(w, err)
			writeError(w, err)
			return
		}
	}
	if err := CheckKey(key, h.cfg.MaxKeyBytes); err != nil {
		writeError(w, err)
		return
	}
	g, ok := h.node.Group(name)
	if !ok {
		writeError(w, fmt.Errorf("%w: %q", cache.ErrNoSuchGroup, name))
		return
	}
	ctx := r.Context()
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		// What the caches answer (a value or a remembered not-found) takes
		// one lookup; only a miss counts against the client's bounds.
		v, ok, err := g.GetCached(key)
		if !ok {
			if h.cfg.Clients != nil {
				release, err := h.cfg.Clients.Acquire(r.RemoteAddr)
				if err != nil {
					w.Header().Set("Retry-After", "1")
					writeError(w, err)
					return
				}
				defer release()
			}
			// A miss may load from the origin: the group's load queue
			// shares its slots between clients, a client being its
			// address as for Clients.
			v, err = g.Get(cache.WithCaller(ctx, ClientOf(r.RemoteAddr).String()), key)
		}
		if err != nil {
			h.fail(w, r, name, key, err)
			return
		}
		h.writeValue(w, r, v)
	case http.MethodPut:
		v, err := ReadValue(w, r, g.Config().MaxValueBytes)
		if err != nil {
			h.fail(w, r, name, key, err)
			return
		}
		v.ContentType = r.Header.Get("Content-Type")
		if maxAge, ok := parseMaxAge(r.Header.Get("Cache-Control")); ok {
			v.Expires = h.now().Add(maxAge)
		}
		res, err := g.Set(ctx, key, v)
		h.written(w, r, name, key, res, err)
	case http.MethodDelete:
		res, err := g.Remove(ctx, key)
		h.written(w, r, name, key, res, err)
	}
}

// HeaderUnreached is the header of a public write's 204 that names the
// nodes the owner could not tell to drop their copy of the key. The write
// was applied; those nodes' copies expired by lease before the answer, so
// they will not serve the old value either.
const HeaderUnreached = "Ringcache-Unreached"

// written answers a write: 204 once the owner applied it, an error when it
// did not.
func (h *Handler) written(w http.ResponseWriter, r *http.Request, group, key string, res cache.WriteResult, err error) {
	if err != nil {
		h.fail(w, r, group, key, err)
		return
	}
	if len(res.Unreached) > 0 {
		w.Header().Set(HeaderUnreached, strings.Join(res.Unreached, ", "))
	}
	w.WriteHeader(http.StatusNoContent)
}

// fail writes err and logs it when it is a failure of ours (500), which
// StatusOf has no better name for.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, group, key string, err error) {
	if StatusOf(err) == http.StatusInternalServerError {
		h.cfg.Logger.Error("transport: request failed",
			"group", group, "key", key, "method", r.Method, "err", err)
	}
	writeError(w, err)
}

// Header values that never change, shared by every response: net/http only
// reads them. Their capacity is their length, so that an Add by a wrapping
// handler copies rather than writes into them.
var (
	octetStream = []string{"application/octet-stream"}
	maxAgeZero  = []string{"max-age=0"}
	noSniff     = []string{"nosniff"}
	noStore     = []string{"no-store"}
)

// writeValue writes a 200 (or 304) for v.
//
// It runs on every hit, so it is written to allocate twice: one string
// holds the ETag and the decimal length (and max-age when the value
// expires), and one slice holds every header value that is not shared.
// The headers are set in the map directly, under their canonical names,
// rather than through Header.Set, which allocates a slice per value.
func (h *Handler) writeValue(w http.ResponseWriter, r *http.Request, v cache.Value) {
	var buf [80]byte
	b, tagEnd, lenEnd, expires := h.appendHead(buf[:0], v)
	s := string(b)
	tag := s[:tagEnd]
	vals := make([]string, 4)
	vals[0], vals[1], vals[2] = tag, s[tagEnd:lenEnd], s[lenEnd:]

	hd := w.Header()
	hd["Etag"] = vals[0:1:1]
	switch {
	case v.NoStore:
		hd["Cache-Control"] = noStore
	case v.Stale:
		// Served past its expiry (a stale window): say how old it is.
		hd["Cache-Control"] = maxAgeZero
		hd.Set("Age", strconv.FormatInt(int64(v.Age/time.Second), 10))
	case expires:
		hd["Cache-Control"] = vals[2:3:3]
	}
	if etagMatch(r.Header.Get("If-None-Match"), tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if v.ContentType == "" {
		hd["Content-Type"] = octetStream
	} else {
		vals[3] = v.ContentType
		hd["Content-Type"] = vals[3:4:4]
	}
	// The origin chose the content type; do not let a browser guess another.
	hd["X-Content-Type-Options"] = noSniff
	if r.Method == http.MethodHead || len(v.Data) > autoLengthMax {
		hd["Content-Length"] = vals[1:2:2]
	}
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(v.Data)
	}
}

// appendHead appends to b what the headers of a 200 for v say besides its
// content type: the ETag (b[:tagEnd]), the decimal length
// (b[tagEnd:lenEnd]) and, when expires, the Cache-Control value
// "max-age=N" (b[lenEnd:]). A value that is no-store or stale has no
// max-age: its Cache-Control is fixed.
func (h *Handler) appendHead(b []byte, v cache.Value) (_ []byte, tagEnd, lenEnd int, expires bool) {
	b = appendValueETag(b, v)
	tagEnd = len(b)
	b = strconv.AppendInt(b, int64(len(v.Data)), 10)
	lenEnd = len(b)
	secs, expires := maxAgeOf(v, h.now())
	if expires {
		b = append(b, "max-age="...)
		b = strconv.AppendInt(b, secs, 10)
	}
	return b, tagEnd, lenEnd, expires
}

// maxAgeOf returns the max-age, in seconds, that tells a client when v
// expires, and false when it has none to tell (no expiry, no-store, or
// served stale). It rounds up: a value that expires in 0.4s may be cached
// for 1s, rather than max-age=0 telling clients it is already stale.
func maxAgeOf(v cache.Value, now time.Time) (int64, bool) {
	if v.NoStore || v.Stale || v.Expires.IsZero() {
		return 0, false
	}
	return max(0, int64(math.Ceil(v.Expires.Sub(now).Seconds()))), true
}

// autoLengthMax is the largest body for which net/http sends the
// Content-Length itself: it buffers a response that small until the handler
// returns (its chunking buffer is 2 KiB), and writes the length outside the
// header map, without the map's per-field cost. A larger value, or any
// answer to HEAD (no body is written), needs it set by hand, or the client
// would get a chunked body or no length.
const autoLengthMax = 2048

// ETag returns the strong entity tag the API gives data, the same on every node: its
// cache.Checksum (CRC-32C and CRC-32) and its length, in lowercase hex. Two
// versions of a value collide with probability 2^-64; a CRC is not
// collision resistant, but whoever could pick colliding values can PUT any
// value anyway. A cached value carries its checksum, so a hit formats the
// tag without reading the bytes.
func ETag(data []byte) string {
	return string(appendETag(nil, cache.Checksum(data), len(data)))
}

// appendValueETag appends v's entity tag, from the checksum v carries
// when it came from a cache.
func appendValueETag(b []byte, v cache.Value) []byte {
	sum := v.Checksum
	if sum == 0 {
		sum = cache.Checksum(v.Data) // not from a cache, or empty
	}
	return appendETag(b, sum, len(v.Data))
}

// appendETag appends the entity tag of a value of n bytes whose checksum is
// sum.
func appendETag(b []byte, sum uint64, n int) []byte {
	var sums [8]byte
	binary.BigEndian.PutUint64(sums[:], sum)
	b = append(b, '"')
	b = hex.AppendEncode(b, sums[:])
	b = append(b, '-')
	b = strconv.AppendUint(b, uint64(n), 16)
	return append(b, '"')
}

// etagMatch reports whether an If-None-Match header matches tag, with the
// weak comparison RFC 9110 section 13.1.2 prescribes for it.
func etagMatch(header, tag string) bool {
	if header == "" {
		return false
	}
	for t := range strings.SplitSeq(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == tag {
			return true
		}
	}
	return false
}

// parseMaxAge returns the max-age directive of a Cache-Control header.
func parseMaxAge(header string) (time.Duration, bool) {
	for d := range strings.SplitSeq(header, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(d), "=")
		if !ok || !strings.EqualFold(name, "max-age") {
			continue
		}
		secs, err := strconv.ParseInt(strings.Trim(val, `"`), 10, 64)
		if err != nil || secs < 0 || secs > math.MaxInt64/int64(time.Second) {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	}
	return 0, false
}

// servePurge serves DELETE /cache/{group}[?prefix=P]: a purge of the
// group, or of its keys under P, on every node. 200 with the
// cache.PurgeResult as JSON once it holds; an empty prefix is refused
// (400) rather than taken for the whole group. The mux guards it with
// Auth (the write token).
func (h *Handler) servePurge(w http.ResponseWriter, r *http.Request, name string) {
	q := r.URL.Query()
	prefix, scoped := q.Get("prefix"), q.Has("prefix")
	switch {
	case scoped && prefix == "":
		writeError(w, fmt.Errorf("%w: empty prefix; to purge the whole group, leave prefix out", ErrBadRequest))
		return
	case len(prefix) > h.cfg.MaxKeyBytes:
		writeError(w, fmt.Errorf("%w: prefix of %d bytes, keys have at most %d", ErrBadRequest, len(prefix), h.cfg.MaxKeyBytes))
		return
	}
	g, ok := h.node.Group(name)
	if !ok {
		writeError(w, fmt.Errorf("%w: %q", cache.ErrNoSuchGroup, name))
		return
	}
	// A purge may wait out a purge lease for a node it cannot reach,
	// longer than the server's write timeout allows a response. (A server
	// that cannot move the deadline keeps its own.)
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(maxPurgeAnswer))
	res, err := g.PurgePrefix(r.Context(), prefix)
	if err != nil {
		h.fail(w, r, name, prefix, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

// CheckKey applies the rules of keys that the public and the peer routes
// share: not empty (cache.ErrBadKey), at most max bytes (ErrKeyTooLong).
func CheckKey(key string, max int) error {
	if key == "" {
		return fmt.Errorf("%w: empty", cache.ErrBadKey)
	}
	if len(key) > max {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLong, len(key), max)
	}
	return nil
}

// ReadValue reads a PUT body of at most max bytes; a longer one is refused
// with an error that StatusOf maps to 413, and is not read further.
//
// The cache keeps the returned slice and accounts for its length only, so
// the slice must not sit in a larger array: bytes.Buffer.ReadFrom (and
// io.ReadAll) leave up to twice the length in capacity, which would make
// the group hold up to twice its MaxBytes.
func ReadValue(w http.ResponseWriter, r *http.Request, max int64) (cache.Value, error) {
	body := http.MaxBytesReader(w, r.Body, max)
	var data []byte
	var err error
	if n := r.ContentLength; n >= 0 && n <= max {
		// The server's body reader stops at Content-Length, so exactly n
		// bytes arrive, or an error.
		data = make([]byte, n)
		_, err = io.ReadFull(body, data)
	} else {
		data, err = io.ReadAll(body)
		if err == nil && cap(data)-len(data) > len(data)/8 {
			data = append(make([]byte, 0, len(data)), data...)
		}
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return cache.Value{}, fmt.Errorf("%w: body over %d bytes", cache.ErrTooLarge, max)
		}
		return cache.Value{}, fmt.Errorf("%w: reading body: %v", ErrBadRequest, err)
	}
	return cache.Value{Data: data}, nil
}
