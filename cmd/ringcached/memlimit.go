package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// The daemon bounds its own heap. Go's collector lets the heap grow to
// twice what was live after the last collection (GOGC=100); a cache keeps
// its whole budget live and churns through garbage as it evicts, so
// without a limit a node peaks near twice its budget, and in a container
// with a hard memory limit that is an OOM kill. A soft limit
// (runtime/debug.SetMemoryLimit) makes the collector run more often as the
// heap nears it instead.
//
// The limit derived from the configuration is the groups' budgets plus
// budgets/memHeadroomDiv (garbage between collections, and what the
// accounting of an entry may miss) plus memBase. Under a cgroup memory
// limit the derived limit plus memReserve must fit below it, or the node
// refuses to start. The figures are measured by deploy/bench/memory.sh;
// deploy/README.md's "Memory and sizing" has the table.
const (
	// memBase is what a node needs beyond its caches: the runtime and its
	// metadata, goroutine stacks, HTTP connections and request buffers,
	// the etcd client, per-group sketches. In deploy/bench/memory.sh runs
	// the live heap beyond the caches' accounted bytes was 3 to 22 MiB (the
	// demo origin's per-key load counts included); the rest is headroom.
	memBase = 48 << 20
	// memHeadroomDiv: the limit is budgets/memHeadroomDiv above the budgets,
	// so the heap can hold garbage between collections. Less headroom means
	// more frequent collections. Measured with 1 KiB values: 1/8 cost about
	// 13% more CPU per request than no limit, 1/5 about 5 to 13%, but with
	// 1/5 a node on a loaded machine once peaked 24 MiB over its limit, past
	// 1.2 x budgets + 64 MiB: the collector's CPU is capped, so a starved
	// node overshoots. 100 B values cost about 1.5 x the CPU per request at
	// this limit, and would need about 1.7 x budgets to come within 10%
	// (deploy/README.md's "Memory and sizing"): no headroom under that bound gets them
	// there, so it stays where the larger values need it.
	memHeadroomDiv = 8
	// memReserve is what the process holds beyond what the Go runtime counts
	// against its limit (the binary's resident text and data), plus the
	// overshoot of a collector that cannot keep up: peak RSS was up to 24
	// MiB above the limit on a loaded machine. The derived limit must stay
	// this far below a cgroup's hard limit.
	memReserve = 32 << 20
)

// Where the memory limit in force came from.
const (
	memSourceDerived = "derived"    // from the budgets (the default)
	memSourceFlag    = "flag"       // -memory-limit (or its variable or file key)
	memSourceEnv     = "GOMEMLIMIT" // the runtime's own variable, left alone
	memSourceOff     = "off"        // -memory-limit off: no limit
)

// noMemLimit is the runtime's "no limit".
const noMemLimit = math.MaxInt64

// errMemory is wrapped by the errors of a node whose memory cannot fit.
var errMemory = errors.New("ringcached: memory")

// memPlan is the soft memory limit a node runs with and why.
type memPlan struct {
	Budgets    int64  // sum of the groups' budgets
	Need       int64  // the derived limit: budgets + headroom + memBase
	Limit      int64  // the limit to set; noMemLimit for none
	Source     string // memSource*
	Cgroup     int64  // the cgroup's hard limit; 0: none found
	CgroupFile string // the file Cgroup was read from
	Warning    string // a configuration that will run but not well
}

// needMemory returns the soft limit derived for budgets bytes of caches.
func needMemory(budgets int64) int64 {
	return budgets + budgets/memHeadroomDiv + memBase
}

// planMemory chooses the memory limit. setting is the -memory-limit
// setting (0: derive, negative: off, positive: that limit); envLimit is the
// runtime's limit when GOMEMLIMIT is set (envSet). cg is the cgroup's hard
// limit, 0 if there is none. An error names the numbers that do not fit.
func planMemory(budgets, setting int64, envLimit int64, envSet bool, cg cgroupLimit) (memPlan, error) {
	p := memPlan{Budgets: budgets, Need: needMemory(budgets), Cgroup: cg.Limit, CgroupFile: cg.File}
	switch {
	case setting > 0:
		p.Limit, p.Source = setting, memSourceFlag
	case setting < 0:
		p.Limit, p.Source = noMemLimit, memSourceOff
	case envSet:
		p.Limit, p.Source = envLimit, memSourceEnv
	default:
		p.Limit, p.Source = p.Need, memSourceDerived
	}
	if p.Source == memSourceFlag || p.Source == memSourceEnv {
		name := "-memory-limit"
		if p.Source == memSourceEnv {
			name = "GOMEMLIMIT"
		}
		if p.Limit != noMemLimit && budgets >= p.Limit {
			return p, fmt.Errorf("%w: the groups' budgets total %s, at or above %s %s: the caches alone would fill it", errMemory, fmtBytes(budgets), name, fmtBytes(p.Limit))
		}
		if cg.Limit > 0 && p.Limit != noMemLimit && p.Limit+memReserve > cg.Limit {
			return p, fmt.Errorf("%w: %s %s plus %s outside the Go heap exceeds the cgroup memory limit %s (%s)", errMemory, name, fmtBytes(p.Limit), fmtBytes(memReserve), fmtBytes(cg.Limit), cg.File)
		}
		if p.Limit < p.Need {
			p.Warning = fmt.Sprintf("%s %s is below the %s that budgets of %s need: the collector will run often", name, fmtBytes(p.Limit), fmtBytes(p.Need), fmtBytes(budgets))
		}
	}
	if (p.Source == memSourceDerived || p.Limit == noMemLimit) && cg.Limit > 0 && p.Need+memReserve > cg.Limit {
		return p, fmt.Errorf("%w: the groups' budgets total %s and need %s of memory (budgets + 1/%d + %s, plus %s outside the Go heap), above the cgroup memory limit %s (%s): lower the budgets (bytes=) or raise the container's memory limit to at least %s",
			errMemory, fmtBytes(budgets), fmtBytes(p.Need+memReserve), memHeadroomDiv, fmtBytes(memBase), fmtBytes(memReserve), fmtBytes(cg.Limit), cg.File, fmtBytes(p.Need+memReserve))
	}
	return p, nil
}

// applyMemoryLimit plans the node's memory limit from its configuration,
// the environment and the cgroup under root ("/" in production), sets it,
// and logs it. The returned restore puts back the limit that was in force
// before, unless another caller changed it since (in-process tests run
// several nodes in one process, whose limit is one for all).
func applyMemoryLimit(cfg Config, getenv func(string) string, root string, log *slog.Logger) (memPlan, func(), error) {
	var budgets int64
	for _, g := range cfg.Groups {
		budgets += g.Bytes
	}
	cg, err := readCgroupLimit(root)
	if err != nil {
		return memPlan{}, nil, fmt.Errorf("%w: reading the cgroup memory limit: %v", errMemory, err)
	}
	envSet := getenv("GOMEMLIMIT") != ""
	prev := debug.SetMemoryLimit(-1)
	p, err := planMemory(budgets, cfg.MemoryLimit, prev, envSet, cg)
	if err != nil {
		return p, nil, err
	}
	if p.Source != memSourceEnv {
		debug.SetMemoryLimit(p.Limit)
	}
	// min_container is the smallest container memory limit the budgets
	// fit: what a manifest's limits.memory must be at least.
	attrs := []any{"limit", fmtLimit(p.Limit), "source", p.Source, "budgets", fmtBytes(p.Budgets), "need", fmtBytes(p.Need), "min_container", fmtBytes(p.Need + memReserve)}
	if p.Cgroup > 0 {
		attrs = append(attrs, "cgroup_limit", fmtBytes(p.Cgroup), "cgroup_file", p.CgroupFile)
	}
	log.Info("memory limit", attrs...)
	if p.Warning != "" {
		log.Warn("memory limit: " + p.Warning)
	}
	if total := physicalMemory(root); p.Cgroup == 0 && total > 0 && p.Need > total {
		log.Warn("memory limit: the budgets need more memory than the machine has: the soft limit cannot hold", "need", fmtBytes(p.Need), "machine", fmtBytes(total))
	}
	set := p.Limit
	restore := func() {
		if p.Source != memSourceEnv && debug.SetMemoryLimit(-1) == set {
			debug.SetMemoryLimit(prev)
		}
	}
	return p, restore, nil
}

// parseMemoryLimit parses -memory-limit: auto (0), off (-1) or a size.
func parseMemoryLimit(n *int64, v string) error {
	switch v {
	case "auto":
		*n = 0
		return nil
	case "off":
		*n = -1
		return nil
	}
	var x int64
	if err := parseBytes(&x, v); err != nil || x == 0 {
		return fmt.Errorf("%q: want auto, off or a size like 360MiB", v)
	}
	*n = x
	return nil
}

// memWatchInterval is how often watchMemory looks at the heap.
const memWatchInterval = 10 * time.Second

// boundMemory sets the node's memory limit (see applyMemoryLimit) and
// watches that it holds until the returned stop is called; stop waits for
// the watcher and restores the limit. An error means the node must not
// start.
func boundMemory(ctx context.Context, cfg Config, getenv func(string) string, log *slog.Logger) (stop func(), err error) {
	_, restore, err := applyMemoryLimit(cfg, getenv, "/", log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchMemory(ctx, memWatchInterval, log)
	}()
	return func() {
		cancel()
		<-done
		restore()
	}, nil
}

// cgroupLimit is a cgroup's hard memory limit and the file it came from.
type cgroupLimit struct {
	Limit int64 // 0: none
	File  string
}

// readCgroupLimit returns the tightest memory limit over the cgroups of
// this process under root: v2's memory.max (and memory.high, above which
// the kernel throttles) and v1's memory.limit_in_bytes, of the process's
// own cgroup as /proc/self/cgroup names it and of every ancestor, since a
// parent's limit binds its children. In a container the cgroup file system
// is usually the container's own, so the root of the mount is read as
// well. Missing files mean no limit; a file that cannot be parsed is an
// error.
func readCgroupLimit(root string) (cgroupLimit, error) {
	var best cgroupLimit
	consider := func(file string) error {
		data, err := os.ReadFile(file)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return nil
		}
		if err != nil {
			return err
		}
		s := strings.TrimSpace(string(data))
		if s == "max" {
			return nil
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return fmt.Errorf("%s: %q: want a number of bytes or max", file, s)
		}
		// cgroup v1 writes "no limit" as the largest page-aligned int64.
		if v >= 1<<62 {
			return nil
		}
		if best.Limit == 0 || v < best.Limit {
			best = cgroupLimit{Limit: v, File: file}
		}
		return nil
	}
	v1, v2 := "/", "/"
	if data, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup")); err == nil {
		v1, v2 = parseProcCgroup(data)
	}
	for _, c := range []struct{ mount, own string }{
		{"sys/fs/cgroup", v2},
		{"sys/fs/cgroup/memory", v1},
	} {
		for dir := c.own; ; dir = path.Dir(dir) {
			base := filepath.Join(root, c.mount, filepath.FromSlash(dir))
			files := []string{"memory.max", "memory.high"}
			if strings.HasSuffix(c.mount, "/memory") {
				files = []string{"memory.limit_in_bytes"}
			}
			for _, f := range files {
				if err := consider(filepath.Join(base, f)); err != nil {
					return cgroupLimit{}, err
				}
			}
			if dir == "/" || dir == "." {
				break
			}
		}
	}
	return best, nil
}

// parseProcCgroup returns this process's cgroup paths in the v1 memory
// hierarchy and in the v2 unified one, from /proc/self/cgroup
// ("4:memory:/docker/abc", "0::/system.slice/x.service"); "/" for one it
// does not list.
func parseProcCgroup(data []byte) (v1, v2 string) {
	v1, v2 = "/", "/"
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		controllers, p, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(p, "/") {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			v2 = path.Clean(p)
		case containsField(controllers, "memory"):
			v1 = path.Clean(p)
		}
	}
	return v1, v2
}

func containsField(list, name string) bool {
	for f := range strings.SplitSeq(list, ",") {
		if f == name {
			return true
		}
	}
	return false
}

// physicalMemory returns MemTotal from root's /proc/meminfo, 0 if unknown.
func physicalMemory(root string) int64 {
	data, err := os.ReadFile(filepath.Join(root, "proc/meminfo"))
	if err != nil {
		return 0
	}
	return procKiB(data, "MemTotal:")
}

// procKiB returns the value of a "Name:  123 kB" line in bytes, 0 if absent.
func procKiB(data []byte, name string) int64 {
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, name); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			v, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0
			}
			return v << 10
		}
	}
	return 0
}

// fmtBytes formats n in MiB, KiB or bytes with at most one decimal: the
// units operators size containers in.
func fmtBytes(n int64) string {
	unit := func(div float64, suffix string) string {
		return strings.TrimSuffix(strconv.FormatFloat(float64(n)/div, 'f', 1, 64), ".0") + suffix
	}
	switch {
	case n >= 1<<20:
		return unit(1<<20, "MiB")
	case n >= 1<<10:
		return unit(1<<10, "KiB")
	}
	return strconv.FormatInt(n, 10) + "B"
}

// fmtLimit formats a memory limit, "none" for the runtime's no-limit.
func fmtLimit(n int64) string {
	if n == noMemLimit {
		return "none"
	}
	return fmtBytes(n)
}

// watchMemory logs, every interval until ctx ends, when the soft limit
// does not hold (see memPressure).
func watchMemory(ctx context.Context, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var p memPressure
	prev := readMemStats()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := readMemStats()
		if msg, begins := p.observe(prev, cur); msg != "" {
			attrs := []any{"heap_live", fmtBytes(int64(cur.HeapLive)), "limit", fmtLimit(cur.Limit), "go_total", fmtBytes(int64(cur.GoTotal)),
				"gc_cpu", fmt.Sprintf("%.0f%%", 100*cur.gcShareSince(prev))}
			if begins {
				log.Warn(msg, attrs...)
			} else {
				log.Info(msg, attrs...)
			}
		}
		prev = cur
	}
}

// memPressure tells when the soft limit stops holding and when it holds
// again. It does not hold when the live heap after a collection is at or
// above 95% of the limit, or when the collector's CPU limiter engaged
// between two observations (the collector wanted more than half the CPU).
// Past that point the runtime lets the heap grow over the limit rather
// than spend all the CPU collecting, and the operator must hear of it, once
// when it begins and once when it ends rather than on every observation.
type memPressure struct{ pressed bool }

// observe compares two successive samples. It returns the message to log,
// if any, and whether it begins a period of pressure.
func (p *memPressure) observe(prev, cur memStats) (msg string, begins bool) {
	limited := cur.LimiterLastCycle != prev.LimiterLastCycle && cur.LimiterLastCycle != 0
	full := cur.Limit != noMemLimit && float64(cur.HeapLive) >= 0.95*float64(cur.Limit)
	switch {
	case (limited || full) && !p.pressed:
		p.pressed = true
		if full {
			return "memory limit cannot hold: the live heap is at 95% of the limit and the collector runs all the time; lower the budgets or raise the limit", true
		}
		return "memory limit cannot hold: collecting under the limit took more than half the CPU, so the heap may pass it; raise the limit (small values need more headroom) or lower the budgets", true
	case !limited && !full && p.pressed:
		p.pressed = false
		return "memory limit holds again", false
	}
	return "", false
}
