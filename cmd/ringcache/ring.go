package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unsafe"

	"github.com/ringcache/ringcache/consistenthash"
)

// Limits that keep a mistyped flag from exhausting memory.
const (
	maxKeys   = 100_000_000
	maxNodes  = 100_000
	maxPoints = 20_000_000 // nodes × replicas, or nodes × positions
	// maxArcNodes bounds -nodes with ranges: the ring is built as a
	// cluster builds it, one join at a time, each rebuilding the ring, so
	// the cost grows with the square of the nodes (2,000: about 15 s).
	maxArcNodes = 2_000
)

// ringConfig is the parsed "ring" subcommand.
type ringConfig struct {
	Nodes     int    `json:"nodes"`     // nodes in the ring before a join or leave
	Replicas  int    `json:"replicas"`  // points per node, hashed placement
	Positions int    `json:"positions"` // positions per node, range placement
	Keys      int    `json:"keys"`      // keys to place: "key-0" ... "key-<Keys-1>"
	Hash      string `json:"hash"`      // a consistenthash.HashByName name
	Placement string `json:"placement"` // "hashed" (Map) or "ranges" (Ranges)
	Prefix    string `json:"prefix"`    // node names are Prefix+"0" ... Prefix+"<Nodes-1>"
	Leave     string `json:"leave"`     // the node that leaves for n -> n-1; "" means Prefix+"0"
	Output    string `json:"-"`         // "text" or "json"
}

func parseRing(args []string, out io.Writer) (ringConfig, error) {
	cfg := ringConfig{}
	fs := flag.NewFlagSet("ring", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&cfg.Nodes, "nodes", 10, "number of nodes")
	fs.IntVar(&cfg.Replicas, "replicas", 160, "points per node (hashed placement)")
	fs.IntVar(&cfg.Positions, "positions", 16, "positions per node (ranges placement)")
	fs.IntVar(&cfg.Keys, "keys", 1_000_000, "number of keys to place")
	fs.StringVar(&cfg.Hash, "hash", "xxhash", "hash function: "+strings.Join(consistenthash.HashNames(), ", "))
	fs.StringVar(&cfg.Placement, "placement", "ranges", "ranges (explicit arcs: ringcached's default where the nodes are in etcd) or hashed (replica points: static peers, weights)")
	fs.StringVar(&cfg.Prefix, "prefix", "node-", "node names are <prefix>0 ... <prefix>N-1")
	fs.StringVar(&cfg.Leave, "leave", "", "node that leaves for the n -> n-1 figures (default <prefix>0)")
	fs.StringVar(&cfg.Output, "o", "text", "output: text or json")
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: ringcache ring [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if cfg.Leave == "" {
		cfg.Leave = cfg.Prefix + "0"
	}
	return cfg, cfg.validate()
}

func (c ringConfig) validate() error {
	if c.Output != "text" && c.Output != "json" {
		return fmt.Errorf("%w: -o %q: want text or json", errUsage, c.Output)
	}
	perNode := c.Replicas
	switch c.Placement {
	case "hashed":
	case "ranges":
		perNode = c.Positions
	default:
		return fmt.Errorf("%w: -placement %q: want hashed or ranges", errUsage, c.Placement)
	}
	if _, ok := consistenthash.HashByName(c.Hash); !ok {
		return fmt.Errorf("%w: -hash %q: want one of %s", errUsage, c.Hash, strings.Join(consistenthash.HashNames(), ", "))
	}
	switch {
	case c.Nodes < 1 || c.Nodes > maxNodes:
		return fmt.Errorf("%w: -nodes %d: want 1 to %d", errUsage, c.Nodes, maxNodes)
	case c.Placement == "ranges" && c.Nodes > maxArcNodes:
		return fmt.Errorf("%w: -nodes %d: want at most %d with ranges (or -placement hashed)", errUsage, c.Nodes, maxArcNodes)
	case c.Keys < 1 || c.Keys > maxKeys:
		return fmt.Errorf("%w: -keys %d: want 1 to %d", errUsage, c.Keys, maxKeys)
	case c.Replicas < 1 || c.Positions < 1:
		return fmt.Errorf("%w: -replicas and -positions must be at least 1", errUsage)
	case (c.Nodes+1)*perNode > maxPoints:
		return fmt.Errorf("%w: %d nodes × %d points per node exceeds %d points", errUsage, c.Nodes+1, perNode, maxPoints)
	case c.Prefix == "":
		return fmt.Errorf("%w: -prefix must not be empty", errUsage)
	}
	if !slices.Contains(nodeNames(c.Prefix, c.Nodes), c.Leave) {
		return fmt.Errorf("%w: -leave %q is not one of the %d nodes", errUsage, c.Leave, c.Nodes)
	}
	return nil
}

func runRing(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parseRing(args, stdout)
	if err != nil {
		return err
	}
	rep, err := measure(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg.Output == "json" {
		return writeJSON(stdout, rep)
	}
	return rep.write(stdout)
}

// ring is what the report needs from consistenthash.Map and Ranges.
type ring interface {
	Get(key string) string
	Shares() map[string]float64
}

func nodeNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// rings builds the ring of cfg.Nodes nodes, the ring after one more node
// joins, and the ring after cfg.Leave leaves.
func rings(cfg ringConfig) (base, grown, shrunk ring, err error) {
	fn, _ := consistenthash.HashByName(cfg.Hash)
	names := nodeNames(cfg.Prefix, cfg.Nodes+1)
	if cfg.Placement == "ranges" {
		r := consistenthash.NewRanges(cfg.Positions, fn)
		for _, n := range names[:cfg.Nodes] {
			if err := r.Join(n); err != nil {
				return nil, nil, nil, err
			}
		}
		g := r.Clone()
		if err := g.Join(names[cfg.Nodes]); err != nil {
			return nil, nil, nil, err
		}
		s := r.Clone()
		s.Leave(cfg.Leave)
		return r, g, s, nil
	}
	m := consistenthash.New(cfg.Replicas, fn)
	if err := m.Add(names[:cfg.Nodes]...); err != nil {
		return nil, nil, nil, err
	}
	g := m.Clone()
	if err := g.Add(names[cfg.Nodes]); err != nil {
		return nil, nil, nil, err
	}
	s := m.Clone()
	s.Remove(cfg.Leave)
	return m, g, s, nil
}

// nodeStat is one node's line of the report.
type nodeStat struct {
	Name       string  `json:"name"`
	Keys       int     `json:"keys"`
	KeyShare   float64 `json:"key_share"`   // fraction of the keys
	SpaceShare float64 `json:"space_share"` // fraction of the hash space (Shares)
}

// move is the key movement of one membership change.
type move struct {
	From   int     `json:"from"`
	To     int     `json:"to"`
	Moved  float64 `json:"moved"`  // fraction of keys whose owner changed
	Ideal  float64 `json:"ideal"`  // the changed node's fair share: 1/max(From, To)
	Modulo float64 `json:"modulo"` // fraction that moves with hash % N instead
}

// report is what "ring" prints.
type report struct {
	Config  ringConfig `json:"config"`
	Nodes   []nodeStat `json:"nodes"`
	MaxMean float64    `json:"max_mean"` // largest node's keys / mean keys
	// SpaceMaxMean is the largest node's share of the hash space times the
	// number of nodes: what MaxMean samples with keys, exact.
	SpaceMaxMean float64 `json:"space_max_mean"`
	CV           float64 `json:"cv"`       // sample standard deviation / mean of keys per node
	IdealCV      float64 `json:"ideal_cv"` // 1/sqrt(replicas), random placement; 0 for ranges
	Join         move    `json:"join"`
	Leave        move    `json:"leave"` // zero with one node: nothing can leave
}

// measure places cfg.Keys keys on the rings and gathers the report.
func measure(ctx context.Context, cfg ringConfig) (report, error) {
	base, grown, shrunk, err := rings(cfg)
	if err != nil {
		return report{}, err
	}
	fn, _ := consistenthash.HashByName(cfg.Hash)
	n := uint32(cfg.Nodes)
	counts := map[string]int{}
	var joinMoved, leaveMoved, modJoin, modLeave int
	buf := make([]byte, 0, 32)
	for i := range cfg.Keys {
		if i%(1<<16) == 0 {
			if err := ctx.Err(); err != nil {
				return report{}, err
			}
		}
		buf = strconv.AppendInt(append(buf[:0], "key-"...), int64(i), 10)
		// The string aliases buf only for this iteration; Get and the
		// Hash do not retain it.
		key := unsafe.String(unsafe.SliceData(buf), len(buf))
		owner := base.Get(key)
		counts[owner]++
		if grown.Get(key) != owner {
			joinMoved++
		}
		if shrunk.Get(key) != owner {
			leaveMoved++
		}
		h := fn(buf)
		if h%n != h%(n+1) {
			modJoin++
		}
		if n > 1 && h%n != h%(n-1) {
			modLeave++
		}
	}

	rep := report{Config: cfg}
	keys := float64(cfg.Keys)
	shares := base.Shares()
	for _, name := range nodeNames(cfg.Prefix, cfg.Nodes) {
		rep.Nodes = append(rep.Nodes, nodeStat{
			Name: name, Keys: counts[name], KeyShare: float64(counts[name]) / keys, SpaceShare: shares[name],
		})
	}
	rep.MaxMean, rep.CV = balance(rep.Nodes)
	for _, n := range rep.Nodes {
		rep.SpaceMaxMean = max(rep.SpaceMaxMean, n.SpaceShare*float64(cfg.Nodes))
	}
	if cfg.Placement == "hashed" {
		rep.IdealCV = 1 / math.Sqrt(float64(cfg.Replicas))
	}
	rep.Join = move{From: cfg.Nodes, To: cfg.Nodes + 1, Moved: float64(joinMoved) / keys,
		Ideal: 1 / float64(cfg.Nodes+1), Modulo: float64(modJoin) / keys}
	if cfg.Nodes > 1 {
		rep.Leave = move{From: cfg.Nodes, To: cfg.Nodes - 1, Moved: float64(leaveMoved) / keys,
			Ideal: 1 / float64(cfg.Nodes), Modulo: float64(modLeave) / keys}
	}
	return rep, nil
}

// balance returns max/mean and the coefficient of variation (sample
// standard deviation over the mean) of the keys per node.
func balance(nodes []nodeStat) (maxMean, cv float64) {
	if len(nodes) == 0 {
		return 0, 0
	}
	var sum, mx float64
	for _, s := range nodes {
		sum += float64(s.Keys)
		mx = max(mx, float64(s.Keys))
	}
	mean := sum / float64(len(nodes))
	if mean == 0 {
		return 0, 0
	}
	if len(nodes) > 1 {
		var ss float64
		for _, s := range nodes {
			d := float64(s.Keys) - mean
			ss += d * d
		}
		cv = math.Sqrt(ss/float64(len(nodes)-1)) / mean
	}
	return mx / mean, cv
}

func (r report) write(w io.Writer) error {
	c := r.Config
	var b strings.Builder
	if c.Placement == "ranges" {
		fmt.Fprintf(&b, "ring: placement=ranges hash=%s nodes=%d positions=%d keys=%d\n\n", c.Hash, c.Nodes, c.Positions, c.Keys)
	} else {
		fmt.Fprintf(&b, "ring: placement=hashed hash=%s nodes=%d replicas=%d keys=%d\n\n", c.Hash, c.Nodes, c.Replicas, c.Keys)
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "node\tkeys\tkey share\tspace share\tkeys/mean\t")
	mean := float64(c.Keys) / float64(c.Nodes)
	for _, s := range r.Nodes {
		fmt.Fprintf(tw, "%s\t%d\t%.4f\t%.4f\t%.3f\t\n", s.Name, s.Keys, s.KeyShare, s.SpaceShare, float64(s.Keys)/mean)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\nbalance: max/mean %.4f (of the hash space %.4f)  cv %.4f", r.MaxMean, r.SpaceMaxMean, r.CV)
	if r.IdealCV > 0 {
		fmt.Fprintf(&b, "  ideal cv %.4f (1/sqrt(%d))  cv/ideal %.3f", r.IdealCV, c.Replicas, r.CV/r.IdealCV)
	}
	b.WriteString("\n")
	writeMove := func(label string, m move) {
		fmt.Fprintf(&b, "%-6s %d -> %d: moved %.4f  ideal %.4f  moved/ideal %.3f  hash%%N moved %.4f\n",
			label, m.From, m.To, m.Moved, m.Ideal, m.Moved/m.Ideal, m.Modulo)
	}
	writeMove("join", r.Join)
	if c.Nodes > 1 {
		writeMove("leave", r.Leave)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
