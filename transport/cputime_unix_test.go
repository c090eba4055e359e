//go:build unix

package transport

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time the process has used, user and system. On a
// machine shared with other work, wall time per op moves with their load;
// the CPU time a benchmark's client and server spend per op moves far less.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
