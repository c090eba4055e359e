package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/ringcache/ringcache/internal/devcert"
	"github.com/ringcache/ringcache/internal/embedetcd"
)

// devConfig configures "ringcached dev".
type devConfig struct {
	BasePort    int // node i listens on 127.0.0.1:BasePort+i; 0: any free ports
	Nodes       int
	DemoSize    int
	DemoLatency time.Duration
	LogLevel    string
	Placement   string // "": the daemon's default (auto: ranges, the nodes being in etcd); hashed or ranges
	TLS         bool   // mutual TLS between the nodes, from a throwaway CA
	// Progress, if not nil, gets a line for each step as it comes up.
	Progress io.Writer
}

// devCluster is the running dev mode: an embedded etcd and the nodes
// registered in it.
type devCluster struct {
	dir     string // etcd's data, removed by stop
	etcd    *embedetcd.Etcd
	etcdURL string
	secret  string
	token   string // the public write token
	certDir string // with TLS: the throwaway CA and certificates, removed by stop
	nodes   []*node
}

// runDev runs the dev cluster until ctx ends.
func runDev(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ringcached dev", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var dc devConfig
	fs.IntVar(&dc.BasePort, "base-port", 8081, "node i listens on 127.0.0.1:base-port+i-1; 0: any free ports")
	fs.IntVar(&dc.Nodes, "nodes", 3, "number of nodes")
	fs.IntVar(&dc.DemoSize, "demo-size", 64, "bytes per value of the demo group")
	fs.DurationVar(&dc.DemoLatency, "demo-latency", 50*time.Millisecond, "sleep per demo origin load, so that a miss and a hit differ visibly")
	fs.StringVar(&dc.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&dc.Placement, "placement", placementAuto, "ring placement: auto (ranges: the nodes are in etcd), hashed or ranges")
	fs.BoolVar(&dc.TLS, "tls", false, "mutual TLS between the nodes, with a throwaway CA and certificates generated for this run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("ringcached dev: unexpected argument %q", fs.Arg(0))
	}
	if _, err := parseLevel(dc.LogLevel); err != nil {
		return fmt.Errorf("%w: log-level: %v", errConfig, err)
	}
	log := newLogger(stdout, dc.LogLevel, "text")
	dc.Progress = stdout
	c, err := startDev(ctx, dc, log)
	if err != nil {
		return err
	}
	c.printIntro(stdout)
	<-ctx.Done()
	log.Info("stopping the dev cluster")
	c.stop(10 * time.Second)
	return nil
}

// startDev starts etcd and the nodes and returns once every node is ready
// and sees all the others, so that every node computes the same owners.
func startDev(ctx context.Context, dc devConfig, log *slog.Logger) (_ *devCluster, err error) {
	if dc.Nodes < 1 || dc.BasePort < 0 || dc.BasePort != 0 && dc.BasePort+dc.Nodes-1 > 65535 {
		return nil, fmt.Errorf("%w: dev: want at least 1 node on ports up to 65535", errConfig)
	}
	c := &devCluster{}
	defer func() {
		if err != nil {
			c.stop(5 * time.Second)
		}
	}()
	began := time.Now()
	step := func(format string, args ...any) {
		if dc.Progress != nil {
			fmt.Fprintf(dc.Progress, "dev: %5.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
		}
	}
	if c.dir, err = os.MkdirTemp("", "ringcache-dev-etcd-"); err != nil {
		return nil, err
	}
	step("starting an embedded etcd in %s", c.dir)
	if err := c.startEtcd(ctx); err != nil {
		return nil, err
	}
	step("etcd ready at %s", c.etcdURL)
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	c.secret = hex.EncodeToString(b[:])
	c.token = newToken()

	var certs []devCerts
	if dc.TLS {
		if c.certDir, certs, err = writeDevCerts(dc.Nodes); err != nil {
			return nil, err
		}
	}

	for i := range dc.Nodes {
		port := 0
		if dc.BasePort != 0 {
			port = dc.BasePort + i
		}
		cfg := DefaultConfig()
		cfg.Listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		cfg.NodeID = fmt.Sprintf("node%d", i+1)
		cfg.Etcd = []string{c.etcdURL}
		cfg.Cluster = "dev"
		cfg.Secret = c.secret
		cfg.Public.WriteToken = c.token
		cfg.LogLevel = dc.LogLevel
		cfg.ShutdownTimeout = 5 * time.Second
		cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo, DemoSize: dc.DemoSize, DemoLatency: dc.DemoLatency}}
		if dc.Placement != "" {
			cfg.Placement = dc.Placement
		}
		if dc.TLS {
			// Mutual TLS needs the peer routes on a listener of their own.
			cfg.PeerListen = "127.0.0.1:0"
			cfg.PeerCA, cfg.PeerCert, cfg.PeerKey = certs[i].ca, certs[i].cert, certs[i].key
		}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		n, err := startNode(ctx, cfg, log)
		if err != nil {
			return nil, fmt.Errorf("ringcached dev: %s: %w", cfg.NodeID, err)
		}
		c.nodes = append(c.nodes, n)
		step("%s ready at http://%s", cfg.NodeID, n.addrs[0])
	}
	// Each node learns of the later ones through its etcd watch.
	for _, n := range c.nodes {
		if err := n.awaitMembers(ctx, func(m int) bool { return m >= len(c.nodes) }, 10*time.Second); err != nil {
			return nil, err
		}
	}
	step("every node sees all %d: the rings agree", len(c.nodes))
	return c, nil
}

// startEtcd starts a single-member etcd on free loopback ports, quiet: its
// zap logs (errors included, on a normal stop) go nowhere.
func (c *devCluster) startEtcd(ctx context.Context) error {
	e, err := embedetcd.Start(ctx, embedetcd.Config{Name: "ringcache-dev", Dir: c.dir})
	if err != nil {
		return fmt.Errorf("ringcached dev: %w", err)
	}
	c.etcd, c.etcdURL = e, e.URL
	return nil
}

// stop stops the nodes together (each leaves the ring and drains), then
// etcd, and removes etcd's data.
func (c *devCluster) stop(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() { n.stop(ctx) })
	}
	wg.Wait()
	if c.etcd != nil {
		c.etcd.Close()
	}
	for _, d := range []string{c.dir, c.certDir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
}

// urls returns the nodes' public base URLs.
func (c *devCluster) urls() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = "http://" + n.addrs[0].String()
	}
	return out
}

// printIntro tells the developer what runs and what to try.
func (c *devCluster) printIntro(w io.Writer) {
	urls := c.urls()
	fmt.Fprintf(w, "\nringcache dev cluster: %d nodes, embedded etcd at %s, group \"demo\"\n", len(urls), c.etcdURL)
	for i, u := range urls {
		fmt.Fprintf(w, "  node%d  %s\n", i+1, u)
	}
	last := urls[len(urls)-1]
	fmt.Fprintf(w, "\nTry:\n")
	fmt.Fprintf(w, "  curl -i %s/cache/demo/hello          # a miss: loaded once, by the key's owner\n", urls[0])
	fmt.Fprintf(w, "  curl -i %s/cache/demo/hello          # the same value from another node\n", last)
	fmt.Fprintf(w, "  curl '%s/debug/ring?key=hello'       # members, shares, and hello's owner\n", urls[0])
	fmt.Fprintf(w, "  curl %s/debug/origin                 # demo origin loads on this node\n", last)
	fmt.Fprintf(w, "  curl -s %s/metrics | grep ^ringcache_\n", urls[0])
	fmt.Fprintf(w, "  curl -i -X PUT -H 'Authorization: Bearer %s' --data 'my value' %s/cache/demo/mine\n", c.token, urls[0])
	fmt.Fprintf(w, "  curl -i -X DELETE -H 'Authorization: Bearer %s' %s/cache/demo/mine\n", c.token, last)
	fmt.Fprintf(w, "  curl -i -X PUT --data 'forged' %s/cache/demo/mine    # 401 without the write token\n", urls[0])
	if c.certDir == "" {
		fmt.Fprintf(w, "  curl -i %s/_groupcache/demo/hello    # a peer route: 401 without the cluster secret\n", urls[0])
		fmt.Fprintf(w, "\nPeer requests are signed with a generated secret; public writes need the\ngenerated write token above. Press Ctrl-C to stop.\n\n")
		return
	}
	peer := c.nodes[0].self
	fmt.Fprintf(w, "  curl -i %s/_groupcache/demo/hello    # a peer route without a client certificate: refused\n", peer)
	fmt.Fprintf(w, "  curl -i --cacert %s --cert %s --key %s %s/_groupcache/demo/hello\n",
		filepath.Join(c.certDir, "ca.pem"), filepath.Join(c.certDir, "node1.pem"), filepath.Join(c.certDir, "node1-key.pem"), peer)
	fmt.Fprintf(w, "        # with node1's certificate: TLS accepted, and still 401 without the cluster secret\n")
	fmt.Fprintf(w, "\nPeers talk mutual TLS with a throwaway CA and certificates in %s (removed on exit),\n", c.certDir)
	fmt.Fprintf(w, "and sign their requests with a generated secret; public writes need the generated\nwrite token above. Press Ctrl-C to stop.\n\n")
}

// devCerts are the files of one dev node's mutual TLS.
type devCerts struct{ ca, cert, key string }

// writeDevCerts generates a throwaway CA and a certificate for each of n
// nodes (for 127.0.0.1 and localhost, where dev nodes listen) into a new
// private directory, and returns it and each node's files.
func writeDevCerts(n int) (dir string, certs []devCerts, err error) {
	ca, err := devcert.NewCA("ringcache dev CA")
	if err != nil {
		return "", nil, err
	}
	if dir, err = os.MkdirTemp("", "ringcache-dev-tls-"); err != nil { // mode 0700
		return "", nil, err
	}
	write := func(name string, data []byte) (string, error) {
		path := filepath.Join(dir, name)
		return path, os.WriteFile(path, data, 0o600)
	}
	caFile, err := write("ca.pem", ca.CertPEM)
	for i := range n {
		if err != nil {
			break
		}
		d := devCerts{ca: caFile, cert: filepath.Join(dir, fmt.Sprintf("node%d.pem", i+1)), key: filepath.Join(dir, fmt.Sprintf("node%d-key.pem", i+1))}
		_, err = ca.IssueFiles(d.cert, d.key, "127.0.0.1", "localhost")
		certs = append(certs, d)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("ringcached dev: certificates: %w", err)
	}
	return dir, certs, nil
}
