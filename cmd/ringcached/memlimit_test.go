package main

import (
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

const mib = 1 << 20

// cgroupTree writes files (path relative to root: content) under a fresh
// directory and returns it: a fake /proc and /sys/fs/cgroup.
func cgroupTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestReadCgroupLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		files    map[string]string
		want     int64
		wantFile string // relative to root
	}{
		{
			name: "v2 container with its own namespace",
			files: map[string]string{
				"proc/self/cgroup":          "0::/\n",
				"sys/fs/cgroup/memory.max":  "402653184\n",
				"sys/fs/cgroup/memory.high": "max\n",
			},
			want: 384 * mib, wantFile: "sys/fs/cgroup/memory.max",
		},
		{
			name: "v2 service: the parent's limit and the own memory.high bind",
			files: map[string]string{
				"proc/self/cgroup": "0::/system.slice/app.service\n",
				"sys/fs/cgroup/system.slice/app.service/memory.max":  "max\n",
				"sys/fs/cgroup/system.slice/app.service/memory.high": "268435456\n",
				"sys/fs/cgroup/system.slice/memory.max":              "536870912\n",
			},
			want: 256 * mib, wantFile: "sys/fs/cgroup/system.slice/app.service/memory.high",
		},
		{
			name: "v2 nested: the tighter ancestor wins",
			files: map[string]string{
				"proc/self/cgroup":                           "0::/kubepods/pod1/ctr\n",
				"sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "1073741824\n",
				"sys/fs/cgroup/kubepods/pod1/memory.max":     "536870912\n",
				"sys/fs/cgroup/kubepods/memory.max":          "max\n",
			},
			want: 512 * mib, wantFile: "sys/fs/cgroup/kubepods/pod1/memory.max",
		},
		{
			name: "v1 docker: the path is the host's, the mount the container's",
			files: map[string]string{
				"proc/self/cgroup":                           "12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes": "314572800\n",
			},
			want: 300 * mib, wantFile: "sys/fs/cgroup/memory/memory.limit_in_bytes",
		},
		{
			name: "v1 with the controllers joined",
			files: map[string]string{
				"proc/self/cgroup": "3:cpu,memory:/app\n",
				"sys/fs/cgroup/memory/app/memory.limit_in_bytes": "209715200\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":     "9223372036854771712\n",
			},
			want: 200 * mib, wantFile: "sys/fs/cgroup/memory/app/memory.limit_in_bytes",
		},
		{
			name: "v1 unlimited",
			files: map[string]string{
				"proc/self/cgroup":                           "4:memory:/\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
			},
		},
		{
			name: "v2 max",
			files: map[string]string{
				"proc/self/cgroup":         "0::/\n",
				"sys/fs/cgroup/memory.max": "max\n",
			},
		},
		{name: "no cgroup file system", files: map[string]string{"proc/meminfo": "MemTotal: 1024 kB\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := cgroupTree(t, tc.files)
			got, err := readCgroupLimit(root)
			if err != nil {
				t.Fatal(err)
			}
			if got.Limit != tc.want {
				t.Fatalf("limit %d (%s), want %d", got.Limit, got.File, tc.want)
			}
			if tc.wantFile != "" && got.File != filepath.Join(root, filepath.FromSlash(tc.wantFile)) {
				t.Fatalf("file %s, want %s", got.File, tc.wantFile)
			}
		})
	}
}

func TestReadCgroupLimitGarbage(t *testing.T) {
	t.Parallel()
	root := cgroupTree(t, map[string]string{
		"proc/self/cgroup":         "0::/\n",
		"sys/fs/cgroup/memory.max": "lots\n",
	})
	_, err := readCgroupLimit(root)
	if err == nil || !strings.Contains(err.Error(), `"lots"`) || !strings.Contains(err.Error(), "memory.max") {
		t.Fatalf("err = %v, want one naming the file and its content", err)
	}
}

func TestParseProcCgroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, v1, v2 string }{
		{"0::/\n", "/", "/"},
		{"0::/a/b\n", "/", "/a/b"},
		{"4:memory:/docker/x\n0::/\n", "/docker/x", "/"},
		{"7:blkio,memory:/m/\n", "/m", "/"},
		{"9:name=systemd:/s\n4:memorycg:/nope\n", "/", "/"},
		{"garbage\n1:memory\n", "/", "/"},
	} {
		v1, v2 := parseProcCgroup([]byte(tc.in))
		if v1 != tc.v1 || v2 != tc.v2 {
			t.Errorf("parseProcCgroup(%q) = %q, %q; want %q, %q", tc.in, v1, v2, tc.v1, tc.v2)
		}
	}
}

func TestPlanMemory(t *testing.T) {
	t.Parallel()
	const budgets = 256 * mib
	need := int64(budgets + budgets/memHeadroomDiv + memBase)
	cg := func(n int64) cgroupLimit { return cgroupLimit{Limit: n, File: "/sys/fs/cgroup/memory.max"} }
	for _, tc := range []struct {
		name      string
		setting   int64
		envLimit  int64
		envSet    bool
		cgroup    cgroupLimit
		want      int64
		source    string
		warns     bool
		errFields []string // each must be in the error
	}{
		{name: "derived, no cgroup", want: need, source: memSourceDerived},
		{name: "derived under a roomy cgroup", cgroup: cg(1 << 30), want: need, source: memSourceDerived},
		{name: "derived exactly fits", cgroup: cg(need + memReserve), want: need, source: memSourceDerived},
		{
			name: "derived does not fit", cgroup: cg(need + memReserve - 1),
			errFields: []string{"256MiB", fmtBytes(need + memReserve), fmtBytes(need + memReserve - 1), "memory.max"},
		},
		{
			name: "budgets alone above the cgroup", cgroup: cg(200 * mib),
			errFields: []string{"budgets total 256MiB", "cgroup memory limit 200MiB"},
		},
		{name: "flag", setting: 400 * mib, want: 400 * mib, source: memSourceFlag},
		{name: "flag below need: runs, warns", setting: 300 * mib, want: 300 * mib, source: memSourceFlag, warns: true},
		{name: "flag at the budgets", setting: budgets, errFields: []string{"-memory-limit 256MiB", "256MiB"}},
		{name: "flag above the cgroup", setting: 400 * mib, cgroup: cg(384 * mib), errFields: []string{"-memory-limit 400MiB", "384MiB"}},
		{name: "flag wins over GOMEMLIMIT", setting: 500 * mib, envLimit: 400 * mib, envSet: true, want: 500 * mib, source: memSourceFlag},
		{name: "GOMEMLIMIT left alone", envLimit: 1 << 30, envSet: true, want: 1 << 30, source: memSourceEnv},
		{name: "GOMEMLIMIT above the cgroup", envLimit: 1 << 30, envSet: true, cgroup: cg(512 * mib), errFields: []string{"GOMEMLIMIT 1024MiB", "512MiB"}},
		{name: "GOMEMLIMIT=off, budgets fit", envLimit: noMemLimit, envSet: true, cgroup: cg(1 << 30), want: noMemLimit, source: memSourceEnv},
		{name: "GOMEMLIMIT=off, budgets do not fit", envLimit: noMemLimit, envSet: true, cgroup: cg(300 * mib), errFields: []string{"256MiB", "300MiB"}},
		{name: "off", setting: -1, want: noMemLimit, source: memSourceOff},
		{name: "off still checks the fit", setting: -1, cgroup: cg(300 * mib), errFields: []string{"256MiB", "300MiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := planMemory(budgets, tc.setting, tc.envLimit, tc.envSet, tc.cgroup)
			if tc.errFields != nil {
				if err == nil {
					t.Fatalf("planMemory = %+v, want an error", p)
				}
				if !errors.Is(err, errMemory) {
					t.Fatalf("err = %v, want errMemory", err)
				}
				for _, f := range tc.errFields {
					if !strings.Contains(err.Error(), f) {
						t.Errorf("error %q does not name %q", err, f)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Limit != tc.want || p.Source != tc.source {
				t.Fatalf("limit %d from %s, want %d from %s", p.Limit, p.Source, tc.want, tc.source)
			}
			if (p.Warning != "") != tc.warns {
				t.Fatalf("warning %q, want one: %v", p.Warning, tc.warns)
			}
			if tc.cgroup.Limit > 0 && p.Limit != noMemLimit && p.Limit+memReserve > tc.cgroup.Limit {
				t.Fatalf("limit %d leaves less than %d below the cgroup's %d", p.Limit, memReserve, tc.cgroup.Limit)
			}
		})
	}
}

// TestMemoryLimitRefusesToStart runs the start-up path with a fake cgroup
// that the budgets do not fit: nothing is set and the error names both
// the memory the budgets need and the limit.
func TestMemoryLimitRefusesToStart(t *testing.T) {
	t.Parallel()
	root := cgroupTree(t, map[string]string{
		"proc/self/cgroup":         "0::/\n",
		"sys/fs/cgroup/memory.max": strconv.Itoa(300 * mib),
	})
	cfg, err := loadConfig([]string{"-group", "name=a,origin=demo,bytes=192MiB", "-group", "name=b,origin=demo,bytes=64MiB"}, env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	before := debug.SetMemoryLimit(-1)
	_, _, err = applyMemoryLimit(cfg, env(nil), root, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("a node whose budgets (256MiB) do not fit a 300MiB cgroup started")
	}
	need := fmtBytes(needMemory(256*mib) + memReserve)
	for _, f := range []string{"256MiB", "300MiB", need} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not name %s", err, f)
		}
	}
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("a refused start changed the memory limit to %d", got)
	}
}

// TestMemoryLimitApplied runs a node with an explicit limit and finds it in
// force, in the log, in /debug/memory and in the metrics; when the node
// stops, the limit from before is back. Not parallel: the limit is the
// whole test process's.
func TestMemoryLimitApplied(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	base, out, stop := serveNode(t, "-group", "name=demo,origin=demo,bytes=16MiB", "-memory-limit", "3GiB")
	if got := debug.SetMemoryLimit(-1); got != 3<<30 {
		t.Fatalf("memory limit in force %d, want 3GiB", got)
	}
	if !regexp.MustCompile(`msg="memory limit" limit=3072MiB source=flag budgets=16MiB need=\S+ min_container=\S+`).MatchString(out.String()) {
		t.Fatalf("no memory limit line in the log:\n%s", out.String())
	}
	for i := range 10 {
		if code, _ := get(t, base+"/cache/demo/k"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("GET: %d", code)
		}
	}
	// The live heap is what the last collection marked: make sure there
	// was one (a short test may not have needed any).
	runtime.GC()
	var info memoryInfo
	getJSON(t, base+"/debug/memory", &info)
	if info.Limit != 3<<30 || info.Budgets != 16*mib || info.Need != needMemory(16*mib) {
		t.Fatalf("/debug/memory: limit %d, budgets %d, need %d", info.Limit, info.Budgets, info.Need)
	}
	if len(info.Groups) != 1 || info.Groups[0].Items != 10 || info.Accounted <= 10*64 || info.Accounted != info.Groups[0].MainBytes+info.Groups[0].HotBytes || info.Dead != info.Groups[0].DeadBytes {
		t.Fatalf("/debug/memory groups: %+v, accounted %d", info.Groups, info.Accounted)
	}
	if info.HeapLive == 0 || info.RSS == 0 || info.RSSPeak < info.RSS || info.GoTotal < info.HeapObjects {
		t.Fatalf("/debug/memory: heap live %d, rss %d, peak %d, go total %d, heap objects %d", info.HeapLive, info.RSS, info.RSSPeak, info.GoTotal, info.HeapObjects)
	}
	if got := value(t, scrape(t, base), "ringcache_memory_limit_bytes"); got != 3<<30 {
		t.Fatalf("ringcache_memory_limit_bytes = %v", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("memory limit after stop %d, want %d as before", got, before)
	}
}

func TestMemoryLimitSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"auto", 0, true}, {"off", -1, true}, {"360MiB", 360 * mib, true}, {"1GiB", 1 << 30, true},
		{"0", 0, false}, {"-5MiB", 0, false}, {"lots", 0, false}, {"", 0, false},
	} {
		cfg, err := loadConfig([]string{"-group", "name=a,origin=demo", "-memory-limit", tc.in}, env(nil), nil)
		if tc.ok != (err == nil) {
			t.Errorf("-memory-limit %q: err = %v", tc.in, err)
			continue
		}
		if tc.ok && cfg.MemoryLimit != tc.want {
			t.Errorf("-memory-limit %q = %d, want %d", tc.in, cfg.MemoryLimit, tc.want)
		}
		if !tc.ok && !strings.Contains(err.Error(), "memory-limit") {
			t.Errorf("-memory-limit %q: error %q does not name the flag", tc.in, err)
		}
	}
	cfg, err := loadConfig([]string{"-group", "name=a,origin=demo"}, env(map[string]string{"RINGCACHE_MEMORY_LIMIT": "off"}), nil)
	if err != nil || cfg.MemoryLimit != -1 {
		t.Fatalf("RINGCACHE_MEMORY_LIMIT=off: %d, %v", cfg.MemoryLimit, err)
	}
}

func TestMemPressure(t *testing.T) {
	t.Parallel()
	limit := int64(100 * mib)
	ok := memStats{Limit: limit, HeapLive: 60 * mib}
	full := memStats{Limit: limit, HeapLive: 96 * mib}
	limiter := func(s memStats, cycle uint64) memStats { s.LimiterLastCycle = cycle; return s }
	var p memPressure
	steps := []struct {
		name   string
		prev   memStats
		cur    memStats
		msg    bool
		begins bool
	}{
		{"below the limit", ok, ok, false, false},
		{"live heap reaches 95%", ok, full, true, true},
		{"still full: logged once", full, full, false, false},
		{"back below", full, ok, true, false},
		{"limiter engages", ok, limiter(ok, 7), true, true},
		{"limiter did not engage again", limiter(ok, 7), limiter(ok, 7), true, false},
		{"no limit, huge heap", memStats{Limit: noMemLimit, HeapLive: math.MaxInt64}, memStats{Limit: noMemLimit, HeapLive: math.MaxInt64}, false, false},
	}
	for _, s := range steps {
		msg, begins := p.observe(s.prev, s.cur)
		if (msg != "") != s.msg || begins != s.begins {
			t.Fatalf("%s: observe = %q, %v; want a message: %v, begins: %v", s.name, msg, begins, s.msg, s.begins)
		}
	}
}

func TestFmtBytes(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{
		0: "0B", 1023: "1023B", 1536: "1.5KiB", 256 * mib: "256MiB", 336*mib + mib/2: "336.5MiB", 3 << 30: "3072MiB",
	} {
		if got := fmtBytes(in); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestProcKiB(t *testing.T) {
	t.Parallel()
	status := []byte("Name:\tringcached\nVmHWM:\t  345600 kB\nVmRSS:\t  200 kB\n")
	if got := procKiB(status, "VmHWM:"); got != 345600<<10 {
		t.Fatalf("VmHWM = %d", got)
	}
	if got := procKiB(status, "VmSwap:"); got != 0 {
		t.Fatalf("absent VmSwap = %d", got)
	}
}
