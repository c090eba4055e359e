package transport

import (
	"net"
	"net/http"
	"time"
)

// newPeerTransport returns the transport of a Pool's client: one for every
// peer, so that keep-alive connections are shared and bounded per host
// rather than per peer object.
func newPeerTransport(cfg Config) *http.Transport {
	return &http.Transport{
		Proxy: nil, // peers are reached directly, never through HTTP_PROXY
		DialContext: (&net.Dialer{
			Timeout:   cfg.DialTimeout,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        0, // no global cap; the per-host cap bounds it
		MaxIdleConnsPerHost: cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:     90 * time.Second,
		// Values are opaque bytes, often already compressed: do not ask for
		// gzip and spend CPU on both ends.
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
	}
}
