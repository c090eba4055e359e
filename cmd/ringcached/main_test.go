package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

// TestMain fails the run if goroutines or HTTP connections outlive the
// tests: every node, cluster and server must be stopped by its test. Two of
// fasthttp's outlive its servers by design (see the transport tests).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}

// output is a goroutine-safe stdout for run that lets a test wait for a
// line: the daemon's logs and dev mode's banner are how it tells the world
// where it listens.
type output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every Write
}

func newOutput() *output { return &output{changed: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	close(o.changed)
	o.changed = make(chan struct{})
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// await waits until the output matches re and returns the submatches of
// every match.
func (o *output) await(t *testing.T, re *regexp.Regexp, done <-chan struct{}) [][]string {
	t.Helper()
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	for {
		o.mu.Lock()
		m := re.FindAllStringSubmatch(o.buf.String(), -1)
		changed := o.changed
		o.mu.Unlock()
		if m != nil {
			return m
		}
		select {
		case <-changed:
		case <-done:
			t.Fatalf("run returned before printing %v; output:\n%s", re, o.String())
		case <-timeout.C:
			t.Fatalf("no %v in the output after 60s:\n%s", re, o.String())
		}
	}
}

// startRun runs the daemon with args in the background. It returns the
// output, a stop function that cancels the run and returns its error, and
// a channel closed when run returns.
func startRun(t *testing.T, args ...string) (*output, func() error, <-chan struct{}) {
	t.Helper()
	out := newOutput()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = run(ctx, args, func(string) string { return "" }, out)
	}()
	stop := func() error {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("run did not return 30s after its context ended; output:\n%s", out.String())
		}
		return err
	}
	t.Cleanup(func() { stop() })
	return out, stop, done
}

var readyLine = regexp.MustCompile(`msg="node ready".* addr=(\S+)`)

// serveNode runs "serve" with args and returns the node's public base URL.
func serveNode(t *testing.T, args ...string) (base string, out *output, stop func() error) {
	t.Helper()
	out, stop, done := startRun(t, append([]string{"serve", "-listen", "127.0.0.1:0"}, args...)...)
	m := out.await(t, readyLine, done)
	return "http://" + m[0][1], out, stop
}

// get sends a GET and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// scrape fetches and parses a node's /metrics with the Prometheus text
// parser.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mfs
}

// value sums the samples of a metric family whose labels include labels
// (name=value pairs); for a histogram it sums the sample counts.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	mf, ok := mfs[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	var sum float64
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}
