//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"
)

// The cluster under test. The bounds below derive from these settings, which
// the suite passes to deploy/ explicitly.
const (
	group     = "demo"
	demoSize  = 256
	numKeys   = 1000
	leaseTTL  = 5 * time.Second
	holdDown  = 2 * time.Second
	groupSpec = "name=demo,origin=demo,bytes=64MiB,ttl=0s,demo-size=256,demo-latency=10ms"

	// killBound: a SIGKILLed node's lease runs out within the TTL, then the
	// survivors hold the change down before they rebuild the ring.
	killBound = leaseTTL + holdDown + time.Second
	// stopBound: a node that stops gracefully revokes its lease; "about 1 s".
	stopBound = 1500 * time.Millisecond
	// etcdOutage and partition are how long etcd is stopped and a node is cut off.
	etcdOutage = 30 * time.Second
	partition  = 20 * time.Second
	// settle bounds how long the cluster may take to agree again after a fault.
	settle = 45 * time.Second

	// numWriteKeys are written by the load generator (PUT and DELETE) while
	// it reads; every written key starts with writtenPrefix, and the origin
	// load figures leave them out (a DELETE makes the next read a load).
	numWriteKeys  = 40
	writtenPrefix = "w-"
	// movedMargin extends a membership interval past the moment the rings
	// agree again: nodes drop what they no longer own just after.
	movedMargin = 2 * time.Second
	// pauseFor is how long the pause scenario freezes a node: longer than
	// the lease plus the hold-down, so the ring drops it.
	pauseFor = 15 * time.Second
	// maxCopiesLoads bounds the origin loads per moved key when a node is
	// killed in a cluster that keeps copies (TestClusterCopies).
	maxCopiesLoads = 0.05
	// slowAfter marks a request as slowed: 50 ms beyond the origin's latency.
	slowAfter = 60 * time.Millisecond
)

// result is one row of the summary table.
type result struct {
	name     string
	stats    Stats
	extra    int64 // origin loads beyond the first load of each key
	converge time.Duration
	note     string
	history  Report // what the history checker found in the scenario's reads
	// handoff is what the membership change cost the origin: loads per
	// key that changed owner (or per warm key), "loads/keys = ratio".
	handoff string
}

// suite holds what the scenarios share: one cluster, one load generator that
// runs from the first scenario to the last, and the ledger of origin loads.
type suite struct {
	c         Cluster
	placement string            // hashed or ranges
	project   string            // the Compose project, which names files the suite leaves in TMPDIR
	names     map[string]string // peer URL -> node name, of every node that ever ran
	up        time.Duration     // how long up.sh took
	api       *API
	load      *Load
	ledger    *Ledger
	keys      []string
	self      map[string]string // node -> its peer URL, as its ring reports it

	// hist records every read and write; checker judges them.
	hist    *History
	checker *Checker
	// writeKeys are the keys the load generator writes.
	writeKeys []string

	mu      sync.Mutex
	results []result
	tail    Report // reads checked after the last scenario
}

// scenario is one named test body run against the suite's cluster.
type scenario struct {
	name string
	run  func(s *suite, t *testing.T) result
}

// TestCluster runs every scenario against a cluster with hashed placement
// (each node's points hashed from its URL), the default.
func TestCluster(t *testing.T) {
	runCluster(t, "hashed", []scenario{
		{"baseline", (*suite).baseline},
		{"kill", (*suite).kill},
		{"stop", (*suite).stop},
		{"etcd-outage", (*suite).etcdOutage},
		{"partition", (*suite).partition},
		{"pause", (*suite).pause},
		{"lost-write", (*suite).lostWrite},
		{"hot-copy", (*suite).hotCopy},
		{"coalesce", (*suite).coalesce},
		{"scale", (*suite).scale},
		{"rolling-restart", (*suite).rollingRestart},
		{"unsigned-peer", (*suite).unsignedPeer},
		{"purge", (*suite).purge},
	})
}

// TestClusterRanges runs the membership scenarios, where the warm hand-off
// counts, against a cluster with explicit arcs stored in etcd
// (RINGCACHE_PLACEMENT=ranges): the hand-off reads the previous owner from
// the ring before a change, however that ring was built. Its nodes serve
// the public API with net/http (RINGCACHE_HTTP_SERVER=net/http), where
// TestCluster's run compose's default, fasthttp, so that both servers are
// proven under the faults, with the same history check.
func TestClusterRanges(t *testing.T) {
	runCluster(t, "ranges", []scenario{
		{"baseline", (*suite).baseline},
		{"kill", (*suite).kill},
		{"stop", (*suite).stop},
		{"scale", (*suite).scale},
		{"rolling-restart", (*suite).rollingRestart},
	})
}

// TestClusterCopies runs the crash scenarios against a cluster whose group
// keeps two copies of each key (copies=2): a SIGKILLed owner's keys move to
// their first heirs, which hold them already, so the survivors load at
// most maxCopiesLoads of them per moved key from the origin (none, but for
// a key loaded in the moment before the kill, whose copy was still on its
// way), with the same history check of every write.
func TestClusterCopies(t *testing.T) {
	runCluster(t, "hashed", []scenario{
		{"baseline", (*suite).baseline},
		{"kill", (*suite).killWithCopies},
		{"stop", (*suite).stop},
	}, ",copies=2")
}

// publicServer tells which server answers a node's public listener at base
// by how it takes 20 KiB of request headers: fasthttp refuses them (431; it
// bounds them at 16 KiB), net/http takes up to 64 KiB.
func publicServer(ctx context.Context, base string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("X-Padding", strings.Repeat("p", 20<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusRequestHeaderFieldsTooLarge:
		return "fasthttp", nil
	case http.StatusOK:
		return "net/http", nil
	}
	return "", fmt.Errorf("/healthz with 20 KiB of headers: %s", resp.Status)
}

// runCluster brings up a cluster with the given placement, starts the load
// generator and runs the scenarios in order, then prints the summary.
func runCluster(t *testing.T, placement string, scenarios []scenario, groupOptions ...string) {
	deployDir := prepareDeploy(t)
	ctx := t.Context()
	var server []string
	wantServer := "fasthttp" // compose's default: the peers have a listener of their own
	if placement == "ranges" {
		server, wantServer = []string{"RINGCACHE_HTTP_SERVER=net/http"}, "net/http"
	}

	start := time.Now()
	c, err := NewCompose(ctx, ComposeConfig{
		DeployDir: deployDir,
		Groups:    groupSpec + strings.Join(groupOptions, ""),
		Env: append([]string{
			"RINGCACHE_LEASE_TTL=" + leaseTTL.String(),
			"RINGCACHE_HOLD_DOWN=" + holdDown.String(),
			// All of the suite's requests come from one address, Docker's
			// port proxy; the defaults never refuse a client for being
			// busy, and the suite runs at them (TestSecurity turns the
			// per-client limits on to check them).
			"RINGCACHE_PLACEMENT=" + placement,
		}, server...),
		Log: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	up := time.Since(start)
	// Cleanup runs after a failure and after t.Fatal too; the test's context
	// is gone by then, so it gets its own. It does not run when go test's
	// -timeout panics, so a guard brings the cluster down shortly before that
	// (the next run's Reap would otherwise be the first to remove it).
	if deadline, ok := t.Deadline(); ok && time.Until(deadline) > 5*time.Minute {
		guard := time.AfterFunc(time.Until(deadline)-2*time.Minute, func() {
			fmt.Fprintf(os.Stderr, "e2e: -timeout is 2 minutes away: removing cluster %s\n", c.Project())
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := c.Close(cctx); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: removing cluster %s: %v\n", c.Project(), err)
			}
		})
		defer guard.Stop()
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		logs := filepath.Join(os.TempDir(), c.Project()+".log")
		if err := c.SaveLogs(cctx, logs); err != nil {
			t.Logf("saving the cluster's logs: %v", err)
		} else {
			t.Logf("the cluster's logs are in %s", logs)
		}
		if err := c.Close(cctx); err != nil {
			t.Errorf("bringing the cluster down: %v", err)
		}
	})

	s := &suite{c: c, placement: placement, up: up, project: c.Project(), names: map[string]string{}, api: NewAPI(5 * time.Second), keys: Keys(numKeys), self: map[string]string{},
		hist: NewHistory(), checker: NewChecker(demoOrigin)}
	for i := range numWriteKeys {
		s.writeKeys = append(s.writeKeys, fmt.Sprintf("%sload-%02d", writtenPrefix, i))
	}
	s.api.SetWriteToken(c.WriteToken())
	t.Cleanup(s.api.Close)
	s.ledger = NewLedger(s.api, group)
	for _, n := range c.Nodes() {
		r, err := s.api.Ring(ctx, c.URL(n), "")
		if err != nil {
			t.Fatal(err)
		}
		s.self[n] = r.Self
		s.names[r.Self] = n
		if got, err := publicServer(ctx, c.URL(n)); err != nil || got != wantServer {
			t.Fatalf("%s's public listener runs %q (%v), want %s", n, got, err, wantServer)
		}
	}
	t.Logf("cluster %s (placement %s, public API on %s) up in %s: %v", c.Project(), placement, wantServer, up.Round(time.Millisecond), s.self)

	s.load, err = NewLoad(LoadConfig{Group: group, Keys: s.keys, WriteKeys: s.writeKeys,
		Writer: "load-" + c.Project(), History: s.hist, WriteToken: c.WriteToken()})
	if err != nil {
		t.Fatal(err)
	}
	s.load.SetTargets(s.targets(c.Nodes()))
	// The baseline turns writes on once every key has been loaded: a write
	// bumps its key's epoch stripe, and a load of any key of that stripe in
	// progress is then not cached, which would cost a second load of it.
	s.load.SetWriting(false)
	s.load.Start(ctx)
	t.Cleanup(s.load.Stop)

	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			// A failed scenario's figures are repeated at the end of the run.
			line := "it ended before its figures were in (a t.Fatal: see its log)"
			defer func() {
				if t.Failed() {
					recapf("%s failed: %s", t.Name(), line)
				}
			}()
			// A scenario starts from three ready nodes that agree; when an
			// earlier one left the cluster broken, say so here instead of
			// failing for the wrong reason.
			nodes := []string{"node1", "node2", "node3"}
			if _, err := s.waitRings(t.Context(), time.Now(), nodes, s.selves(nodes), settle); err != nil {
				t.Fatalf("cluster not healthy before %s: %v", sc.name, err)
			}
			// Nor may a node still be unable to reach one restarted by the
			// scenario before (a new container's name can take seconds to
			// resolve): it would load that node's keys itself. This sees only
			// a breaker already open; a scenario that counts every origin
			// load warms up first (warmUp), which proves every path.
			if err := s.waitReachable(t.Context(), nodes, settle); err != nil {
				t.Fatalf("cluster not healthy before %s: %v", sc.name, err)
			}
			r := sc.run(s, t)
			if r.name == "" {
				r.name = sc.name
			}
			r.history = s.checkHistory(t)
			s.add(r)
			line = fmt.Sprintf("%s: %d requests, %d errors %v, %d wrong, %d retried, %d dropped, %.0f req/s, p99 %s, max %s (%s without retry); %d extra origin loads; converged in %s; %d violations; %s",
				r.name, r.stats.Requests, r.stats.Errors, r.stats.ErrorsByNode, r.stats.Wrong, r.stats.Retries,
				r.stats.Dropped, r.stats.Rate, r.stats.P99.Round(time.Millisecond), r.stats.MaxLatency.Round(time.Millisecond), r.stats.MaxFirstTry.Round(time.Millisecond), r.extra,
				r.converge.Round(time.Millisecond), r.history.Violations, r.note)
			t.Log(line)
			for _, line := range r.stats.Samples {
				t.Logf("  sample: %s", line)
			}
			for _, line := range r.stats.Slowest {
				t.Logf("  slowest: %s", line)
			}
			ws := r.stats.Writes
			t.Logf("%s: writes: %d, %d acknowledged, %d refused, %d unknown, %d over %s, max %s, %d with Ringcache-Unreached",
				r.name, ws.Writes, ws.Acked, ws.Failed, ws.Unknown, ws.Slow, WriteBound, ws.Max.Round(time.Millisecond), ws.Unreached)
			for _, line := range append(ws.Samples, ws.UnreachedSamples...) {
				t.Logf("  write: %s", line)
			}
			if ws.Failed > 0 {
				t.Errorf("%d writes were refused (4xx); the generator's writes are all valid", ws.Failed)
			}
		})
	}
	// What was still in flight when the last scenario ended.
	s.load.Stop()
	s.tail = s.checkHistory(t)
	s.summary(t)
}

// demoOrigin is the demo origin as the history checker sees it: it has
// every key.
func demoOrigin(key string) ([]byte, bool) { return DemoValue(group, key, demoSize), true }

// checkHistory checks the reads recorded since the last call whose writes
// are all known, fails t on a violation, and returns the report.
func (s *suite) checkHistory(t *testing.T) Report {
	t.Helper()
	ops, complete := s.hist.Take()
	writes := 0
	for _, op := range ops {
		if op.Kind != Read {
			writes++
		}
	}
	s.checker.Add(ops)
	r := s.checker.Check(complete)
	r.Writes = writes
	t.Logf("history: %d reads checked, %d writes recorded: %d violations, %d reverts within the bound, %d reverts without a membership change",
		r.Reads, r.Writes, r.Violations, r.Reverts, r.UnexplainedReverts)
	for _, line := range r.Samples {
		t.Logf("  violation: %s", line)
	}
	for _, line := range r.RevertSamples {
		t.Logf("  revert: %s", line)
	}
	if r.Violations > 0 {
		t.Errorf("the history checker found %d reads that returned a value they must not (the first are logged above)", r.Violations)
	}
	return r
}

// moved tells the checker that keys' ownership may have moved from from
// until movedMargin after now.
func (s *suite) moved(from time.Time) {
	s.checker.Moved(Interval{From: from, To: time.Now().Add(movedMargin)})
}

// prepareDeploy skips t when no Docker daemon answers, removes what earlier
// runs left behind, and returns the deploy directory the clusters are
// brought up from.
func prepareDeploy(t *testing.T) string {
	t.Helper()
	if !dockerAnswers(t) {
		t.Skip("no Docker daemon answers")
	}
	deployDir, err := filepath.Abs(filepath.Join("..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	if reaped, err := Reap(t.Context(), deployDir, 30*time.Minute); err != nil {
		t.Logf("reaping leftovers: %v", err)
	} else if len(reaped) > 0 {
		t.Logf("removed leftovers of earlier runs: %v", reaped)
	}
	return deployDir
}

// dockerAnswers reports whether a Docker daemon answers within a minute.
func dockerAnswers(t *testing.T) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info").Run() == nil
}

// first returns at most n elements of list.
func first(list []string, n int) []string { return list[:min(n, len(list))] }

// targets returns the load targets for nodes.
func (s *suite) targets(nodes []string) []Target {
	ts := make([]Target, len(nodes))
	for i, n := range nodes {
		ts[i] = Target{Node: n, URL: s.c.URL(n)}
	}
	return ts
}

// urls returns node name -> base URL for nodes.
func (s *suite) urls(nodes ...string) map[string]string {
	m := make(map[string]string, len(nodes))
	for _, n := range nodes {
		m[n] = s.c.URL(n)
	}
	return m
}

// selves returns the peer URLs of nodes.
func (s *suite) selves(nodes []string) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = s.self[n]
	}
	return out
}

func (s *suite) add(r result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.results = append(s.results, r)
}

// hold keeps the load running for d: the scenarios need traffic during a
// fault, not an ordering, so a timer is what is meant here.
func hold(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-t.Context().Done():
		t.Fatal("test ended while holding load")
	case <-time.After(d):
	}
}

// waitRings polls the nodes' rings until each holds exactly want, and
// returns how long that took since since. It gives up after limit.
func (s *suite) waitRings(ctx context.Context, since time.Time, nodes, want []string, limit time.Duration) (time.Duration, error) {
	err := s.pollRings(ctx, since.Add(limit), nodes, func(n string, r Ring) string {
		if !r.SameMembers(want) {
			return fmt.Sprintf("%s has %v", n, r.Members)
		}
		return ""
	})
	if err != nil {
		return time.Since(since), fmt.Errorf("rings of %v did not become %v within %s; last: %w", nodes, want, limit, err)
	}
	return time.Since(since), nil
}

// waitReachable polls the nodes' rings until none of them suspects a peer,
// for at most limit.
func (s *suite) waitReachable(ctx context.Context, nodes []string, limit time.Duration) error {
	err := s.pollRings(ctx, time.Now().Add(limit), nodes, func(n string, r Ring) string {
		if len(r.Suspected) > 0 {
			return fmt.Sprintf("%s suspects %v", n, r.Suspected)
		}
		return ""
	})
	if err != nil {
		return fmt.Errorf("a node still cannot reach a peer after %s: %w", limit, err)
	}
	return nil
}

// pollRings reads the nodes' rings every 100 ms until bad finds nothing
// wrong with any of them (it returns why one is not as wanted, or ""), or
// deadline passes; the error then says the last thing that was wrong.
func (s *suite) pollRings(ctx context.Context, deadline time.Time, nodes []string, bad func(node string, r Ring) string) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		last := ""
		for _, n := range nodes {
			r, err := s.api.Ring(ctx, s.c.URL(n), "")
			if err != nil {
				last = fmt.Sprintf("%s: %v", n, err)
			} else {
				last = bad(n, r)
			}
			if last != "" {
				break
			}
		}
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New(last)
		case <-tick.C:
		}
	}
}

// waitReady polls a node's /readyz until it answers 200.
func (s *suite) waitReady(ctx context.Context, node string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !s.api.Ready(ctx, s.c.URL(node)) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready within %s", node, limit)
		case <-tick.C:
		}
	}
	return nil
}

// owners returns each key's owner (a peer URL) as node sees it.
func (s *suite) owners(ctx context.Context, node string) (map[string]string, error) {
	// The first failure ends the lookups: a node that hangs would otherwise
	// cost a timeout per key.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		owner = make(map[string]string, len(s.keys))
		errs  []error
		wg    sync.WaitGroup
		next  = make(chan string)
	)
	for range 8 {
		wg.Go(func() {
			for k := range next {
				r, err := s.api.Ring(ctx, s.c.URL(node), k)
				mu.Lock()
				if err != nil || r.Owner == "" {
					errs = append(errs, fmt.Errorf("owner of %s from %s: %q, %v", k, node, r.Owner, err))
					cancel()
				}
				owner[k] = r.Owner
				mu.Unlock()
			}
		})
	}
feed:
	for _, k := range s.keys {
		select {
		case next <- k:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("%d owner lookups failed, first: %w", len(errs), errs[0])
	}
	return owner, nil
}

// job is one read of a sweep.
type job struct{ key, node string }

// fromAll asks each of nodes for every key at once, so that owners see
// concurrent asks for the same key.
func (s *suite) fromAll(nodes []string) []job {
	var jobs []job
	for _, k := range s.keys {
		for _, n := range nodes {
			jobs = append(jobs, job{k, n})
		}
	}
	return jobs
}

// toOwners asks every key's owner for it. That warms the owners' caches for
// the next scenario: asking another node may not reach the owner at all,
// since a node answers keys it fetched before from its hot cache.
func (s *suite) toOwners(t *testing.T, nodes []string) []job {
	t.Helper()
	owners, err := s.owners(t.Context(), nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	byURL := map[string]string{}
	for _, n := range nodes {
		byURL[s.self[n]] = n
	}
	jobs := make([]job, 0, len(s.keys))
	for _, k := range s.keys {
		n, ok := byURL[owners[k]]
		if !ok {
			t.Fatalf("%s is owned by %s, which is not one of %v", k, owners[k], nodes)
		}
		jobs = append(jobs, job{k, n})
	}
	return jobs
}

// sweepMaxErrors ends a sweep early: past this many failed reads the
// scenario has failed anyway, and a node that hangs would otherwise cost a
// timeout per read (thousands of reads, eight at a time).
const sweepMaxErrors = 50

// sweep runs the reads, eight at a time, and checks the answers like the
// generator's. It stops after sweepMaxErrors failed reads.
func (s *suite) sweep(ctx context.Context, jobs []job) Stats {
	var (
		mu     sync.Mutex
		w      = Window{Start: time.Now()}
		wg     sync.WaitGroup
		next   = make(chan job)
		failed = make(chan struct{})
		errs   int
	)
	for range 8 {
		wg.Go(func() {
			for j := range next {
				at := time.Now()
				status, body, err := s.api.Get(ctx, s.c.URL(j.node), group, j.key)
				r := Record{At: at, Key: j.key, Node: j.node, Served: j.node, Status: status, Body: body, Dur: time.Since(at)}
				if err != nil {
					r.Err = err.Error()
				}
				s.hist.Add(r.Op())
				mu.Lock()
				w.Records = append(w.Records, r)
				if r.Status != http.StatusOK {
					if errs++; errs == sweepMaxErrors {
						close(failed)
					}
				}
				mu.Unlock()
			}
		})
	}
feed:
	for _, j := range jobs {
		select {
		case next <- j:
		case <-failed:
			break feed
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	w.End = time.Now()
	st := Check(&w, group, demoSize)
	st.Rate = 0 // the sweep's rate says nothing about the generator's
	return st
}

// plus adds the sweep's figures to the generator's.
func (st Stats) plus(o Stats) Stats {
	st.Requests += o.Requests
	st.Errors += o.Errors
	st.Wrong += o.Wrong
	st.Retries += o.Retries
	st.Dropped += o.Dropped
	st.MaxLatency = max(st.MaxLatency, o.MaxLatency)
	st.MaxFirstTry = max(st.MaxFirstTry, o.MaxFirstTry)
	if st.ErrorsByNode == nil {
		st.ErrorsByNode = map[string]int{}
	}
	for n, e := range o.ErrorsByNode {
		st.ErrorsByNode[n] += e
	}
	st.Samples = append(st.Samples, o.Samples...)
	return st
}

// window closes the generator's window and adds the sweep's figures.
func (s *suite) window(sweep Stats) Stats {
	w := s.load.Take()
	return Check(&w, group, demoSize).plus(sweep)
}

// noErrors fails t when clients saw errors or wrong values.
func noErrors(t *testing.T, st Stats) {
	t.Helper()
	if st.Errors != 0 || st.Wrong != 0 {
		t.Errorf("clients saw %d errors (by first node asked: %v) and %d wrong values; want none; samples: %q",
			st.Errors, st.ErrorsByNode, st.Wrong, st.Samples)
	}
	if st.Dropped != 0 {
		t.Logf("the generator dropped %d ticks: every worker was busy", st.Dropped)
	}
}

// loads returns the ledger's loads per key, failing t on error.
func (s *suite) loads(t *testing.T, nodes ...string) Tally {
	t.Helper()
	l, err := s.ledger.Loads(t.Context(), s.urls(nodes...))
	if err != nil {
		t.Fatal(err)
	}
	// Written keys are loaded again after each DELETE: not the cluster's doing.
	maps.DeleteFunc(l, func(k string, _ map[string]int64) bool { return strings.HasPrefix(k, writtenPrefix) })
	return l
}

// reset starts a ledger window at the current counts of nodes.
func (s *suite) reset(t *testing.T, nodes ...string) {
	t.Helper()
	if err := s.ledger.Reset(t.Context(), s.urls(nodes...)); err != nil {
		t.Fatal(err)
	}
}

var three = []string{"node1", "node2", "node3"}

// baseline: a fresh cluster under load, and a sweep that asks every node for
// every key at once. Every key is loaded from the origin exactly once
// cluster-wide. Then the generator starts writing too.
func (s *suite) baseline(t *testing.T) result {
	ctx := t.Context()
	// No reset: the ledger starts at zero, as the fresh cluster did, and the
	// generator has been running since before this scenario.
	hold(t, 3*time.Second)
	sweep := s.sweep(ctx, s.fromAll(three))
	hold(t, 2*time.Second)
	loads := s.loads(t, three...)
	s.load.SetWriting(true)
	hold(t, 3*time.Second)
	st := s.window(sweep)
	noErrors(t, st)

	var extra int64
	var missing, twice []string
	for _, k := range s.keys {
		switch n := loads.Key(k); {
		case n == 0:
			missing = append(missing, k)
		case n > 1:
			extra += n - 1
			twice = append(twice, k+" "+loads.Who(k))
		}
	}
	if len(missing) > 0 || len(twice) > 0 || len(loads) != numKeys {
		t.Errorf("want every key loaded exactly once: %d keys never loaded %v, %d loaded more than once %v, %d keys loaded in all",
			len(missing), first(missing, 5), len(twice), first(twice, 5), len(loads))
	}
	return result{stats: st, extra: extra, converge: s.up, note: "converged = up.sh: build, start, all ready and agreeing"}
}

// faultDrop runs fault against victim while polling the survivors' rings,
// and returns how long after the fault began every survivor had dropped it.
func (s *suite) faultDrop(t *testing.T, victim string, fault func(context.Context, string) error,
	exitedAt func(context.Context, string) (time.Time, error)) time.Duration {
	t.Helper()
	ctx := t.Context()
	survivors := slices.DeleteFunc(slices.Clone(three), func(n string) bool { return n == victim })
	errc := make(chan error, 1)
	t0 := time.Now()
	go func() { errc <- s.end(ctx, victim, fault) }()
	_, err := s.waitRings(ctx, t0, survivors, s.selves(survivors), settle)
	dropped := time.Now()
	if ferr := <-errc; ferr != nil {
		t.Fatal(ferr)
	}
	if err != nil {
		t.Fatal(err)
	}
	// A graceful stop counts from the moment it was asked for (SIGTERM is
	// when the node leaves); a kill from when the process died, if known.
	if exitedAt != nil {
		at, err := exitedAt(ctx, victim)
		if err != nil {
			t.Fatal(err)
		}
		if at.After(t0) && at.Before(dropped) {
			t0 = at
		}
	}
	return dropped.Sub(t0)
}

// survivorsKeptKeys checks that no key owned by a survivor was loaded again.
func (s *suite) survivorsKeptKeys(t *testing.T, owners map[string]string, victim string) (victimKeysLoaded int) {
	t.Helper()
	survivors := slices.DeleteFunc(slices.Clone(three), func(n string) bool { return n == victim })
	loads := s.loads(t, survivors...)
	var reloaded []string
	for _, k := range s.keys {
		if loads.Key(k) == 0 {
			continue
		}
		if owners[k] == s.self[victim] {
			victimKeysLoaded++
		} else {
			reloaded = append(reloaded, fmt.Sprintf("%s (owner %s, loaded by %s)", k, owners[k], loads.Who(k)))
		}
	}
	if len(reloaded) > 0 {
		t.Errorf("%d keys owned by survivors were loaded again, e.g. %v; want none", len(reloaded), first(reloaded, 5))
	}
	return victimKeysLoaded
}

// rejoin starts a node again, waits until the three agree, warms its keys
// and returns how long the rejoin took.
func (s *suite) rejoin(t *testing.T, node string) (time.Duration, Stats) {
	t.Helper()
	ctx := t.Context()
	t0 := time.Now()
	if err := s.c.Start(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := s.waitReady(ctx, node, settle); err != nil {
		t.Fatal(err)
	}
	d, err := s.waitRings(ctx, t0, three, s.selves(three), settle)
	if err != nil {
		t.Fatal(err)
	}
	return d, s.sweep(ctx, s.toOwners(t, three))
}

// crash: one node is killed (SIGKILL) or stopped (SIGTERM) under load, the
// clients keep its URL (they retry elsewhere when it refuses), then it comes
// back. Survivors drop it within bound and do not load their own keys again.
// While it is gone every key is read through its new owner, and the origin
// loads of the keys that moved are counted: a node that stops gracefully
// hands its values over first (at most maxLoads per moved key; a negative
// maxLoads: no bound, as for a kill, which hands nothing over). Its return
// moves the same keys back, and is counted the same way.
func (s *suite) crash(t *testing.T, victim string, fault func(context.Context, string) error,
	exitedAt func(context.Context, string) (time.Time, error), bound time.Duration, maxLoads float64) result {
	ctx := t.Context()
	survivors := without(three, victim)
	warm := s.warmUp(t, three)
	s.reset(t, three...)
	owners, err := s.owners(ctx, "node1")
	if err != nil {
		t.Fatal(err)
	}
	hold(t, 2*time.Second)
	w := s.watchLoads(ctx, three...)
	faultAt := time.Now()
	defer s.moved(faultAt)
	w.mark(t, "ending %s", victim)
	drop := s.faultDrop(t, victim, fault, exitedAt)
	if drop > bound {
		t.Errorf("survivors dropped %s after %s; want within %s", victim, drop.Round(time.Millisecond), bound)
	}
	w.mark(t, "survivors dropped %s", victim)
	hold(t, 2*time.Second)
	gone, err := s.owners(ctx, survivors[0])
	if err != nil {
		t.Fatal(err)
	}
	moved := movedKeys(owners, gone)
	for _, k := range moved {
		if owners[k] != s.self[victim] {
			t.Errorf("%s moved from %s to %s, but only %s left", k, owners[k], gone[k], victim)
		}
	}
	goneSweep := s.sweep(ctx, s.toOwners(t, survivors))
	w.mark(t, "every key read through its owner among %v", survivors)
	victimKeys := s.survivorsKeptKeys(t, owners, victim)
	away := s.loads(t, survivors...)
	goneEvents := w.Stop()
	if maxLoads >= 0 && float64(away.Total()) > maxLoads*float64(len(moved)) {
		t.Errorf("%d origin loads for %d keys that moved when %s left: %.3f per moved key; want at most %.2f",
			away.Total(), len(moved), victim, float64(away.Total())/float64(len(moved)), maxLoads)
		s.describeLoads(t, w, goneEvents, owners, gone)
	}

	w = s.watchLoads(ctx, three...)
	w.mark(t, "starting %s again", victim)
	back, sweep := s.rejoin(t, victim)
	w.mark(t, "%s rejoined, every key read through its owner", victim)
	backEvents := w.Stop()
	all := s.loads(t, three...)
	rejoined := all.Minus(away)
	again, err := s.owners(ctx, "node1")
	if err != nil {
		t.Fatal(err)
	}
	movedBack := movedKeys(gone, again)
	if maxLoads >= 0 && float64(rejoined.Total()) > maxLoads*float64(len(movedBack)) {
		// Not a target of its own: logged so that a restart's cost can be told from the stop's.
		t.Logf("%d origin loads for %d keys that moved back when %s rejoined", rejoined.Total(), len(movedBack), victim)
		s.describeLoads(t, w, backEvents, gone, again)
	}
	st := s.window(warm.plus(goneSweep).plus(sweep))
	noErrors(t, st)
	return result{stats: st, extra: all.Total(), converge: drop,
		handoff: perKey(away.Total(), len(moved)) + ", back " + perKey(rejoined.Total(), len(movedBack)),
		note: fmt.Sprintf("ring dropped %s (bound %s); %d keys moved to the survivors, which loaded %d of them (%d loads) while it was gone and 0 of their own; it rejoined in %s, %d keys moved back with %d loads",
			victim, bound, len(moved), victimKeys, away.Total(), back.Round(time.Millisecond), len(movedBack), rejoined.Total())}
}

// exitTimer is a Cluster that can tell when a node's process ended.
type exitTimer interface {
	ExitedAt(ctx context.Context, node string) (time.Time, error)
}

func (s *suite) kill(t *testing.T) result {
	var exitedAt func(context.Context, string) (time.Time, error)
	if et, ok := s.c.(exitTimer); ok {
		exitedAt = et.ExitedAt
	}
	return s.crash(t, "node2", s.c.Kill, exitedAt, killBound, -1)
}

// killWithCopies is kill, bounded: with copies the moved keys are at
// their new owners already.
func (s *suite) killWithCopies(t *testing.T) result {
	var exitedAt func(context.Context, string) (time.Time, error)
	if et, ok := s.c.(exitTimer); ok {
		exitedAt = et.ExitedAt
	}
	return s.crash(t, "node2", s.c.Kill, exitedAt, killBound, maxCopiesLoads)
}

func (s *suite) stop(t *testing.T) result {
	return s.crash(t, "node3", s.c.Stop, nil, stopBound, maxLeaveLoads)
}

// etcdOutage: etcd is stopped for 30 s under load, then started. Nothing
// changes for clients: no errors, no ring changes, no origin loads; and every
// node is registered again afterwards.
func (s *suite) etcdOutage(t *testing.T) result {
	ctx := t.Context()
	// Any origin load fails this scenario, so it starts from a round that
	// cost none: after the stop before it, a node's first requests to the
	// restarted one can hang in Docker's DNS for a second and open its
	// breaker, and the keys it then loads itself would count here.
	warm := s.warmUp(t, three)
	s.reset(t, three...)
	before := map[string]Ring{}
	for _, n := range three {
		r, err := s.api.Ring(ctx, s.c.URL(n), "")
		if err != nil {
			t.Fatal(err)
		}
		before[n] = r
	}
	// Rings are watched from the moment etcd is asked to stop; the outage
	// counts from when it is down.
	t0 := time.Now()
	// A node whose key was deleted while etcd was away registers again under
	// a new term and drops what it cached (the term check below fails the
	// scenario then): reads that revert to the origin are not violations.
	defer s.moved(t0)
	stopped := make(chan error, 1)
	go func() { stopped <- s.c.StopEtcd(ctx) }()
	changes := s.watchRings(t, before, stopped)
	stopping := time.Since(t0)
	changes += s.watchRings(t, before, after(etcdOutage))

	t1 := time.Now()
	if err := s.c.StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	// Back when every node says it is connected and registered again.
	var back time.Duration
	deadline := time.Now().Add(settle)
	for {
		connected := 0
		for _, n := range three {
			if r, err := s.api.Ring(ctx, s.c.URL(n), ""); err == nil && r.EtcdConnected() && r.EtcdRegistered() {
				connected++
			}
		}
		if connected == len(three) {
			back = time.Since(t1)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of 3 nodes say they are connected to etcd and registered %s after it started", connected, settle)
		}
		hold(t, 100*time.Millisecond)
	}
	// A node that failed to register again would vanish from the others'
	// rings once its old lease ran out: watch for longer than that.
	changes += s.watchRings(t, before, after(leaseTTL+holdDown+2*time.Second))
	// A new term means a node's key was deleted while etcd was away (its
	// lease ran out before the node put it again), so that node dropped
	// what it had cached.
	for _, n := range three {
		r, err := s.api.Ring(ctx, s.c.URL(n), "")
		if err != nil {
			t.Fatal(err)
		}
		if was, now := before[n].EtcdTerm(), r.EtcdTerm(); was != now {
			t.Errorf("%s's term went from %d to %d: its key in etcd was deleted and put again; want it kept", n, was, now)
			recapf("%s: %s's term went from %d to %d, back %s after etcd started", t.Name(), n, was, now, back)
		}
	}
	if changes > 0 {
		t.Errorf("rings changed %d times during and after the etcd outage; want none", changes)
	}
	st := s.window(warm)
	noErrors(t, st)
	loads := s.loads(t, three...)
	if extra := loads.Total(); extra != 0 {
		var who []string
		for _, k := range slices.Sorted(maps.Keys(loads)) {
			who = append(who, k+" "+loads.Who(k))
		}
		t.Errorf("%d origin loads during the etcd outage, e.g. %v; want none", extra, first(who, 5))
		recapf("%s: %d origin loads during the etcd outage, e.g. %v", t.Name(), extra, first(who, 5))
	}
	return result{stats: st, extra: loads.Total(), converge: back,
		note: fmt.Sprintf("etcd took %s to stop, was down %s; rings unchanged (%d changes); converged = all nodes connected to etcd and registered again, then still on every ring %s later",
			stopping.Round(time.Millisecond), etcdOutage, changes, leaseTTL+holdDown+2*time.Second)}
}

// after returns a channel that receives once d has passed.
func after(d time.Duration) <-chan error {
	c := make(chan error, 1)
	time.AfterFunc(d, func() { c <- nil })
	return c
}

// watchRings polls the rings until done delivers, and counts the polls that
// found a node's members or version different from before. An error from
// done fails t.
func (s *suite) watchRings(t *testing.T, before map[string]Ring, done <-chan error) int {
	t.Helper()
	changes := 0
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		for n, b := range before {
			r, err := s.api.Ring(t.Context(), s.c.URL(n), "")
			if err != nil {
				t.Errorf("%s's ring: %v", n, err)
				changes++
				continue
			}
			if !r.SameMembers(b.Members) || r.Version != b.Version {
				if changes < 5 {
					t.Logf("%s's ring changed: %v (%s), was %v (%s)", n, r.Members, r.Version, b.Members, b.Version)
					recapf("%s: at %s %s's ring changed: %v (%s), was %v (%s)", t.Name(), time.Now().Format("15:04:05.000"), n, r.Members, r.Version, b.Members, b.Version)
				}
				changes++
			}
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return changes
		case <-t.Context().Done():
			t.Fatal("test ended while watching the rings")
		case <-tick.C:
		}
	}
}

// partition: node1 is cut off the network for 20 s, then reconnected. The
// clients of the other nodes see no errors; the rings agree again after it
// returns.
func (s *suite) partition(t *testing.T) result {
	ctx := t.Context()
	const victim = "node1"
	others := []string{"node2", "node3"}
	s.reset(t, three...)
	hold(t, time.Second)
	t0 := time.Now()
	defer s.moved(t0)
	if err := s.c.Disconnect(ctx, victim); err != nil {
		t.Fatal(err)
	}
	// The others drop node1 once its lease runs out; watch that happen.
	dropped, err := s.waitRings(ctx, t0, others, s.selves(others), partition)
	if err != nil {
		t.Logf("while node1 was cut off: %v", err)
	}
	hold(t, partition-time.Since(t0))
	t1 := time.Now()
	if err := s.c.Connect(ctx, victim); err != nil {
		t.Fatal(err)
	}
	back, err := s.waitRings(ctx, t1, three, s.selves(three), settle)
	if err != nil {
		t.Fatal(err)
	}
	st := s.window(s.sweep(ctx, s.toOwners(t, three)))
	for _, n := range others {
		if st.ErrorsByNode[n] > 0 {
			t.Errorf("clients of %s saw %d errors; want none", n, st.ErrorsByNode[n])
		}
	}
	if st.Wrong > 0 {
		t.Errorf("%d wrong values; want none; samples: %q", st.Wrong, st.Samples)
	}
	extra := s.loads(t, three...).Total()
	return result{stats: st, extra: extra, converge: back,
		note: fmt.Sprintf("node1 cut off %s; the others dropped it after %s; converged = rings agree after reconnecting; errors for node1's clients: %d",
			partition, dropped.Round(time.Millisecond), st.ErrorsByNode[victim])}
}

// scale: node4 joins under load, about a quarter of the keys move to it,
// all of them, and node4 takes their values from their previous owners
// rather than the origin (at most maxJoinLoads origin loads per moved key);
// then it leaves gracefully, handing them back (at most maxLeaveLoads).
func (s *suite) scale(t *testing.T) result {
	ctx := t.Context()
	warm := s.warmUp(t, three)
	s.reset(t, three...)
	before, err := s.owners(ctx, "node1")
	if err != nil {
		t.Fatal(err)
	}
	w := s.watchLoads(ctx, three...)
	t0 := time.Now()
	defer s.moved(t0)
	w.mark(t, "adding a node")
	added, err := s.c.ScaleUp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.add(added)
	four := append(slices.Clone(three), added)
	r, err := s.api.Ring(ctx, s.c.URL(added), "")
	if err != nil {
		t.Fatal(err)
	}
	s.self[added] = r.Self
	s.names[r.Self] = added
	joined, err := s.waitRings(ctx, t0, four, s.selves(four), settle)
	if err != nil {
		t.Fatal(err)
	}
	w.mark(t, "the four rings agree")
	s.load.SetTargets(s.targets(four))
	after, err := s.owners(ctx, "node2")
	if err != nil {
		t.Fatal(err)
	}
	moved := movedKeys(before, after)
	for _, k := range moved {
		if after[k] != s.self[added] {
			t.Errorf("%s moved from %s to %s, not to the new node", k, before[k], after[k])
		}
	}
	frac := float64(len(moved)) / float64(len(s.keys))
	if frac < 0.10 || frac > 0.40 {
		t.Errorf("%.3f of the keys changed owner; want about 1/4", frac)
	}
	upSweep := s.sweep(ctx, s.toOwners(t, four))
	w.mark(t, "every key read through its owner")
	loads := s.loads(t, four...)
	upEvents := w.Stop()
	// A moved key is taken over from its previous owner; an origin load of
	// it is what the hand-off failed to save, and any other is extra.
	var movedLoaded, movedLoads int64
	var unmoved []string
	isMoved := make(map[string]bool, len(moved))
	for _, k := range moved {
		isMoved[k] = true
	}
	for k := range loads {
		n := loads.Key(k)
		switch {
		case isMoved[k]:
			movedLoaded++
			movedLoads += n
		default:
			unmoved = append(unmoved, fmt.Sprintf("%s (owner %s, loaded by %s)", k, after[k], loads.Who(k)))
		}
	}
	if len(unmoved) > 0 {
		t.Errorf("%d keys that kept their owner were loaded again, e.g. %v; want none", len(unmoved), first(unmoved, 5))
	}
	if float64(loads.Total()) > maxJoinLoads*float64(len(moved)) {
		t.Errorf("%d origin loads for %d keys that moved to %s: %.3f per moved key; want at most %.2f",
			loads.Total(), len(moved), added, float64(loads.Total())/float64(len(moved)), maxJoinLoads)
		s.describeLoads(t, w, upEvents, before, after)
	}
	taken, _ := s.handoffs(ctx, added)
	upStats := s.window(warm.plus(upSweep))
	noErrors(t, upStats)
	s.moved(t0) // before the check: the join moved keys
	s.add(result{name: "scale 3->4", stats: upStats, extra: loads.Total(), converge: joined, history: s.checkHistory(t),
		handoff: perKey(loads.Total(), len(moved)),
		note: fmt.Sprintf("%d of %d keys (%.1f%%) changed owner, all to %s, which took %.0f values from their previous owners; %d moved keys loaded from the origin (%d loads), %d of the rest",
			len(moved), len(s.keys), 100*frac, added, taken, movedLoaded, movedLoads, len(unmoved))})

	// And back to three: node4 stops gracefully and hands its keys to their
	// old owners. Clients keep node4's URL until it is gone; the retry
	// covers the moment it refuses.
	s.reset(t, four...)
	w = s.watchLoads(ctx, four...)
	w.mark(t, "removing %s", added)
	t1 := time.Now()
	errc := make(chan error, 1)
	go func() {
		errc <- s.end(ctx, added, func(ctx context.Context, _ string) error { _, err := s.c.ScaleDown(ctx); return err })
	}()
	left, err := s.waitRings(ctx, t1, three, s.selves(three), settle)
	if serr := <-errc; serr != nil {
		t.Fatal(serr)
	}
	if err != nil {
		t.Fatal(err)
	}
	w.mark(t, "%s is gone and the three rings agree", added)
	s.load.SetTargets(s.targets(three))
	delete(s.self, added)
	back, err := s.owners(ctx, "node3")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(back, before) {
		t.Errorf("owners after node4 left differ from before it joined")
	}
	movedBack := movedKeys(after, back)
	st := s.window(s.sweep(ctx, s.toOwners(t, three)))
	noErrors(t, st)
	downLoads := s.loads(t, three...)
	downEvents := w.Stop()
	if float64(downLoads.Total()) > maxLeaveLoads*float64(len(movedBack)) {
		t.Errorf("%d origin loads for %d keys that moved back when %s left: %.3f per moved key; want at most %.2f",
			downLoads.Total(), len(movedBack), added, float64(downLoads.Total())/float64(len(movedBack)), maxLeaveLoads)
		s.describeLoads(t, w, downEvents, after, back)
	}
	return result{name: "scale 4->3", stats: st, extra: downLoads.Total(), converge: left,
		handoff: perKey(downLoads.Total(), len(movedBack)),
		note:    fmt.Sprintf("%d keys went back from %s to their old owners, which loaded %d of them again", len(movedBack), added, len(downLoads))}
}

// rollingRestart: each node in turn is stopped gracefully and started again,
// the next one only once it is ready and the three agree, as a deploy
// would; only the generator's load reads meanwhile. No client errors; final
// rings agree; the warm keys cost the origin at most maxRollingShare of them
// (each stopping node hands its values over, each returning one takes its
// keys back from their interim owners).
func (s *suite) rollingRestart(t *testing.T) result {
	ctx := t.Context()
	warm := s.warmUp(t, three)
	s.reset(t, three...)
	defer s.moved(time.Now())
	before, err := s.owners(ctx, "node1")
	if err != nil {
		t.Fatal(err)
	}
	w := s.watchLoads(ctx, three...)
	var worst time.Duration
	var per []string
	prev := Tally{}
	for _, n := range three {
		t0 := time.Now()
		w.mark(t, "stopping %s", n)
		if err := s.end(ctx, n, s.c.Stop); err != nil {
			t.Fatal(err)
		}
		w.mark(t, "%s stopped; starting it", n)
		if err := s.c.Start(ctx, n); err != nil {
			t.Fatal(err)
		}
		if err := s.waitReady(ctx, n, settle); err != nil {
			t.Fatal(err)
		}
		d, err := s.waitRings(ctx, t0, three, s.selves(three), settle)
		if err != nil {
			t.Fatal(err)
		}
		cur := s.loads(t, three...)
		step := cur.Minus(prev).Total()
		prev = cur
		w.mark(t, "%s ready and the rings agree; %d origin loads since its stop began", n, step)
		worst = max(worst, d)
		per = append(per, fmt.Sprintf("%s %s (%d loads)", n, d.Round(time.Millisecond), step))
	}
	st := s.window(warm.plus(s.sweep(ctx, s.toOwners(t, three))))
	noErrors(t, st)
	if _, err := s.waitRings(ctx, time.Now(), three, s.selves(three), time.Second); err != nil {
		t.Errorf("final rings: %v", err)
	}
	after, err := s.owners(ctx, "node1")
	if err != nil {
		t.Fatal(err)
	}
	// Every node comes back to the arcs it left: hashed points follow from
	// its URL, and explicit arcs are kept in etcd for a minute after a
	// graceful leave, for a node with the same ID to take back.
	if moved := movedKeys(before, after); len(moved) > 0 {
		t.Errorf("%d keys end the rolling restart with another owner than before, e.g. %v; want none: every node came back to an unchanged cluster",
			len(moved), first(moved, 5))
	}
	loads := s.loads(t, three...)
	events := w.Stop()
	if share := float64(loads.Total()) / float64(len(s.keys)); share > maxRollingShare {
		t.Errorf("%d origin loads for %d warm keys in the rolling restart: %.1f%%; want at most %.0f%%",
			loads.Total(), len(s.keys), 100*share, 100*maxRollingShare)
		s.describeLoads(t, w, events, before, after)
	}
	return result{stats: st, extra: loads.Total(), converge: worst,
		handoff: perKey(loads.Total(), len(s.keys)) + " of warm keys",
		note: fmt.Sprintf("stop, start, ready and agreeing, per node: %s; %d keys loaded again; %d keys end with another owner than before",
			strings.Join(per, ", "), len(loads), len(movedKeys(before, after)))}
}

// unsignedPeer: a peer request from outside, without the secret, is refused
// with 401 and makes no node ask the origin.
func (s *suite) unsignedPeer(t *testing.T) result {
	ctx := t.Context()
	s.reset(t, three...)
	key := fmt.Sprintf("unsigned-%d", time.Now().UnixNano())
	for _, n := range three {
		for _, k := range []string{key, s.keys[0]} {
			status, body, err := s.api.Peer(ctx, s.c.PeerURL(n), group, k)
			if err != nil {
				t.Fatal(err)
			}
			if status != 401 {
				t.Errorf("unsigned peer request for %s to %s: status %d (%.80q), want 401", k, n, status, body)
			}
		}
	}
	loads := s.loads(t, three...)
	if loads.Key(key) != 0 || loads.Total() != 0 {
		t.Errorf("origin loads after unsigned peer requests: %d of %s, %d in all; want none", loads.Key(key), key, loads.Total())
	}
	st := s.window(Stats{})
	noErrors(t, st)
	return result{stats: st, extra: loads.Total(), note: "6 unsigned peer requests, all 401, no origin load"}
}

// summary prints the figures of every scenario as a table.
func (s *suite) summary(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\trequests\terrors\twrong\tretried\tp99\tmax\textra origin loads\tloads/moved keys\tconverged\t"+
		"writes\tacked\tslow writes\tunreached\treads checked\tviolations\treverts\tunexplained\t")
	var total Report
	for _, r := range s.results {
		ws := r.stats.Writes
		handoff := r.handoff
		if handoff == "" {
			handoff = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", r.name, r.stats.Requests, r.stats.Errors,
			r.stats.Wrong, r.stats.Retries, r.stats.P99.Round(time.Millisecond), r.stats.MaxLatency.Round(time.Millisecond),
			r.extra, handoff, r.converge.Round(10*time.Millisecond),
			ws.Writes, ws.Acked, ws.Slow, ws.Unreached, r.history.Reads, r.history.Violations, r.history.Reverts, r.history.UnexplainedReverts)
		total = total.Plus(r.history)
	}
	total = total.Plus(s.tail)
	tw.Flush()
	fmt.Fprintf(&b, "history: %d reads checked against %d writes: %d violations, %d reverts within the bound, %d without a membership change\n",
		total.Reads, s.checker.Writes(), total.Violations, total.Reverts, total.UnexplainedReverts)
	for _, r := range s.results {
		fmt.Fprintf(&b, "%s: %s\n", r.name, r.note)
	}
	t.Log("\n" + b.String())
	fmt.Fprintf(os.Stdout, "\n== e2e summary (placement %s)\n%s", s.placement, b.String())
}
