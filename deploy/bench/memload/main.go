// Command memload measures how much memory a ringcached node uses for its
// budget. For each value size and memory-limit mode it starts the daemon
// (one node, one demo group of -budget bytes, no GOMEMLIMIT in its
// environment), reads more distinct keys through it than the budget holds
// (so the caches fill and evict, as in production), then reads random keys
// for -measure, and prints the node's peak RSS against its budget and its
// throughput. Every body is checked against the demo origin's value.
//
//	go build -o /tmp/ringcached ./cmd/ringcached
//	go run ./deploy/bench/memload -bin /tmp/ringcached
//
// deploy/bench/memory.sh builds both and runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ringcache/ringcache/internal/loadgen"
	"github.com/ringcache/ringcache/transport/origin"
)

const group = "bench"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "memload:", err)
		os.Exit(1)
	}
}

type config struct {
	bin     string
	url     string
	sizes   []int
	modes   []string
	budget  int64
	rounds  int
	conns   int
	measure time.Duration
	keysX   float64
}

func run() error {
	var c config
	var sizes, modes, budget string
	flag.StringVar(&c.bin, "bin", "", "the ringcached binary (required unless -url)")
	flag.StringVar(&c.url, "url", "", "load a running node instead (one size; -budget as configured; the modes are labels); its CPU time is not measured")
	flag.StringVar(&sizes, "sizes", "100,1024,65536", "value sizes in bytes, comma-separated")
	flag.StringVar(&modes, "modes", "auto,off", "the daemon's -memory-limit values to compare, comma-separated")
	flag.StringVar(&budget, "budget", "256MiB", "the group's budget (bytes=), in MiB")
	flag.IntVar(&c.rounds, "rounds", 1, "runs of every mode per size, alternating, for the throughput ratio")
	flag.IntVar(&c.conns, "conns", 32, "concurrent keep-alive connections")
	flag.DurationVar(&c.measure, "measure", 20*time.Second, "how long random keys are read after the fill")
	flag.Float64Var(&c.keysX, "keys", 1.375, "distinct keys as a multiple of what the budget holds")
	flag.Parse()
	if c.bin == "" && c.url == "" {
		return errors.New("-bin or -url is required")
	}
	mib, err := strconv.ParseInt(strings.TrimSuffix(budget, "MiB"), 10, 64)
	if err != nil || mib <= 0 {
		return fmt.Errorf("-budget %q: want a number of MiB like 256MiB", budget)
	}
	c.budget = mib << 20
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("-sizes: %q: want a positive integer", s)
		}
		c.sizes = append(c.sizes, n)
	}
	c.modes = strings.Split(modes, ",")

	fmt.Printf("one node, one group of %d MiB, %d connections, %v of random reads after the fill; no GOMEMLIMIT\n\n", mib, c.conns, c.measure)
	fmt.Println("| value | -memory-limit | keys | limit | accounted | heap live | GC goal | free in spans | peak RSS | peak / budget | bound (1.2x + 64 MiB) | fill req/s | read req/s | CPU µs/read | GC cycles | GC CPU | scavenger CPU |")
	fmt.Println("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	failed := false
	type key struct {
		size int
		mode string
	}
	rates, costs := map[key][]float64{}, map[key][]float64{}
	for _, size := range c.sizes {
		for range c.rounds {
			for _, mode := range c.modes {
				r, err := measure(c, size, mode)
				if err != nil {
					return fmt.Errorf("%d B, -memory-limit %s: %w", size, mode, err)
				}
				bound := c.budget*12/10 + 64<<20
				verdict := "ok"
				if r.peakRSS > bound {
					verdict = "over"
					if mode == "auto" {
						failed = true
					}
				}
				limit := "none"
				if r.mem.Limit > 0 {
					limit = mibs(r.mem.Limit)
				}
				fmt.Printf("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %.2fx | %s | %.0f | %.0f | %.1f | %d | %.1f%% | %.1f%% |\n",
					sizeName(size), mode, r.keys, limit, mibs(r.mem.Accounted), mibs(int64(r.mem.HeapLive)),
					mibs(int64(r.mem.HeapGoal)), mibs(int64(r.mem.HeapUnused)), mibs(r.peakRSS),
					float64(r.peakRSS)/float64(c.budget), verdict, r.fillRate, r.readRate, 1e6*r.cpuPerReq, r.mem.GCCycles, 100*r.mem.GCCPU, 100*r.mem.Scavenge)
				rates[key{size, mode}] = append(rates[key{size, mode}], r.readRate)
				costs[key{size, mode}] = append(costs[key{size, mode}], r.cpuPerReq)
			}
		}
	}
	if len(c.modes) > 1 {
		fmt.Printf("\nread throughput, median over %d round(s), as a ratio to -memory-limit %s in the same run:\n\n", c.rounds, c.modes[len(c.modes)-1])
		ref := c.modes[len(c.modes)-1]
		for _, size := range c.sizes {
			for _, mode := range c.modes[:len(c.modes)-1] {
				k, r := key{size, mode}, key{size, ref}
				fmt.Printf("  %s: %s / %s: req/s %.3f, CPU per read %.3f\n", sizeName(size), mode, ref,
					median(rates[k])/median(rates[r]), median(costs[k])/median(costs[r]))
			}
		}
	}
	if failed {
		return errors.New("peak RSS above 1.2x the budget + 64 MiB with the derived memory limit")
	}
	return nil
}

// result is one run's figures.
type result struct {
	keys     int
	peakRSS  int64
	fillRate float64
	readRate float64
	// cpuPerReq is the daemon's CPU time (user and system) per random
	// read: unlike req/s it does not move with what else the machine runs.
	cpuPerReq float64
	mem       memoryInfo
}

// memoryInfo is the part of the daemon's /debug/memory read here.
type memoryInfo struct {
	Limit     int64  `json:"memory_limit"`
	Accounted int64  `json:"accounted"`
	HeapLive  uint64 `json:"heap_live"`
	HeapGoal  uint64 `json:"gc_goal"`
	// HeapUnused is the free space in partly used spans: held, counted
	// against the limit, holding nothing.
	HeapUnused uint64  `json:"heap_unused"`
	RSSPeak    int64   `json:"rss_peak"` // as the node itself sees it
	GCCycles   uint64  `json:"gc_cycles"`
	GCCPU      float64 `json:"gc_cpu_fraction"`
	Scavenge   float64 `json:"scavenge_cpu_fraction"`
}

// entryBytes approximates what one entry costs the budget, to choose how
// many keys overflow it.
func entryBytes(size int) int64 { return int64(size) + 140 + 11 + int64(len(origin.DemoContentType)) }

var readyLine = regexp.MustCompile(`msg="node ready".* addr=(\S+)`)

func measure(c config, size int, mode string) (result, error) {
	keys := int(c.keysX * float64(c.budget) / float64(entryBytes(size)))
	base, pid := c.url, 0
	if base == "" {
		d, err := startDaemon(c, size, mode)
		if err != nil {
			return result{}, err
		}
		defer d.stop()
		base, pid = d.base, d.cmd.Process.Pid
	}
	lc := loadgen.Config{Client: loadgen.NewClient(c.conns, 1, 30*time.Second), Targets: loadgen.URLs(base),
		Group: group, KeyPrefix: "key-", Workers: c.conns, Check: loadgen.DemoCheck(group, "key-", size)}
	client := lc.Client
	defer client.CloseIdleConnections()

	r := result{keys: keys}
	fill := lc
	fill.Source = loadgen.Each(loadgen.Get, keys)
	res, err := load(fill)
	if err != nil {
		return r, fmt.Errorf("fill: %w", err)
	}
	r.fillRate = float64(res.Requests()) / res.Elapsed.Seconds()

	cpu0, err := procCPU(pid)
	if err != nil && pid != 0 {
		return r, err
	}
	read := lc
	read.Source, read.Duration = loadgen.Reads(loadgen.NewPicker(keys, 0)), c.measure
	res, err = load(read)
	if err != nil {
		return r, fmt.Errorf("random reads: %w", err)
	}
	r.readRate = float64(res.Requests()) / res.Elapsed.Seconds()
	cpu1, err := procCPU(pid)
	if err != nil && pid != 0 {
		return r, err
	}
	r.cpuPerReq = (cpu1 - cpu0).Seconds() / float64(res.Requests())

	resp, err := client.Get(base + "/debug/memory")
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r.mem); err != nil {
		return r, fmt.Errorf("/debug/memory: %w", err)
	}
	r.peakRSS = r.mem.RSSPeak
	if pid != 0 {
		// The kernel's figure, read from outside the process.
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return r, err
		}
		r.peakRSS = procKiB(status, "VmHWM:")
	}
	return r, nil
}

// daemon is a ringcached started by startDaemon.
type daemon struct {
	cmd  *exec.Cmd
	base string
}

// startDaemon starts one node with a demo group of the budget and size and
// waits until it is ready.
func startDaemon(c config, size int, mode string) (*daemon, error) {
	maxValue := max(size, 1<<20)
	// One client address does the whole fill, every read a miss: the
	// per-client miss limits would refuse most of it.
	cmd := exec.Command(c.bin, "serve", "-listen", "127.0.0.1:0", "-memory-limit", mode,
		"-client-misses", "off", "-client-miss-rate", "off",
		"-group", fmt.Sprintf("name=%s,origin=demo,bytes=%d,demo-size=%d,max-value-bytes=%d", group, c.budget, size, maxValue))
	// The node must derive its own limit: nothing from this environment
	// that would steer the runtime or the daemon.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "RINGCACHE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &daemon{cmd: cmd}
	addr, err := awaitReady(out)
	if err != nil {
		d.stop()
		return nil, err
	}
	d.base = "http://" + addr
	return d, nil
}

func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
}

// awaitReady reads the daemon's log until it is ready and returns its
// address; later warnings and errors are copied to stderr.
func awaitReady(out io.Reader) (string, error) {
	var logs bytes.Buffer
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		logs.WriteString(line + "\n")
		if m := readyLine.FindStringSubmatch(line); m != nil {
			go func() {
				for sc.Scan() {
					if strings.Contains(sc.Text(), "level=WARN") || strings.Contains(sc.Text(), "level=ERROR") {
						fmt.Fprintln(os.Stderr, "ringcached:", sc.Text())
					}
				}
			}()
			return m[1], nil
		}
	}
	return "", fmt.Errorf("the daemon exited before it was ready:\n%s", logs.String())
}

// load runs lc, in which every body is checked against the demo origin's
// value; any failure fails it.
func load(lc loadgen.Config) (loadgen.Result, error) {
	res, err := loadgen.Do(context.Background(), lc)
	if err != nil {
		return res, err
	}
	if bad := res.Requests() - res.Status[http.StatusOK] + res.Wrong; bad > 0 {
		return res, fmt.Errorf("%d of %d GETs failed or read a wrong value (%v)", bad, res.Requests(), res.Errs)
	}
	return res, nil
}

// procCPU returns the user and system CPU time of process pid so far.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis. utime and stime are fields 14 and
	// 15 of the line, in clock ticks (USER_HZ, 100 on Linux).
	rest := string(data[bytes.LastIndexByte(data, ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// procKiB returns the value of a "Name:  123 kB" line in bytes.
func procKiB(data []byte, name string) int64 {
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				return v << 10
			}
		}
	}
	return 0
}

func mibs(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

func sizeName(n int) string {
	switch {
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
