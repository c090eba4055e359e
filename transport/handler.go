package transport

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ringcache/ringcache/cache"
)

// PublicPrefix is the path prefix of the public API.
const PublicPrefix = "/cache/"

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// MaxKeyBytes bounds a key, after unescaping. If zero, 250.
	MaxKeyBytes int
	// Logger receives unexpected failures (500s). If nil, logs are discarded.
	Logger *slog.Logger
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
//
// A 200 carries ETag, Content-Type (application/octet-stream unless the
// origin or the PUT said otherwise), Content-Length and, for a value that
// expires, Cache-Control: max-age. Errors are a status code with a short
// text body, as StatusOf documents: 400 for an empty or over-long key, 404
// for an unknown group or a key the origin does not have, 405 (with Allow),
// 413 for a value over the group's MaxValueBytes, 502 when the origin fails,
// 504 when it times out.
//
// The key is the rest of the path after the group, unescaped once, so it may
// contain "/" and, percent-encoded, any byte. Escape "/" as %2F where the key
// has empty or dot segments ("a//b", "a/./b"): net/http cleans such paths
// and redirects before a handler sees them.
//
// Handler does not serve the peer routes (Pool.PeerHandler), so the two can
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
	// One pattern for every method, so that 405 goes through StatusOf like
	// every other error; a second one catches /cache/ paths without a key.
	h.mux.HandleFunc(PublicPrefix+"{group}/{key...}", h.serveKey)
	h.mux.HandleFunc(PublicPrefix, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, fmt.Errorf("%w: want %s{group}/{key}", ErrBadPath, PublicPrefix))
	})
	return h, nil
}

// ServeHTTP serves the public API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

const allowPublic = "GET, HEAD, PUT, DELETE"

func (h *Handler) serveKey(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete:
	default:
		w.Header().Set("Allow", allowPublic)
		writeError(w, ErrMethodNotAllowed)
		return
	}
	key := r.PathValue("key")
	if err := checkKey(key, h.cfg.MaxKeyBytes); err != nil {
		writeError(w, err)
		return
	}
	name := r.PathValue("group")
	g, ok := h.node.Group(name)
	if !ok {
		writeError(w, fmt.Errorf("%w: %q", cache.ErrNoSuchGroup, name))
		return
	}
	ctx := r.Context()
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		v, err := g.Get(ctx, key)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		h.writeValue(w, r, v)
	case http.MethodPut:
		v, err := readValue(w, r, g.Config().MaxValueBytes)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		v.ContentType = r.Header.Get("Content-Type")
		if maxAge, ok := parseMaxAge(r.Header.Get("Cache-Control")); ok {
			v.Expires = h.now().Add(maxAge)
		}
		res, err := g.Set(ctx, key, v)
		h.written(w, r, res, err)
	case http.MethodDelete:
		res, err := g.Remove(ctx, key)
		h.written(w, r, res, err)
	}
}

// HeaderUnreached is the header of a public write's 204 that names the
// nodes the owner could not tell to drop their copy of the key. The write
// was applied; those nodes' copies expired by lease before the answer, so
// they will not serve the old value either.
const HeaderUnreached = "Ringcache-Unreached"

// written answers a write: 204 once the owner applied it, an error when it
// did not.
func (h *Handler) written(w http.ResponseWriter, r *http.Request, res cache.WriteResult, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if len(res.Unreached) > 0 {
		w.Header().Set(HeaderUnreached, strings.Join(res.Unreached, ", "))
	}
	w.WriteHeader(http.StatusNoContent)
}

// fail writes err and logs it when it is a failure of ours (500), which
// StatusOf has no better name for.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	if StatusOf(err) == http.StatusInternalServerError {
		h.cfg.Logger.Error("transport: request failed",
			"group", r.PathValue("group"), "key", r.PathValue("key"), "method", r.Method, "err", err)
	}
	writeError(w, err)
}

// writeValue writes a 200 (or 304) for v.
func (h *Handler) writeValue(w http.ResponseWriter, r *http.Request, v cache.Value) {
	hd := w.Header()
	tag := etag(v.Data)
	hd.Set("ETag", tag)
	switch {
	case v.NoStore:
		hd.Set("Cache-Control", "no-store")
	case v.Stale:
		// Served past its expiry (a stale window): say how old it is.
		hd.Set("Cache-Control", "max-age=0")
		hd.Set("Age", strconv.FormatInt(int64(v.Age/time.Second), 10))
	case !v.Expires.IsZero():
		// Round up: a value that expires in 0.4s may be cached for 1s,
		// rather than max-age=0 telling clients it is already stale.
		secs := max(0, int64(math.Ceil(v.Expires.Sub(h.now()).Seconds())))
		hd.Set("Cache-Control", "max-age="+strconv.FormatInt(secs, 10))
	}
	if etagMatch(r.Header.Get("If-None-Match"), tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	ct := v.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	hd.Set("Content-Type", ct)
	// The origin chose the content type; do not let a browser guess another.
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Length", strconv.Itoa(len(v.Data)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(v.Data)
	}
}

// etag returns a strong entity tag of data, the same on every node: its
// CRC-32C and CRC-32 (IEEE), which together act as one 64-bit CRC whose
// polynomial is the product of the two, and its length. It runs on every
// 200 and 304, so it must cost little next to writing the value: both CRCs
// have hardware paths (SSE4.2, PCLMULQDQ on amd64; ARMv8 CRC) and take a
// fraction of the time a cryptographic hash would (SHA-256 takes about
// 1.2 ms per MiB here). Two versions
// of a value collide with probability 2^-64; a CRC is not collision
// resistant, but whoever could pick colliding values can PUT any value
// anyway.
func etag(data []byte) string {
	var sums [8]byte
	binary.BigEndian.PutUint32(sums[:4], crc32.Checksum(data, castagnoli))
	binary.BigEndian.PutUint32(sums[4:], crc32.ChecksumIEEE(data))
	var b [1 + 16 + 1 + 16 + 1]byte
	t := append(b[:0], '"')
	t = hex.AppendEncode(t, sums[:])
	t = append(t, '-')
	t = strconv.AppendUint(t, uint64(len(data)), 16)
	t = append(t, '"')
	return string(t)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

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
