// Package embedetcd runs a single-member etcd inside the process, on
// loopback, with its logs discarded: the dev cluster's (ringcached dev) and
// the tests' and examples' (real etcd, never a mock), started one way.
package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config says where an Etcd runs.
type Config struct {
	// Dir holds its data. Required.
	Dir string
	// Name is the member's name. If empty, "ringcache".
	Name string
	// ClientAddr and PeerAddr are the host:port it listens on for clients
	// and for peers. If empty, a free port on 127.0.0.1. Fixed addresses let
	// an etcd restarted on the same Dir come back where its clients look.
	ClientAddr, PeerAddr string
}

// readyTimeout bounds the wait for a new member to serve.
const readyTimeout = 30 * time.Second

// Etcd is a running member.
type Etcd struct {
	// URL is its client URL, http://host:port.
	URL  string
	e    *embed.Etcd
	once sync.Once
}

// Start starts a member and returns once it serves, or with an error when
// it fails, is not ready within 30 s, or ctx ends first.
func Start(ctx context.Context, c Config) (*Etcd, error) {
	if c.Dir == "" {
		return nil, errors.New("embedetcd: Config.Dir is empty")
	}
	at := func(addr string) url.URL {
		if addr == "" {
			addr = "127.0.0.1:0" // port 0: any free port
		}
		return url.URL{Scheme: "http", Host: addr}
	}
	cfg := embed.NewConfig()
	cfg.Name = c.Name
	if cfg.Name == "" {
		cfg.Name = "ringcache"
	}
	cfg.Dir = c.Dir
	client, peer := at(c.ClientAddr), at(c.PeerAddr)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting etcd: %w", err)
	}
	et := &Etcd{URL: "http://" + e.Clients[0].Addr().String(), e: e}
	timeout := time.NewTimer(readyTimeout)
	defer timeout.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return et, nil
	case err = <-e.Err():
		err = fmt.Errorf("etcd: %w", err)
	case <-timeout.C:
		err = fmt.Errorf("etcd not ready after %v", readyTimeout)
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	et.Close()
	return nil, err
}

// Close stops the member; it may be called more than once (embed.Etcd's
// Close panics when called twice).
func (e *Etcd) Close() { e.once.Do(e.e.Close) }

// Err reports a failure of the running member.
func (e *Etcd) Err() <-chan error { return e.e.Err() }

// TB is what ForTest needs of a test (a *testing.T or *testing.B), named
// here so that this package does not import testing into the daemon.
type TB interface {
	Helper()
	TempDir() string
	Cleanup(func())
	Context() context.Context
	Fatal(args ...any)
}

// ForTest starts a member in a directory of the test's own, stopped when
// the test ends, and returns its client URL.
func ForTest(t TB) string {
	t.Helper()
	e, err := Start(t.Context(), Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.URL
}
