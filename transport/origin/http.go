package origin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ringcache/ringcache/cache"
)

const (
	// DefaultMaxBytes is the largest value an origin returns when its
	// Config leaves MaxBytes zero: a group's default MaxValueBytes, so that
	// an origin does not read what its group would refuse anyway.
	DefaultMaxBytes = cache.DefaultMaxValueBytes
	// DefaultTimeout bounds one request of an HTTP origin whose Config
	// leaves Timeout zero.
	DefaultTimeout = 10 * time.Second
)

// HTTPConfig configures an HTTP origin.
type HTTPConfig struct {
	// URL is the template of the upstream URL. "{group}" and "{key}" are
	// replaced by the group name and the key, path-escaped before the first
	// '?' and query-escaped after it, so a key with '/', '?' or '&' cannot
	// change the URL's structure; where "{key}" is in the path, the keys "."
	// and ".." are refused with a *KeyError, since the upstream would resolve
	// them as dot segments. Required: an http or https URL with a host that
	// contains "{key}".
	URL string
	// Group is the name put in place of "{group}".
	Group string
	// Timeout bounds one request, reading the body included. If zero,
	// DefaultTimeout (10s).
	Timeout time.Duration
	// MaxBytes bounds the size of a value. If zero, DefaultMaxBytes.
	MaxBytes int64
	// Header is added to every request (an Authorization header, say).
	// If nil, none.
	Header http.Header
	// Client sends the requests. If nil, a client of its own whose
	// transport keeps up to 64 idle connections per host (the default of 2
	// would open a new connection for most loads under concurrency).
	Client *http.Client
}

// HTTP is an origin that loads keys from an HTTP upstream. A 404 or 410 is
// cache.ErrNotFound; any other status outside 2xx is a *StatusError. The
// upstream's Content-Type is kept, and its Cache-Control (RFC 9111, as a
// shared cache reads it) sets the value's expiry: s-maxage, else max-age,
// minus Age; no-store, no-cache, private, a zero lifetime and an invalid or
// conflicting max-age or s-maxage mark the value NoStore. Without either
// directive, an Expires header is used; without any, the group's TTL
// applies. HTTP is safe for concurrent use.
type HTTP struct {
	pathPart, queryPart string // the template split at its first '?'
	keyInPath           bool   // pathPart has "{key}"
	group               string
	timeout             time.Duration
	maxBytes            int64
	header              http.Header
	client              *http.Client
}

var _ cache.Getter = (*HTTP)(nil)

// NewHTTP validates cfg and returns an HTTP origin.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	if !strings.Contains(cfg.URL, "{key}") {
		return nil, configError("url %q: must contain {key}", cfg.URL)
	}
	probe := strings.NewReplacer("{group}", "g", "{key}", "k").Replace(cfg.URL)
	u, err := url.Parse(probe)
	if err != nil {
		return nil, configError("url %q: %v", cfg.URL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, configError("url %q: scheme must be http or https", cfg.URL)
	}
	if u.Host == "" {
		return nil, configError("url %q: no host", cfg.URL)
	}
	if strings.Contains(cfg.URL, "#") {
		// A fragment is not sent: keys in it would all ask for one URL.
		return nil, configError("url %q: a fragment is not sent to the upstream", cfg.URL)
	}
	// A placeholder in the scheme or host would let a key pick the server.
	authorityEnd := strings.Index(cfg.URL, "://") + 3
	if i := strings.IndexAny(cfg.URL[authorityEnd:], "/?#"); i >= 0 {
		authorityEnd += i
	} else {
		authorityEnd = len(cfg.URL)
	}
	if strings.Contains(cfg.URL[:authorityEnd], "{") {
		return nil, configError("url %q: {group} and {key} must come after the host", cfg.URL)
	}
	if cfg.Timeout < 0 {
		return nil, configError("timeout %v: must not be negative", cfg.Timeout)
	}
	if cfg.MaxBytes < 0 {
		return nil, configError("max bytes %d: must not be negative", cfg.MaxBytes)
	}
	h := &HTTP{
		group:    cfg.Group,
		timeout:  cfg.Timeout,
		maxBytes: cfg.MaxBytes,
		header:   cfg.Header.Clone(),
		client:   cfg.Client,
	}
	var hasQuery bool
	h.pathPart, h.queryPart, hasQuery = strings.Cut(cfg.URL, "?")
	if hasQuery {
		h.queryPart = "?" + h.queryPart
	}
	h.keyInPath = strings.Contains(h.pathPart, "{key}")
	if h.timeout == 0 {
		h.timeout = DefaultTimeout
	}
	if h.maxBytes == 0 {
		h.maxBytes = DefaultMaxBytes
	}
	if h.client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		h.client = &http.Client{Transport: t}
	}
	return h, nil
}

// Get fetches key from the upstream.
func (h *HTTP) Get(ctx context.Context, key string) (cache.Value, error) {
	// Escaping cannot help here: "%2E%2E" is ".." to RFC 3986 normalization
	// and to servers that decode before they clean the path (net/http's
	// ServeMux does), so "/v/{key}" would become "/", outside the template.
	if h.keyInPath && (key == "." || key == "..") {
		return cache.Value{}, &KeyError{Key: key, Reason: "a dot segment in the upstream path"}
	}
	u := h.url(key)
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return cache.Value{}, fmt.Errorf("origin: %w", err)
	}
	for k, vs := range h.header {
		req.Header[k] = vs
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return cache.Value{}, fmt.Errorf("origin: %w", err)
	}
	defer resp.Body.Close()

	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		drain(resp.Body)
		return cache.Value{}, fmt.Errorf("origin: %s: %w", u, cache.ErrNotFound)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		drain(resp.Body)
		return cache.Value{}, &StatusError{URL: u, StatusCode: resp.StatusCode}
	}
	if resp.ContentLength > h.maxBytes {
		return cache.Value{}, fmt.Errorf("%w: %s: content length %d > %d", ErrTooLarge, u, resp.ContentLength, h.maxBytes)
	}
	// Read one byte more than allowed to tell "exactly MaxBytes" from "more".
	data, err := io.ReadAll(io.LimitReader(resp.Body, h.maxBytes+1))
	if err != nil {
		return cache.Value{}, fmt.Errorf("origin: %s: reading body: %w", u, err)
	}
	if int64(len(data)) > h.maxBytes {
		return cache.Value{}, fmt.Errorf("%w: %s: body > %d bytes", ErrTooLarge, u, h.maxBytes)
	}
	v := cache.Value{Data: data, ContentType: resp.Header.Get("Content-Type")}
	v.Expires, v.NoStore = freshness(resp.Header, time.Now())
	v.StaleWhileRevalidate, v.StaleIfError = staleWindows(resp.Header)
	return v, nil
}

// url fills the template for key.
func (h *HTTP) url(key string) string {
	g, k := url.PathEscape(h.group), url.PathEscape(key)
	s := strings.NewReplacer("{group}", g, "{key}", k).Replace(h.pathPart)
	if h.queryPart != "" {
		g, k = url.QueryEscape(h.group), url.QueryEscape(key)
		s += strings.NewReplacer("{group}", g, "{key}", k).Replace(h.queryPart)
	}
	return s
}

// drain reads a little of an unwanted body so that the connection can be
// reused, without reading an unbounded one.
func drain(r io.Reader) { _, _ = io.CopyN(io.Discard, r, 4<<10) }

// freshness reads a response's caching headers as a shared cache does
// (RFC 9111 sections 4.2.1 and 5.2.2): it returns when the value expires
// (zero: the headers say nothing, the group's TTL applies) and whether the
// value must not be stored.
func freshness(h http.Header, now time.Time) (expires time.Time, noStore bool) {
	var maxAge, sMaxAge time.Duration
	haveMaxAge, haveSMaxAge := false, false
	// directive records a delta-seconds directive. RFC 9111 section 4.2.1:
	// invalid freshness information (max-age=-1, max-age=soon) and
	// conflicting repeats are stale, not absent; read as absent, the group's
	// TTL (possibly "until evicted") would keep what the upstream meant to
	// expire at once.
	directive := func(d *time.Duration, have *bool, arg string) {
		n, ok := seconds(arg)
		if !ok || *have && n != *d {
			noStore = true
		}
		*d, *have = n, true
	}
	for _, line := range h.Values("Cache-Control") {
		for d := range strings.SplitSeq(line, ",") {
			name, arg, _ := strings.Cut(strings.TrimSpace(d), "=")
			arg = strings.Trim(strings.TrimSpace(arg), `"`)
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "no-store", "no-cache", "private":
				// no-cache allows storing but demands revalidation before
				// every use, which a read-through cache cannot do; private
				// forbids shared caches.
				noStore = true
			case "max-age":
				directive(&maxAge, &haveMaxAge, arg)
			case "s-maxage":
				directive(&sMaxAge, &haveSMaxAge, arg)
			}
		}
	}
	if noStore {
		return time.Time{}, true
	}
	var lifetime time.Duration
	switch {
	case haveSMaxAge:
		lifetime = sMaxAge
	case haveMaxAge:
		lifetime = maxAge
	case h.Get("Expires") != "":
		exp, err := http.ParseTime(h.Get("Expires"))
		if err != nil {
			return time.Time{}, true // an invalid Expires means "already expired"
		}
		// Measure against the upstream's own clock when it sends one, so
		// that clock skew between us and it does not change the lifetime.
		base := now
		if date, err := http.ParseTime(h.Get("Date")); err == nil {
			base = date
		}
		lifetime = exp.Sub(base)
	default:
		return time.Time{}, false
	}
	if age, ok := seconds(h.Get("Age")); ok {
		lifetime -= age
	}
	if lifetime <= 0 {
		return time.Time{}, true
	}
	return now.Add(lifetime), false
}

// staleWindows returns the upstream's stale-while-revalidate and
// stale-if-error Cache-Control extensions (RFC 5861), zero where absent or
// invalid: the group's own windows apply then.
func staleWindows(h http.Header) (swr, sie time.Duration) {
	for _, line := range h.Values("Cache-Control") {
		for d := range strings.SplitSeq(line, ",") {
			name, arg, _ := strings.Cut(strings.TrimSpace(d), "=")
			n, ok := seconds(strings.Trim(strings.TrimSpace(arg), `"`))
			if !ok {
				continue
			}
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "stale-while-revalidate":
				swr = n
			case "stale-if-error":
				sie = n
			}
		}
	}
	return swr, sie
}

// seconds parses a delta-seconds value; values too large to represent are
// capped at about 68 years, as RFC 9111 section 1.2.2 allows.
func seconds(s string) (time.Duration, bool) {
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	// On ErrRange, n is the largest uint64, which the cap brings down.
	return time.Duration(min(n, 1<<31-1)) * time.Second, true
}
