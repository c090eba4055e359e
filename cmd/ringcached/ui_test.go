package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/ringcache/ringcache/peers"
	"github.com/ringcache/ringcache/transport/ui"
)

// startUICluster starts a dev cluster of n nodes (real embedded etcd) and
// stops it at cleanup.
func startUICluster(t *testing.T, n int) *devCluster {
	t.Helper()
	c, err := startDev(t.Context(), devConfig{Nodes: n, DemoSize: 64, LogLevel: "warn"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(10 * time.Second) })
	return c
}

// addDevNode starts one more node in c's etcd, configured as startDev
// configures its own.
func addDevNode(t *testing.T, c *devCluster, id string) *node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.NodeID = id
	cfg.Etcd = []string{c.etcdURL}
	cfg.Cluster = "dev"
	cfg.Secret = c.secret
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Groups = []GroupSpec{{Name: "demo", Origin: originDemo, DemoSize: 64}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n, err := startNode(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c.nodes = append(c.nodes, n) // c.stop stops it with the others
	return n
}

// traffic reads keys through every node, each key reps times per node, so
// that non-owners fetch from owners and the popular keys go hot.
func traffic(t *testing.T, c *devCluster, keys, reps int) {
	t.Helper()
	for _, base := range c.urls() {
		for k := range keys {
			for range reps {
				if status, body := get(t, base+"/cache/demo/k"+strconv.Itoa(k)); status != 200 {
					t.Fatalf("%s: k%d = %d %s", base, k, status, body)
				}
			}
		}
	}
}

// background reads keys k0..k(keys-1) through bases, about 50 times a
// second, until the test ends. Errors are ignored: it only keeps the
// caches busy.
func background(t *testing.T, bases []string, keys int) {
	stop := make(chan struct{})
	done := make(chan struct{})
	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			res, err := client.Get(bases[i%len(bases)] + "/cache/demo/k" + strconv.Itoa(i%keys))
			if err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		client.CloseIdleConnections()
	})
}

// TestUIPage checks the page as served by a node of a real cluster,
// without a browser: the static parts are complete, the key box finds the
// owner that /debug/ring names, and the state's numbers are /metrics'.
func TestUIPage(t *testing.T) {
	t.Parallel()
	c := startUICluster(t, 3)
	traffic(t, c, 30, 4)
	base := c.urls()[0]

	// /ui redirects to the page, which one mux registration serves.
	res, err := http.Get(base + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Request.URL.Path != "/ui/" {
		t.Fatalf("GET /ui ended at %s with %d", res.Request.URL.Path, res.StatusCode)
	}

	var ring ringInfo
	getJSON(t, base+"/debug/ring?key=hello", &ring)
	status, page := get(t, base+"/ui/?key=hello")
	if status != 200 {
		t.Fatalf("/ui/ = %d", status)
	}
	if n := strings.Count(page, `<g class="member`); n != 3 {
		t.Errorf("%d member groups in the SVG, want 3", n)
	}
	if !strings.Contains(page, `<g class="member hl" data-member="`+ring.Owner+`"`) {
		t.Errorf("the highlighted arcs are not those of hello's owner %s", ring.Owner)
	}
	for _, want := range []string{"all 3 nodes agree", "etcd connected", `<span class="kind">joined</span>`, "Hottest keys"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, c.secret) {
		t.Error("the page shows the cluster secret")
	}

	var s ui.Snapshot
	getJSON(t, base+"/ui/state", &s)
	checkAgainstMetrics(t, base, s)
	if s.Agreement.Agree != 3 || s.Version != ring.Version || len(s.Members) != 3 {
		t.Errorf("state: agreement %+v, version %s (ring %s), %d members", s.Agreement, s.Version, ring.Version, len(s.Members))
	}
	// Hot copies are listed while their owner's contact lease holds, which
	// lasts about a second after the last contact: under load they show.
	background(t, c.urls(), 30)
	hotSeen := false
	for deadline := time.Now().Add(20 * time.Second); !hotSeen && time.Now().Before(deadline); {
		var s ui.Snapshot
		getJSON(t, base+"/ui/state", &s)
		for _, g := range s.Groups {
			hotSeen = hotSeen || len(g.HotKeys) > 0
		}
	}
	if !hotSeen {
		t.Error("no hot keys listed in 20s of load over keys read four times through every node")
	}
	for _, m := range s.Members {
		if m.State != ui.StateReady || m.ID == "" || m.Weight != 1 || len(m.Arcs) == 0 {
			t.Errorf("member %+v", m)
		}
	}
	if st, _ := get(t, base+"/ui/state?key="+strings.Repeat("k", 251)); st != http.StatusBadRequest {
		t.Errorf("an over-long key: %d, want 400", st)
	}
}

// checkAgainstMetrics fails unless the state's counters of group demo are
// what base's /metrics says. The cluster must be idle.
func checkAgainstMetrics(t *testing.T, base string, s ui.Snapshot) {
	t.Helper()
	i := slices.IndexFunc(s.Groups, func(g ui.Group) bool { return g.Name == "demo" })
	if i < 0 {
		t.Fatalf("no group demo in %+v", s.Groups)
	}
	g := s.Groups[i]
	mfs := scrape(t, base)
	for _, c := range []struct {
		name   string
		got    int64
		metric string
		labels []string
	}{
		{"gets", g.Gets, "ringcache_gets_total", nil},
		{"main hits", g.MainHits, "ringcache_hits_total", []string{"cache", "main"}},
		{"hot hits", g.HotHits, "ringcache_hits_total", []string{"cache", "hot"}},
		{"origin loads", g.OriginLoads, "ringcache_loads_total", []string{"source", "local"}},
		{"peer loads", g.PeerLoads, "ringcache_loads_total", []string{"source", "peer"}},
		{"evictions", g.Evictions, "ringcache_evictions_total", nil},
		{"main bytes", g.MainBytes, "ringcache_bytes", []string{"cache", "main"}},
		{"hot bytes", g.HotBytes, "ringcache_bytes", []string{"cache", "hot"}},
		{"max bytes", g.MaxBytes, "ringcache_max_bytes", nil},
	} {
		if want := value(t, mfs, c.metric, append([]string{"group", "demo"}, c.labels...)...); float64(c.got) != want {
			t.Errorf("%s: the page says %d, /metrics %v", c.name, c.got, want)
		}
	}
	if g.Gets == 0 {
		t.Error("no gets: the comparison proves nothing")
	}
}

// TestUITimeline drives the timeline of a real cluster through a join and
// a graceful leave, seen from the first node.
func TestUITimeline(t *testing.T) {
	t.Parallel()
	c := startUICluster(t, 2)
	first := c.nodes[0]
	kinds := func() []string {
		first.ui.mu.Lock()
		defer first.ui.mu.Unlock()
		var out []string
		for _, e := range first.ui.events {
			out = append(out, e.Kind+" "+e.Member)
		}
		return out
	}
	third := addDevNode(t, c, "node3")
	if err := first.awaitMembers(t.Context(), func(m int) bool { return m == 3 }, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// The third node's timeline starts with the ring it found.
	third.ui.mu.Lock()
	var found []string
	for _, e := range third.ui.events {
		found = append(found, e.Kind+" "+e.Member)
	}
	third.ui.mu.Unlock()
	wantFound := []string{"joined " + third.self}
	for _, m := range slices.Sorted(slices.Values([]string{first.self, c.nodes[1].self})) {
		wantFound = append(wantFound, "present "+m)
	}
	if !slices.Equal(found, wantFound) {
		t.Errorf("the joining node's timeline = %q, want %q", found, wantFound)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	third.stop(ctx)
	if err := first.awaitMembers(ctx, func(m int) bool { return m == 2 }, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// The first event is the node's own join, with the ring it found;
	// later ones are the others'. The third left gracefully.
	got := kinds()
	want := []string{
		"joined " + first.self,
		"joined " + c.nodes[1].self,
		"joined " + third.self,
		"left " + third.self,
	}
	if !slices.Equal(got, want) {
		t.Errorf("timeline = %q, want %q", got, want)
	}
}

// TestUITimelineHoldDown feeds the timeline what the registry and the
// Setter report when a member's key leaves etcd without a goodbye: it is
// held down (vanished), then either comes back or is removed. Removal is
// recorded as such whichever of the two reports arrives first.
func TestUITimelineHoldDown(t *testing.T) {
	t.Parallel()
	const self, a, b = "http://self:1", "http://a:1", "http://b:1"
	held := func(members []string, pending ...string) peers.State {
		st := peers.State{Peers: members}
		for _, p := range pending {
			st.Pending = append(st.Pending, peers.Member{PeerURL: p})
		}
		return st
	}
	u := newUIState(&node{self: self})
	all := []string{a, b, self}
	u.record(all)
	u.observe(held(all))
	u.observe(held(all, a))               // a's key is gone: held down
	u.observe(held(all))                  // and back before the hold-down ended
	u.observe(held(all, b))               // b's key is gone
	u.observe(held([]string{a, self}))    // the registry drops b...
	u.record([]string{a, self})           // ...and the ring follows
	u.observe(held([]string{a, self}, a)) // a vanishes again
	u.record([]string{self})              // the ring drops a before follow sees it go
	u.observe(held([]string{self}))
	u.record([]string{self, b}) // b joins again
	var got []string
	for _, e := range u.events {
		got = append(got, e.Kind+" "+e.Member)
	}
	want := []string{"joined " + self, "present " + a, "present " + b, "vanished " + a, "back " + a, "vanished " + b, "removed " + b,
		"vanished " + a, "removed " + a, "joined " + b}
	if !slices.Equal(got, want) {
		t.Errorf("timeline = %q\nwant       %q", got, want)
	}
}

// findChromium returns the path of a Chromium the browser tests can drive,
// or "" when there is none.
func findChromium() string {
	if p := os.Getenv("RINGCACHE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser is a headless Chromium tab that records console errors,
// warnings and uncaught exceptions.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := findChromium()
	if path == "" {
		t.Skip("no Chromium found (chromium, chromium-browser, google-chrome, headless-shell or $RINGCACHE_CHROMIUM): .ci/run installs Debian's chromium")
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox refuses to start
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &browser{ctx: ctx}
	read := make(chan struct{})
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		<-read
	})
	// Console starts the browser and subscribes before the first page.
	messages := chromedp.Console(ctx)
	go func() {
		defer close(read)
		for m, err := range messages {
			if err != nil {
				return // the tab closed at cleanup
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
				b.mu.Lock()
				b.errors = append(b.errors, m.String()+" "+m.URL)
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// do runs actions in the tab, within 30 s.
func (b *browser) do(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// eval returns the value of a JavaScript expression in the page.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// checkConsole fails t if the page logged errors to its console.
func (b *browser) checkConsole(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	errs := slices.Clone(b.errors)
	b.mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// awaitUpdates waits until the page's script has redrawn it n times.
func awaitUpdates(n int) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(`Number(document.body.dataset.updates || 0) >= %d`, n), chromedp.WithPollingInterval(50*time.Millisecond))
}

// awaitNextUpdate waits for the page's next redraw.
func (b *browser) awaitNextUpdate(t *testing.T) {
	t.Helper()
	b.do(t, awaitUpdates(eval[int](t, b, `Number(document.body.dataset.updates || 0)`)+1))
}

// screenshot saves the whole page as a PNG in the test's artifact
// directory (go test -artifacts keeps it) and returns its path.
func (b *browser) screenshot(t *testing.T, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot %s is not a PNG (%d bytes)", name, len(png))
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return path
}

const countArcGroups = `document.querySelectorAll("#arcs g.member").length`

// TestUIBrowser loads the page of a live cluster in headless Chromium: it
// runs without a console error, draws one arc group per member, shows the
// numbers /metrics shows, and the key box highlights the owner's arcs.
func TestUIBrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	c := startUICluster(t, 3)
	traffic(t, c, 30, 4)
	base := c.urls()[0]

	b.do(t, chromedp.Navigate(base+"/ui/"), awaitUpdates(2)) // two polls: the rates exist from the second
	if n := eval[int](t, b, countArcGroups); n != 3 {
		t.Errorf("%d arc groups in the SVG, want 3", n)
	}
	// The numbers as the page shows them, after its script redrew it.
	shown := eval[map[string]string](t, b, `(() => {
		const out = {};
		for (const td of document.querySelectorAll('[data-group="demo"] [data-field]')) {
			out[td.dataset.field] = td.dataset.value !== undefined ? td.dataset.value : td.textContent;
		}
		return out;
	})()`)
	field := func(name string) int64 {
		v, err := strconv.ParseInt(shown[name], 10, 64)
		if err != nil {
			t.Fatalf("field %s = %q in %v", name, shown[name], shown)
		}
		return v
	}
	checkAgainstMetrics(t, base, ui.Snapshot{Groups: []ui.Group{{
		Name: "demo", Gets: field("gets"), MainHits: field("main_hits"), HotHits: field("hot_hits"),
		OriginLoads: field("origin_loads"), PeerLoads: field("peer_loads"), Evictions: field("evictions"),
		MainBytes: field("main_bytes"), HotBytes: field("hot_bytes"), MaxBytes: field("max_bytes"),
	}}})
	if !strings.HasSuffix(shown["gets_per_s"], "/s") {
		t.Errorf("gets per second = %q after two polls", shown["gets_per_s"])
	}

	// The key box, answered by the script without a reload.
	var ring ringInfo
	getJSON(t, base+"/debug/ring?key=hello", &ring)
	b.do(t,
		chromedp.SetValue(chromedp.ID("key"), "hello"),
		chromedp.Submit(chromedp.ID("where")),
		chromedp.WaitVisible(chromedp.CSS("#where-result .owner")),
	)
	hl := eval[[]string](t, b, `[...document.querySelectorAll("#arcs g.member.hl")].map(g => g.dataset.member)`)
	if !slices.Equal(hl, []string{ring.Owner}) {
		t.Errorf("highlighted %v, want hello's owner %s", hl, ring.Owner)
	}
	if loc := eval[string](t, b, `location.search`); loc != "?key=hello" {
		t.Errorf("location.search = %q: the key is not in the address to share", loc)
	}
	b.screenshot(t, "ui-3-nodes.png")
	b.checkConsole(t)
}

// TestUIBrowserNoScript loads the page with JavaScript off: the server's
// rendering alone shows the ring, the numbers and the key's owner.
func TestUIBrowserNoScript(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	c := startUICluster(t, 3)
	traffic(t, c, 30, 4)
	base := c.urls()[0]
	var ring ringInfo
	getJSON(t, base+"/debug/ring?key=hello", &ring)
	noScript := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return err
	})
	b.do(t, noScript, chromedp.Navigate(base+"/ui/"),
		chromedp.SetValue(chromedp.ID("key"), "hello"),
		chromedp.Submit(chromedp.ID("where")), // a plain GET of the form: a new page
		chromedp.WaitVisible(chromedp.CSS("#where-result .owner")))
	if n := eval[int](t, b, `Number(document.body.dataset.updates || 0)`); n != 0 {
		t.Fatalf("the script ran %d times with JavaScript off", n)
	}
	if n := eval[int](t, b, countArcGroups); n != 3 {
		t.Errorf("%d arc groups, want 3", n)
	}
	hl := eval[[]string](t, b, `[...document.querySelectorAll("#arcs g.member.hl")].map(g => g.dataset.member)`)
	if !slices.Equal(hl, []string{ring.Owner}) {
		t.Errorf("highlighted %v, want hello's owner %s", hl, ring.Owner)
	}
	gets := eval[string](t, b, `document.querySelector('[data-group="demo"] [data-field="gets"]').textContent`)
	if want := value(t, scrape(t, base), "ringcache_gets_total", "group", "demo"); gets != strconv.FormatFloat(want, 'f', -1, 64) {
		t.Errorf("gets = %s, /metrics %v", gets, want)
	}
	b.screenshot(t, "ui-no-script.png")
	b.checkConsole(t)
}

// TestUIScale photographs one node's page while the cluster grows from
// three nodes to four and then loses one, in headless Chromium.
func TestUIScale(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	c := startUICluster(t, 3)
	traffic(t, c, 40, 4)
	first := c.nodes[0]
	base := c.urls()[0]
	// Light load all along, through the nodes that stay, so that the
	// pictures show rates and hot copies in use.
	background(t, []string{base, c.urls()[2]}, 40)

	b.do(t, chromedp.Navigate(base+"/ui/?key=hello"), awaitUpdates(2))
	if n := eval[int](t, b, countArcGroups); n != 3 {
		t.Fatalf("%d arc groups before the join, want 3", n)
	}
	b.screenshot(t, "scale-1-three-nodes.png")
	const colorsJS = `Object.fromEntries([...document.querySelectorAll("#arcs g.member")].map(g => [g.dataset.member, g.querySelector("path").getAttribute("stroke")]))`
	before := eval[map[string]string](t, b, colorsJS)

	fourth := addDevNode(t, c, "node4")
	if err := first.awaitMembers(t.Context(), func(m int) bool { return m == 4 }, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	traffic(t, c, 40, 4)
	b.awaitNextUpdate(t)
	if n := eval[int](t, b, countArcGroups); n != 4 {
		t.Fatalf("%d arc groups after the join, want 4", n)
	}
	if tl := eval[string](t, b, `document.getElementById("timeline").textContent`); !strings.Contains(tl, "joined "+fourth.self) {
		t.Errorf("the timeline does not show the join: %q", tl)
	}
	after := eval[map[string]string](t, b, colorsJS)
	for m, c := range before {
		if after[m] != c {
			t.Errorf("%s changed colour from %s to %s when node4 joined", m, c, after[m])
		}
	}
	if slices.Contains(slices.Collect(maps.Values(before)), after[fourth.self]) {
		t.Errorf("node4 got the colour %s of another member", after[fourth.self])
	}
	b.screenshot(t, "scale-2-four-nodes.png")

	// The second node stops gracefully.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	gone := c.nodes[1]
	gone.stop(ctx)
	if err := first.awaitMembers(ctx, func(m int) bool { return m == 3 }, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	b.awaitNextUpdate(t)
	n := eval[int](t, b, countArcGroups)
	tl := eval[string](t, b, `document.getElementById("timeline").textContent`)
	if n != 3 || !strings.Contains(tl, "left "+gone.self) {
		t.Errorf("after a leave: %d arc groups, timeline %q", n, tl)
	}
	b.screenshot(t, "scale-3-one-left.png")
	b.checkConsole(t)
}

// TestUITimelineShowsPurges purges a prefix and then the group through one
// node of a dev cluster, and finds both purges, with their scope and the
// node that made them, in the other node's timeline and on its page.
func TestUITimelineShowsPurges(t *testing.T) {
	t.Parallel()
	c := startUICluster(t, 2)
	g, ok := c.nodes[0].cache.Group("demo")
	if !ok {
		t.Fatal("no demo group")
	}
	if _, err := g.PurgePrefix(t.Context(), "key-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Purge(t.Context()); err != nil {
		t.Fatal(err)
	}
	second := c.nodes[1]
	var purges []string
	for _, e := range second.ui.Snapshot(t.Context()).Timeline {
		if e.Kind == ui.EventPurged {
			purges = append(purges, e.Scope+" by "+e.Member)
		}
	}
	by := c.nodes[0].self
	want := []string{"group demo by " + by, "prefix key-1 of group demo by " + by} // newest first
	if !slices.Equal(purges, want) {
		t.Errorf("the second node's timeline shows purges %q, want %q", purges, want)
	}
	status, page := get(t, c.urls()[1]+"/ui/")
	if status != 200 || !strings.Contains(page, "prefix key-1 of group demo by ") {
		t.Errorf("the page does not show the prefix purge:\n%s", page)
	}
}

// TestUINarrow loads the page of a live cluster at 360 px wide, a phone's
// width, in headless Chromium: nothing overflows the width (no sideways
// scrolling), and the groups card's cells are not squeezed below a word.
func TestUINarrow(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	c := startUICluster(t, 3)
	traffic(t, c, 30, 4)
	phone := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetDeviceMetricsOverride,
			emulation.SetDeviceMetricsOverrideParams{Width: 360, Height: 740, DeviceScaleFactor: 2, Mobile: true})
		return err
	})
	b.do(t, phone, chromedp.Navigate(c.urls()[0]+"/ui/?key=hello"), awaitUpdates(2))
	if w := eval[int](t, b, `document.documentElement.scrollWidth`); w > 360 {
		wide := eval[[]string](t, b, `[...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > 361).slice(0, 8).map(e => e.tagName + (e.id ? "#" + e.id : "") + (e.className && e.className.baseVal === undefined ? "." + e.className : ""))`)
		t.Errorf("the page is %d px wide at 360: it overflows (%v)", w, wide)
	}
	if narrow := eval[[]string](t, b, `[...document.querySelectorAll("#groups td, #groups th")].filter(e => e.getBoundingClientRect().width < 40 && e.textContent.trim() !== "").slice(0, 8).map(e => e.textContent.trim())`); len(narrow) > 0 {
		t.Errorf("groups cells squeezed under 40 px at 360: %q", narrow)
	}
	b.screenshot(t, "ui-360px.png")
	b.checkConsole(t)
}
