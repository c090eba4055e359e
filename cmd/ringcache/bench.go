package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringcache/ringcache/internal/loadgen"
)

// Limits that keep a mistyped flag from exhausting memory or sockets.
const (
	maxBenchKeys  = 10_000_000
	maxBenchConns = 10_000
	maxValueSize  = 64 << 20
)

// benchConfig is the parsed "bench" subcommand.
type benchConfig struct {
	opts        options
	Keys        int
	Zipf        float64 // 0: uniform
	ValueSize   int     // > 0: PUT every key, then GET; 0: GET only
	Concurrency int
	Duration    time.Duration
	Requests    int64 // > 0: stop after this many GETs rather than after Duration
	KeyPrefix   string
	Seed        uint64
	Quiet       bool
	Procs       int // GOMAXPROCS while bench runs; 0: Go's default
}

func parseBench(args []string, env environ) (benchConfig, error) {
	cmd := newCommand("bench", "bench [flags]", env).withOutput().withGroup("demo", "the group to load").withAll()
	var cfg benchConfig
	fs := cmd.fs
	fs.IntVar(&cfg.Keys, "keys", 10000, "distinct keys: <key-prefix>0 ... <key-prefix>N-1")
	fs.Float64Var(&cfg.Zipf, "zipf", 0, "Zipf exponent s > 0 for skewed keys (0.99 is typical; key 0 hottest); 0: uniform")
	fs.IntVar(&cfg.ValueSize, "value-size", 0, "bytes: PUT every key with a value of this size, then GET; 0: GET only (the origin's values)")
	fs.IntVar(&cfg.Concurrency, "c", 16, "concurrent requests (one keep-alive connection each per node)")
	fs.DurationVar(&cfg.Duration, "d", 10*time.Second, "how long to GET (unless -n)")
	fs.Int64Var(&cfg.Requests, "n", 0, "GET this many times, then stop (instead of -d)")
	fs.StringVar(&cfg.KeyPrefix, "key-prefix", "bench-", "prefix of every key; letters, digits and -._~")
	seed := fs.Uint64("seed", 1, "seed of the key sequence, for repeatable runs")
	fs.BoolVar(&cfg.Quiet, "q", false, "no progress line on stderr")
	fs.IntVar(&cfg.Procs, "procs", 0, "cores bench itself may use; 1 leaves the others to nodes on the same machine; 0: all")
	if _, err := cmd.parse(args, 0, 0); err != nil {
		return cfg, err
	}
	cfg.opts, cfg.Seed = cmd.opts, *seed
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case cfg.Keys < 1 || cfg.Keys > maxBenchKeys:
		return cfg, fmt.Errorf("%w: bench: -keys %d: want 1 to %d", errUsage, cfg.Keys, maxBenchKeys)
	case cfg.Zipf < 0 || cfg.Zipf > 10:
		return cfg, fmt.Errorf("%w: bench: -zipf %v: want 0 (uniform) or 0 < s <= 10", errUsage, cfg.Zipf)
	case cfg.ValueSize < 0 || cfg.ValueSize > maxValueSize:
		return cfg, fmt.Errorf("%w: bench: -value-size %d: want 0 to %d", errUsage, cfg.ValueSize, maxValueSize)
	case cfg.Concurrency < 1 || cfg.Concurrency > maxBenchConns:
		return cfg, fmt.Errorf("%w: bench: -c %d: want 1 to %d", errUsage, cfg.Concurrency, maxBenchConns)
	case set["d"] && set["n"]:
		return cfg, fmt.Errorf("%w: bench: give -d or -n, not both", errUsage)
	case cfg.Requests < 0:
		return cfg, fmt.Errorf("%w: bench: -n %d: must not be negative", errUsage, cfg.Requests)
	case cfg.Requests == 0 && cfg.Duration <= 0:
		return cfg, fmt.Errorf("%w: bench: -d %v: must be positive", errUsage, cfg.Duration)
	case cfg.Procs < 0 || cfg.Procs > 1024:
		return cfg, fmt.Errorf("%w: bench: -procs %d: want 0 (all cores) to 1024", errUsage, cfg.Procs)
	case !unreserved(cfg.KeyPrefix):
		return cfg, fmt.Errorf("%w: bench: -key-prefix %q: want letters, digits and -._~", errUsage, cfg.KeyPrefix)
	}
	return cfg, nil
}

// unreserved reports whether s needs no escaping in a path (RFC 3986).
func unreserved(s string) bool {
	for _, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', strings.ContainsRune("-._~", r):
		default:
			return false
		}
	}
	return true
}

// benchReport is what bench prints (and, with -o json, its JSON).
type benchReport struct {
	Group       string        `json:"group"`
	Nodes       []string      `json:"nodes"`
	Keys        int           `json:"keys"`
	Zipf        float64       `json:"zipf"` // 0: uniform
	Concurrency int           `json:"concurrency"`
	Procs       int           `json:"procs"` // GOMAXPROCS during the run
	Check       string        `json:"check"` // what bodies were compared with: demo, put, none
	Fill        *phaseReport  `json:"fill,omitempty"`
	Get         phaseReport   `json:"get"`
	Cluster     clusterReport `json:"cluster"`
	Interrupted bool          `json:"interrupted,omitempty"` // stopped by Ctrl-C
}

// phaseReport is one phase's figures: the PUT fill or the GET run.
type phaseReport struct {
	Requests  int64   `json:"requests"`
	Seconds   float64 `json:"seconds"`
	ReqPerS   float64 `json:"req_per_s"`
	P50us     float64 `json:"p50_us"`
	P90us     float64 `json:"p90_us"`
	P99us     float64 `json:"p99_us"`
	MaxUs     float64 `json:"max_us"`
	Errors    int64   `json:"errors"`    // no answer, or a status other than 200 (GET) or 204 (PUT)
	Transport int64   `json:"transport"` // of which, no answer
	Wrong     int64   `json:"wrong"`     // 200s whose body is not the key's value
	// Other counts 200s with the key's other known value, counted as
	// right: in put mode the demo origin's (the PUT value was evicted, or
	// the key changed owner, since the fill); in a demo GET run, the value
	// an earlier put-mode run stored.
	Other    int64 `json:"other"`
	Checked  int64 `json:"checked"`
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// ClientCPUs is the CPU time bench's own process used in the phase
	// (0 where it is not measured): next to Seconds × cores, it says
	// whether bench itself was the limit.
	ClientCPUs float64 `json:"client_cpu_s"`
	// Status counts the answers by status code.
	Status map[string]int64 `json:"status"`
	// Reasons counts the requests without an answer by node and reason.
	Reasons map[string]int64 `json:"reasons,omitempty"`
}

// clusterReport is what the nodes' /metrics say happened during the GET
// run: the difference of a scrape before and one after.
type clusterReport struct {
	NodesScraped int     `json:"nodes_scraped"`
	ClientGets   int64   `json:"client_gets"`
	PeerGets     int64   `json:"peer_gets"`
	HitRatio     float64 `json:"hit_ratio"` // (main + hot hits) / all gets
	MainHits     int64   `json:"main_hits"`
	HotHits      int64   `json:"hot_hits"`
	OriginLoads  int64   `json:"origin_loads"`
	PeerLoads    int64   `json:"peer_loads"`
	// PeerErrors are fetches from an owner that failed; each one was
	// followed by a load from the origin on the asking node.
	PeerErrors int64 `json:"peer_errors"`
	// ClientHitRatio is 1 - origin loads / client gets: how many of the
	// clients' requests the cluster served without asking the origin.
	ClientHitRatio float64 `json:"client_hit_ratio"`
}

func runBench(ctx context.Context, args []string, env environ) error {
	cfg, err := parseBench(args, env)
	if err != nil {
		return err
	}
	o := &cfg.opts
	if cfg.Procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cfg.Procs))
	}
	c := newClient(o)
	defer c.close()
	if o.All {
		o.URLs = withMembers(ctx, c, o.URLs)
	}

	// Before any load: which nodes answer, and is the group a demo one?
	before, scrapeErrs := scrapeAll(ctx, c, o.URLs, o.Group)
	if live := len(o.URLs) - countErrs(scrapeErrs); live == 0 {
		return failed(ctx, env.Stderr, scrapeErrs...)
	}
	for _, err := range scrapeErrs {
		if err != nil {
			fmt.Fprintln(env.Stderr, "ringcache: bench: warning:", err)
		}
	}
	if !hasGroup(before, o.Group) {
		return fmt.Errorf("bench: no node has a group %q (see ringcache stats)", o.Group)
	}
	demo := isDemo(ctx, c, o.URLs, o.Group)

	lc, err := newLoadConfig(cfg, demo)
	if err != nil {
		return err
	}
	defer lc.Client.CloseIdleConnections()
	rep := benchReport{Group: o.Group, Nodes: o.URLs, Keys: cfg.Keys, Zipf: cfg.Zipf, Concurrency: cfg.Concurrency, Procs: runtime.GOMAXPROCS(0)}
	rep.Check = "none"
	switch {
	case cfg.ValueSize > 0:
		rep.Check = "put"
	case demo:
		rep.Check = "demo"
	}

	prog := progress{w: env.Stderr, terminal: env.terminal(env.Stderr), quiet: cfg.Quiet}
	if cfg.ValueSize > 0 {
		fill := lc
		fill.Source, fill.Check = loadgen.Each(loadgen.Put, cfg.Keys), nil
		p, err := runPhase(ctx, fill, &prog, "fill")
		if err != nil {
			return err
		}
		rep.Fill = &p
		if ctx.Err() != nil {
			rep.Interrupted = true
			return finish(env, o, rep)
		}
		if before, scrapeErrs = scrapeAll(ctx, c, o.URLs, o.Group); countErrs(scrapeErrs) == len(o.URLs) {
			return failed(ctx, env.Stderr, scrapeErrs...)
		}
	}
	lc.Source = loadgen.Reads(loadgen.NewPicker(cfg.Keys, cfg.Zipf))
	if cfg.Requests > 0 {
		lc.Requests = cfg.Requests
	} else {
		lc.Duration = cfg.Duration
	}
	if rep.Get, err = runPhase(ctx, lc, &prog, "get"); err != nil {
		return err
	}
	rep.Interrupted = ctx.Err() != nil

	// After: bounded, and even after a Ctrl-C, so the report has them.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.Timeout)
	defer cancel()
	after, afterErrs := scrapeAll(actx, c, o.URLs, o.Group)
	rep.Cluster = clusterDelta(before, after, scrapeErrs, afterErrs)
	return finish(env, o, rep)
}

// finish prints the report and fails the command when a request failed or
// a value was wrong: a load test is also a correctness test.
func finish(env environ, o *options, rep benchReport) error {
	var err error
	if o.json() {
		err = writeJSON(env.Stdout, rep)
	} else {
		err = writeOut(env.Stdout, rep.text())
	}
	if err != nil {
		return err
	}
	var bad []string
	for _, p := range []*phaseReport{rep.Fill, &rep.Get} {
		if p == nil {
			continue
		}
		if p.Errors > 0 {
			bad = append(bad, fmt.Sprintf("%d failed requests", p.Errors))
		}
		if p.Wrong > 0 {
			bad = append(bad, fmt.Sprintf("%d wrong values", p.Wrong))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("bench: %s", strings.Join(bad, ", "))
	}
	return nil
}

// newLoadConfig builds what the phases share: a client sized to the
// concurrency, the nodes, the check of the bodies.
func newLoadConfig(cfg benchConfig, demo bool) (loadgen.Config, error) {
	o := &cfg.opts
	for _, raw := range o.URLs {
		if _, err := url.Parse(raw); err != nil {
			return loadgen.Config{}, fmt.Errorf("%w: -url %q: %v", errUsage, raw, err)
		}
	}
	lc := loadgen.Config{
		Client:    loadgen.NewClient(cfg.Concurrency, len(o.URLs), o.Timeout),
		Targets:   loadgen.URLs(o.URLs...),
		Group:     o.Group,
		KeyPrefix: cfg.KeyPrefix,
		Token:     o.Token,
		Workers:   cfg.Concurrency,
		ValueSize: cfg.ValueSize,
		Seed:      cfg.Seed,
	}
	switch {
	case cfg.ValueSize > 0:
		lc.Check = loadgen.PutCheck(o.Group, cfg.KeyPrefix, cfg.ValueSize, demo)
	case demo:
		lc.Check = loadgen.DemoCheck(o.Group, cfg.KeyPrefix, 0)
	}
	return lc, nil
}

// runPhase runs one phase with a progress line and reports it: the fill
// PUTs every key once; the GET run lasts -d or -n requests.
func runPhase(ctx context.Context, lc loadgen.Config, prog *progress, name string) (phaseReport, error) {
	cpu0, cpuOK := processCPU()
	r, err := loadgen.Start(ctx, lc)
	if err != nil {
		return phaseReport{}, err
	}
	stopProgress := prog.start(name, time.Now(), r.Progress)
	res := r.Wait()
	cpu1, _ := processCPU()
	stopProgress()
	p := phaseOf(&res)
	if cpuOK {
		p.ClientCPUs = (cpu1 - cpu0).Seconds()
	}
	return p, nil
}

// phaseOf is what a phase's result says.
func phaseOf(r *loadgen.Result) phaseReport {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	p := phaseReport{
		Requests: r.Requests(), Seconds: r.Elapsed.Seconds(),
		P50us: us(r.Hist.Quantile(.5)), P90us: us(r.Hist.Quantile(.9)), P99us: us(r.Hist.Quantile(.99)), MaxUs: us(r.Hist.Max()),
		Transport: r.Transport, Wrong: r.Wrong, Other: r.Other, Checked: r.Checked,
		BytesIn: r.BytesIn, BytesOut: r.BytesOut, Status: map[string]int64{}, Reasons: r.Errs,
	}
	if p.Seconds > 0 {
		p.ReqPerS = float64(p.Requests) / p.Seconds
	}
	p.Errors = r.Transport
	for code, n := range r.Status {
		if n == 0 {
			continue
		}
		p.Status[strconv.Itoa(code)] = n
		if code != http.StatusOK && code != http.StatusNoContent {
			p.Errors += n
		}
	}
	return p
}

// scrapeAll reads every node's counters of group.
func scrapeAll(ctx context.Context, c *client, urls []string, group string) ([]groupStats, []error) {
	out := make([]groupStats, len(urls))
	errs := each(urls, func(i int, base string) error {
		mfs, err := c.scrape(ctx, base)
		if err != nil {
			return err
		}
		g, ok := parseStats(mfs).Groups[group]
		if !ok {
			g.Group = "" // the node does not have the group
		}
		out[i] = g
		return nil
	})
	return out, errs
}

func hasGroup(stats []groupStats, group string) bool {
	return slices.ContainsFunc(stats, func(s groupStats) bool { return s.Group == group })
}

func countErrs(errs []error) int {
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
		}
	}
	return n
}

// isDemo reports whether the first node that answers runs group on the
// demo origin: its /debug/origin lists exactly the demo groups.
func isDemo(ctx context.Context, c *client, urls []string, group string) bool {
	for _, base := range urls {
		var groups map[string]json.RawMessage
		err := c.getJSON(ctx, base, "/debug/origin", &groups)
		if errors.Is(err, errUnreachable) {
			continue
		}
		_, ok := groups[group]
		return err == nil && ok
	}
	return false
}

// clusterDelta sums the nodes that answered both scrapes.
func clusterDelta(before, after []groupStats, errsBefore, errsAfter []error) clusterReport {
	var d groupStats
	var r clusterReport
	for i := range before {
		if errsBefore[i] != nil || errsAfter[i] != nil {
			continue
		}
		r.NodesScraped++
		d.add(after[i].sub(before[i]))
	}
	r.ClientGets, r.PeerGets = d.ClientGets(), d.PeerGets
	r.MainHits, r.HotHits = d.MainHits, d.HotHits
	r.HitRatio = ratio(d.MainHits+d.HotHits, d.Gets)
	r.OriginLoads, r.PeerLoads, r.PeerErrors = d.LocalLoads, d.PeerLoads, d.PeerErrors
	if r.ClientGets > 0 {
		r.ClientHitRatio = 1 - ratio(r.OriginLoads, r.ClientGets)
	}
	return r
}

func (r benchReport) text() string {
	var b strings.Builder
	keys := "uniform"
	if r.Zipf > 0 {
		keys = "zipf " + strconv.FormatFloat(r.Zipf, 'g', -1, 64)
	}
	mode := "GET"
	if r.Fill != nil {
		mode = "PUT then GET"
	}
	fmt.Fprintf(&b, "bench: group %s on %d nodes, %d keys (%s), %s, %d concurrent\n", r.Group, len(r.Nodes), r.Keys, keys, mode, r.Concurrency)
	if r.Interrupted {
		b.WriteString("interrupted: the figures cover the requests made until Ctrl-C\n")
	}
	phase := func(name string, p phaseReport) {
		fmt.Fprintf(&b, "\n%s\n", name)
		fmt.Fprintf(&b, "  requests   %d in %.2fs: %.1f req/s\n", p.Requests, p.Seconds, p.ReqPerS)
		fmt.Fprintf(&b, "  latency    p50 %s  p90 %s  p99 %s  max %s\n", usText(p.P50us), usText(p.P90us), usText(p.P99us), usText(p.MaxUs))
		fmt.Fprintf(&b, "  errors     %d (%d without an answer)\n", p.Errors, p.Transport)
		for _, reason := range slices.Sorted(maps.Keys(p.Reasons)) {
			fmt.Fprintf(&b, "             %d × %s\n", p.Reasons[reason], reason)
		}
		var st []string
		for _, code := range slices.Sorted(maps.Keys(p.Status)) {
			st = append(st, fmt.Sprintf("%s: %d", code, p.Status[code]))
		}
		if len(st) > 0 {
			fmt.Fprintf(&b, "  status     %s\n", strings.Join(st, ", "))
		}
		fmt.Fprintf(&b, "  bytes      read %s, sent %s\n", bytesIEC(p.BytesIn), bytesIEC(p.BytesOut))
		if p.ClientCPUs > 0 && p.Requests > 0 {
			fmt.Fprintf(&b, "  bench cpu  %.2fs over %.2fs on up to %d cores (%s per request)\n",
				p.ClientCPUs, p.Seconds, r.Procs, since(time.Duration(p.ClientCPUs*1e9/float64(p.Requests))))
		}
		switch r.Check {
		case "demo":
			fmt.Fprintf(&b, "  values     %d wrong of %d checked against the demo origin", p.Wrong, p.Checked)
			if p.Other > 0 {
				fmt.Fprintf(&b, " (%d held the value of an earlier bench -value-size run)", p.Other)
			}
			b.WriteString("\n")
		case "put":
			if p.Checked > 0 {
				fmt.Fprintf(&b, "  values     %d wrong of %d checked against the PUT values (%d were the demo origin's: evicted or moved since the fill)\n", p.Wrong, p.Checked, p.Other)
			}
		default:
			if name == "get" {
				b.WriteString("  values     not checked (the group's origin is not the demo origin)\n")
			}
		}
	}
	if r.Fill != nil {
		phase("fill (PUT each key once)", *r.Fill)
	}
	phase("get", r.Get)
	c := r.Cluster
	fmt.Fprintf(&b, "\ncluster (/metrics of %d of %d nodes, during the get run)\n", c.NodesScraped, len(r.Nodes))
	fmt.Fprintf(&b, "  gets       %d from clients, %d from peers\n", c.ClientGets, c.PeerGets)
	fmt.Fprintf(&b, "  hit ratio  %s of all gets (main %s, hot %s)\n", percent(c.MainHits+c.HotHits, c.ClientGets+c.PeerGets),
		percent(c.MainHits, c.ClientGets+c.PeerGets), percent(c.HotHits, c.ClientGets+c.PeerGets))
	fmt.Fprintf(&b, "  loads      %d from the origin (%s of client gets served without one), %d fetched from peers\n",
		c.OriginLoads, percentF(c.ClientHitRatio, c.ClientGets > 0), c.PeerLoads)
	if c.PeerErrors > 0 {
		fmt.Fprintf(&b, "  peer errors %d fetches from owners failed (each asking node loaded from the origin instead)\n", c.PeerErrors)
	}
	return b.String()
}

func usText(us float64) string { return since(time.Duration(us * 1e3)) }

// progress writes the live progress line on stderr: redrawn in place on a
// terminal, a line a second otherwise.
type progress struct {
	w        io.Writer
	terminal bool
	quiet    bool
}

// start prints the progress of a phase every second until the returned
// function is called, which prints the last line and returns once the
// printer has stopped.
func (p *progress) start(name string, start time.Time, counts func() (done, failed int64)) func() {
	if p.quiet {
		return func() {}
	}
	var last int64
	lastAt := start
	line := func(final bool) {
		now := time.Now()
		n, f := counts()
		rate := float64(n-last) / max(now.Sub(lastAt).Seconds(), 1e-9)
		last, lastAt = n, now
		s := fmt.Sprintf("%s %5.1fs  %d requests  %.0f req/s  %d failed", name, now.Sub(start).Seconds(), n, rate, f)
		switch {
		case p.terminal && final:
			fmt.Fprintf(p.w, "\r\x1b[K%s\n", s)
		case p.terminal:
			fmt.Fprintf(p.w, "\r\x1b[K%s", s)
		case !final:
			fmt.Fprintln(p.w, s)
		}
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				line(true)
				return
			case <-t.C:
				line(false)
			}
		}
	}()
	return func() {
		close(stop)
		<-stopped
	}
}
