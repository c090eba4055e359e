// Package freeport gives tests loopback addresses they can bind later, or
// bind again after a restart.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
)

// Addr returns a loopback address with a port that was free a moment ago,
// for a test that must know an address before its server binds it, or that
// restarts a server where its clients look for it. The port is below the
// kernel's ephemeral range, and never handed out twice in one process: a
// port taken from that range (":0") and released could be taken again,
// before the server binds it, as the local port of one of the many
// connections tests open (the bind then fails, "address already in use").
func Addr(t testing.TB) string {
	t.Helper()
	ports.Lock()
	defer ports.Unlock()
	for range 1000 {
		port := ports.low + rand.IntN(ports.span)
		if ports.used[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		ports.used[port] = true
		return ln.Addr().String()
	}
	t.Fatal("no free port below the ephemeral range")
	return ""
}

// ports are the ports Addr picks from: the 8,000 below the kernel's
// ephemeral range (Linux's ip_local_port_range, 32768 by default).
var ports = struct {
	sync.Mutex
	low, span int
	used      map[int]bool
}{low: ephemeralLow() - 8000, span: 8000, used: map[int]bool{}}

// ephemeralLow returns the lowest port the kernel picks for ":0" and for
// outgoing connections.
func ephemeralLow() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var lo, hi int
		if n, _ := fmt.Sscan(string(b), &lo, &hi); n == 2 && lo > 9000 {
			return lo
		}
	}
	return 32768
}
