package main

import (
	"testing"

	"github.com/ringcache/ringcache/peers"
	"github.com/ringcache/ringcache/transport"
)

// nopSetter takes any member set.
type nopSetter struct{}

func (nopSetter) Set(...string) error { return nil }

// TestPeerURLOneRule: the daemon accepts a peer URL exactly when the
// transport accepts it as a member and peers accepts it as a static peer,
// so that a URL the start let through never fails later, and a URL the
// libraries take is never refused here.
func TestPeerURLOneRule(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		// (https peers are left out: the daemon also wants its mutual TLS
		// settings for them, a rule about the node, not the URL.)
		"http://node:8080", "http://node:8080/", "http://node:8080/prefix",
		"http://10.0.0.1:8080", "http://[::1]:8080",
		"node:8080", "ftp://node", "http://", "http://user@node:8080", "http://node:8080/?q=1", "http://node:8080/#f",
	} {
		cfg := DefaultConfig()
		cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo}}
		cfg.Peers = []string{u}
		daemon := cfg.Validate() == nil
		pool := transport.CheckPeerURL(u) == nil
		_, err := peers.Static(nopSetter{}, "http://self:1", u)
		static := err == nil
		if daemon != pool || pool != static {
			t.Errorf("%q: daemon accepts %v, transport %v, peers %v", u, daemon, pool, static)
		}
	}
}
