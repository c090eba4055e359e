package origin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ringcache/ringcache/cache"
)

// newTree builds a root with files, links and a FIFO, next to a directory
// "outside" whose secret no key may reach. It returns the root.
func newTree(t testing.TB) string {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{root, outside, filepath.Join(root, "sub", "deep")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(root, "a.txt"):               "hello a",
		filepath.Join(root, "sub", "b.json"):       `{"b":1}`,
		filepath.Join(root, "sub", "deep", "c"):    "\x89PNG\r\n\x1a\n binary",
		filepath.Join(root, "big"):                 strings.Repeat("z", 11),
		filepath.Join(root, "sp ace?#.txt"):        "odd name",
		filepath.Join(outside, "secret"):           "SECRET",
		filepath.Join(root, "sub", "deep", "ten"):  strings.Repeat("t", 10),
		filepath.Join(root, "sub", "not-a-dir.md"): "# md",
	}
	for name, data := range files {
		if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		filepath.Join(root, "link-in"):           "a.txt",
		filepath.Join(root, "sub", "link-up"):    "../a.txt",
		filepath.Join(root, "link-out"):          filepath.Join(outside, "secret"),
		filepath.Join(root, "link-out-relative"): "../outside/secret",
		filepath.Join(root, "dir-out"):           outside,
		filepath.Join(root, "dangling-out"):      filepath.Join(outside, "missing"),
		filepath.Join(root, "dangling-in"):       "missing",
		filepath.Join(root, "loop1"):             "loop2",
		filepath.Join(root, "loop2"):             "loop1",
	}
	for name, target := range links {
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestDir(t *testing.T) {
	t.Parallel()
	root := newTree(t)
	o, err := NewDir(DirConfig{Root: root, MaxBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	type want int
	const (
		ok want = iota
		notFound
		badKey
		tooLarge
	)
	tests := []struct {
		key         string
		want        want
		data        string
		contentType string // prefix
	}{
		{key: "a.txt", data: "hello a", contentType: "text/plain"},
		{key: "./a.txt", data: "hello a", contentType: "text/plain"},
		{key: "sub/b.json", data: `{"b":1}`, contentType: "application/json"},
		{key: "sub/deep/c", data: "\x89PNG\r\n\x1a\n binary"[:10], want: tooLarge},
		{key: "sub/deep/ten", data: strings.Repeat("t", 10), contentType: "text/plain"},
		{key: "link-in", data: "hello a", contentType: "text/plain"},
		{key: "sub/link-up", data: "hello a", contentType: "text/plain"},
		{key: "missing", want: notFound},
		{key: "sub", want: notFound},
		{key: "sub/", want: notFound},
		{key: "fifo", want: notFound},
		{key: "dangling-in", want: notFound},
		{key: "sub/not-a-dir.md/x", want: notFound},
		{key: "loop1", want: notFound},
		{key: strings.Repeat("n", 300), want: notFound},
		{key: "big", want: tooLarge},
		{key: "", want: badKey},
		{key: "..", want: badKey},
		{key: "../outside/secret", want: badKey},
		{key: "sub/../../outside/secret", want: badKey},
		{key: "sub/../a.txt", want: badKey},
		{key: "/etc/passwd", want: badKey},
		{key: "//etc/passwd", want: badKey},
		{key: "a.txt\x00.png", want: badKey},
		{key: "link-out", want: badKey},
		{key: "link-out-relative", want: badKey},
		{key: "dir-out/secret", want: badKey},
		{key: "dangling-out", want: badKey},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel()
			v, err := o.Get(t.Context(), tt.key)
			switch tt.want {
			case ok:
				if err != nil {
					t.Fatal(err)
				}
				if string(v.Data) != tt.data || !strings.HasPrefix(v.ContentType, tt.contentType) {
					t.Errorf("got %q (%s), want %q (%s)", v.Data, v.ContentType, tt.data, tt.contentType)
				}
			case notFound:
				if !errors.Is(err, cache.ErrNotFound) {
					t.Errorf("err = %v, want cache.ErrNotFound", err)
				}
			case badKey:
				var ke *KeyError
				if !errors.As(err, &ke) || !errors.Is(err, cache.ErrBadKey) || ke.Key != tt.key {
					t.Errorf("err = %v, want a *KeyError for the key that is cache.ErrBadKey", err)
				}
			case tooLarge:
				if !errors.Is(err, ErrTooLarge) {
					t.Errorf("err = %v, want ErrTooLarge", err)
				}
			}
		})
	}
}

func TestNewDirRejects(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]DirConfig{
		"empty":     {},
		"missing":   {Root: filepath.Join(t.TempDir(), "nope")},
		"file":      {Root: file},
		"max bytes": {Root: t.TempDir(), MaxBytes: -1},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewDir(cfg); !errors.Is(err, ErrConfig) {
				t.Fatalf("NewDir(%+v) = %v, want ErrConfig", cfg, err)
			}
		})
	}
}

func TestDirCanceled(t *testing.T) {
	t.Parallel()
	o, err := NewDir(DirConfig{Root: newTree(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := o.Get(ctx, "a.txt"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// FuzzDirKey checks that no key reads anything outside the root, and that
// every refusal is a typed error rather than a panic.
func FuzzDirKey(f *testing.F) {
	for _, k := range []string{"a.txt", "../outside/secret", "link-out", "dir-out/secret", "sub/../../outside/secret", "/etc/passwd", "a\x00", "sub//b.json", "sub/./../link-out"} {
		f.Add(k)
	}
	root := newTree(f)
	o, err := NewDir(DirConfig{Root: root})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key string) {
		v, err := o.Get(t.Context(), key)
		if err == nil && bytes.Contains(v.Data, []byte("SECRET")) {
			t.Fatalf("key %q read the secret outside the root", key)
		}
		if err != nil && !errors.Is(err, cache.ErrNotFound) && !errors.Is(err, cache.ErrBadKey) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("key %q: untyped error %v", key, err)
		}
	})
}
