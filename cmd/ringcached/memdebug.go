package main

import (
	"net/http"
	"os"
	"runtime/debug"
	rtmetrics "runtime/metrics"
)

// memStats is what the process's memory looks like now, from the runtime
// and from the kernel.
type memStats struct {
	Limit            int64  // the soft limit in force (noMemLimit: none)
	HeapLive         uint64 // heap marked live by the last collection
	HeapObjects      uint64 // heap occupied by objects, live or not yet swept
	HeapUnused       uint64 // free slots in spans in use (fragmentation): held, counted by the limit, holding nothing
	HeapGoal         uint64 // the heap size at which the collector aims to finish its current cycle
	Objects          uint64 // heap objects, live or not yet swept
	GoTotal          uint64 // what the runtime holds from the OS, less what it returned: what the limit bounds
	GCCycles         uint64
	LimiterLastCycle uint64  // the collection at which the GC CPU limiter last engaged; 0: never
	GCCPU            float64 // CPU seconds spent collecting, since start
	ScavengeCPU      float64 // CPU seconds spent returning memory to the OS, since start
	TotalCPU         float64 // CPU seconds available to the process, since start
	RSS              int64   // resident set size (VmRSS)
	RSSPeak          int64   // peak resident set size (VmHWM)
}

// memSampleNames are the runtime metrics readMemStats reads, in the order
// it reads them.
var memSampleNames = []string{
	"/gc/heap/live:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/gc/cycles/total:gc-cycles",
	"/gc/limiter/last-enabled:gc-cycle",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
	"/cpu/classes/scavenge/total:cpu-seconds",
	"/memory/classes/heap/unused:bytes",
	"/gc/heap/goal:bytes",
	"/gc/heap/objects:objects",
}

// readMemStats samples the runtime's metrics and /proc/self/status.
func readMemStats() memStats {
	samples := make([]rtmetrics.Sample, len(memSampleNames))
	for i, name := range memSampleNames {
		samples[i].Name = name
	}
	rtmetrics.Read(samples)
	u := func(i int) uint64 {
		if samples[i].Value.Kind() != rtmetrics.KindUint64 {
			return 0
		}
		return samples[i].Value.Uint64()
	}
	f := func(i int) float64 {
		if samples[i].Value.Kind() != rtmetrics.KindFloat64 {
			return 0
		}
		return samples[i].Value.Float64()
	}
	s := memStats{
		Limit:            debug.SetMemoryLimit(-1),
		HeapLive:         u(0),
		HeapObjects:      u(1),
		GoTotal:          u(2) - u(3),
		GCCycles:         u(4),
		LimiterLastCycle: u(5),
		GCCPU:            f(6),
		TotalCPU:         f(7),
		ScavengeCPU:      f(8),
		HeapUnused:       u(9),
		HeapGoal:         u(10),
		Objects:          u(11),
	}
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		s.RSS = procKiB(data, "VmRSS:")
		s.RSSPeak = procKiB(data, "VmHWM:")
	}
	return s
}

// gcShareSince returns the share of the CPU the collector used between
// prev and s.
func (s memStats) gcShareSince(prev memStats) float64 {
	total := s.TotalCPU - prev.TotalCPU
	if total <= 0 {
		return 0
	}
	return (s.GCCPU - prev.GCCPU) / total
}

// memoryInfo is the JSON of /debug/memory: what the operator sized (the
// budgets), what the caches account for, what the heap holds and what the
// kernel sees, side by side. Sizes are in bytes.
type memoryInfo struct {
	Limit       int64             `json:"memory_limit"` // -1: none
	Cgroup      int64             `json:"cgroup_limit,omitempty"`
	CgroupFile  string            `json:"cgroup_file,omitempty"`
	Budgets     int64             `json:"budgets"`
	Need        int64             `json:"need"` // the limit the budgets derive
	Accounted   int64             `json:"accounted"`
	Dead        int64             `json:"dead"` // the caches' dead page bytes, counted against the budgets too
	Groups      []groupMemoryInfo `json:"groups"`
	HeapLive    uint64            `json:"heap_live"`
	HeapObjects uint64            `json:"heap_objects"`
	HeapUnused  uint64            `json:"heap_unused"` // free space in partly used spans
	HeapGoal    uint64            `json:"gc_goal"`
	Objects     uint64            `json:"objects"` // heap objects, live or not yet swept
	GoTotal     uint64            `json:"go_total"`
	RSS         int64             `json:"rss"`
	RSSPeak     int64             `json:"rss_peak"`
	GCCycles    uint64            `json:"gc_cycles"`
	GCCPU       float64           `json:"gc_cpu_fraction"` // since start
	GCLimiter   uint64            `json:"gc_limiter_last_cycle"`
	ScavengeCPU float64           `json:"scavenge_cpu_fraction"` // since start
	// HeapPerAccounted is heap_live / accounted: how far the caches'
	// accounting is from the heap (the rest of the process included).
	HeapPerAccounted float64 `json:"heap_per_accounted,omitempty"`
	RSSPerBudget     float64 `json:"rss_per_budget,omitempty"`
}

// groupMemoryInfo is one group's part of /debug/memory.
type groupMemoryInfo struct {
	Name      string `json:"name"`
	Budget    int64  `json:"budget"`
	MainBytes int64  `json:"main_bytes"`
	HotBytes  int64  `json:"hot_bytes"`
	CopyBytes int64  `json:"copy_bytes"` // other nodes' values held as an heir (copies > 1)
	DeadBytes int64  `json:"dead_bytes"`
	Items     int64  `json:"items"`
}

// serveMemory answers GET /debug/memory.
func (n *node) serveMemory(w http.ResponseWriter, r *http.Request) {
	s := readMemStats()
	info := memoryInfo{
		Limit:       s.Limit,
		HeapLive:    s.HeapLive,
		HeapObjects: s.HeapObjects,
		HeapUnused:  s.HeapUnused,
		HeapGoal:    s.HeapGoal,
		Objects:     s.Objects,
		GoTotal:     s.GoTotal,
		RSS:         s.RSS,
		RSSPeak:     s.RSSPeak,
		GCCycles:    s.GCCycles,
		GCLimiter:   s.LimiterLastCycle,
		Groups:      []groupMemoryInfo{},
	}
	if info.Limit == noMemLimit {
		info.Limit = -1
	}
	if s.TotalCPU > 0 {
		info.GCCPU = s.GCCPU / s.TotalCPU
		info.ScavengeCPU = s.ScavengeCPU / s.TotalCPU
	}
	if cg, err := readCgroupLimit("/"); err == nil {
		info.Cgroup, info.CgroupFile = cg.Limit, cg.File
	}
	for _, g := range n.groups() {
		st := g.Stats()
		gi := groupMemoryInfo{Name: g.Name(), Budget: g.Config().MaxBytes, MainBytes: st.MainBytes, HotBytes: st.HotBytes, CopyBytes: st.CopyBytes, DeadBytes: st.DeadBytes, Items: st.MainItems + st.HotItems + st.CopyItems}
		info.Groups = append(info.Groups, gi)
		info.Budgets += gi.Budget
		info.Accounted += gi.MainBytes + gi.HotBytes + gi.CopyBytes
		info.Dead += gi.DeadBytes
	}
	info.Need = needMemory(info.Budgets)
	if info.Accounted > 0 {
		info.HeapPerAccounted = float64(s.HeapLive) / float64(info.Accounted)
	}
	if info.Budgets > 0 {
		info.RSSPerBudget = float64(s.RSS) / float64(info.Budgets)
	}
	writeJSON(w, info)
}
