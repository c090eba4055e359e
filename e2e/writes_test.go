//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The scenarios in this file write: a paused node under reads and writes,
// a write made while a key's owner is paused (then it comes back), a write
// while a node holds a hot copy of the key, and writes to keys whose copies
// came from coalesced fetches.

// write sends a PUT (or DELETE) of key through node and records it.
func (s *suite) write(t *testing.T, node string, kind Kind, key string, value []byte) Op {
	t.Helper()
	p := s.hist.Begin(kind, key, node, value)
	status, unreached, err := s.api.Write(t.Context(), kind, s.c.URL(node), group, key, value)
	return p.End(node, status, err, unreached)
}

// read reads key through node and records it.
func (s *suite) read(t *testing.T, node, key string) Op {
	t.Helper()
	start := time.Now()
	status, body, err := s.api.Get(t.Context(), s.c.URL(node), group, key)
	op := Op{Kind: Read, Key: key, Node: node, Start: start, End: time.Now(), Status: status, Value: body}
	if err != nil {
		op.Err = err.Error()
	}
	s.hist.Add(op)
	return op
}

// ownerOf returns the node that owns key by node's ring.
func (s *suite) ownerOf(t *testing.T, node, key string) string {
	t.Helper()
	r, err := s.api.Ring(t.Context(), s.c.URL(node), key)
	if err != nil {
		t.Fatal(err)
	}
	for n, self := range s.self {
		if self == r.Owner {
			return n
		}
	}
	t.Fatalf("%s's owner by %s's ring is %q, not a node of the cluster", key, node, r.Owner)
	return ""
}

// without returns nodes without the ones given.
func without(nodes []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return slices.Contains(drop, n) })
}

// pauser unpauses a node when the scenario ends with it still paused, so
// that a failed scenario leaves the cluster to the next one in one piece.
type pauser struct {
	s      *suite
	node   string
	paused bool
}

func (p *pauser) pause(t *testing.T) time.Time {
	t.Helper()
	if err := p.s.c.Pause(t.Context(), p.node); err != nil {
		t.Fatal(err)
	}
	p.paused = true
	return time.Now()
}

func (p *pauser) unpause(ctx context.Context) error {
	if !p.paused {
		return nil
	}
	p.paused = false
	return p.s.c.Unpause(ctx, p.node)
}

func (p *pauser) cleanup(t *testing.T) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.unpause(ctx); err != nil {
			t.Errorf("unpausing %s: %v", p.node, err)
		}
	})
}

// slowness counts, per node asked, the requests sent in [from, to) that
// took longer than slowAfter, and those that took longer than a second.
func slowness(recs []Record, from, to time.Time) (slow, overSecond map[string]int, n int, p99 time.Duration) {
	slow, overSecond = map[string]int{}, map[string]int{}
	var durs []time.Duration
	for _, r := range recs {
		if r.At.Before(from) || !r.At.Before(to) {
			continue
		}
		durs = append(durs, r.Dur)
		if r.Dur > slowAfter {
			slow[r.Node]++
		}
		if r.Dur > time.Second {
			overSecond[r.Node]++
		}
	}
	if len(durs) > 0 {
		slices.Sort(durs)
		p99 = durs[len(durs)*99/100]
	}
	return slow, overSecond, len(durs), p99
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// pause: node2 is frozen with docker pause for 15 s under reads and
// writes, then thawed. Clients send to the other two only (as a client
// with health checks would), which must notice the silent peer within
// about a second once: after the first second of the pause, no more
// requests are slowed than in a calm stretch before it, and at most one per
// node (begun as the breaker opened) waits a second. Every write answers within WriteBound; writes of keys that the
// paused node owns may fail (5xx: not applied) until the ring drops it,
// every other write is acknowledged.
func (s *suite) pause(t *testing.T) result {
	ctx := t.Context()
	const victim = "node2"
	survivors := without(three, victim)
	s.reset(t, three...)
	owned := map[string]bool{} // write keys the victim owns
	for _, k := range s.writeKeys {
		if s.ownerOf(t, "node1", k) == victim {
			owned[k] = true
		}
	}
	s.load.SetTargets(s.targets(survivors))
	calmFrom := time.Now()
	hold(t, 5*time.Second)

	p := &pauser{s: s, node: victim}
	p.cleanup(t)
	pausedAt := p.pause(t)
	defer s.moved(pausedAt)
	dropped, err := s.waitRings(ctx, pausedAt, survivors, s.selves(survivors), pauseFor)
	droppedAt := pausedAt.Add(dropped)
	if err != nil {
		t.Errorf("while %s was paused: %v", victim, err)
		droppedAt = time.Now()
	}
	hold(t, pauseFor-time.Since(pausedAt))
	unpausedAt := time.Now()
	if err := p.unpause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.waitReady(ctx, victim, settle); err != nil {
		t.Fatal(err)
	}
	back, err := s.waitRings(ctx, unpausedAt, three, s.selves(three), settle)
	if err != nil {
		t.Fatal(err)
	}
	s.load.SetTargets(s.targets(three))
	sweep := s.sweep(ctx, s.toOwners(t, three))

	w := s.load.Take()
	// A key written at the paused node gets no fallback copy (the origin's
	// value is older than the write): its reads are answered 503 with
	// Retry-After until the survivors drop the node, and the generator asks
	// again each second. They are counted apart, and each must be answered
	// soon after the drop.
	var reads []Record
	waitedForRing, late := 0, []string{}
	for _, r := range w.Records {
		if r.Written && r.Retried && !r.At.Before(pausedAt) && r.At.Before(unpausedAt) {
			waitedForRing++
			if end := r.At.Add(r.Dur); end.After(droppedAt.Add(movedMargin + time.Second)) {
				late = append(late, fmt.Sprintf("%s via %s at +%s answered %d at +%s", r.Key, r.Node,
					r.At.Sub(pausedAt).Round(time.Millisecond), r.Status, end.Sub(pausedAt).Round(time.Millisecond)))
			}
			continue
		}
		reads = append(reads, r)
	}
	if len(late) > 0 {
		t.Errorf("%d reads of written keys asked again after a 503 were answered well after the ring dropped %s (+%s): %q",
			len(late), victim, dropped.Round(time.Millisecond), first(late, 5))
	}
	calm, _, calmN, calmP99 := slowness(reads, calmFrom, pausedAt)
	firstSecond, _, _, _ := slowness(reads, pausedAt, pausedAt.Add(time.Second))
	later, laterSecond, laterN, _ := slowness(reads, pausedAt.Add(time.Second), unpausedAt)
	_, _, pauseN, pauseP99 := slowness(reads, pausedAt, unpausedAt)
	// The calm stretch is the reference: the same clients, the same two
	// nodes, the same machine, just before.
	calmRate := float64(sum(calm)) / pausedAt.Sub(calmFrom).Seconds()
	allowed := int(2*calmRate*unpausedAt.Sub(pausedAt.Add(time.Second)).Seconds()) + 10
	// A node suspects the paused peer when its first request to it has
	// heard nothing for the peer timeout (1 s), so the breaker opens a
	// little after the first second: one request per node that began just
	// before may still wait that second.
	racing := 0
	for _, n := range laterSecond {
		racing = max(racing, n)
	}
	var waited []string // what waited a second after the first one
	for _, r := range reads {
		if r.Dur > time.Second && !r.At.Before(pausedAt.Add(time.Second)) && r.At.Before(unpausedAt) {
			waited = append(waited, fmt.Sprintf("%s via %s at +%s took %s", r.Key, r.Node,
				r.At.Sub(pausedAt).Round(time.Millisecond), r.Dur.Round(time.Millisecond)))
		}
	}
	if len(waited) > 0 {
		t.Logf("requests begun after the first second of the pause that took over 1s: %q", first(waited, 10))
	}
	if sum(later) > allowed || racing > 1 {
		t.Errorf("after the first second of the pause, %d requests (%v) were slowed over %s and %d (%v) over 1s; "+
			"want at most %d (twice the calm rate of %.1f/s, plus 10) and at most one per node over 1s",
			sum(later), later, slowAfter, sum(laterSecond), laterSecond, allowed, calmRate)
	}

	var pausedWrites []Op
	for _, op := range w.Writes {
		if !op.Start.Before(pausedAt) && op.Start.Before(unpausedAt) {
			pausedWrites = append(pausedWrites, op)
		}
	}
	ws := CheckWrites(pausedWrites, WriteBound)
	var lost []string
	ownedFailed := 0
	for _, op := range pausedWrites {
		if op.Outcome() == Acked {
			continue
		}
		// Until the others have dropped it (and a moment after, while the
		// new owners take over: 503), its keys have no owner that answers.
		if owned[op.Key] && op.Start.Before(droppedAt.Add(movedMargin)) {
			ownedFailed++
			continue
		}
		lost = append(lost, op.String())
	}
	if ws.Slow > 0 {
		var slow []string
		for _, op := range pausedWrites {
			if d := op.End.Sub(op.Start); d > WriteBound {
				slow = append(slow, fmt.Sprintf("%s in %s, Ringcache-Unreached %q", op, d.Round(time.Millisecond), op.Unreached))
			}
		}
		t.Errorf("%d of %d writes during the pause took over %s (max %s): %q", ws.Slow, ws.Writes, WriteBound, ws.Max.Round(time.Millisecond), first(slow, 5))
	}
	if len(lost) > 0 {
		t.Errorf("%d writes of keys that a live node owns were not acknowledged during the pause, e.g. %q", len(lost), first(lost, 5))
	}
	if ws.Writes == 0 {
		t.Error("no write during the pause: the scenario proves nothing about writes")
	}

	st := Check(&w, group, demoSize).plus(sweep)
	noErrors(t, st)
	return result{stats: st, extra: s.loads(t, three...).Total(), converge: dropped,
		note: fmt.Sprintf("%s paused %s; ring dropped it after %s, agreed %s after unpause; "+
			"requests slowed over %s: calm %d of %d (p99 %s) in the %s before, first second of the pause %v, after it %v of %d, over 1s %v; "+
			"p99 during the pause %s over %d requests; %d reads of keys written at the paused node waited for the drop (503, asked again); "+
			"writes during the pause: %d, %d acknowledged, %d not (%d of the paused node's own keys before the drop), max %s, %d with Ringcache-Unreached",
			victim, pauseFor, dropped.Round(time.Millisecond), back.Round(time.Millisecond),
			slowAfter, sum(calm), calmN, calmP99.Round(time.Millisecond), pausedAt.Sub(calmFrom).Round(time.Second), firstSecond, later, laterN, laterSecond,
			pauseP99.Round(time.Millisecond), pauseN, waitedForRing, ws.Writes, ws.Acked, ws.Writes-ws.Acked, ownedFailed, ws.Max.Round(time.Millisecond), ws.Unreached)}
}

// valueName names a read's answer for the notes: "v1", "v2", "origin" or
// "other".
func valueName(op Op, origin []byte, named map[string][]byte) string {
	if op.Status != http.StatusOK {
		return fmt.Sprintf("status %d", op.Status)
	}
	for _, name := range slices.Sorted(maps.Keys(named)) {
		if bytes.Equal(op.Value, named[name]) {
			return name
		}
	}
	if bytes.Equal(op.Value, origin) {
		return "origin"
	}
	return "other"
}

// lostWrite: PUT v1 of a fresh key through a node that does not own it
// (the owner holds v1), pause the owner until the ring drops it, PUT v2
// through the third node, unpause the owner and let it rejoin. From then on
// every node serves v2 or the origin's value, never v1.
func (s *suite) lostWrite(t *testing.T) result {
	ctx := t.Context()
	s.reset(t, three...)
	key := fmt.Sprintf("%slost-%d", writtenPrefix, time.Now().UnixNano())
	owner := s.ownerOf(t, "node1", key)
	others := without(three, owner)
	a, b := others[0], others[1]
	origin := DemoValue(group, key, demoSize)
	v1 := []byte("lost-write v1 of " + key)
	v2 := []byte("lost-write v2 of " + key)
	named := map[string][]byte{"v1": v1, "v2": v2}

	if op := s.write(t, a, Put, key, v1); op.Outcome() != Acked {
		t.Fatalf("PUT v1 through %s: %s", a, op)
	}
	if op := s.read(t, owner, key); !bytes.Equal(op.Value, v1) {
		t.Fatalf("the owner %s does not serve v1 after the PUT: %s", owner, op)
	}

	s.load.SetTargets(s.targets(others))
	p := &pauser{s: s, node: owner}
	p.cleanup(t)
	pausedAt := p.pause(t)
	defer s.moved(pausedAt)
	dropped, err := s.waitRings(ctx, pausedAt, others, s.selves(others), settle)
	if err != nil {
		t.Fatal(err)
	}
	// 503 says ownership is moving and asks for a retry: a client retries.
	put2 := s.write(t, b, Put, key, v2)
	tries := 1
	for ; put2.Status == http.StatusServiceUnavailable && tries < 5; tries++ {
		hold(t, 500*time.Millisecond)
		put2 = s.write(t, b, Put, key, v2)
	}
	if put2.Outcome() != Acked || put2.End.Sub(put2.Start) > WriteBound {
		t.Errorf("PUT v2 through %s with the old owner paused and dropped: %s in %s; want 2xx within %s",
			b, put2, put2.End.Sub(put2.Start).Round(time.Millisecond), WriteBound)
	}
	var during []string
	for _, n := range others {
		op := s.read(t, n, key)
		during = append(during, n+":"+valueName(op, origin, named))
		if !bytes.Equal(op.Value, v2) {
			t.Errorf("right after PUT v2, %s served %s; want v2", n, valueName(op, origin, named))
		}
	}

	unpausedAt := time.Now()
	if err := p.unpause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.waitReady(ctx, owner, settle); err != nil {
		t.Fatal(err)
	}
	back, err := s.waitRings(ctx, unpausedAt, three, s.selves(three), settle)
	if err != nil {
		t.Fatal(err)
	}
	s.load.SetTargets(s.targets(three))
	if now := s.ownerOf(t, a, key); now != owner {
		t.Logf("after the rejoin %s is owned by %s, not by %s again", key, now, owner)
	}
	// Every node, every 200 ms for 6 s: long enough for a hot copy made in
	// the meantime to be asked again.
	seen := map[string]map[string]int{} // node -> value name -> reads
	for range 30 {
		for _, n := range three {
			op := s.read(t, n, key)
			name := valueName(op, origin, named)
			if seen[n] == nil {
				seen[n] = map[string]int{}
			}
			seen[n][name]++
		}
		hold(t, 200*time.Millisecond)
	}
	for _, n := range three {
		for name, count := range seen[n] {
			if name != "v2" && name != "origin" {
				t.Errorf("after %s rejoined, %s served %s %d times; want only v2 or the origin's value", owner, n, name, count)
			}
		}
	}
	st := s.window(Stats{})
	noErrors(t, st)
	return result{stats: st, extra: s.loads(t, three...).Total(), converge: back,
		note: fmt.Sprintf("%s: v1 through %s; owner %s paused, dropped after %s; v2 through %s: status %d in %s after %d tries (Ringcache-Unreached %q), then %s; after the rejoin (%s): %s",
			key, a, owner, dropped.Round(time.Millisecond), b, put2.Status, put2.End.Sub(put2.Start).Round(100*time.Microsecond),
			tries, put2.Unreached, strings.Join(during, " "), back.Round(time.Millisecond), describeSeen(seen))}
}

func describeSeen(seen map[string]map[string]int) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(seen)) {
		var vs []string
		for _, name := range slices.Sorted(maps.Keys(seen[n])) {
			vs = append(vs, fmt.Sprintf("%s×%d", name, seen[n][name]))
		}
		parts = append(parts, n+" "+strings.Join(vs, ","))
	}
	return strings.Join(parts, "; ")
}

// hotReads reads key through node often enough to make it a hot copy there
// (the default rule: 3 misses within 10 s) and returns the node's hot
// promotions before and after.
func (s *suite) hotReads(t *testing.T, node, key string) (before, after float64) {
	t.Helper()
	const sample = `ringcache_hot_promotions_total{group="` + group + `"}`
	before, err := s.api.Metric(t.Context(), s.c.URL(node), sample)
	if err != nil {
		t.Logf("hot promotions of %s: %v", node, err)
	}
	for range 10 {
		s.read(t, node, key)
	}
	after, err = s.api.Metric(t.Context(), s.c.URL(node), sample)
	if err != nil {
		t.Logf("hot promotions of %s: %v", node, err)
	}
	return before, after
}

// hotCopy: a fresh key is written (v1) and read often through a node that
// does not own it, which then holds a hot copy; then it is written again
// through the third node and read through the hot node at once: that read
// must return the new value. The same with the owner writing, and with a
// DELETE.
func (s *suite) hotCopy(t *testing.T) result {
	s.reset(t, three...)
	key := fmt.Sprintf("%shot-%d", writtenPrefix, time.Now().UnixNano())
	owner := s.ownerOf(t, "node1", key)
	others := without(three, owner)
	hot, writer := others[0], others[1]
	origin := DemoValue(group, key, demoSize)
	v := func(i int) []byte { return fmt.Appendf(nil, "hot-copy v%d of %s", i, key) }
	named := map[string][]byte{"v1": v(1), "v2": v(2), "v3": v(3)}

	var notes []string
	step := func(i int, via string, kind Kind, want []byte, wantName string) {
		t.Helper()
		before, after := s.hotReads(t, hot, key)
		op := s.write(t, via, kind, key, want)
		if kind == Delete {
			want = origin
		}
		if op.Outcome() != Acked || op.End.Sub(op.Start) > WriteBound {
			t.Errorf("step %d: %s through %s: %s in %s; want 2xx within %s", i, kind, via, op, op.End.Sub(op.Start).Round(time.Millisecond), WriteBound)
		}
		got := s.read(t, hot, key)
		name := valueName(got, origin, named)
		if !bytes.Equal(got.Value, want) {
			t.Errorf("step %d: right after %s through %s, the hot node %s served %s; want %s", i, kind, via, hot, name, wantName)
		}
		notes = append(notes, fmt.Sprintf("%s through %s (hot promotions on %s %+.0f): %s served %s", kind, via, hot, after-before, hot, name))
	}
	if op := s.write(t, writer, Put, key, v(1)); op.Outcome() != Acked {
		t.Fatalf("PUT v1 through %s: %s", writer, op)
	}
	step(1, writer, Put, v(2), "v2")
	step(2, owner, Put, v(3), "v3")
	step(3, writer, Delete, nil, "the origin's value")
	st := s.window(Stats{})
	noErrors(t, st)
	return result{stats: st, extra: s.loads(t, three...).Total(),
		note: fmt.Sprintf("%s owned by %s, hot on %s: %s", key, owner, hot, strings.Join(notes, "; "))}
}

// coalesce: in the compose cluster, whose peers sign their requests,
// overlapping fetches from one node to one owner share requests (batches),
// and every answer is the owner's: concurrent reads of keys the owner holds
// through a node that holds none of them, each loaded once, then writes to
// some of them through a third node, read back through the first, whose
// copies came from batch answers.
func (s *suite) coalesce(t *testing.T) result {
	ctx := t.Context()
	const via, own, writer = "node1", "node2", "node3"
	s.reset(t, three...)
	var keys []string
	for i := 0; len(keys) < 64; i++ {
		if k := fmt.Sprintf("coalesce-%d-%d", time.Now().UnixNano(), i); s.ownerOf(t, via, k) == own {
			keys = append(keys, k)
		}
	}
	for _, k := range keys { // the owner loads each
		if op := s.read(t, own, k); op.Status != 200 {
			t.Fatalf("GET %s at %s: %d %s", k, own, op.Status, op.Err)
		}
	}
	count := func(op string) float64 {
		v, err := s.api.MetricSum(ctx, s.c.URL(via), "ringcache_peer_requests_total", `op="`+op+`"`)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	batches0, gets0 := count("batch"), count("get")
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			if op := s.read(t, via, k); op.Status != 200 || !bytes.Equal(op.Value, DemoValue(group, k, demoSize)) {
				t.Errorf("GET %s at %s: %d %.40q %s", k, via, op.Status, op.Value, op.Err)
			}
		})
	}
	wg.Wait()
	batches, gets := count("batch")-batches0, count("get")-gets0
	if batches == 0 || batches+gets >= float64(len(keys)) {
		t.Errorf("%d concurrent reads of %s's keys through %s took %v batches and %v single fetches; want fewer requests than keys", len(keys), own, via, batches, gets)
	}
	// Writes through a third node reach the copies the batches left.
	for i, k := range keys[:8] {
		v := []byte(fmt.Sprintf("coalesced-write-%d-%d", i, time.Now().UnixNano()))
		if op := s.write(t, writer, Put, k, v); op.Status != 204 {
			t.Fatalf("PUT %s at %s: %d %s", k, writer, op.Status, op.Err)
		}
		if op := s.read(t, via, k); op.Status != 200 || !bytes.Equal(op.Value, v) {
			t.Errorf("GET %s at %s after the write: %d %q, want %q", k, via, op.Status, op.Value, v)
		}
	}
	// Only these keys' loads count: the generator's keys may still be
	// loaded again after an earlier scenario.
	loads := s.loads(t, three...)
	var extra int64
	for _, k := range keys {
		if n := loads.Key(k); n != 1 {
			t.Errorf("%s loaded %d times, want once (by %s)", k, n, own)
		}
		extra += max(loads.Key(k)-1, 0)
	}
	st := s.window(Stats{})
	noErrors(t, st)
	return result{stats: st, extra: extra,
		note: fmt.Sprintf("%d concurrent reads of %s's keys through %s: %v batches and %v single fetches; 8 writes through %s read back through %s", len(keys), own, via, batches, gets, writer, via)}
}

// purge: the whole group is purged through one node while the load
// generator reads and writes. The purge is applied by all three nodes and
// recorded in etcd; a sweep through every node then reloads every key
// (each at most twice cluster-wide: once, but for a key whose load the
// purge itself voided), and the history checker, which counts the purge as
// a DELETE of every written key between its call and its answer, finds no
// read of a value from before it.
func (s *suite) purge(t *testing.T) result {
	ctx := t.Context()
	const via = "node2"
	warm := s.warmUp(t, three)
	s.reset(t, three...)
	var pending []*Pending
	for _, k := range s.writeKeys {
		pending = append(pending, s.hist.Begin(Delete, k, via, nil))
	}
	start := time.Now()
	status, ans, err := s.api.Purge(ctx, s.c.URL(via), group, "")
	took := time.Since(start)
	for _, p := range pending {
		p.End(via, status, err, strings.Join(ans.Unconfirmed, ", "))
	}
	if err != nil || status != http.StatusOK {
		t.Fatalf("purge through %s: %d %v", via, status, err)
	}
	if len(ans.Confirmed) != 2 || len(ans.Unconfirmed) != 0 || !ans.Recorded {
		t.Errorf("purge through %s: %+v; want it recorded and confirmed by the two others", via, ans)
	}
	st := warm.plus(s.sweep(ctx, s.fromAll(three)))
	loads := s.loads(t, three...)
	var missing, twice []string
	for _, k := range s.keys {
		switch n := loads.Key(k); {
		case n == 0:
			missing = append(missing, k)
		case n > 2:
			twice = append(twice, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d keys were not loaded again after the purge (still cached somewhere), e.g. %v", len(missing), len(s.keys), first(missing, 5))
	}
	if len(twice) > 0 {
		t.Errorf("%d keys were loaded more than twice after the purge, e.g. %v", len(twice), first(twice, 5))
	}
	st = s.window(st)
	noErrors(t, st)
	return result{stats: st, extra: loads.Total() - int64(len(s.keys)),
		note: fmt.Sprintf("purge answered in %s, applied by %s and %v; %d loads for %d keys after it",
			took.Round(time.Millisecond), via, ans.Confirmed, loads.Total(), len(s.keys))}
}
