package api

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/ringcache/ringcache/cache"
)

// Limits of one batch read (GET or POST /cache/{group} with keys).
const (
	// MaxBatchKeys is the most keys one batch read may name.
	MaxBatchKeys = 1000
	// MaxBatchBytes bounds the values one batch answer carries: the keys
	// past it are answered 413, to be asked for again.
	MaxBatchBytes = 32 << 20
	// maxBatchForm bounds a POSTed list of keys.
	maxBatchForm = 1 << 20
)

// BatchItem is one key's line in a batch answer (application/x-ndjson), as a
// client decodes it.
type BatchItem struct {
	Key         string `json:"key"`
	Status      int    `json:"status"`
	Value       string `json:"value,omitempty"`
	ValueBase64 []byte `json:"value_base64,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	ETag        string `json:"etag,omitempty"`
	// MaxAge is the value's remaining lifetime in seconds, when it expires.
	MaxAge *int64  `json:"max_age,omitempty"`
	Error  string  `json:"error,omitempty"`
	Stale  bool    `json:"stale,omitempty"`
	Age    float64 `json:"age,omitempty"`
}

// serveBatch serves GET /cache/{group}?key=a&key=b... and POST
// /cache/{group} with a form of keys: many keys in one request. The answer
// is 200 with one JSON object a line (application/x-ndjson), one a key, in
// the order asked: its status as a single GET would have it (200, 404,
// 502, ...), and the value (UTF-8 as "value", else "value_base64"), its
// content type, ETag and max-age; or the error's short text. A request
// with no key, more than MaxBatchKeys, or a key that is empty or too long
// is refused whole (400); values past MaxBatchBytes are answered 413, to
// be asked for again.
//
// The mux guards it with Auth: a batch only reads, so a POST of keys needs
// what a GET needs.
func (h *Handler) serveBatch(w http.ResponseWriter, r *http.Request, name string) {
	keys, err := batchKeys(w, r)
	if err == nil {
		for _, k := range keys {
			if err = CheckKey(k, h.cfg.MaxKeyBytes); err != nil {
				err = fmt.Errorf("%w: key %q", err, k)
				break
			}
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	g, ok := h.node.Group(name)
	if !ok {
		writeError(w, fmt.Errorf("%w: %q", cache.ErrNoSuchGroup, name))
		return
	}
	ctx := r.Context()
	if h.cfg.Clients != nil {
		// The batch counts as one request against the client's bounds.
		release, err := h.cfg.Clients.Acquire(r.RemoteAddr)
		if err != nil {
			w.Header().Set("Retry-After", "1")
			writeError(w, err)
			return
		}
		defer release()
	}
	results := g.GetMany(cache.WithCaller(ctx, ClientOf(r.RemoteAddr).String()), keys)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	now := h.now()
	budget := int64(MaxBatchBytes)
	for _, res := range results {
		it := BatchItem{Key: res.Key}
		switch {
		case res.Err != nil:
			it.Status = StatusOf(res.Err)
			it.Error = errorText(res.Err, it.Status)
		case int64(len(res.Value.Data)) > budget:
			it.Status = http.StatusRequestEntityTooLarge
			it.Error = "batch answer full; ask for this key again"
		default:
			v := res.Value
			budget -= int64(len(v.Data))
			it.Status = http.StatusOK
			if utf8.Valid(v.Data) {
				it.Value = string(v.Data)
			} else {
				it.ValueBase64 = v.Data
			}
			it.ContentType = v.ContentType
			it.ETag = string(appendValueETag(nil, v))
			if secs, ok := maxAgeOf(v, now); ok {
				it.MaxAge = &secs
			}
			if v.Stale {
				it.Stale, it.Age = true, v.Age.Seconds()
			}
		}
		if err := enc.Encode(it); err != nil {
			return // the client is gone
		}
	}
	bw.Flush()
}

// batchKeys returns the keys of a batch read: the query's "key" values for
// a GET, the form's for a POST.
func batchKeys(w http.ResponseWriter, r *http.Request) ([]string, error) {
	var keys []string
	switch r.Method {
	case http.MethodGet:
		keys = r.URL.Query()["key"]
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, maxBatchForm)
		if err := r.ParseForm(); err != nil {
			return nil, fmt.Errorf("%w: the form of keys: %v", ErrBadRequest, err)
		}
		keys = r.PostForm["key"]
	}
	switch {
	case len(keys) == 0:
		return nil, fmt.Errorf("%w: no key: give key=K once a key (or a group and a key in the path)", ErrBadRequest)
	case len(keys) > MaxBatchKeys:
		return nil, fmt.Errorf("%w: %d keys, at most %d a batch", ErrBadRequest, len(keys), MaxBatchKeys)
	}
	return keys, nil
}
