package ui

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// DefaultMaxKeyBytes bounds the key of the "where is this key?" box when
// Config.MaxKeyBytes is zero; it is the daemon's default key limit.
const DefaultMaxKeyBytes = 250

// Config configures a Handler.
type Config struct {
	// Prefix is the path the handler is mounted at, starting and ending
	// with "/". If empty, "/ui/".
	Prefix string
	// MaxKeyBytes bounds the key a visitor may ask about. If zero, 250.
	MaxKeyBytes int
}

// Handler serves the page under its prefix (here /ui/):
//
//	GET /ui/[?key=K]        the page, rendered on the server: complete
//	                        without JavaScript; K's owner highlighted
//	GET /ui/state[?key=K]   the same state as JSON (Snapshot), which the
//	                        page's script polls to update itself
//	GET /ui/static/...      the embedded script, style sheet and icon
//
// A key longer than MaxKeyBytes gets 400 with a short text. The page is
// read-only, loads nothing from elsewhere (its Content-Security-Policy
// allows only its own script and style), and escapes every key and member
// name: the template through html/template, the script by setting text,
// never markup. A Handler is safe for concurrent use.
type Handler struct {
	src  Source
	cfg  Config
	page *template.Template
	mux  *http.ServeMux
}

// NewHandler returns the page's handler over src, or an error for a bad
// Config.
func NewHandler(src Source, cfg Config) (*Handler, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "/ui/"
	}
	if !strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("%w: prefix %q must start and end with /", ErrConfig, cfg.Prefix)
	}
	if cfg.MaxKeyBytes < 0 {
		return nil, fmt.Errorf("%w: MaxKeyBytes %d < 0", ErrConfig, cfg.MaxKeyBytes)
	}
	if cfg.MaxKeyBytes == 0 {
		cfg.MaxKeyBytes = DefaultMaxKeyBytes
	}
	page, err := template.New("page.html").Funcs(funcs).ParseFS(assets, "assets/page.html")
	if err != nil {
		return nil, fmt.Errorf("ui: parsing the page: %w", err)
	}
	static, _ := fs.Sub(assets, "assets/static") // a constant directory of the embed
	h := &Handler{src: src, cfg: cfg, page: page, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /{$}", h.servePage)
	h.mux.HandleFunc("GET /state", h.serveState)
	h.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	return h, nil
}

// ServeHTTP serves the page's routes under the prefix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// Only this origin's script and style; no frames, no forms elsewhere.
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	http.StripPrefix(strings.TrimSuffix(h.cfg.Prefix, "/"), h.mux).ServeHTTP(w, r)
}

// snapshot reads the source and answers the key box. It returns a short
// message and false for a key the handler refuses.
func (h *Handler) snapshot(r *http.Request) (Snapshot, string, bool) {
	key := r.URL.Query().Get("key")
	if len(key) > h.cfg.MaxKeyBytes {
		return Snapshot{}, fmt.Sprintf("key over %d bytes", h.cfg.MaxKeyBytes), false
	}
	s := h.src.Snapshot(r.Context())
	if key != "" {
		loc := h.src.Locate(key)
		s.Key = &loc
	}
	decorate(&s)
	return s, "", true
}

func (h *Handler) serveState(w http.ResponseWriter, r *http.Request) {
	s, msg, ok := h.snapshot(r)
	if !ok {
		http.Error(w, msg, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(s) // an error here is the client gone
}

// pageData is what the template renders.
type pageData struct {
	Snapshot
	Error   string // a refused key
	AskedAt string // the key as asked, echoed into the box
	View    string // the SVG viewBox
	Radius  int
}

func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	s, msg, ok := h.snapshot(r)
	status := http.StatusOK
	if !ok {
		status = http.StatusBadRequest
		s = h.src.Snapshot(r.Context()) // still show the node, with the message
		decorate(&s)
	}
	d := pageData{Snapshot: s, Error: msg, View: fmt.Sprintf("%d %d %d %d", -viewHalf, -viewHalf, 2*viewHalf, 2*viewHalf), Radius: ringRadius}
	if ok {
		d.AskedAt = r.URL.Query().Get("key")
	}
	// Render to a buffer first: a template error must not leave half a
	// page behind a 200.
	var buf bytes.Buffer
	if err := h.page.Execute(&buf, d); err != nil {
		http.Error(w, "ui: rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// funcs format numbers for the page. assets/static/ui.js formats the same
// way, so the page reads alike before and after its first update.
var funcs = template.FuncMap{
	"pct":   func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) },
	"bytes": formatBytes,
	"rate": func(f *float64) string {
		if f == nil {
			return "…"
		}
		return fmt.Sprintf("%.1f/s", *f)
	},
	"ago": func(s float64) string {
		return fmt.Sprintf("%.0fs ago", math.Floor(s))
	},
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"hex":   func(h uint32) string { return fmt.Sprintf("%08x", h) },
	"deg":   func(f float64) string { return fmt.Sprintf("rotate(%.2f)", f) },
}

// agreementText is the one-line verdict on the ring versions.
func agreementText(a Agreement) string {
	n := a.Agree + a.Differ + a.Unknown
	switch {
	case a.All():
		return fmt.Sprintf("all %d nodes agree", n)
	case a.Differ > 0:
		return fmt.Sprintf("%d of %d nodes report another ring", a.Differ, n)
	}
	return fmt.Sprintf("%d of %d nodes not heard from since the ring changed or in %v", a.Unknown, n, a.Fresh)
}

// formatBytes writes n in binary units with one decimal: 0 B, 512 B,
// 1.5 KiB, 64.0 MiB.
func formatBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/1024, 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, units[i])
}
