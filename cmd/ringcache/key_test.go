package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringcache/ringcache/transport/origin"
)

func TestGetDemoValue(t *testing.T) {
	urls := devCluster(t)
	for i, u := range urls {
		r := cli(t, "", urlEnv(u), "get", "hello")
		if r.err != nil {
			t.Fatalf("get hello from node %d: %v", i+1, r.err)
		}
		if want := string(origin.DemoValue("demo", "hello", 64)); r.stdout != want {
			t.Errorf("node %d: get hello = %q, want the demo value %q", i+1, r.stdout, want)
		}
	}
}

func TestPutGetDel(t *testing.T) {
	urls := devCluster(t)
	env := urlEnv(urls...)
	dir := t.TempDir()
	file := filepath.Join(dir, "v.bin")
	binary := []byte{0, 1, 2, 0xff, 0xfe, '\n'}
	if err := os.WriteFile(file, binary, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		key   string
		stdin string
		args  []string
		want  []byte
	}{
		{"argument", "put-arg", "", []string{"hello world"}, []byte("hello world")},
		{"stdin", "put-stdin", "from stdin\n", nil, []byte("from stdin\n")},
		{"stdin dash", "put-dash", "dash", []string{"-file", "-"}, []byte("dash")},
		{"file, not UTF-8", "put-file", "", []string{"-file", file}, binary},
		{"key with slash and space", "a/b c", "", []string{"v1"}, []byte("v1")},
		{"dot key", "..", "", []string{"dots"}, []byte("dots")},
		{"unicode key", "clé/ü", "", []string{"ü"}, []byte("ü")},
		{"key after flags end", "-dash", "", []string{"dash key"}, []byte("dash key")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"put", "--", tt.key}, tt.args...)
			if tt.args != nil && tt.args[0] == "-file" {
				args = []string{"put", tt.args[0], tt.args[1], "--", tt.key}
			}
			if r := cli(t, tt.stdin, env, args...); r.err != nil {
				t.Fatalf("put: %v", r.err)
			}
			// Read it back from every node: a PUT lands at the owner.
			for _, u := range urls {
				r := cli(t, "", urlEnv(u), "get", "-o", "json", "--", tt.key)
				if r.err != nil {
					t.Fatalf("get from %s: %v", u, r.err)
				}
				var got getResult
				if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
					t.Fatalf("get -o json: %v\n%s", err, r.stdout)
				}
				var value []byte
				switch {
				case got.Value != nil:
					value = []byte(*got.Value)
				case got.ValueBase64 != nil:
					value, _ = base64.StdEncoding.DecodeString(*got.ValueBase64)
				}
				if string(value) != string(tt.want) || got.Size != len(tt.want) || got.Key != tt.key || got.Node != u {
					t.Errorf("get from %s = %+v (value %q), want %q", u, got, value, tt.want)
				}
			}
		})
	}

	t.Run("ttl and content type", func(t *testing.T) {
		if r := cli(t, "", env, "put", "put-ttl", "{}", "-ttl", "90s", "-content-type", "application/json"); r.err != nil {
			t.Fatal(r.err)
		}
		r := cli(t, "", env, "get", "put-ttl", "-o", "json")
		var got getResult
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.err != nil {
			t.Fatalf("get: %v %v\n%s", r.err, err, r.stdout)
		}
		if got.MaxAge == nil || *got.MaxAge < 80 || *got.MaxAge > 90 || got.ContentType != "application/json" {
			t.Errorf("after put -ttl 90s: max_age %v, content type %q", got.MaxAge, got.ContentType)
		}
	})

	t.Run("del drops the value everywhere", func(t *testing.T) {
		if r := cli(t, "", env, "put", "put-del", "gone soon"); r.err != nil {
			t.Fatal(r.err)
		}
		for _, u := range urls { // warm hot copies on every node
			cli(t, "", urlEnv(u), "get", "put-del")
		}
		if r := cli(t, "", urlEnv(urls[1]), "del", "put-del"); r.err != nil {
			t.Fatal(r.err)
		}
		// The demo origin has every key: after the delete, every node
		// serves its value again, not ours.
		want := string(origin.DemoValue("demo", "put-del", 64))
		for _, u := range urls {
			if r := cli(t, "", urlEnv(u), "get", "put-del"); r.stdout != want {
				t.Errorf("%s after del: %q, want the demo value", u, r.stdout)
			}
		}
	})
}

func TestGetTerminalNewline(t *testing.T) {
	urls := devCluster(t)
	cli(t, "", urlEnv(urls...), "put", "nl", "no newline")
	if r := cliTerm(t, true, "", urlEnv(urls...), "get", "nl"); r.stdout != "no newline\n" {
		t.Errorf("get on a terminal = %q, want a newline added", r.stdout)
	}
	if r := cli(t, "", urlEnv(urls...), "get", "nl"); r.stdout != "no newline" {
		t.Errorf("get into a pipe = %q, want the bytes as stored", r.stdout)
	}
}

func TestGetNotFound(t *testing.T) {
	base, root := fileNode(t)
	if err := os.WriteFile(filepath.Join(root, "there"), []byte("file body"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "", urlEnv(base), "get", "-group", "files", "there")
	if r.err != nil || r.stdout != "file body" {
		t.Fatalf("get there = %q, %v", r.stdout, r.err)
	}
	r = cli(t, "", urlEnv(base), "get", "-group", "files", "missing")
	if r.code() != exitNotFound {
		t.Errorf("get missing: exit %d (%v), want %d", r.code(), r.err, exitNotFound)
	}
	if r.stdout != "" || !strings.Contains(r.err.Error(), `"missing"`) {
		t.Errorf("get missing: stdout %q, error %v", r.stdout, r.err)
	}
	// An unknown group is a failure, not a missing key.
	r = cli(t, "", urlEnv(base), "get", "-group", "nope", "there")
	if r.code() != exitFailure || !strings.Contains(r.err.Error(), base) || !strings.Contains(r.err.Error(), "404") {
		t.Errorf("get from an unknown group: exit %d, %v", r.code(), r.err)
	}
}

// TestPutEmpty checks that an empty stdin or file is refused unless -empty
// says it is meant (nothing is stored), while an explicit empty argument
// and -empty store an empty value.
func TestPutEmpty(t *testing.T) {
	urls := devCluster(t)
	env := urlEnv(urls...)
	key := freshPrefix("empty")
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"put", key}, {"put", "-file", empty, key}} {
		r := cli(t, "", env, args...)
		if r.code() != exitUsage || !strings.Contains(r.err.Error(), "-empty") {
			t.Errorf("%v with nothing to read: exit %d, %v; want a usage error naming -empty", args, r.code(), r.err)
		}
	}
	// Nothing was stored: the key still reads as the demo origin's value.
	if r := cli(t, "", env, "get", key); r.err != nil || r.stdout == "" {
		t.Fatalf("get after the refused puts = %q, %v; want the origin's value", r.stdout, r.err)
	}
	for _, args := range [][]string{{"put", "-empty", key}, {"put", key, ""}} {
		if r := cli(t, "", env, args...); r.err != nil {
			t.Fatalf("%v: %v", args, r.err)
		}
		if r := cli(t, "", env, "get", key); r.err != nil || r.stdout != "" {
			t.Fatalf("get after %v = %q, %v; want the empty value", args, r.stdout, r.err)
		}
	}
}

func TestPutTooLarge(t *testing.T) {
	urls := devCluster(t)
	big := strings.Repeat("x", 1<<20+1) // over the default max-value-bytes
	r := cli(t, big, urlEnv(urls[0]), "put", "too-big")
	if r.code() != exitFailure || !strings.Contains(r.err.Error(), "413") || !strings.Contains(r.err.Error(), urls[0]) {
		t.Errorf("put of 1 MiB + 1: exit %d, %v", r.code(), r.err)
	}
}

// closedURL returns the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// silentURL returns the URL of a loopback listener that accepts
// connections and never answers, as a stopped process does.
func silentURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	closed, silent := closedURL(t), silentURL(t)
	tests := []struct {
		name   string
		url    string
		args   []string
		reason string
	}{
		{"get refused", closed, []string{"get", "k"}, "connection refused"},
		{"put refused", closed, []string{"put", "k", "v"}, "connection refused"},
		{"del refused", closed, []string{"del", "k"}, "connection refused"},
		{"owner refused", closed, []string{"owner", "k"}, "connection refused"},
		{"members refused", closed, []string{"members"}, "connection refused"},
		{"stats refused", closed, []string{"stats"}, "connection refused"},
		{"watch refused", closed, []string{"watch", "-count", "1"}, "connection refused"},
		{"bench refused", closed, []string{"bench", "-n", "10"}, "connection refused"},
		{"get silent", silent, []string{"get", "k", "-timeout", "300ms"}, "no answer in time"},
		{"stats silent", silent, []string{"stats", "-timeout", "300ms"}, "no answer in time"},
		{"no such host", "http://no-such-host.invalid:8080", []string{"get", "k"}, "no such host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, "", urlEnv(tt.url), tt.args...)
			if r.code() != exitFailure {
				t.Fatalf("exit %d (%v), want %d", r.code(), r.err, exitFailure)
			}
			msg := r.err.Error()
			if !strings.Contains(msg, tt.url) || !strings.Contains(msg, "unreachable") || !strings.Contains(msg, tt.reason) || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line naming %s, unreachable, %s", msg, tt.url, tt.reason)
			}
		})
	}
}

func TestFailover(t *testing.T) {
	urls := devCluster(t)
	closed := closedURL(t)
	r := cli(t, "", urlEnv(closed, urls[0]), "get", "failover")
	if r.err != nil {
		t.Fatalf("get with the first node down: %v", r.err)
	}
	if r.stdout != string(origin.DemoValue("demo", "failover", 64)) {
		t.Errorf("get = %q", r.stdout)
	}
	if !strings.Contains(r.stderr, closed) || !strings.Contains(r.stderr, "trying "+urls[0]) {
		t.Errorf("stderr %q: want a note naming %s and the next node", r.stderr, closed)
	}
	// Every node down: one line that names each.
	closed2 := closedURL(t)
	r = cli(t, "", urlEnv(closed, closed2), "get", "failover")
	if r.code() != exitFailure || !strings.Contains(r.err.Error(), closed) || !strings.Contains(r.err.Error(), closed2) {
		t.Errorf("get with every node down: exit %d, %v", r.code(), r.err)
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	// A node that wants a token, as the daemon's -write-token will.
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	r := cli(t, "", urlEnv(srv.URL), "put", "k", "v")
	if r.code() != exitFailure || !strings.Contains(r.err.Error(), "401") || !strings.Contains(r.err.Error(), "RINGCACHE_TOKEN") {
		t.Errorf("put without a token: exit %d, %v", r.code(), r.err)
	}
	if r := cli(t, "", append(urlEnv(srv.URL), "RINGCACHE_TOKEN=s3cret"), "put", "k", "v"); r.err != nil {
		t.Errorf("put with RINGCACHE_TOKEN: %v", r.err)
	}
	if r := cli(t, "", urlEnv(srv.URL), "del", "k", "-token", "s3cret"); r.err != nil {
		t.Errorf("del with -token: %v", r.err)
	}
	r = cli(t, "", append(urlEnv(srv.URL), "RINGCACHE_TOKEN=s3cret"), "del", "k", "-token", "wrong")
	if r.code() != exitFailure {
		t.Errorf("-token overrides RINGCACHE_TOKEN: exit %d", r.code())
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"", "Bearer s3cret", "Bearer s3cret", "Bearer wrong"}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Errorf("Authorization headers %q, want %q", seen, want)
	}
}

func TestWriteRetriesWhileTheOwnerChanges(t *testing.T) {
	t.Parallel()
	// A node that refuses the first write as the daemon does during a
	// membership change, then applies it but cannot reach one node.
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "key owner is changing; retry", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Ringcache-Unreached", "http://10.0.0.9:8080")
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	start := time.Now()
	r := cli(t, "", urlEnv(srv.URL), "put", "k", "v")
	if r.err != nil || calls.Load() != 2 || time.Since(start) < time.Second {
		t.Fatalf("put: %v after %d calls in %v", r.err, calls.Load(), time.Since(start))
	}
	if !strings.Contains(r.stderr, "key owner is changing; retry") || !strings.Contains(r.stderr, "could not reach http://10.0.0.9:8080") {
		t.Errorf("stderr %q: want the retry and the unreached node", r.stderr)
	}
}

func TestNotFoundTellsKeyFromGroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header string
		body   string
		want   bool
	}{
		{"key", "", "not found\n", true},
		{"key, older daemon", "1", "not found\n", true},
		{"group", "", "cache: no such group: \"x\"\n", false},
		{"route", "", "404 page not found\n", false},
	}
	for _, tt := range tests {
		a := answer{Status: http.StatusNotFound, Header: http.Header{}, Body: []byte(tt.body)}
		if tt.header != "" {
			a.Header.Set("X-Ringcache-Not-Found", tt.header)
		}
		if got := keyNotFound(a); got != tt.want {
			t.Errorf("%s: keyNotFound = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestGetStaleAnswer(t *testing.T) {
	t.Parallel()
	// A stale answer, as a node inside a group's stale window gives it.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Age", "7")
		w.Header().Set("Cache-Control", "max-age=0")
		w.Write([]byte("old"))
	}))
	t.Cleanup(srv.Close)
	r := cli(t, "", urlEnv(srv.URL), "get", "-o", "json", "k")
	var got getResult
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.err != nil {
		t.Fatalf("get: %v %v", r.err, err)
	}
	if got.Age == nil || *got.Age != 7 || got.MaxAge == nil || *got.MaxAge != 0 || *got.Value != "old" {
		t.Errorf("get of a stale value = %+v", got)
	}
}

// TestPurgePrefix purges the keys under a fresh prefix through the CLI:
// written values under it are gone (the demo origin's come back), one
// outside it stays, and the answer names the nodes that applied it.
func TestPurgePrefix(t *testing.T) {
	urls := devCluster(t)
	env := urlEnv(urls...)
	prefix := freshPrefix("purge")
	in, out := prefix+"/a", freshPrefix("kept")
	for _, k := range []string{in, out} {
		if r := cli(t, "", env, "put", k, "written"); r.err != nil {
			t.Fatalf("put %s: %v", k, r.err)
		}
	}
	r := cli(t, "", env, "purge", "-prefix", prefix+"/", "demo")
	if r.err != nil || !strings.Contains(r.stdout, "purged the keys of group demo under") ||
		!strings.Contains(r.stdout, fmt.Sprintf("applied by %d nodes", len(urls))) {
		t.Fatalf("purge: %v\n%s", r.err, r.stdout)
	}
	if r := cli(t, "", env, "get", in); r.err != nil || r.stdout == "written" {
		t.Errorf("get %s after its purge = %q, %v; want the origin's value", in, r.stdout, r.err)
	}
	if r := cli(t, "", env, "get", out); r.err != nil || r.stdout != "written" {
		t.Errorf("get %s, outside the prefix = %q, %v; want the written value", out, r.stdout, r.err)
	}
	if r := cli(t, "", env, "purge"); r.code() != exitUsage {
		t.Errorf("purge without a group: exit %d, %v; want a usage error", r.code(), r.err)
	}
}

// TestGetMany reads several keys in one request: each found one is a
// "KEY<TAB>VALUE" line in the order given, a missing one is named on stderr
// and makes the exit status 3; -o json prints the node's lines as they are.
func TestGetMany(t *testing.T) {
	base, root := fileNode(t)
	for _, name := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte("body of "+name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := cli(t, "", urlEnv(base), "get", "-group", "files", "b", "a")
	if r.err != nil || r.stdout != "b\tbody of b\na\tbody of a\n" {
		t.Fatalf("get b a = %q, %v", r.stdout, r.err)
	}
	r = cli(t, "", urlEnv(base), "get", "-group", "files", "a", "missing", "b")
	if r.code() != exitNotFound || r.stdout != "a\tbody of a\nb\tbody of b\n" || !strings.Contains(r.stderr, "missing: not found") {
		t.Errorf("get a missing b: exit %d, stdout %q, stderr %q", r.code(), r.stdout, r.stderr)
	}
	r = cli(t, "", urlEnv(base), "get", "-o", "json", "-group", "files", "a", "missing")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code() != exitNotFound || len(lines) != 2 ||
		!strings.Contains(lines[0], `"status":200`) || !strings.Contains(lines[1], `"status":404`) {
		t.Errorf("get -o json a missing: %q, %v", r.stdout, r.err)
	}
}
