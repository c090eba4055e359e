package ui

import "errors"

// ErrConfig is returned by NewHandler for an invalid Config.
var ErrConfig = errors.New("ui: invalid config")
