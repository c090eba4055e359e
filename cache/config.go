package cache

import (
	"fmt"
	"time"
)

// Defaults for the zero fields of a GroupConfig.
const (
	defaultLoadTimeout   = 30 * time.Second
	defaultMaxValueBytes = 1 << 20
	defaultFallbackTTL   = 5 * time.Second
	defaultHotAfter      = 3
	defaultHotWindow     = 10 * time.Second
	defaultHotTTL        = time.Minute
	defaultErrorTTL      = time.Second
)

// withDefaults validates c and returns it with the documented defaults in
// place of its zero fields. It never clamps: a value out of range is an
// error naming the field.
func (c GroupConfig) withDefaults() (GroupConfig, error) {
	bad := func(format string, args ...any) (GroupConfig, error) {
		return GroupConfig{}, fmt.Errorf("%w: group %q: "+format, append([]any{ErrBadConfig, c.Name}, args...)...)
	}
	switch {
	case c.Name == "":
		return bad("Name is required")
	case c.Getter == nil:
		return bad("Getter is required")
	case c.MaxBytes <= 0:
		return bad("MaxBytes %d must be > 0", c.MaxBytes)
	case c.HotBytes >= c.MaxBytes:
		return bad("HotBytes %d must be < MaxBytes %d", c.HotBytes, c.MaxBytes)
	case c.MaxValueBytes < 0:
		return bad("MaxValueBytes %d must be >= 0", c.MaxValueBytes)
	case c.HotAfter < 0 || c.HotAfter > 255:
		return bad("HotAfter %d must be in [0, 255]", c.HotAfter)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"TTL", c.TTL}, {"NotFoundTTL", c.NotFoundTTL}, {"LoadTimeout", c.LoadTimeout},
		{"FallbackTTL", c.FallbackTTL}, {"HotWindow", c.HotWindow}, {"HotTTL", c.HotTTL},
	} {
		if d.v < 0 {
			return bad("%s %v must be >= 0", d.name, d.v)
		}
	}
	if c.HotBytes == 0 {
		c.HotBytes = c.MaxBytes / 8
	}
	if c.LoadTimeout == 0 {
		c.LoadTimeout = defaultLoadTimeout
	}
	if c.MaxValueBytes == 0 {
		c.MaxValueBytes = defaultMaxValueBytes
	}
	if c.FallbackTTL == 0 {
		c.FallbackTTL = defaultFallbackTTL
	}
	if c.HotAfter == 0 {
		c.HotAfter = defaultHotAfter
	}
	if c.HotWindow == 0 {
		c.HotWindow = defaultHotWindow
	}
	if c.HotTTL == 0 {
		c.HotTTL = defaultHotTTL
	}
	if c.ErrorTTL == 0 {
		c.ErrorTTL = defaultErrorTTL
	}
	return c, nil
}
