//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringcache/ringcache/internal/freeport"
)

// The tests in this file check the harness itself; only TestReap needs Docker
// (and skips itself without it).

func TestDemoValue(t *testing.T) {
	t.Parallel()
	// printf 'ringcache-demo/demo/key-0001' | sha256sum
	const sum = "5cff9050541199746fe8efccc85dd457890161437bc975c36d5122f9146d4a26"
	tests := []struct {
		name string
		size int
		want string
	}{
		{"default size", 64, sum},
		{"shorter", 10, sum[:10]},
		{"repeated and cut", 100, sum + sum[:36]},
		{"empty", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := string(DemoValue("demo", "key-0001", tt.size)); got != tt.want {
				t.Errorf("DemoValue(demo, key-0001, %d) = %q, want %q", tt.size, got, tt.want)
			}
		})
	}
}

// demoServer serves the demo value of every key, like a healthy node.
func demoServer(t *testing.T, size int) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		group, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/cache/"), "/")
		w.Write(DemoValue(group, key, size))
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// TestLoadRetriesARefusedNode: the generator reads at its rate, round
// robin, and a read whose node refused the connection is asked once at the
// next node (loadgen's own tests cover the other retries); every read is
// recorded, with the node asked first and the one that served it.
func TestLoadRetriesARefusedNode(t *testing.T) {
	t.Parallel()
	l, err := NewLoad(LoadConfig{Group: "demo", Keys: Keys(10), Rate: 100, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l.SetTargets([]Target{{"a", "http://" + freeport.Addr(t)}, {"b", demoServer(t, 64)}})
	l.Start(t.Context())
	time.Sleep(500 * time.Millisecond)
	l.Stop()
	w := l.Take()
	byNode := map[string]int{}
	for _, r := range w.Records {
		byNode[r.Node]++
		if r.Status != http.StatusOK || r.Served != "b" || r.Retried != (r.Node == "a") ||
			string(r.Body) != string(DemoValue("demo", r.Key, 64)) {
			t.Errorf("record = node %s served %s retried %v status %d err %q; want every read served by b, retried if asked at a",
				r.Node, r.Served, r.Retried, r.Status, r.Err)
		}
	}
	if byNode["a"] < 10 || byNode["b"] < 10 || w.Dropped != 0 {
		t.Errorf("%v reads by the node asked first, %d dropped; want some of each in 0.5 s at 100/s, none dropped", byNode, w.Dropped)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	now := time.Now()
	w := Window{Start: now.Add(-time.Second), End: now, Records: []Record{
		{Key: "k1", Node: "a", Served: "a", Status: 200, Body: DemoValue("demo", "k1", 64)},
		{Key: "k2", Node: "a", Served: "a", Status: 200, Body: DemoValue("demo", "k1", 64)},
		{Key: "k3", Node: "b", Served: "c", Retried: true, Status: 0, Err: "connection refused"},
		{Key: "k4", Node: "b", Served: "b", Status: 200, Body: DemoValue("demo", "k4", 63)},
		{Key: "k5", Node: "c", Served: "a", Retried: true, Status: 200, Body: DemoValue("demo", "k5", 64)},
	}}
	s := Check(&w, "demo", 64)
	if s.Requests != 5 || s.Errors != 1 || s.ErrorsByNode["b"] != 1 || s.Wrong != 2 || s.Retries != 2 {
		t.Errorf("Check = %+v; want 5 requests, 1 error (from b), 2 wrong, 2 retries", s)
	}
	for i, r := range w.Records {
		if r.Body != nil {
			t.Errorf("record %d kept its body after Check", i)
		}
	}
}

func TestNewLoadRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []LoadConfig{
		{},
		{Group: "demo"},
		{Group: "demo", Keys: Keys(1), Rate: -1},
	} {
		if _, err := NewLoad(cfg); err == nil {
			t.Errorf("NewLoad(%+v) = nil error, want one", cfg)
		}
	}
}

// TestReap leaves what a run killed half way through down.sh leaves (images
// and a volume, no container) for a dead run and for a live one, and checks
// that Reap removes the first and keeps the second.
func TestReap(t *testing.T) {
	if !dockerAnswers(t) {
		t.Skip("no Docker daemon answers")
	}
	deployDir, err := filepath.Abs(filepath.Join("..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	// A pid that no process holds any more.
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s%d-%d", projectPrefix, time.Now().Add(-time.Hour).Unix(), done.Process.Pid)
	live := fmt.Sprintf("%s%d-%d", projectPrefix, time.Now().Unix(), os.Getpid())

	docker := func(stdin io.Reader, args ...string) string {
		t.Helper()
		cmd := exec.Command("docker", args...)
		cmd.Stdin = stdin
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("docker %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	images := func(project string) []string {
		var names []string
		for _, kv := range imageEnv(project) {
			_, name, _ := strings.Cut(kv, "=")
			names = append(names, name)
		}
		return names
	}
	for _, project := range []string{stale, live} {
		for _, image := range images(project) {
			// An empty tar makes an image without pulling anything.
			docker(bytes.NewReader(make([]byte, 1024)), "import", "-", image)
			t.Cleanup(func() { exec.Command("docker", "image", "rm", image).Run() })
		}
	}
	volume := stale + "_etcd-data"
	docker(nil, "volume", "create", "--label", "com.docker.compose.project="+stale,
		"--label", "com.docker.compose.volume=etcd-data", volume)
	t.Cleanup(func() { exec.Command("docker", "volume", "rm", volume).Run() })

	reaped, err := Reap(t.Context(), deployDir, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(reaped, stale) || slices.Contains(reaped, live) {
		t.Errorf("Reap removed %v; want %s among them and not %s", reaped, stale, live)
	}
	for _, image := range images(stale) {
		if out := docker(nil, "image", "ls", "-q", image); out != "" {
			t.Errorf("image %s of the dead run is still there", image)
		}
	}
	if out := docker(nil, "volume", "ls", "-q", "--filter", "name=^"+volume+"$"); out != "" {
		t.Errorf("volume %s of the dead run is still there", volume)
	}
	for _, image := range images(live) {
		if out := docker(nil, "image", "ls", "-q", image); out == "" {
			t.Errorf("image %s of the live run was removed", image)
		}
	}
}

func TestMovedKeys(t *testing.T) {
	t.Parallel()
	before := map[string]string{"a": "n1", "b": "n2", "c": "n3", "d": "n1"}
	after := map[string]string{"a": "n4", "b": "n2", "c": "n4", "d": "n1"}
	if got, want := movedKeys(before, after), []string{"a", "c"}; !slices.Equal(got, want) {
		t.Errorf("movedKeys = %v, want %v", got, want)
	}
	if got := movedKeys(before, before); len(got) != 0 {
		t.Errorf("movedKeys of one map = %v, want none", got)
	}
	if got, want := perKey(3, 331), "3/331 = 0.009"; got != want {
		t.Errorf("perKey(3, 331) = %q, want %q", got, want)
	}
}

// originServer answers /debug/origin with the counts in *loads.
func originServer(t *testing.T, loads *map[string]int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var total int64
		for _, n := range *loads {
			total += n
		}
		fmt.Fprintf(w, `{"demo":{"loads":%d,"keys":{`, total)
		sep := ""
		for k, n := range *loads {
			fmt.Fprintf(w, `%s%q:%d`, sep, k, n)
			sep = ","
		}
		io.WriteString(w, "}}}")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A node's loads up to its last answer are kept when it ends, its next
// process counts from zero, and Minus tells one step of a window from the
// next.
func TestLedgerEnded(t *testing.T) {
	t.Parallel()
	api := NewAPI(5 * time.Second)
	t.Cleanup(api.Close)
	loads := map[string]int64{"k1": 2, "k2": 1}
	url := originServer(t, &loads)
	nodes := map[string]string{"n1": url}
	l := NewLedger(api, "demo")
	if err := l.Reset(t.Context(), nodes); err != nil {
		t.Fatal(err)
	}
	loads = map[string]int64{"k1": 3, "k2": 1, "k3": 1} // k1 and k3 loaded in the window
	last, err := api.Origin(t.Context(), url, "demo")
	if err != nil {
		t.Fatal(err)
	}
	l.Ended("n1", last)
	loads = map[string]int64{"k3": 1} // the next process
	step1, err := l.Loads(t.Context(), nodes)
	if err != nil {
		t.Fatal(err)
	}
	if step1.Key("k1") != 1 || step1.Key("k2") != 0 || step1.Key("k3") != 2 || step1.Total() != 3 {
		t.Errorf("loads = %v; want k1:1 k3:2 (one before the end, one after)", step1)
	}
	loads = map[string]int64{"k3": 1, "k4": 4}
	step2, err := l.Loads(t.Context(), nodes)
	if err != nil {
		t.Fatal(err)
	}
	if d := step2.Minus(step1); d.Total() != 4 || d.Key("k4") != 4 || d.Who("k4") != "n1:4" {
		t.Errorf("second step = %v; want k4:4 on n1", d)
	}
}
