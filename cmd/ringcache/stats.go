package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	dto "github.com/prometheus/client_model/go"
)

// statsResult is stats' JSON output.
type statsResult struct {
	Nodes []statsNode `json:"nodes"`
	// Total sums each group over the nodes that answered.
	Total []groupStats `json:"total"`
}

type statsNode struct {
	URL     string       `json:"url"`
	Error   string       `json:"error,omitempty"`
	Members int          `json:"members"`
	Groups  []groupStats `json:"groups"`
}

func runStats(ctx context.Context, args []string, env environ) error {
	cmd := newCommand("stats", "stats [flags]", env).withOutput().withGroup("", "show only this group").withAll()
	if _, err := cmd.parse(args, 0, 0); err != nil {
		return err
	}
	o := &cmd.opts
	c := newClient(o)
	defer c.close()
	if o.All {
		o.URLs = withMembers(ctx, c, o.URLs)
	}
	stats := make([]nodeStats, len(o.URLs))
	errs := each(o.URLs, func(i int, base string) error {
		mfs, err := c.scrape(ctx, base)
		stats[i] = parseStats(mfs)
		return err
	})
	res := statsResult{}
	totals := map[string]groupStats{}
	answers := 0
	for i, base := range o.URLs {
		n := statsNode{URL: base, Groups: []groupStats{}}
		if errs[i] != nil {
			n.Error = errs[i].Error()
			res.Nodes = append(res.Nodes, n)
			continue
		}
		answers++
		n.Members = stats[i].Members
		n.Groups = stats[i].sortedGroups(o.Group)
		for _, g := range n.Groups {
			t := totals[g.Group]
			t.Group = g.Group
			t.add(g)
			totals[g.Group] = t
		}
		res.Nodes = append(res.Nodes, n)
	}
	if answers == 0 {
		return failed(ctx, env.Stderr, errs...)
	}
	if o.Group != "" && len(totals) == 0 {
		return fmt.Errorf("no node has a group %q", o.Group)
	}
	res.Total = []groupStats{}
	for _, name := range slices.Sorted(maps.Keys(totals)) {
		res.Total = append(res.Total, totals[name])
	}
	return printResult(ctx, o, env, res, func() string { return res.text(len(o.URLs) > 1) }, errs)
}

func (r statsResult) text(withTotal bool) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tGROUP\tGETS\tFROM PEERS\tHIT MAIN\tHIT HOT\tLOADS local/peer/dedup\tNOT FOUND\tERRORS\tBYTES / BUDGET\tITEMS\tEVICTIONS")
	row := func(node string, g groupStats) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%d/%d/%d\t%d\t%d\t%s / %s\t%d\t%d\n",
			node, g.Group, g.Gets, g.PeerGets, percent(g.MainHits, g.Gets), percent(g.HotHits, g.Gets),
			g.LocalLoads, g.PeerLoads, g.DedupLoads, g.NotFound, g.Errors,
			bytesIEC(g.MainBytes+g.HotBytes), bytesIEC(g.MaxBytes), g.MainItems+g.HotItems, g.Evictions)
	}
	for _, n := range r.Nodes {
		if n.Error != "" {
			// Every cell, so that the columns stay aligned across the row.
			fmt.Fprintf(tw, "%s\t(no answer)%s\n", n.URL, strings.Repeat("\t-", 10))
			continue
		}
		for _, g := range n.Groups {
			row(n.URL, g)
		}
	}
	if withTotal {
		for _, g := range r.Total {
			row("all nodes", g)
		}
	}
	tw.Flush()
	return b.String()
}

// groupStats is one group's counters on one node (or summed over nodes),
// read from the daemon's ringcache_* metrics.
type groupStats struct {
	Group      string `json:"group"`
	Gets       int64  `json:"gets"`      // every Get, peers' included
	PeerGets   int64  `json:"peer_gets"` // Gets that came from peers
	MainHits   int64  `json:"main_hits"`
	HotHits    int64  `json:"hot_hits"`
	LocalLoads int64  `json:"local_loads"` // origin loads on this node
	PeerLoads  int64  `json:"peer_loads"`  // fetched from the owner
	DedupLoads int64  `json:"dedup_loads"` // shared another caller's load
	NotFound   int64  `json:"not_found"`
	Errors     int64  `json:"errors"`      // failed Gets
	PeerErrors int64  `json:"peer_errors"` // failed fetches from owners
	Evictions  int64  `json:"evictions"`
	MainBytes  int64  `json:"main_bytes"`
	HotBytes   int64  `json:"hot_bytes"`
	MaxBytes   int64  `json:"max_bytes"`
	MainItems  int64  `json:"main_items"`
	HotItems   int64  `json:"hot_items"`
}

// ClientGets are the Gets that came from clients, not peers.
func (s groupStats) ClientGets() int64 { return s.Gets - s.PeerGets }

func ratio(n, d int64) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// add sums t into s (gauges too: over nodes, bytes and budgets add up).
func (s *groupStats) add(t groupStats) {
	s.Gets += t.Gets
	s.PeerGets += t.PeerGets
	s.MainHits += t.MainHits
	s.HotHits += t.HotHits
	s.LocalLoads += t.LocalLoads
	s.PeerLoads += t.PeerLoads
	s.DedupLoads += t.DedupLoads
	s.NotFound += t.NotFound
	s.Errors += t.Errors
	s.PeerErrors += t.PeerErrors
	s.Evictions += t.Evictions
	s.MainBytes += t.MainBytes
	s.HotBytes += t.HotBytes
	s.MaxBytes += t.MaxBytes
	s.MainItems += t.MainItems
	s.HotItems += t.HotItems
}

// sub returns the counters of s less those of an earlier t (the gauges are
// s's).
func (s groupStats) sub(t groupStats) groupStats {
	d := s
	d.Gets -= t.Gets
	d.PeerGets -= t.PeerGets
	d.MainHits -= t.MainHits
	d.HotHits -= t.HotHits
	d.LocalLoads -= t.LocalLoads
	d.PeerLoads -= t.PeerLoads
	d.DedupLoads -= t.DedupLoads
	d.NotFound -= t.NotFound
	d.Errors -= t.Errors
	d.PeerErrors -= t.PeerErrors
	d.Evictions -= t.Evictions
	return d
}

// nodeStats is what one node's /metrics says.
type nodeStats struct {
	Members int
	Groups  map[string]groupStats
}

// sortedGroups returns the groups by name, only group if it is not "".
func (n nodeStats) sortedGroups(group string) []groupStats {
	var out []groupStats
	for _, name := range slices.Sorted(maps.Keys(n.Groups)) {
		if group == "" || name == group {
			out = append(out, n.Groups[name])
		}
	}
	return out
}

// parseStats reads the ringcache_* families of a scrape.
func parseStats(mfs map[string]*dto.MetricFamily) nodeStats {
	ns := nodeStats{Groups: map[string]groupStats{}}
	if mf, ok := mfs["ringcache_members"]; ok && len(mf.GetMetric()) > 0 {
		ns.Members = int(mf.GetMetric()[0].GetGauge().GetValue())
	}
	// field picks the counter a sample belongs to from its labels.
	fields := map[string]func(s *groupStats, labels map[string]string) *int64{
		"ringcache_gets_total":      func(s *groupStats, _ map[string]string) *int64 { return &s.Gets },
		"ringcache_peer_gets_total": func(s *groupStats, _ map[string]string) *int64 { return &s.PeerGets },
		"ringcache_hits_total": func(s *groupStats, l map[string]string) *int64 {
			return pick(l["cache"], map[string]*int64{"main": &s.MainHits, "hot": &s.HotHits})
		},
		"ringcache_loads_total": func(s *groupStats, l map[string]string) *int64 {
			return pick(l["source"], map[string]*int64{"local": &s.LocalLoads, "peer": &s.PeerLoads, "dedup": &s.DedupLoads})
		},
		"ringcache_not_found_total": func(s *groupStats, _ map[string]string) *int64 { return &s.NotFound },
		"ringcache_errors_total": func(s *groupStats, l map[string]string) *int64 {
			return pick(l["kind"], map[string]*int64{"get": &s.Errors, "peer": &s.PeerErrors})
		},
		"ringcache_evictions_total": func(s *groupStats, _ map[string]string) *int64 { return &s.Evictions },
		"ringcache_bytes": func(s *groupStats, l map[string]string) *int64 {
			return pick(l["cache"], map[string]*int64{"main": &s.MainBytes, "hot": &s.HotBytes})
		},
		"ringcache_items": func(s *groupStats, l map[string]string) *int64 {
			return pick(l["cache"], map[string]*int64{"main": &s.MainItems, "hot": &s.HotItems})
		},
		"ringcache_max_bytes": func(s *groupStats, _ map[string]string) *int64 { return &s.MaxBytes },
	}
	for name, field := range fields {
		mf, ok := mfs[name]
		if !ok {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			group := labels["group"]
			s := ns.Groups[group]
			s.Group = group
			if p := field(&s, labels); p != nil {
				*p += int64(m.GetCounter().GetValue() + m.GetGauge().GetValue())
			}
			ns.Groups[group] = s
		}
	}
	return ns
}

func pick(label string, by map[string]*int64) *int64 { return by[label] }
