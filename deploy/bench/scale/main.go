// Command scale measures what membership changes cost the origin on a
// cluster of many nodes on one machine: it starts one etcd process and -n
// ringcached processes registered in it (loopback, one group, -copies
// copies), warms -keys keys through the first node, and then, one after
// another: a join, a graceful drain (SIGTERM), one crash (SIGKILL), two
// crashes at once, and a rolling restart of every node (SIGTERM, start
// again, next). After each change it waits until every node's ring agrees
// and reads every key again through random nodes, and prints the origin
// loads per key that changed owner (for the rolling restart, per key), the
// seconds until the rings agreed, and at the end each process's idle CPU
// and RSS.
//
//	deploy/bench/scale.sh 100            # builds etcd and ringcached, runs this
//	go run ./deploy/bench/scale -n 20 -copies 2 -etcd-bin BIN -ringcached-bin BIN
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ringcache/ringcache/consistenthash"
	"github.com/ringcache/ringcache/internal/loadgen"
)

var (
	nodes     = flag.Int("n", 20, "ringcached processes")
	copies    = flag.Int("copies", 2, "the group's copies")
	keys      = flag.Int("keys", 10000, "keys warmed and read after each change")
	etcdBin   = flag.String("etcd-bin", "", "the etcd binary (required)")
	nodeBin   = flag.String("ringcached-bin", "", "the ringcached binary (required)")
	readers   = flag.Int("readers", 32, "concurrent readers")
	scenarios = flag.String("scenarios", "join,drain,crash,crash2,rolling", "which changes to make, in order")
	verbose   = flag.Bool("v", false, "log every origin load and restart, print the nodes' counters after each change, and keep the logs")
)

// origin counts the loads of every key.
type origin struct {
	loads atomic.Int64
}

// ServeHTTP answers /<node>/<key> with the key's value.
func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.loads.Add(1)
	node, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if *verbose {
		log.Printf("%s load %s by %s", time.Now().Format("15:04:05.000"), key, node)
	}
	fmt.Fprint(w, "v:"+key)
}

// proc is one process the bench started.
type proc struct {
	name, url string
	args      []string
	cmd       *exec.Cmd
	exited    chan struct{}
}

type bench struct {
	dir       string
	etcd      *proc
	endpoint  string
	originURL string
	procs     []*proc // live ringcached processes, in start order
	next      int     // the next node's number
	c         *http.Client
	o         *origin
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	if *etcdBin == "" || *nodeBin == "" {
		log.Fatal("scale: -etcd-bin and -ringcached-bin are required (deploy/bench/scale.sh builds both)")
	}
	dir, err := os.MkdirTemp("", "ringcache-scale-")
	if err != nil {
		log.Fatal(err)
	}
	if !*verbose {
		defer os.RemoveAll(dir)
	} else {
		log.Printf("logs in %s", dir)
	}
	b := &bench{dir: dir, o: &origin{}, c: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 4, MaxIdleConns: 1024}}}
	srv := httptest.NewServer(b.o)
	defer srv.Close()
	b.originURL = srv.URL
	defer b.stopAll()
	b.startEtcd()

	start := time.Now()
	for range *nodes {
		b.startNode()
	}
	took := b.awaitAgreement(len(b.procs))
	fmt.Printf("%d nodes, copies=%d, %d keys: started and agreed on one ring in %.1fs (the last ring %.1fs after the last start)\n",
		*nodes, *copies, *keys, time.Since(start).Seconds(), took.Seconds())

	all := make([]string, *keys)
	for i := range all {
		all[i] = fmt.Sprintf("key-%d", i)
	}
	b.read(all, b.procs[:1])
	time.Sleep(2 * time.Second) // the copies of the loads go out in the background
	fmt.Printf("warmed through %s: %d origin loads\n\n", b.procs[0].name, b.o.loads.Load())

	fmt.Println("| change | keys moved | origin loads | per moved key | rings agreed after |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: |")
	for _, s := range strings.Split(*scenarios, ",") {
		before := b.ring()
		loads0 := b.o.loads.Load()
		var agreed time.Duration
		switch s {
		case "join":
			b.startNode()
			agreed = b.awaitAgreement(len(b.procs))
		case "drain":
			b.stop(b.procs[len(b.procs)/2], syscall.SIGTERM)
			agreed = b.awaitAgreement(len(b.procs))
		case "crash":
			b.stop(b.procs[len(b.procs)/3], syscall.SIGKILL)
			agreed = b.awaitAgreement(len(b.procs))
		case "crash2":
			b.stop(b.procs[len(b.procs)/4], syscall.SIGKILL)
			b.stop(b.procs[3*len(b.procs)/4], syscall.SIGKILL)
			agreed = b.awaitAgreement(len(b.procs))
		case "rolling":
			for i := range b.procs {
				p := b.procs[i]
				if *verbose {
					log.Printf("%s restart %s", time.Now().Format("15:04:05.000"), p.name)
				}
				b.stop(p, syscall.SIGTERM)
				b.awaitAgreement(len(b.procs))
				b.procs = slices.Insert(b.procs, i, b.restart(p))
				agreed = b.awaitAgreement(len(b.procs))
			}
		default:
			log.Fatalf("scale: unknown scenario %q", s)
		}
		after := b.ring()
		moved := 0
		for _, k := range all {
			if before.Get(k) != after.Get(k) {
				moved++
			}
		}
		// Repair runs in the background after each change; give it a moment,
		// as an operator's next change would.
		time.Sleep(2 * time.Second)
		b.read(all, b.procs)
		loads := b.o.loads.Load() - loads0
		if *verbose {
			for _, p := range b.procs {
				resp, err := b.c.Get(p.url + "/metrics")
				if err != nil {
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for _, line := range strings.Split(string(body), "\n") {
					if strings.HasPrefix(line, "ringcache_loads_total") || strings.HasPrefix(line, "ringcache_errors_total") ||
						strings.HasPrefix(line, "ringcache_copies_total") || strings.HasPrefix(line, "ringcache_handoffs_total") || strings.HasPrefix(line, "ringcache_items") {
						log.Printf("%s %s", p.name, line)
					}
				}
			}
		}
		per, of := float64(loads)/float64(max(moved, 1)), "moved key"
		if s == "rolling" {
			per, of = float64(loads)/float64(len(all)), "key (every key)"
		}
		fmt.Printf("| %s | %d | %d | %.3f per %s | %.1fs |\n", s, moved, loads, per, of, agreed.Seconds())
	}
	b.idle()
}

// startEtcd starts etcd on two free loopback ports.
func (b *bench) startEtcd() {
	client, peer := "http://"+freeAddr(), "http://"+freeAddr()
	p := &proc{name: "etcd", url: client, args: []string{"--name", "scale", "--data-dir", filepath.Join(b.dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "scale=" + peer, "--log-level", "error"}}
	b.spawn(p, *etcdBin)
	b.etcd, b.endpoint = p, client
	deadline := time.Now().Add(30 * time.Second)
	for !ok(b.c, client+"/health") {
		if time.Now().After(deadline) {
			log.Fatal("scale: etcd not healthy within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startNode starts the next ringcached process and waits until it is ready.
func (b *bench) startNode() {
	addr := freeAddr()
	b.next++
	p := &proc{name: fmt.Sprintf("n%d", b.next), url: "http://" + addr}
	p.args = []string{"-listen", addr, "-peer-url", p.url, "-etcd", b.endpoint, "-node-id", p.name,
		"-copies", strconv.Itoa(*copies), "-log-level", "warn",
		"-group", "name=g,origin=http,url=" + b.originURL + "/" + p.name + "/{key},bytes=16MiB"}
	b.procs = append(b.procs, b.restart(p))
}

// restart starts p's process again from its arguments, and waits until it
// is ready.
func (b *bench) restart(p *proc) *proc {
	q := &proc{name: p.name, url: p.url, args: p.args}
	b.spawn(q, *nodeBin)
	deadline := time.Now().Add(60 * time.Second)
	for !ok(b.c, q.url+"/readyz") {
		if time.Now().After(deadline) {
			log.Fatalf("scale: %s not ready within 60s", q.name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return q
}

func (b *bench) spawn(p *proc, bin string) {
	p.cmd = exec.Command(bin, p.args...)
	logf, err := os.OpenFile(filepath.Join(b.dir, p.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644) // a restart appends
	if err != nil {
		log.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		log.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() {
		p.cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
}

// stop sends p sig, waits for it to exit and takes it out of the live list.
func (b *bench) stop(p *proc, sig syscall.Signal) {
	p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		log.Fatalf("scale: %s did not exit within 30s of %v", p.name, sig)
	}
	b.procs = slices.DeleteFunc(b.procs, func(q *proc) bool { return q == p })
}

func (b *bench) stopAll() {
	for _, p := range b.procs {
		p.cmd.Process.Kill()
	}
	if b.etcd != nil {
		b.etcd.cmd.Process.Kill()
	}
}

// ringView is what the bench reads of /debug/ring.
type ringView struct {
	Version string   `json:"version"`
	Members []string `json:"members"`
}

// awaitAgreement waits until every live node's ring has n members and the
// same version, and returns how long that took.
func (b *bench) awaitAgreement(n int) time.Duration {
	start := time.Now()
	for {
		versions := map[string]bool{}
		agree := true
		for _, p := range b.procs {
			var v ringView
			if err := getJSON(b.c, p.url+"/debug/ring", &v); err != nil || len(v.Members) != n {
				agree = false
				break
			}
			versions[v.Version] = true
		}
		if agree && len(versions) == 1 {
			return time.Since(start)
		}
		if time.Since(start) > 2*time.Minute {
			log.Fatalf("scale: the rings did not agree on %d members within 2 minutes", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// owners maps a key to its owner.
type owners interface{ Get(key string) string }

// arcs is a ring of explicit arcs, as /debug/ring lists them.
type arcs []consistenthash.Arc

func (a arcs) Get(key string) string {
	h := consistenthash.XXHash([]byte(key))
	for _, arc := range a {
		if arc.Contains(h) {
			return arc.Owner
		}
	}
	return ""
}

// ring builds the live nodes' ring as the nodes do: with ranges placement
// (the default, with etcd) from the arcs the first node lists, else from
// the members (xxhash, 160 points a member); and checks it against the
// first node's owner of a few keys.
func (b *bench) ring() owners {
	var info struct {
		Placement string                          `json:"placement"`
		Arcs      map[string][]consistenthash.Arc `json:"arcs"`
	}
	if err := getJSON(b.c, b.procs[0].url+"/debug/ring", &info); err != nil {
		log.Fatal(err)
	}
	var m owners
	if info.Placement == "ranges" {
		var all arcs
		for owner, as := range info.Arcs {
			for _, a := range as {
				a.Owner = owner
				all = append(all, a)
			}
		}
		m = all
	} else {
		h := consistenthash.New(160, consistenthash.XXHash)
		for _, p := range b.procs {
			if err := h.Add(p.url); err != nil {
				log.Fatal(err)
			}
		}
		m = h
	}
	for i := range 5 {
		k := fmt.Sprintf("key-%d", i*997)
		var v struct {
			Owner string `json:"owner"`
		}
		if err := getJSON(b.c, b.procs[0].url+"/debug/ring?key="+k, &v); err != nil || v.Owner != m.Get(k) {
			log.Fatalf("scale: the bench's ring gives %s to %s, the node's %s (%v)", k, m.Get(k), v.Owner, err)
		}
	}
	return m
}

// read reads every key once through the nodes of via, round robin, and
// checks each value.
func (b *bench) read(all []string, via []*proc) {
	urls := make([]string, len(via))
	for i, p := range via {
		urls[i] = p.url
	}
	var next atomic.Int64
	res, err := loadgen.Do(context.Background(), loadgen.Config{
		Targets: loadgen.URLs(urls...), Group: "g", Workers: *readers,
		Source: loadgen.SourceFunc(func(_ *rand.Rand, op *loadgen.Op) bool {
			i := next.Add(1) - 1
			if i >= int64(len(all)) {
				return false
			}
			*op = loadgen.Op{Name: all[i]}
			return true
		}),
		Check: func(op *loadgen.Op, body []byte) loadgen.Verdict {
			if string(body) == "v:"+op.Name {
				return loadgen.Right
			}
			return loadgen.Wrong
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if bad := res.Requests() - res.Status[http.StatusOK] + res.Wrong; bad > 0 {
		log.Printf("scale: %d of %d reads failed or read a wrong value", bad, len(all))
	}
}

// idle measures each process's CPU over 10 idle seconds, and its RSS.
func (b *bench) idle() {
	const window = 10 * time.Second
	type sample struct{ cpu, rss float64 }
	read := func(p *proc) sample {
		pid := p.cmd.Process.Pid
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return sample{}
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		var rss float64
		for _, line := range strings.Split(string(status), "\n") {
			if v, found := strings.CutPrefix(line, "VmRSS:"); found {
				rss, _ = strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			}
		}
		return sample{cpu: (utime + stime) / 100, rss: rss * 1024}
	}
	all := append([]*proc{b.etcd}, b.procs...)
	first := make([]sample, len(all))
	for i, p := range all {
		first[i] = read(p)
	}
	time.Sleep(window)
	var cpu, rss float64
	for i, p := range all[1:] {
		s := read(p)
		cpu += s.cpu - first[i+1].cpu
		rss += s.rss
	}
	n := float64(len(all) - 1)
	etcd := read(b.etcd)
	fmt.Printf("\nidle, over %v: %.2f%% of a core per node (mean), etcd %.2f%%; mean RSS per node %.1f MiB, etcd %.1f MiB\n",
		window, 100*cpu/n/window.Seconds(), 100*(etcd.cpu-first[0].cpu)/window.Seconds(), rss/n/(1<<20), etcd.rss/(1<<20))
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func ok(c *http.Client, url string) bool {
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func getJSON(c *http.Client, url string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
