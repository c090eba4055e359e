package origin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ringcache/ringcache/cache"
)

// DirConfig configures a directory origin.
type DirConfig struct {
	// Root is the directory whose files are the values. Required; it must
	// exist when NewDir is called.
	Root string
	// MaxBytes bounds the size of a value. If zero, DefaultMaxBytes.
	MaxBytes int64
}

// Dir is an origin that serves the regular files under a directory. A key is
// a slash-separated path relative to the root. Keys that are absolute, that
// have a ".." element or a NUL byte, and symbolic links that lead out of the
// root are refused with a *KeyError; an absent file, a directory or a special
// file is cache.ErrNotFound. The Content-Type comes from the file's
// extension, else from its first bytes. Dir is safe for concurrent use.
type Dir struct {
	root     string
	maxBytes int64
}

var _ cache.Getter = (*Dir)(nil)

// NewDir validates cfg and returns a directory origin.
func NewDir(cfg DirConfig) (*Dir, error) {
	if cfg.Root == "" {
		return nil, configError("dir: required")
	}
	fi, err := os.Stat(cfg.Root)
	if err != nil {
		return nil, configError("dir: %v", err)
	}
	if !fi.IsDir() {
		return nil, configError("dir %q: not a directory", cfg.Root)
	}
	if cfg.MaxBytes < 0 {
		return nil, configError("max bytes %d: must not be negative", cfg.MaxBytes)
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, configError("dir: %v", err)
	}
	d := &Dir{root: root, maxBytes: cfg.MaxBytes}
	if d.maxBytes == 0 {
		d.maxBytes = DefaultMaxBytes
	}
	return d, nil
}

// Get reads the file named by key.
func (d *Dir) Get(ctx context.Context, key string) (cache.Value, error) {
	if err := checkRelative(key); err != nil {
		return cache.Value{}, err
	}
	if err := ctx.Err(); err != nil {
		return cache.Value{}, err
	}
	// os.Root resolves every element, symbolic links included, inside the
	// root and fails rather than follow one out of it; opening it per call
	// keeps no descriptor and follows a root that is replaced (a remount).
	root, err := os.OpenRoot(d.root)
	if err != nil {
		return cache.Value{}, fmt.Errorf("origin: %w", err)
	}
	defer root.Close()
	name := filepath.FromSlash(key)

	// Stat before Open: opening a FIFO would block until a writer comes.
	fi, err := root.Stat(name)
	if err != nil {
		return cache.Value{}, d.openError(key, err)
	}
	if !fi.Mode().IsRegular() {
		return cache.Value{}, fmt.Errorf("origin: %q is not a regular file: %w", key, cache.ErrNotFound)
	}
	f, err := root.Open(name)
	if err != nil {
		return cache.Value{}, d.openError(key, err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return cache.Value{}, fmt.Errorf("origin: %w", err)
	}
	if !fi.Mode().IsRegular() { // replaced between Stat and Open
		return cache.Value{}, fmt.Errorf("origin: %q is not a regular file: %w", key, cache.ErrNotFound)
	}
	if fi.Size() > d.maxBytes {
		return cache.Value{}, fmt.Errorf("%w: %q: %d bytes > %d", ErrTooLarge, key, fi.Size(), d.maxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, d.maxBytes+1))
	if err != nil {
		return cache.Value{}, fmt.Errorf("origin: %w", err)
	}
	if int64(len(data)) > d.maxBytes { // grew while we read it
		return cache.Value{}, fmt.Errorf("%w: %q: more than %d bytes", ErrTooLarge, key, d.maxBytes)
	}
	ct := mime.TypeByExtension(path.Ext(key))
	if ct == "" {
		ct = http.DetectContentType(data)
	}
	return cache.Value{Data: data, ContentType: ct}, nil
}

// openError classifies an error from os.Root. The error it returns for a
// path that leaves the root ("path escapes from parent") is not exported;
// every other failure it reports carries a system errno, so an error with no
// errno is taken for an escape.
func (d *Dir) openError(key string, err error) error {
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP):
		// No file can have that name: a file where a directory would be, a
		// name longer than the file system allows, a loop of links.
		return fmt.Errorf("origin: %q: %w", key, cache.ErrNotFound)
	case !errors.As(err, &errno):
		return &KeyError{Key: key, Reason: "leads out of the root"}
	}
	return fmt.Errorf("origin: %w", err)
}

// checkRelative refuses keys that are not a plain relative path.
func checkRelative(key string) error {
	switch {
	case key == "":
		return &KeyError{Key: key, Reason: "empty"}
	case strings.IndexByte(key, 0) >= 0:
		return &KeyError{Key: key, Reason: "contains a NUL byte"}
	case strings.HasPrefix(key, "/") || filepath.IsAbs(key):
		return &KeyError{Key: key, Reason: "absolute path"}
	}
	for elem := range strings.SplitSeq(key, "/") {
		if elem == ".." {
			return &KeyError{Key: key, Reason: `".." element`}
		}
	}
	if !filepath.IsLocal(filepath.FromSlash(key)) {
		return &KeyError{Key: key, Reason: "not a local path"}
	}
	return nil
}
