package cache

import (
	"cmp"
	"fmt"
	"time"
)

// Defaults for the zero fields of a GroupConfig.
const (
	DefaultLoadTimeout   = 30 * time.Second
	DefaultMaxValueBytes = 1 << 20
	DefaultFallbackTTL   = 5 * time.Second
	DefaultHotAfter      = 3
	DefaultHotWindow     = 10 * time.Second
	DefaultHotTTL        = time.Minute
	DefaultErrorTTL      = time.Second

	// MaxCopies bounds GroupConfig.Copies: each copy costs every write a
	// round trip to one more node, and every node MaxBytes/Copies of room
	// for its own keys.
	MaxCopies = 5

	// DefaultMaxLoads is a group's bound on concurrent origin loads per
	// node: a pool size a database takes without trouble, and at a 1 ms
	// origin far more loads a second than one node's two cores can serve.
	DefaultMaxLoads = 64
	// DefaultLoadQueue is how many loads may wait beyond MaxLoads: a cold
	// fill by thousands of connections at once waits rather than fails.
	DefaultLoadQueue = 4096
	// DefaultLoadQueueWait bounds a queued load's wait, well under a
	// client's usual timeout so that it learns to back off (503) in time.
	DefaultLoadQueueWait = 5 * time.Second
)

// Validate reports whether NewGroup would accept c: nil, or a *ConfigError
// naming the first field at fault. Zero fields are valid where they select a
// documented default. NewGroup applies the same rules; it never clamps a
// value out of range.
func (c GroupConfig) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Group: c.Name, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Name == "":
		return bad("Name", "required")
	case c.Getter == nil:
		return bad("Getter", "required")
	case c.MaxBytes <= 0:
		return bad("MaxBytes", "%d: must be > 0", c.MaxBytes)
	case c.HotBytes >= c.MaxBytes:
		return bad("HotBytes", "%d: must be less than MaxBytes (%d)", c.HotBytes, c.MaxBytes)
	case c.MaxValueBytes < 0:
		return bad("MaxValueBytes", "%d: must not be negative", c.MaxValueBytes)
	case c.HotAfter < 0 || c.HotAfter > 255:
		return bad("HotAfter", "%d: want 0 to 255", c.HotAfter)
	case c.Copies < 0 || c.Copies > MaxCopies:
		return bad("Copies", "%d: want 1 to %d", c.Copies, MaxCopies)
	case c.Policy != "" && c.Policy != PolicySLRU && c.Policy != PolicyLRU:
		return bad("Policy", "%q: want %q or %q", c.Policy, PolicySLRU, PolicyLRU)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"TTL", c.TTL}, {"NotFoundTTL", c.NotFoundTTL}, {"LoadTimeout", c.LoadTimeout},
		{"FallbackTTL", c.FallbackTTL}, {"HotWindow", c.HotWindow}, {"HotTTL", c.HotTTL},
		{"StaleWhileRevalidate", c.StaleWhileRevalidate}, {"StaleIfError", c.StaleIfError},
		{"LoadQueueWait", c.LoadQueueWait},
	} {
		if d.v < 0 {
			return bad(d.field, "%v: must not be negative", d.v)
		}
	}
	return nil
}

// withDefaults validates c and returns it with the documented defaults in
// place of its zero fields.
func (c GroupConfig) withDefaults() (GroupConfig, error) {
	if err := c.Validate(); err != nil {
		return GroupConfig{}, err
	}
	c.HotBytes = cmp.Or(c.HotBytes, c.MaxBytes/8)
	c.Policy = cmp.Or(c.Policy, PolicySLRU)
	c.Copies = cmp.Or(c.Copies, 1)
	c.LoadTimeout = cmp.Or(c.LoadTimeout, DefaultLoadTimeout)
	c.MaxValueBytes = cmp.Or(c.MaxValueBytes, DefaultMaxValueBytes)
	c.FallbackTTL = cmp.Or(c.FallbackTTL, DefaultFallbackTTL)
	c.HotAfter = cmp.Or(c.HotAfter, DefaultHotAfter)
	c.HotWindow = cmp.Or(c.HotWindow, DefaultHotWindow)
	c.HotTTL = cmp.Or(c.HotTTL, DefaultHotTTL)
	c.ErrorTTL = cmp.Or(c.ErrorTTL, DefaultErrorTTL)
	c.MaxLoads = cmp.Or(c.MaxLoads, DefaultMaxLoads)
	c.LoadQueue = cmp.Or(c.LoadQueue, DefaultLoadQueue)
	c.LoadQueueWait = cmp.Or(c.LoadQueueWait, DefaultLoadQueueWait)
	return c, nil
}
