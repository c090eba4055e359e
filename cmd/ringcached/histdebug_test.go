package main

import "fmt"

// loadsOf describes the origin's loads of key between from and to (Unix
// nanoseconds), in ms from t0: what a history's explanation shows beside a
// violation (linearize.Explain).
func (o *countingOrigin) loadsOf(key string, from, to, t0 int64) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := ""
	for _, l := range o.log {
		if at := l.at.UnixNano(); l.key == key && at >= from && at <= to {
			out += fmt.Sprintf("  origin load by %s at %8.3fms\n", l.node, float64(at-t0)/1e6)
		}
	}
	return out
}
