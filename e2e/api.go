//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DemoValue recomputes what the daemon's demo origin serves for a key: the
// lowercase hex SHA-256 of "ringcache-demo/" + group + "/" + key, repeated and
// cut to exactly size bytes. The suite never asks the cluster what the value
// should be, so a node that serves a wrong value cannot vouch for itself.
func DemoValue(group, key string, size int) []byte {
	sum := sha256.Sum256([]byte("ringcache-demo/" + group + "/" + key))
	unit := hex.EncodeToString(sum[:])
	if size <= 0 {
		return []byte{}
	}
	v := strings.Repeat(unit, size/len(unit)+1)
	return []byte(v[:size])
}

// Ring is a node's view of the ring, as /debug/ring reports it.
type Ring struct {
	// Self is the node's own peer URL.
	Self string `json:"self"`
	// Version identifies the ring; nodes with the same members report the same one.
	Version string `json:"version"`
	// Members are the peer URLs on the ring.
	Members []string `json:"members"`
	// Shares is the fraction of the key space each member owns.
	Shares map[string]float64 `json:"shares"`
	// Owner is the owner of the key asked with ?key=, else empty.
	Owner string `json:"owner"`
	// Etcd is the membership client's state; "connected" is a bool.
	Etcd map[string]any `json:"etcd"`
	// Suspected are the members the node cannot reach lately: it loads
	// their keys itself until they answer.
	Suspected []string `json:"suspected"`
}

// EtcdConnected reports whether the node says it is connected to etcd.
func (r Ring) EtcdConnected() bool {
	c, ok := r.Etcd["connected"].(bool)
	return ok && c
}

// EtcdTerm is the create revision of the node's key in etcd, which changes
// only when the key was deleted and put again; 0 when the node does not
// report it.
func (r Ring) EtcdTerm() uint64 {
	t, _ := r.Etcd["term"].(float64)
	return uint64(t)
}

// EtcdRegistered reports whether the node says its registration in etcd
// stands; a node that does not report it counts as registered.
func (r Ring) EtcdRegistered() bool {
	v, ok := r.Etcd["registered"]
	if !ok {
		return true
	}
	b, ok := v.(bool)
	return ok && b
}

// SameMembers reports whether the ring holds exactly the given peer URLs.
func (r Ring) SameMembers(want []string) bool {
	if len(r.Members) != len(want) {
		return false
	}
	seen := make(map[string]bool, len(want))
	for _, m := range want {
		seen[m] = true
	}
	for _, m := range r.Members {
		if !seen[m] {
			return false
		}
		delete(seen, m)
	}
	return len(seen) == 0
}

// GroupLoads is one group's entry in /debug/origin: how often this node
// called the origin, in total and per key.
type GroupLoads struct {
	// Loads is the number of origin loads by this node.
	Loads int64 `json:"loads"`
	// Keys holds the loads of each key this node loaded.
	Keys map[string]int64 `json:"keys"`
}

// API is an HTTP client for the daemon's public endpoints. The zero value is
// not usable; NewAPI returns one. It is safe for concurrent use.
type API struct {
	client *http.Client
}

// NewAPI returns an API whose requests each give up after timeout.
func NewAPI(timeout time.Duration) *API {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 16
	tr.IdleConnTimeout = clientIdleTimeout
	return &API{client: &http.Client{Timeout: timeout, Transport: tr}}
}

// SetWriteToken makes the API's PUTs and DELETEs carry token; call it
// before the API is used.
func (a *API) SetWriteToken(token string) {
	a.client.Transport = withWriteToken(a.client.Transport, token)
}

// Close releases idle connections.
func (a *API) Close() { a.client.CloseIdleConnections() }

// get fetches base+path and returns status and body.
func (a *API) get(ctx context.Context, base, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// getJSON fetches base+path, wants a 200 and decodes the body into v.
func (a *API) getJSON(ctx context.Context, base, path string, v any) error {
	status, body, err := a.get(ctx, base, path)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("GET %s%s: status %d: %.200s", base, path, status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s%s: %w: %.200s", base, path, err, body)
	}
	return nil
}

// Ready reports whether the node's /readyz answers 200.
func (a *API) Ready(ctx context.Context, base string) bool {
	status, _, err := a.get(ctx, base, "/readyz")
	return err == nil && status == http.StatusOK
}

// Ring returns the node's ring; with a non-empty key, Owner is that key's owner.
func (a *API) Ring(ctx context.Context, base, key string) (Ring, error) {
	path := "/debug/ring"
	if key != "" {
		path += "?key=" + url.QueryEscape(key)
	}
	var r Ring
	err := a.getJSON(ctx, base, path, &r)
	return r, err
}

// Origin returns the node's origin load counts for one group; a group the
// node has not loaded anything for yet has zero counts.
func (a *API) Origin(ctx context.Context, base, group string) (GroupLoads, error) {
	var m map[string]GroupLoads
	if err := a.getJSON(ctx, base, "/debug/origin", &m); err != nil {
		return GroupLoads{}, err
	}
	return m[group], nil
}

// Get fetches a key through the node's public API.
func (a *API) Get(ctx context.Context, base, group, key string) (int, []byte, error) {
	return a.get(ctx, base, "/cache/"+url.PathEscape(group)+"/"+url.PathEscape(key))
}

// Write sends a PUT of value (or a DELETE) of key through the node's public
// API and returns the status and the Ringcache-Unreached header.
func (a *API) Write(ctx context.Context, kind Kind, base, group, key string, value []byte) (int, string, error) {
	return Write(ctx, a.client, kind, base, group, key, value)
}

// Metric returns the value of one sample of the node's /metrics, named with
// its labels exactly as the text format writes them, e.g.
// `ringcache_hot_promotions_total{group="demo"}`.
func (a *API) Metric(ctx context.Context, base, sample string) (float64, error) {
	status, body, err := a.get(ctx, base, "/metrics")
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("GET %s/metrics: status %d", base, status)
	}
	for line := range strings.Lines(string(body)) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && name == sample {
			return strconv.ParseFloat(value, 64)
		}
	}
	return 0, fmt.Errorf("GET %s/metrics: no sample %s", base, sample)
}

// MetricSum returns the sum of the node's /metrics samples of the metric
// name that carry every label given (as the text format writes them, e.g.
// `op="batch"`), whatever their other labels; 0 when there are none.
func (a *API) MetricSum(ctx context.Context, base, name string, labels ...string) (float64, error) {
	status, body, err := a.get(ctx, base, "/metrics")
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("GET %s/metrics: status %d", base, status)
	}
	sum := 0.0
	for line := range strings.Lines(string(body)) {
		sample, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		set, found := strings.CutPrefix(sample, name+"{")
		if !ok || !found || !strings.HasSuffix(set, "}") {
			continue
		}
		if slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(set, l) }) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, fmt.Errorf("GET %s/metrics: %s: %v", base, sample, err)
		}
		sum += v
	}
	return sum, nil
}

// Peer sends a request to the node's peer route the way an outsider would:
// without the cluster secret.
func (a *API) Peer(ctx context.Context, base, group, key string) (int, []byte, error) {
	return a.get(ctx, base, "/_groupcache/"+url.PathEscape(group)+"/"+url.PathEscape(key))
}

// PurgeAnswer is a node's answer to a purge (DELETE /cache/{group}).
type PurgeAnswer struct {
	ID          string   `json:"id"`
	By          string   `json:"by"`
	Confirmed   []string `json:"confirmed"`
	Unconfirmed []string `json:"unconfirmed"`
	Recorded    bool     `json:"recorded"`
}

// Purge purges group (its keys under prefix, if not empty) through the
// node's public API and returns the status and the answer (on a 200).
func (a *API) Purge(ctx context.Context, base, group, prefix string) (int, PurgeAnswer, error) {
	u := base + "/cache/" + url.PathEscape(group)
	if prefix != "" {
		u += "?prefix=" + url.QueryEscape(prefix)
	}
	var ans PurgeAnswer
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, u, nil)
	if err != nil {
		return 0, ans, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, ans, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(body, &ans)
	}
	return resp.StatusCode, ans, err
}
