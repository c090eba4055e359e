package main

import (
	"bytes"
	"slices"
	"testing"
)

func TestParseInterleaved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		pos   []string
		group string
	}{
		{"flags first", []string{"-group", "g", "k"}, []string{"k"}, "g"},
		{"flags after", []string{"k", "-group", "g"}, []string{"k"}, "g"},
		{"between", []string{"k", "-group", "g", "v"}, []string{"k", "v"}, "g"},
		{"dash dash", []string{"--", "-k", "-group"}, []string{"-k", "-group"}, "demo"},
		{"flag then dash dash", []string{"-group", "g", "--", "-k"}, []string{"-k"}, "g"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCommand("put", "put", environ{Stdout: &bytes.Buffer{}}).withGroup("demo", "")
			pos, err := c.parse(tt.args, 1, 2)
			if err != nil || !slices.Equal(pos, tt.pos) || c.opts.Group != tt.group {
				t.Errorf("parse(%q) = %q, group %q, %v; want %q, %q", tt.args, pos, c.opts.Group, err, tt.pos, tt.group)
			}
		})
	}
}

func TestURLsFromEnvironment(t *testing.T) {
	t.Parallel()
	c := newCommand("stats", "stats", environ{Stdout: &bytes.Buffer{},
		Getenv: func(k string) string {
			return map[string]string{"RINGCACHE_URL": " http://a:1/ ,https://b:2", "RINGCACHE_TOKEN": "tok"}[k]
		}})
	if _, err := c.parse(nil, 0, 0); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.opts.URLs, []string{"http://a:1", "https://b:2"}) || c.opts.Token != "tok" {
		t.Errorf("from the environment: %q, token %q", c.opts.URLs, c.opts.Token)
	}
	c = newCommand("stats", "stats", environ{Stdout: &bytes.Buffer{}})
	if _, err := c.parse(nil, 0, 0); err != nil || !slices.Equal(c.opts.URLs, []string{defaultURL}) {
		t.Errorf("default: %q, %v", c.opts.URLs, err)
	}
}

func TestKeyPath(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"hello": "/cache/g/hello",
		"a/b":   "/cache/g/a%2Fb",
		"a b?":  "/cache/g/a%20b%3F",
		".":     "/cache/g/%2E",
		"..":    "/cache/g/%2E%2E",
		"...":   "/cache/g/...",
		"ü":     "/cache/g/%C3%BC",
	} {
		if got := keyPath("g", key); got != want {
			t.Errorf("keyPath(%q) = %q, want %q", key, got, want)
		}
	}
}

func FuzzKeyPath(f *testing.F) {
	for _, s := range []string{"a", "a/b", "..", "%2F", "a?b#c", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		p := keyPath("g", key)
		// One segment after the group, whatever the key: no "/" inside,
		// nothing a router would clean, no query or fragment.
		seg := p[len("/cache/g/"):]
		if bytes.ContainsAny([]byte(seg), "/?# ") || seg == "." || seg == ".." {
			t.Errorf("keyPath(%q) = %q", key, p)
		}
	})
}
