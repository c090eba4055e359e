//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// What a planned membership change costs the origin. The node that owned a
// key before a change is usually alive and holds the key warm: a joining
// node asks it before the origin, and a node that stops gracefully pushes
// its values to their next owners first. The scenarios of cluster_test.go
// count the keys whose owner changed (from /debug/ring?key= before and
// after), read every key through its new owner, and divide the origin loads
// of the window (the ledger's, from /debug/origin) by the keys that moved.
const (
	// maxJoinLoads bounds origin loads per moved key when a node joins
	// (scale 3 to 4); without the hand-off it was 0.69.
	maxJoinLoads = 0.02
	// maxLeaveLoads bounds origin loads per moved key when a warm node
	// stops gracefully (docker stop, SIGTERM); without the drain it was 1.00.
	maxLeaveLoads = 0.05
	// maxRollingShare bounds the origin loads of a rolling restart of every
	// node, as a share of all warm keys.
	maxRollingShare = 0.05
)

// movedKeys returns the keys whose owner differs between two owner maps, in
// key order.
func movedKeys(before, after map[string]string) []string {
	var moved []string
	for k, o := range before {
		if after[k] != o {
			moved = append(moved, k)
		}
	}
	slices.Sort(moved)
	return moved
}

// perKey formats loads per key as the summary table shows it: "3/331 = 0.009".
func perKey(loads int64, keys int) string {
	if keys == 0 {
		return fmt.Sprintf("%d/0", loads)
	}
	return fmt.Sprintf("%d/%d = %.3f", loads, keys, float64(loads)/float64(keys))
}

// end runs fault (a stop or a kill of node) and keeps in the ledger what node
// had loaded when it last answered: a node that stops gracefully hands its
// values over before it exits, and serves (and may load) meanwhile, so its
// /debug/origin is polled until the fault returns.
func (s *suite) end(ctx context.Context, node string, fault func(context.Context, string) error) error {
	url := s.c.URL(node)
	last, err := s.api.Origin(ctx, url, group)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- fault(ctx, node) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			s.ledger.Ended(node, last)
			return err
		case <-tick.C:
			pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
			if g, err := s.api.Origin(pctx, url, group); err == nil {
				last = g
			}
			cancel()
		}
	}
}

// handoffs returns the sum of the nodes' hand-off counters (values taken as
// a key's new owner, given as its previous owner); a node that does not
// answer counts nothing.
func (s *suite) handoffs(ctx context.Context, nodes ...string) (taken, given float64) {
	for _, n := range nodes {
		if v, err := s.api.Metric(ctx, s.c.URL(n), `ringcache_handoffs_total{direction="taken",group="demo"}`); err == nil {
			taken += v
		}
		if v, err := s.api.Metric(ctx, s.c.URL(n), `ringcache_handoffs_total{direction="given",group="demo"}`); err == nil {
			given += v
		}
	}
	return taken, given
}

// loadEvent is one origin load as a loadWatch saw it appear.
type loadEvent struct {
	at        time.Duration // since the watch began, within its poll interval
	node, key string
	n         int64
}

// loadWatch polls nodes' /debug/origin while a scenario runs and notes when
// each origin load first showed, so that a figure that misses its target can
// say which keys were loaded, on which node and when. A node that does not
// answer (stopped, restarting) is skipped until it does; a new process counts
// from zero, which the watch notices by a total lower than before.
type loadWatch struct {
	s     *suite
	start time.Time
	stop  chan struct{}
	done  chan struct{}

	mu     sync.Mutex
	nodes  []string
	prev   map[string]GroupLoads // node -> last answer
	events []loadEvent
	marks  []mark
}

// mark is a step of the scenario on the watch's clock.
type mark struct {
	at   time.Duration
	what string
}

// watchLoads starts a loadWatch over nodes.
func (s *suite) watchLoads(ctx context.Context, nodes ...string) *loadWatch {
	w := &loadWatch{s: s, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{}),
		nodes: slices.Clone(nodes), prev: map[string]GroupLoads{}}
	w.poll(ctx) // the counts the window starts from
	w.events = nil
	go func() {
		defer close(w.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				w.poll(ctx)
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				w.poll(ctx)
			}
		}
	}()
	return w
}

// add watches one more node (one that joined).
func (w *loadWatch) add(node string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Contains(w.nodes, node) {
		w.nodes = append(w.nodes, node)
	}
}

// since returns the time since the watch began: scenarios log their steps
// with it, on the same clock as the events.
func (w *loadWatch) since() time.Duration { return time.Since(w.start).Round(10 * time.Millisecond) }

// mark notes a step of the scenario, logs it, and starts a phase of the
// loads' summary.
func (w *loadWatch) mark(t *testing.T, format string, args ...any) {
	t.Helper()
	m := mark{at: time.Since(w.start), what: fmt.Sprintf(format, args...)}
	w.mu.Lock()
	w.marks = append(w.marks, m)
	w.mu.Unlock()
	t.Logf("+%s: %s", m.at.Round(10*time.Millisecond), m.what)
}

func (w *loadWatch) poll(ctx context.Context) {
	w.mu.Lock()
	nodes := slices.Clone(w.nodes)
	w.mu.Unlock()
	for _, n := range nodes {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		g, err := w.s.api.Origin(pctx, w.s.c.URL(n), group)
		cancel()
		if err != nil {
			continue
		}
		at := time.Since(w.start)
		w.mu.Lock()
		p, seen := w.prev[n]
		if seen && g.Loads < p.Loads {
			p = GroupLoads{} // a new process
		}
		// A node first seen now (one that joined) counts from zero.
		for k, c := range g.Keys {
			if d := c - p.Keys[k]; d > 0 && !strings.HasPrefix(k, writtenPrefix) {
				w.events = append(w.events, loadEvent{at: at, node: n, key: k, n: d})
			}
		}
		w.prev[n] = g
		w.mu.Unlock()
	}
}

// Stop ends the watch after one last poll and returns the loads it saw, in
// the order they showed.
func (w *loadWatch) Stop() []loadEvent {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	slices.SortStableFunc(w.events, func(a, b loadEvent) int { return int(a.at - b.at) })
	return slices.Clone(w.events)
}

// describeLoads says which keys were loaded, on which node and when: per
// phase between the watch's marks, how many loads each node made and whose
// keys they were by the owners before and after the change; every load, with
// each key's owners, goes to a file in the temporary directory.
func (s *suite) describeLoads(t *testing.T, w *loadWatch, events []loadEvent, before, after map[string]string) {
	t.Helper()
	name := func(url string) string {
		if n, ok := s.names[url]; ok {
			return n
		}
		return url
	}
	w.mu.Lock()
	marks := slices.Clone(w.marks)
	w.mu.Unlock()
	phase := func(at time.Duration) string {
		p := "start"
		for _, m := range marks {
			if m.at <= at {
				p = m.what
			}
		}
		return p
	}
	type bucket struct{ phase, node string }
	counts := map[bucket]map[string]int{}
	var order []bucket
	var b strings.Builder
	for _, e := range events {
		k := bucket{phase(e.at), e.node}
		if counts[k] == nil {
			counts[k] = map[string]int{}
			order = append(order, k)
		}
		counts[k][name(before[e.key])+"->"+name(after[e.key])] += int(e.n)
		fmt.Fprintf(&b, "+%s\t%s\t%s\t%d\towner before %s\tafter %s\t(after: %s)\n", e.at.Round(10*time.Millisecond), e.node, e.key, e.n,
			name(before[e.key]), name(after[e.key]), k.phase)
	}
	for _, k := range order {
		var parts []string
		total := 0
		for _, o := range slices.Sorted(maps.Keys(counts[k])) {
			parts = append(parts, fmt.Sprintf("%s %d", o, counts[k][o]))
			total += counts[k][o]
		}
		t.Logf("  loads after %q: %s loaded %d (owner before->after: %s)", k.phase, k.node, total, strings.Join(parts, ", "))
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("%s-%s-loads.txt", s.project, strings.ReplaceAll(t.Name(), "/", "_")))
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Logf("  writing the loads: %v", err)
		return
	}
	t.Logf("  every load (time since the scenario's first step, node, key, loads, owners) is in %s", path)
}

// warmUp reads every key through every one of nodes until a whole round
// costs the origin nothing, and returns the reads' figures. Then every key
// is cached at its owner and every node reaches every owner: the warm,
// healthy cluster the hand-off figures are about. An earlier scenario can
// leave either undone: a node paused past its lease registers again and
// does not serve what it cached before, and a node that restarted may stay
// suspected by a peer for a few seconds (its first requests to it can time
// out in Docker's DNS), so that the peer loads its keys itself and, when it
// leaves, cannot hand it anything. It fails t after settle.
func (s *suite) warmUp(t *testing.T, nodes []string) Stats {
	t.Helper()
	deadline := time.Now().Add(settle)
	var st Stats
	for round := 1; ; round++ {
		s.reset(t, nodes...)
		st = st.plus(s.sweep(t.Context(), s.fromAll(nodes)))
		loads := s.loads(t, nodes...)
		if loads.Total() == 0 {
			t.Logf("warm: a round of %d reads through %v cost the origin nothing (round %d)", len(s.keys)*len(nodes), nodes, round)
			return st
		}
		var who []string
		for _, k := range slices.Sorted(maps.Keys(loads)) {
			who = append(who, k+" "+loads.Who(k))
		}
		t.Logf("warming up, round %d: %d origin loads, e.g. %v", round, loads.Total(), first(who, 5))
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not become warm within %s", settle)
		}
		hold(t, time.Second)
	}
}
