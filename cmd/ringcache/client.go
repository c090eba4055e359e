package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// maxBody bounds what the tool reads of one answer into memory.
const maxBody = 256 << 20

// client talks to the nodes' public API. It is safe for concurrent use.
type client struct {
	http    *http.Client
	token   string
	timeout time.Duration
}

func newClient(o *options) *client {
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true, // values are returned as stored
	}
	return &client{http: &http.Client{Transport: tr}, token: o.Token, timeout: o.Timeout}
}

// close drops the idle connections, so that the tool leaves no sockets or
// goroutines behind when run returns.
func (c *client) close() { c.http.CloseIdleConnections() }

// request is one call to one node.
type request struct {
	Method string
	Base   string // the node's base URL
	Path   string // escaped, from "/"
	Body   []byte
	Header http.Header
}

// answer is a node's response, its body read.
type answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// do sends r, bounded by the client's timeout, and reads the answer. A
// request that gets no answer returns a *nodeError matching errUnreachable.
func (c *client) do(ctx context.Context, r request) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, r.Base+r.Path, body)
	if err != nil {
		return answer{}, fmt.Errorf("%w: %s%s: %v", errUsage, r.Base, r.Path, err)
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	op := r.Method + " " + r.Path
	resp, err := c.http.Do(req)
	if err != nil {
		if parent := context.Cause(ctx); parent != nil && !errors.Is(parent, context.DeadlineExceeded) {
			return answer{}, parent // the user stopped us: not the node's fault
		}
		return answer{}, &nodeError{URL: r.Base, Op: op, Msg: unreachableReason(err), Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return answer{}, &nodeError{URL: r.Base, Op: op, Msg: "answer cut off: " + unreachableReason(err), Err: err}
	}
	if len(data) > maxBody {
		return answer{}, &nodeError{URL: r.Base, Op: op, Status: resp.StatusCode, Msg: fmt.Sprintf("answer over %d bytes", maxBody)}
	}
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: data}, nil
}

// failure turns an unexpected answer into a one-line *nodeError with the
// node's own short text.
func (c *client) failure(r request, a answer) *nodeError {
	msg := string(a.Body)
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.TrimSpace(msg)
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	if a.Status == http.StatusUnauthorized && c.token == "" {
		msg += " (the node wants a token: -token or RINGCACHE_TOKEN)"
	}
	return &nodeError{URL: r.Base, Op: r.Method + " " + r.Path, Status: a.Status, Msg: msg}
}

// getJSON GETs path from base and decodes a 200's JSON body into v.
func (c *client) getJSON(ctx context.Context, base, path string, v any) error {
	r := request{Method: http.MethodGet, Base: base, Path: path}
	a, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	if a.Status != http.StatusOK {
		return c.failure(r, a)
	}
	if err := json.Unmarshal(a.Body, v); err != nil {
		return &nodeError{URL: base, Op: "GET " + path, Status: a.Status, Msg: "not JSON (is this a ringcache node?): " + err.Error()}
	}
	return nil
}

// scrape GETs base's /metrics and parses the Prometheus text.
func (c *client) scrape(ctx context.Context, base string) (map[string]*dto.MetricFamily, error) {
	r := request{Method: http.MethodGet, Base: base, Path: "/metrics",
		Header: http.Header{"Accept": {"text/plain;version=0.0.4"}}}
	a, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	if a.Status != http.StatusOK {
		return nil, c.failure(r, a)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(a.Body))
	if err != nil {
		return nil, &nodeError{URL: base, Op: "GET /metrics", Status: a.Status, Msg: "not Prometheus text: " + err.Error()}
	}
	return mfs, nil
}

// each calls fn for every base URL at once and returns the errors in the
// order of urls.
func each(urls []string, fn func(i int, base string) error) []error {
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() { errs[i] = fn(i, u) })
	}
	wg.Wait()
	return errs
}

// keyPath is the escaped public path of key in group. The key is escaped
// as one path segment ("/" as %2F) and a key "." or ".." with %2E, so that
// no router cleans the path of a key with empty or dot segments.
func keyPath(group, key string) string {
	k := url.PathEscape(key)
	if key == "." || key == ".." {
		k = strings.ReplaceAll(key, ".", "%2E")
	}
	return "/cache/" + url.PathEscape(group) + "/" + k
}
