package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
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
