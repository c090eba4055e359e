package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ringcache/ringcache/cache"
)

// TestBatchRead reads many keys of a 3-node cluster in one request through
// one node, by GET and by POST: one line per key in the order asked, each
// as a single GET would answer it (a value, a not-found, a binary value in
// base64), every key loaded once cluster-wide; bad batches are refused
// whole.
func TestBatchRead(t *testing.T) {
	t.Parallel()
	nodes, loads := newCluster(t, 3, clusterOpts{origin: func(_ context.Context, _, key string) (cache.Value, error) {
		switch {
		case strings.HasPrefix(key, "missing"):
			return cache.Value{}, cache.ErrNotFound
		case key == "binary":
			return cache.Value{Data: []byte{0xff, 0x00, 0xfe}}, nil
		}
		return cache.Value{Data: valueOf(key)}, nil
	}})
	c := testClient(t)
	var keys []string
	for i := range 60 {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	keys = append(keys, "missing-1", "binary", "k3")
	read := func(r response) []batchItem {
		t.Helper()
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("batch: %d %s %q", r.status, r.header.Get("Content-Type"), r.body)
		}
		var items []batchItem
		for line := range strings.SplitSeq(strings.TrimSuffix(r.body, "\n"), "\n") {
			var it batchItem
			if err := json.Unmarshal([]byte(line), &it); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			items = append(items, it)
		}
		if len(items) != len(keys) {
			t.Fatalf("%d lines for %d keys", len(items), len(keys))
		}
		for i, it := range items {
			k := keys[i]
			switch {
			case it.Key != k:
				t.Errorf("line %d is %q, want %q", i, it.Key, k)
			case k == "missing-1":
				if it.Status != http.StatusNotFound || it.Error != "not found" {
					t.Errorf("%s: %+v, want a 404", k, it)
				}
			case k == "binary":
				if it.Status != http.StatusOK || string(it.ValueBase64) != "\xff\x00\xfe" || it.Value != "" {
					t.Errorf("%s: %+v, want the bytes in value_base64", k, it)
				}
			case it.Status != http.StatusOK || it.Value != string(valueOf(k)) || it.ETag == "":
				t.Errorf("%s: %+v", k, it)
			}
		}
		return items
	}
	q := url.Values{"key": keys}
	read(mustDo(t, c, "GET", nodes[0].url+PublicPrefix+"g?"+q.Encode(), nil))
	if got := loads.count(); got != 62 {
		t.Errorf("%d origin loads for 62 distinct keys (60, a missing one and a binary one), want 62", got)
	}
	read(mustDo(t, c, "POST", nodes[1].url+PublicPrefix+"g", strings.NewReader(q.Encode()), "Content-Type", "application/x-www-form-urlencoded"))
	// Only the missing key is asked of the origin again: a not-found is
	// not remembered by default (NotFoundTTL).
	if got := loads.count(); got != 63 {
		t.Errorf("the second batch, through another node, loaded %d keys again; want 1 (the missing one)", got-62)
	}

	many := url.Values{}
	for i := range MaxBatchKeys + 1 {
		many.Add("key", fmt.Sprint("x", i))
	}
	for _, tt := range []struct {
		name, url string
		status    int
	}{
		{"no key", nodes[0].url + PublicPrefix + "g", 400},
		{"an empty key", nodes[0].url + PublicPrefix + "g?key=a&key=", 400},
		{"a key too long", nodes[0].url + PublicPrefix + "g?key=" + strings.Repeat("k", DefaultMaxKeyBytes+1), 400},
		{"too many keys", nodes[0].url + PublicPrefix + "g?" + many.Encode(), 400},
		{"an unknown group", nodes[0].url + PublicPrefix + "nosuch?key=a", 404},
	} {
		if r := mustDo(t, c, "GET", tt.url, nil); r.status != tt.status {
			t.Errorf("%s: %d %q, want %d", tt.name, r.status, r.body, tt.status)
		}
	}
}

// BenchmarkBatchRead reads 50 warm keys of a 3-node cluster through one
// node, as 50 GETs one after another (what a client without batches does)
// and as one batch: go test -run '^$' -bench BatchRead -count 6 ./transport.
func BenchmarkBatchRead(b *testing.B) {
	nodes, _ := newCluster(b, 3, clusterOpts{})
	c := testClient(b)
	var keys []string
	for i := range 50 {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	batch := nodes[0].url + PublicPrefix + "g?" + url.Values{"key": keys}.Encode()
	for range 2 { // warm: loaded, then copies kept where they are read
		mustDo(b, c, "GET", batch, nil)
	}
	b.Run("50-gets", func(b *testing.B) {
		for b.Loop() {
			for _, k := range keys {
				if r := mustDo(b, c, "GET", nodes[0].url+PublicPrefix+"g/"+k, nil); r.status != http.StatusOK {
					b.Fatal(r.status)
				}
			}
		}
	})
	b.Run("1-batch", func(b *testing.B) {
		for b.Loop() {
			if r := mustDo(b, c, "GET", batch, nil); r.status != http.StatusOK {
				b.Fatal(r.status)
			}
		}
	})
}
