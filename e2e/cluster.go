//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Cluster is a running ringcache cluster as a test sees it from outside:
// named nodes with a public URL each, and the faults a test can inject. The
// test bodies use only this, so another way to run a cluster (processes on
// the host, say) needs only another implementation.
type Cluster interface {
	// Nodes returns the names of the cluster's nodes, running or not, in order.
	Nodes() []string
	// URL returns the base URL of a node's public API.
	URL(node string) string
	// PeerURL returns the base URL of a node's peer routes, as the host
	// reaches them: their own listener's published port, or URL's when the
	// node serves them on its public listener (RINGCACHE_PEER_LISTEN empty).
	PeerURL(node string) string
	// Kill ends a node with SIGKILL: no goodbye to etcd or to clients.
	Kill(ctx context.Context, node string) error
	// Stop ends a node with SIGTERM and waits until it has exited.
	Stop(ctx context.Context, node string) error
	// Start starts a node that was killed or stopped.
	Start(ctx context.Context, node string) error
	// StopEtcd stops the cluster's etcd; StartEtcd starts it again.
	StopEtcd(ctx context.Context) error
	// StartEtcd starts etcd after StopEtcd.
	StartEtcd(ctx context.Context) error
	// Disconnect cuts a node off the cluster network (and from clients).
	Disconnect(ctx context.Context, node string) error
	// Connect undoes Disconnect.
	Connect(ctx context.Context, node string) error
	// Pause freezes a node's processes (SIGSTOP-like): connections to it are
	// still accepted, but nothing answers them, not even etcd keepalives.
	Pause(ctx context.Context, node string) error
	// Unpause undoes Pause; the node goes on where it stopped.
	Unpause(ctx context.Context, node string) error
	// ScaleUp adds a node and returns its name once all running nodes agree
	// on the ring; ScaleDown removes it again the same way.
	ScaleUp(ctx context.Context) (string, error)
	// ScaleDown removes the node ScaleUp added.
	ScaleDown(ctx context.Context) (string, error)
	// Close removes the cluster: containers, network and volumes.
	Close(ctx context.Context) error
}

// ComposeConfig configures a Compose cluster.
type ComposeConfig struct {
	// DeployDir is the directory with docker-compose.yml and the scripts; required.
	DeployDir string
	// Project is the Compose project name: if empty, "ringcache-e2e-<unix
	// seconds>-<pid>", which Reap recognises as stale once the process is gone.
	Project string
	// Secret is the cluster secret: if empty, a random one.
	Secret string
	// WriteToken is the bearer token public writes need: if empty, a
	// random one.
	WriteToken string
	// Groups is the daemon's group setting (RINGCACHE_GROUP); required.
	Groups string
	// Env holds more VAR=value settings for the scripts, after ours.
	Env []string
	// Log receives the scripts' output line by line; nil discards it.
	Log func(format string, args ...any)
}

// projectPrefix marks the Compose projects this package creates.
const projectPrefix = "ringcache-e2e-"

// Compose is a Cluster run by deploy/'s scripts under docker compose, its
// nodes published on free ports of 127.0.0.1. It is safe for concurrent use.
type Compose struct {
	cfg       ComposeConfig
	env       []string
	ports     map[string]int
	peerPorts map[string]int // of the peer listeners; nil: peers on the public one

	// buildDir holds the binaries up.sh builds for this run; removed by Close.
	buildDir string

	mu    sync.Mutex
	nodes []string
	ids   map[string]string // service -> container id
}

var _ Cluster = (*Compose)(nil)

// NewCompose builds the images and starts etcd and node1..node3 through
// deploy/up.sh, and returns once every node is ready and the rings agree.
// On error the cluster is removed again.
func NewCompose(ctx context.Context, cfg ComposeConfig) (*Compose, error) {
	if cfg.DeployDir == "" || cfg.Groups == "" {
		return nil, errors.New("e2e: compose needs DeployDir and Groups")
	}
	if cfg.Project == "" {
		cfg.Project = fmt.Sprintf("%s%d-%d", projectPrefix, time.Now().Unix(), os.Getpid())
	}
	if cfg.Secret == "" {
		b := make([]byte, 16)
		rand.Read(b)
		cfg.Secret = hex.EncodeToString(b)
	}
	if cfg.WriteToken == "" {
		b := make([]byte, 32)
		rand.Read(b)
		cfg.WriteToken = hex.EncodeToString(b)
	}
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	c := &Compose{
		cfg:   cfg,
		ports: map[string]int{},
		nodes: []string{"node1", "node2", "node3"},
		ids:   map[string]string{},
	}
	// Free ports, so that neither a dev cluster on 8081-8083 nor a leftover of
	// another run can be in the way. A port could be taken between here and
	// `up`; then up.sh fails loudly rather than testing the wrong cluster.
	ports, err := freePorts(8)
	if err != nil {
		return nil, err
	}
	// Only our settings reach Compose: a RINGCACHE_ETCD in the caller's
	// environment must not point the test cluster somewhere else.
	c.env = scriptEnv()
	c.env = append(c.env,
		"COMPOSE_PROJECT_NAME="+cfg.Project,
		"RINGCACHE_SECRET="+cfg.Secret,
		"RINGCACHE_WRITE_TOKEN="+cfg.WriteToken,
		"RINGCACHE_GROUP="+cfg.Groups,
	)
	if os.Getenv("RINGCACHE_SKIP_BUILD") != "1" {
		// Images and binaries of our own: a dev cluster or another run
		// building at the same time can neither swap them under this run nor
		// be broken by it, and Close removes them, so runs leave no images.
		if c.buildDir, err = os.MkdirTemp("", cfg.Project+"-build-"); err != nil {
			return nil, fmt.Errorf("e2e: build directory: %w", err)
		}
		c.env = append(c.env, "RINGCACHE_BUILD_DIR="+c.buildDir, "RINGCACHE_REMOVE_IMAGES=1")
		c.env = append(c.env, imageEnv(cfg.Project)...)
	}
	for i, p := range ports[:4] {
		node := fmt.Sprintf("node%d", i+1)
		c.ports[node] = p
		c.env = append(c.env, fmt.Sprintf("RINGCACHE_NODE%d_PORT=%d", i+1, p),
			fmt.Sprintf("RINGCACHE_NODE%d_PEER_PORT=%d", i+1, ports[4+i]))
	}
	c.env = append(c.env, cfg.Env...)
	if !slices.Contains(cfg.Env, "RINGCACHE_PEER_LISTEN=") {
		c.peerPorts = map[string]int{}
		for i, p := range ports[4:] {
			c.peerPorts[fmt.Sprintf("node%d", i+1)] = p
		}
	}

	_, err = c.script(ctx, "up.sh")
	// Look the containers up now: Compose takes seconds to answer, which
	// must not count into the time a fault takes to show.
	for _, service := range []string{"etcd", "node1", "node2", "node3"} {
		if err != nil {
			break
		}
		_, err = c.id(ctx, service)
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		return nil, errors.Join(err, c.Close(cctx))
	}
	return c, nil
}

// Project returns the Compose project name.
func (c *Compose) Project() string { return c.cfg.Project }

// WriteToken returns the bearer token the cluster's public writes need.
func (c *Compose) WriteToken() string { return c.cfg.WriteToken }

// Nodes implements Cluster.
func (c *Compose) Nodes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// URL implements Cluster.
func (c *Compose) URL(node string) string {
	return "http://127.0.0.1:" + strconv.Itoa(c.ports[node])
}

// PeerURL implements Cluster.
func (c *Compose) PeerURL(node string) string {
	if c.peerPorts == nil {
		return c.URL(node)
	}
	return "http://127.0.0.1:" + strconv.Itoa(c.peerPorts[node])
}

// Kill implements Cluster.
func (c *Compose) Kill(ctx context.Context, node string) error {
	return c.docker(ctx, node, "kill", "--signal", "KILL")
}

// Stop implements Cluster. The grace period is longer than the daemon's
// shutdown timeout, so Docker never has to SIGKILL it.
func (c *Compose) Stop(ctx context.Context, node string) error {
	return c.docker(ctx, node, "stop", "-t", "15") // -t: --time in docker 20.10, --timeout later
}

// ExitedAt returns when a node's process last exited, by Docker's clock
// (this host's). A kill is timed from there: the docker CLI itself can take
// most of a second to return on a busy machine.
func (c *Compose) ExitedAt(ctx context.Context, node string) (time.Time, error) {
	id, err := c.id(ctx, node)
	if err != nil {
		return time.Time{}, err
	}
	out, err := c.run(ctx, "docker", "inspect", "--format", "{{.State.FinishedAt}}", id)
	if err != nil {
		return time.Time{}, err
	}
	at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(out))
	if err != nil {
		return time.Time{}, fmt.Errorf("e2e: exit time of %s: %w", node, err)
	}
	return at, nil
}

// Start implements Cluster.
func (c *Compose) Start(ctx context.Context, node string) error {
	return c.docker(ctx, node, "start")
}

// StopEtcd implements Cluster.
func (c *Compose) StopEtcd(ctx context.Context) error { return c.Stop(ctx, "etcd") }

// StartEtcd implements Cluster.
func (c *Compose) StartEtcd(ctx context.Context) error { return c.Start(ctx, "etcd") }

// Disconnect implements Cluster. Without its network the container is also
// unreachable on its published port: clients see refused connections.
func (c *Compose) Disconnect(ctx context.Context, node string) error {
	id, network, err := c.network(ctx, node)
	if err != nil {
		return err
	}
	_, err = c.run(ctx, "docker", "network", "disconnect", network, id)
	return err
}

// Connect implements Cluster. The service name goes back on as an alias, so
// that peers find the node under the same host name as before.
func (c *Compose) Connect(ctx context.Context, node string) error {
	id, network, err := c.network(ctx, node)
	if err != nil {
		return err
	}
	_, err = c.run(ctx, "docker", "network", "connect", "--alias", node, network, id)
	return err
}

// Pause implements Cluster with docker pause (the cgroup freezer).
func (c *Compose) Pause(ctx context.Context, node string) error {
	return c.docker(ctx, node, "pause")
}

// Unpause implements Cluster with docker unpause.
func (c *Compose) Unpause(ctx context.Context, node string) error {
	return c.docker(ctx, node, "unpause")
}

// ScaleUp implements Cluster with deploy/scale.sh up (node4).
func (c *Compose) ScaleUp(ctx context.Context) (string, error) {
	if _, err := c.script(ctx, "scale.sh", "up"); err != nil {
		return "", err
	}
	if _, err := c.id(ctx, "node4"); err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.nodes, "node4") {
		c.nodes = append(c.nodes, "node4")
	}
	return "node4", nil
}

// ScaleDown implements Cluster with deploy/scale.sh down. The script
// removes node4's container, and its log with it, so the log is followed
// into <TMPDIR>/<project>-node4.log meanwhile: what a leaving node did
// (its hand-over) stays readable.
func (c *Compose) ScaleDown(ctx context.Context) (string, error) {
	if id, err := c.id(ctx, "node4"); err == nil {
		path := filepath.Join(os.TempDir(), c.cfg.Project+"-node4.log")
		if f, err := os.Create(path); err == nil {
			cmd := exec.CommandContext(ctx, "docker", "logs", "--follow", "--timestamps", id)
			cmd.Stdout, cmd.Stderr = f, f
			if err := cmd.Start(); err == nil {
				// The log ends when the container is removed; if the
				// script failed before that, it is cut off.
				defer func() {
					cut := time.AfterFunc(5*time.Second, func() { cmd.Process.Kill() })
					defer cut.Stop()
					if err := cmd.Wait(); err != nil {
						c.cfg.Log("following node4's log: %v", err)
					}
					f.Close()
					c.cfg.Log("node4's log is in %s", path)
				}()
			} else {
				f.Close()
			}
		}
	}
	if _, err := c.script(ctx, "scale.sh", "down"); err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = slices.DeleteFunc(c.nodes, func(n string) bool { return n == "node4" })
	delete(c.ids, "node4")
	return "node4", nil
}

// Close implements Cluster with deploy/down.sh, which also removes the
// run's images; then it removes the run's build directory.
func (c *Compose) Close(ctx context.Context) error {
	_, err := c.script(ctx, "down.sh")
	if c.buildDir != "" {
		err = errors.Join(err, os.RemoveAll(c.buildDir))
	}
	return err
}

// scriptEnv returns this process's environment without the settings that
// would change which cluster the scripts run: only RINGCACHE_COMPOSE (which
// Compose command) and RINGCACHE_SKIP_BUILD pass.
func scriptEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "RINGCACHE_") && name != "RINGCACHE_COMPOSE" && name != "RINGCACHE_SKIP_BUILD" ||
			name == "COMPOSE_PROJECT_NAME" || name == "COMPOSE_FILE" || name == "COMPOSE_PROFILES" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// imageEnv returns the settings that give a run's images names of its own,
// derived from the project name so that Reap finds them too.
func imageEnv(project string) []string {
	return []string{
		"RINGCACHE_IMAGE=" + imageRepo + "ringcached:" + project,
		"RINGCACHE_ETCD_IMAGE=" + imageRepo + "etcd:" + project,
	}
}

// imageRepo prefixes the names of the images the suite builds.
const imageRepo = "ringcache-e2e/"

// SaveLogs writes every service's whole log to path.
func (c *Compose) SaveLogs(ctx context.Context, path string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.cfg.DeployDir, "compose.sh"), "logs", "--no-color", "--timestamps")
	cmd.Env = c.env
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	return errors.Join(cmd.Run(), f.Close())
}

// id returns the container id of a service, as Compose knows it.
func (c *Compose) id(ctx context.Context, service string) (string, error) {
	c.mu.Lock()
	id, ok := c.ids[service]
	c.mu.Unlock()
	if ok {
		return id, nil
	}
	out, err := c.script(ctx, "compose.sh", "ps", "-q", service)
	if err != nil {
		return "", err
	}
	id = strings.TrimSpace(out)
	if id == "" || strings.ContainsAny(id, " \n") {
		return "", fmt.Errorf("e2e: no single container for %s: %q", service, out)
	}
	c.mu.Lock()
	c.ids[service] = id
	c.mu.Unlock()
	return id, nil
}

// docker runs `docker <verb> [args] <container of service>`.
func (c *Compose) docker(ctx context.Context, service, verb string, args ...string) error {
	id, err := c.id(ctx, service)
	if err != nil {
		return err
	}
	_, err = c.run(ctx, "docker", append(append([]string{verb}, args...), id)...)
	return err
}

// network returns a node's container id and the network Compose made for
// the project. Docker is asked by label: v1 and v2 name things differently,
// and a disconnected container has no network left to inspect.
func (c *Compose) network(ctx context.Context, node string) (id, network string, err error) {
	if id, err = c.id(ctx, node); err != nil {
		return "", "", err
	}
	out, err := c.run(ctx, "docker", "network", "ls", "--format", "{{.Name}}",
		"--filter", "label=com.docker.compose.project="+c.cfg.Project,
		"--filter", "label=com.docker.compose.network=default")
	if err != nil {
		return "", "", err
	}
	network = strings.TrimSpace(out)
	if network == "" || strings.ContainsAny(network, " \n") {
		return "", "", fmt.Errorf("e2e: no single default network in project %s: %q", c.cfg.Project, out)
	}
	return id, network, nil
}

// script runs a deploy/ script with the cluster's environment.
func (c *Compose) script(ctx context.Context, name string, args ...string) (string, error) {
	return c.run(ctx, filepath.Join(c.cfg.DeployDir, name), args...)
}

// run runs a command with the cluster's environment and returns its output,
// which also goes to the log; a failure carries the output's tail.
func (c *Compose) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.env
	cmd.Dir = c.cfg.DeployDir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// A cancelled test must not leave docker-compose half way: give it a moment.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	start := time.Now()
	err := cmd.Run()
	text := out.String()
	for line := range strings.Lines(text) {
		c.cfg.Log("  | %s", strings.TrimRight(line, "\n"))
	}
	c.cfg.Log("%s %s: %v (%s)", filepath.Base(name), strings.Join(args, " "), errOrOK(err), time.Since(start).Round(time.Millisecond))
	if err != nil {
		return text, fmt.Errorf("e2e: %s %s: %w\n%s", name, strings.Join(args, " "), err, tail(text, 40))
	}
	return text, nil
}

func errOrOK(err error) any {
	if err == nil {
		return "ok"
	}
	return err
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePorts returns n ports that were free on 127.0.0.1 a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("e2e: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Reap removes the Compose projects of earlier e2e runs whose test process
// is gone (it was killed, or go test's timeout panicked past t.Cleanup) or
// that are older than maxAge, so a leftover cannot hold resources forever.
// It returns the projects it removed.
func Reap(ctx context.Context, deployDir string, maxAge time.Duration) ([]string, error) {
	// A run can die half way through down.sh, so look for every kind of
	// thing it leaves: containers, networks and volumes by Compose's label,
	// images by their tag (the project name).
	var out bytes.Buffer
	for _, args := range [][]string{
		{"ps", "-a", "--format", `{{.Label "com.docker.compose.project"}}`},
		{"network", "ls", "--format", `{{.Label "com.docker.compose.project"}}`},
		{"volume", "ls", "--format", `{{.Label "com.docker.compose.project"}}`},
		{"image", "ls", "--format", "{{.Tag}}", "--filter", "reference=" + imageRepo + "*"},
	} {
		b, err := exec.CommandContext(ctx, "docker", args...).Output()
		if err != nil {
			return nil, fmt.Errorf("e2e: docker %s: %w", strings.Join(args[:2], " "), err)
		}
		out.Write(b)
		out.WriteByte('\n')
	}
	var reaped []string
	seen := map[string]bool{}
	for line := range strings.Lines(out.String()) {
		project := strings.TrimSpace(line)
		if seen[project] || !strings.HasPrefix(project, projectPrefix) {
			continue
		}
		seen[project] = true
		// ringcache-e2e-<unix seconds>-<pid>
		parts := strings.Split(strings.TrimPrefix(project, projectPrefix), "-")
		if len(parts) != 2 {
			continue
		}
		born, err1 := strconv.ParseInt(parts[0], 10, 64)
		pid, err2 := strconv.Atoi(parts[1])
		if err1 != nil || err2 != nil {
			continue
		}
		err := syscall.Kill(pid, 0)
		alive := pid == os.Getpid() || err == nil || errors.Is(err, syscall.EPERM)
		if alive && time.Since(time.Unix(born, 0)) < maxAge {
			continue
		}
		cmd := exec.CommandContext(ctx, filepath.Join(deployDir, "down.sh"))
		cmd.Env = append(scriptEnv(), "COMPOSE_PROJECT_NAME="+project, "RINGCACHE_STOP_TIMEOUT=1", "RINGCACHE_REMOVE_IMAGES=1")
		cmd.Env = append(cmd.Env, imageEnv(project)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return reaped, fmt.Errorf("e2e: reaping %s: %w\n%s", project, err, tail(string(b), 20))
		}
		reaped = append(reaped, project)
	}
	return reaped, nil
}
