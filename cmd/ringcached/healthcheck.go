package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// runHealthcheck probes a node's /readyz (or any URL given with -url) and
// fails unless it answers 200: the health check of an image with no shell
// and no curl.
func runHealthcheck(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ringcached healthcheck", flag.ContinueOnError)
	fs.SetOutput(stdout)
	def := defaultHealthURL(getenv(envName("listen")))
	if getenv(envName("tls-cert")) != "" {
		def = "https" + strings.TrimPrefix(def, "http")
	}
	url := fs.String("url", def, "URL to probe; 200 means healthy")
	timeout := fs.Duration("timeout", 2*time.Second, "bound on the probe")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("ringcached healthcheck: unexpected argument %q", fs.Arg(0))
	}
	return healthcheck(ctx, *url, *timeout)
}

// defaultHealthURL is /readyz on the loopback at the port of listen (the
// RINGCACHE_LISTEN a container shares with its node), else port 8080.
func defaultHealthURL(listen string) string {
	host, port := "127.0.0.1", "8080"
	if h, p, err := net.SplitHostPort(listen); err == nil && p != "" && p != "0" {
		port = p
		if ip := net.ParseIP(h); ip != nil && !ip.IsUnspecified() {
			host = ip.String()
		}
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz"
}

// healthcheck returns nil if url answers 200 within timeout.
func healthcheck(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("ringcached healthcheck: %w", err)
	}
	// No proxy: the probe is for this host's node, whatever HTTP_PROXY says.
	// The probe asks whether this host's node serves, not who it is: with
	// TLS it does not verify the certificate, whose CA it may not have.
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	client := &http.Client{Transport: tr}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("ringcached healthcheck: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ringcached healthcheck: %s: %s", url, resp.Status)
	}
	return nil
}
