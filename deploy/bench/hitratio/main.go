// Command hitratio replays real cache access traces through the project's
// store (a single-node cache.Group sized by the sizing rule) and through
// other caches at the same capacity in entries, and prints one table of
// hit ratios: every miss is an origin load.
//
//	go run ./deploy/bench/hitratio                 # the traces in ../shared/traces
//	go run ./deploy/bench/hitratio FILE...         # any trace in the same formats
//
// Capacities are 0.1%, 1% and 10% of each trace's distinct keys, and the
// published sizes of a trace where there are some (OLTP: 250, 1,000 and
// 2,000 entries, at which LRU holds exactly 16.47%, 32.83% and 42.47%,
// counted from an empty cache). Results on the ARC traces must cite N.
// Megiddo and D. S. Modha, "ARC: A Self-Tuning, Low Overhead Replacement
// Cache", USENIX FAST 2003.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// published are the sizes (entries) at which figures on a trace were
// published, by its file name without a compression suffix.
var published = map[string][]int{"arc-OLTP.lis": {250, 1000, 2000}}

func main() {
	dir := flag.String("traces", "../shared/traces", "directory whose trace files are replayed when no file is named")
	flag.IntVar(&valueBytes, "value", valueBytes, "bytes of every value the store holds (the sizing rule counts them)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: hitratio [-traces DIR] [FILE...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	files := flag.Args()
	if len(files) == 0 {
		var err error
		if files, err = traceFiles(*dir); err != nil {
			fmt.Fprintln(os.Stderr, "hitratio:", err)
			os.Exit(1)
		}
	}
	for _, f := range files {
		t, err := readTrace(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hitratio:", err)
			os.Exit(1)
		}
		sizes := capacities(t)
		printRows(os.Stdout, t, sizes, replay(t, sizes))
	}
}

// traceFiles returns the trace files in dir, by name.
func traceFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		n := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".zst"), ".xz")
		if strings.Contains(n, "LICENSE") || strings.Contains(n, "README") {
			continue // the terms beside the traces
		}
		if ext := filepath.Ext(n); !e.IsDir() && (ext == ".lis" || ext == ".trace" || ext == ".txt") {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no trace file (.lis, .trace, .txt, optionally .zst or .xz) in %s", dir)
	}
	return files, nil
}

// capacities returns the sizes t is replayed at, smallest first.
func capacities(t *trace) []int {
	sizes := []int{max(1, t.distinct/1000), max(1, t.distinct/100), max(1, t.distinct/10)}
	base := strings.TrimSuffix(strings.TrimSuffix(t.name, ".zst"), ".xz")
	sizes = append(sizes, published[base]...)
	slices.Sort(sizes)
	return slices.Compact(sizes)
}

// replay returns the hits of every policy at every capacity: hits[i][j]
// for capacities[i] and policies[j]. The replays run in parallel.
func replay(t *trace, capacities []int) [][]int {
	hits := make([][]int, len(capacities))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, c := range capacities {
		hits[i] = make([]int, len(policies))
		for j, p := range policies {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				hits[i][j] = run(p.make(c), t.keys)
			})
		}
	}
	wg.Wait()
	return hits
}

// run replays keys through p and returns its hits.
func run(p policy, keys []uint64) int {
	n := 0
	for _, k := range keys {
		if p.access(k) {
			n++
		}
	}
	return n
}

var headerOnce sync.Once

// printRows prints t's rows of the table (its header first, once), at
// sizes, with the hits replay returned: hit ratios in percent, and
// ringcache's misses against LRU's and against the fewest of any other
// policy.
func printRows(w io.Writer, t *trace, sizes []int, hits [][]int) {
	headerOnce.Do(func() {
		fmt.Fprint(w, "| trace | entries |")
		for _, p := range policies {
			fmt.Fprintf(w, " %s |", p.name)
		}
		fmt.Fprintln(w, " ringcache misses / lru's | / best other's |")
		fmt.Fprint(w, "| --- | ---: |")
		for range policies {
			fmt.Fprint(w, " ---: |")
		}
		fmt.Fprintln(w, " ---: | ---: |")
	})
	n := len(t.keys)
	for i, c := range sizes {
		fmt.Fprintf(w, "| %s | %d |", t.name, c)
		best, lruMisses := n, 0
		for j, p := range policies {
			fmt.Fprintf(w, " %s |", percent(hits[i][j], n))
			switch {
			case p.name == "lru":
				lruMisses = n - hits[i][j]
				best = min(best, lruMisses)
			case !strings.HasPrefix(p.name, "ringcache"):
				best = min(best, n-hits[i][j])
			}
		}
		misses := n - hits[i][0] // the store at its default policy
		fmt.Fprintf(w, " %.3f | %.3f |\n", ratio(misses, lruMisses), ratio(misses, best))
	}
}

// percent formats hits of n as a percentage with two decimals.
func percent(hits, n int) string { return fmt.Sprintf("%.2f", 100*float64(hits)/float64(n)) }

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
