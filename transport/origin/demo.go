package origin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/ringcache/ringcache/cache"
)

// DemoContentType is the Content-Type of every demo value.
const DemoContentType = "text/plain; charset=utf-8"

// DefaultDemoSize is the length of a demo value when DemoConfig leaves Size
// zero.
const DefaultDemoSize = 64

// DemoConfig configures a demo origin.
type DemoConfig struct {
	// Group is the group name, part of every value (see DemoValue).
	Group string
	// Size is the length of every value in bytes. If zero,
	// DefaultDemoSize (64).
	Size int
	// Latency is how long each load sleeps, as a slow origin would.
	// If zero, none.
	Latency time.Duration
	// MaxKeys bounds how many distinct keys have their own load count;
	// loads of further keys count only in the total. If zero, 100000.
	MaxKeys int
}

// Demo is an origin whose values are computed from the key (DemoValue), so
// that a test or a quick start needs no upstream and can check every value
// it reads. It counts its loads, in total and per key, for /debug/origin and
// for tests that assert "one origin load per key". Demo is safe for
// concurrent use.
type Demo struct {
	group   string
	size    int
	latency time.Duration
	maxKeys int

	mu    sync.Mutex
	loads int64
	keys  map[string]int64
}

var _ cache.Getter = (*Demo)(nil)

// NewDemo validates cfg and returns a demo origin.
func NewDemo(cfg DemoConfig) (*Demo, error) {
	if cfg.Size < 0 {
		return nil, configError("demo size %d: must not be negative", cfg.Size)
	}
	if cfg.Latency < 0 {
		return nil, configError("demo latency %v: must not be negative", cfg.Latency)
	}
	if cfg.MaxKeys < 0 {
		return nil, configError("demo max keys %d: must not be negative", cfg.MaxKeys)
	}
	d := &Demo{group: cfg.Group, size: cfg.Size, latency: cfg.Latency, maxKeys: cfg.MaxKeys, keys: make(map[string]int64)}
	if d.size == 0 {
		d.size = DefaultDemoSize
	}
	if d.maxKeys == 0 {
		d.maxKeys = 100000
	}
	return d, nil
}

// Get counts a load of key, sleeps for the configured latency (or until ctx
// is done) and returns DemoValue(group, key, size).
func (d *Demo) Get(ctx context.Context, key string) (cache.Value, error) {
	d.mu.Lock()
	d.loads++
	if n, ok := d.keys[key]; ok {
		d.keys[key] = n + 1
	} else if len(d.keys) < d.maxKeys {
		// A copy: key may be cut from a request line, which it would keep.
		d.keys[strings.Clone(key)] = 1
	}
	d.mu.Unlock()

	if d.latency > 0 {
		t := time.NewTimer(d.latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return cache.Value{}, fmt.Errorf("origin: demo: %w", context.Cause(ctx))
		}
	}
	return cache.Value{Data: DemoValue(d.group, key, d.size), ContentType: DemoContentType}, nil
}

// DemoLoads is a snapshot of a demo origin's load counts.
type DemoLoads struct {
	// Loads counts every Get call.
	Loads int64 `json:"loads"`
	// Keys counts the Get calls of each key (at most MaxKeys keys).
	Keys map[string]int64 `json:"keys"`
}

// Loads returns a snapshot of the load counts.
func (d *Demo) Loads() DemoLoads {
	d.mu.Lock()
	defer d.mu.Unlock()
	return DemoLoads{Loads: d.loads, Keys: maps.Clone(d.keys)}
}

// DemoValue returns the demo value of key in group: the lowercase hex
// SHA-256 of "ringcache-demo/" + group + "/" + key, repeated and cut to
// exactly size bytes. A size <= 0 gives an empty value.
func DemoValue(group, key string, size int) []byte {
	if size <= 0 {
		return []byte{}
	}
	sum := sha256.Sum256([]byte("ringcache-demo/" + group + "/" + key))
	var digest [2 * sha256.Size]byte
	hex.Encode(digest[:], sum[:])
	v := make([]byte, size)
	for i := 0; i < size; i += len(digest) {
		copy(v[i:], digest[:])
	}
	return v
}
