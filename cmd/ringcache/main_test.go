package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The CLI is tested against real daemons: the ringcached binary, built once
// from this module, run as "ringcached dev" (embedded etcd and three nodes
// on free loopback ports, group "demo") and as a single "serve" node with a
// directory origin (a group whose missing keys are not found). Each starts
// on first use and stops when the tests end.

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error

	daemonsMu sync.Mutex
	daemons   []*daemon

	devOnce sync.Once
	dev     *daemon
	devErr  error

	dirOnce sync.Once
	dirNode *daemon
	dirErr  error
	dirRoot string
)

func TestMain(m *testing.M) {
	code := m.Run()
	daemonsMu.Lock()
	for _, d := range daemons {
		d.stop()
	}
	daemonsMu.Unlock()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if code == 0 {
		// Every command closes its connections and goroutines before it
		// returns; a leak here is a bug in the tool.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// ringcached builds the daemon once.
func ringcached(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "ringcache-cli-test-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "ringcached")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "github.com/ringcache/ringcache/cmd/ringcached")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("building ringcached: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// daemon is a running ringcached process.
type daemon struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	urls []string
	done chan struct{}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startDaemon runs ringcached with args and waits for the line ready to
// appear, collecting the node URLs that urlRE's first group matches.
func startDaemon(t *testing.T, urlRE, ready *regexp.Regexp, args ...string) (*daemon, error) {
	cmd := exec.Command(ringcached(t), args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &daemon{cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
	daemonsMu.Lock()
	daemons = append(daemons, d)
	daemonsMu.Unlock()
	go func() {
		cmd.Wait()
		pw.Close()
		close(d.done)
	}()
	found := make(chan []string, 1)
	go func() {
		var urls []string
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			d.out.Write([]byte(line + "\n"))
			if m := urlRE.FindStringSubmatch(line); m != nil {
				urls = append(urls, m[1])
			}
			if !sent && ready.MatchString(line) {
				found <- urls
				sent = true
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case d.urls = <-found:
		return d, nil
	case <-d.done:
		return nil, fmt.Errorf("ringcached %s exited before it was ready:\n%s", strings.Join(args, " "), d.out.String())
	case <-time.After(90 * time.Second):
		return nil, fmt.Errorf("ringcached %s not ready after 90s:\n%s", strings.Join(args, " "), d.out.String())
	}
}

// stop ends the daemon as Ctrl-C would, and kills it if it hangs.
func (d *daemon) stop() {
	d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
	}
}

// devCluster returns the URLs of the shared three-node dev cluster.
func devCluster(t *testing.T) []string {
	t.Helper()
	devOnce.Do(func() {
		dev, devErr = startDaemon(t, regexp.MustCompile(`^\s+node\d+\s+(http://\S+)$`), regexp.MustCompile(`Press Ctrl-C`),
			"dev", "-base-port", "0", "-demo-latency", "0", "-log-level", "warn")
	})
	if devErr != nil {
		t.Fatal(devErr)
	}
	if len(dev.urls) != 3 {
		t.Fatalf("dev cluster printed %d node URLs, want 3:\n%s", len(dev.urls), dev.out.String())
	}
	return dev.urls
}

// freshKeys numbers freshPrefix's prefixes.
var freshKeys atomic.Int64

// freshPrefix returns prefix made unique to this call: the dev cluster
// lives as long as the test binary, so keys a test counts on being new
// (never loaded) must be new again when -count runs the test again.
func freshPrefix(prefix string) string {
	return fmt.Sprintf("%s%d-", prefix, freshKeys.Add(1))
}

// usesDev reports whether env points the tool at the dev cluster.
func usesDev(env []string) bool {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == "RINGCACHE_URL" && slices.ContainsFunc(dev.urls, func(u string) bool { return strings.Contains(v, u) }) {
			return true
		}
	}
	return false
}

// devWriteToken returns the write token the dev cluster printed in its curl
// lines: public writes need it.
func devWriteToken(t *testing.T) string {
	t.Helper()
	devCluster(t)
	m := regexp.MustCompile(`Authorization: Bearer ([^' ]+)'`).FindStringSubmatch(dev.out.String())
	if m == nil {
		t.Fatalf("the dev cluster printed no write token:\n%s", dev.out.String())
	}
	return m[1]
}

// fileNode returns the URL of a single node whose group "files" serves the
// files of a directory, and that directory: a key without a file is not
// found.
func fileNode(t *testing.T) (string, string) {
	t.Helper()
	dirOnce.Do(func() {
		dirRoot, dirErr = os.MkdirTemp(binDirOrTemp(t), "files-")
		if dirErr != nil {
			return
		}
		dirNode, dirErr = startDaemon(t, regexp.MustCompile(`msg="node ready".* addr=(\S+)`), regexp.MustCompile(`msg="node ready"`),
			"serve", "-listen", "127.0.0.1:0", "-node-id", "files", "-open-writes",
			"-group", "name=files,origin=dir,dir="+dirRoot, "-log-level", "info")
	})
	if dirErr != nil {
		t.Fatal(dirErr)
	}
	return "http://" + dirNode.urls[0], dirRoot
}

func binDirOrTemp(t *testing.T) string {
	ringcached(t)
	return binDir
}

// result is what one run of the tool did.
type result struct {
	err    error
	stdout string
	stderr string
}

func (r result) code() int { return exitCode(r.err) }

// cli runs the tool with args, an environment of env ("NAME=value"), and
// stdin.
func cli(t *testing.T, stdin string, env []string, args ...string) result {
	t.Helper()
	return cliTerm(t, false, stdin, env, args...)
}

func cliTerm(t *testing.T, terminal bool, stdin string, env []string, args ...string) result {
	t.Helper()
	return cliCtx(t, t.Context(), terminal, stdin, env, args...)
}

// cliCtx runs the tool until ctx ends, as Ctrl-C ends it.
func cliCtx(t *testing.T, ctx context.Context, terminal bool, stdin string, env []string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	vars := map[string]string{}
	if dev != nil && devErr == nil && usesDev(env) {
		// The dev cluster's writes need its token, as a user's would.
		vars["RINGCACHE_TOKEN"] = devWriteToken(t)
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err := run(ctx, args, environ{
		Getenv:     func(k string) string { return vars[k] },
		Stdin:      strings.NewReader(stdin),
		Stdout:     &stdout,
		Stderr:     &stderr,
		IsTerminal: func(stream any) bool { return terminal && isWriter(stream) },
	})
	return result{err: err, stdout: stdout.String(), stderr: stderr.String()}
}

// urlEnv is RINGCACHE_URL for urls.
func urlEnv(urls ...string) []string {
	return []string{"RINGCACHE_URL=" + strings.Join(urls, ",")}
}

// isWriter: the fake terminal is stdout and stderr; stdin is the test's.
func isWriter(stream any) bool {
	_, ok := stream.(io.Writer)
	return ok
}
