package transport

import (
	"net/http"
	"time"
)

// Limits set by NewServer.
const (
	ServerReadHeaderTimeout = 5 * time.Second
	ServerReadTimeout       = 60 * time.Second
	ServerWriteTimeout      = 60 * time.Second
	ServerIdleTimeout       = 120 * time.Second
	ServerMaxHeaderBytes    = 64 << 10
)

// NewServer returns an http.Server for h on addr with the limits a node
// reachable from a network needs: ReadHeaderTimeout (5s) against clients
// that trickle headers, ReadTimeout and WriteTimeout (60s, above a group's
// default 30s LoadTimeout, so a slow origin load is not cut off mid-way),
// IdleTimeout (120s, above the peer client's 90s idle timeout, so the client
// closes a keep-alive connection before the server does) and MaxHeaderBytes
// (64 KiB: a 250-byte key is at most 750 bytes escaped). Adjust the fields
// before serving if a deployment needs other values.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ServerReadHeaderTimeout,
		ReadTimeout:       ServerReadTimeout,
		WriteTimeout:      ServerWriteTimeout,
		IdleTimeout:       ServerIdleTimeout,
		MaxHeaderBytes:    ServerMaxHeaderBytes,
	}
}
