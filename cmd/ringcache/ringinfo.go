package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// ringInfo is the daemon's GET /debug/ring answer.
type ringInfo struct {
	Self    string             `json:"self"`
	NodeID  string             `json:"node_id"`
	Version string             `json:"version"`
	Members []string           `json:"members"`
	Shares  map[string]float64 `json:"shares"`
	Owner   string             `json:"owner,omitempty"`
	Ready   bool               `json:"ready"`
	Static  bool               `json:"static,omitempty"`
	Etcd    *struct {
		Connected   bool      `json:"connected"`
		Registered  bool      `json:"registered"`
		LastContact time.Time `json:"last_contact"`
		LastChange  time.Time `json:"last_change"`
		Pending     []string  `json:"pending"`
	} `json:"etcd,omitempty"`
}

// view is one node's answer, or why there was none.
type view struct {
	URL  string
	Info ringInfo
	Err  error
}

// views asks every node for its ring (and key's owner when key is not nil).
func views(ctx context.Context, c *client, urls []string, key *string) []view {
	path := "/debug/ring"
	if key != nil {
		path += "?key=" + url.QueryEscape(*key)
	}
	out := make([]view, len(urls))
	errs := each(urls, func(i int, base string) error {
		out[i].URL = base
		return c.getJSON(ctx, base, path, &out[i].Info)
	})
	for i, err := range errs {
		out[i].Err = err
	}
	return out
}

// withMembers returns urls and, after them, every member of the rings of
// the nodes in urls that none of those nodes is (by peer URL): with -all,
// one URL is enough to see a whole cluster whose nodes serve the public
// API on their peer URLs.
func withMembers(ctx context.Context, c *client, urls []string) []string {
	vs := answered(views(ctx, c, urls, nil))
	seen := map[string]bool{}
	for _, u := range urls {
		seen[u] = true
	}
	for _, v := range vs {
		seen[v.Info.Self] = true
	}
	out := slices.Clone(urls)
	for _, v := range vs {
		for _, m := range v.Info.Members {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	return out
}

// answered returns the views that have an answer.
func answered(vs []view) []view {
	return slices.DeleteFunc(slices.Clone(vs), func(v view) bool { return v.Err != nil })
}

// failed reports every node without an answer on stderr, and returns an
// error if there was one: the other nodes' answers are printed, but the
// command did not get what it asked for.
func failed(ctx context.Context, stderr io.Writer, errs ...error) error {
	var n int
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if first == nil {
			first = err
		} else {
			fmt.Fprintln(stderr, "ringcache:", err)
		}
		n++
	}
	switch n {
	case 0:
		return nil
	case 1:
		return first
	}
	return fmt.Errorf("%v (and %d more nodes failed)", first, n-1)
}

// majority returns the value most views agree on (ties: the first seen)
// and whether every view agrees.
func majority(vs []view, of func(view) string) (string, bool) {
	var order []string
	counts := map[string]int{}
	for _, v := range vs {
		s := of(v)
		if counts[s] == 0 {
			order = append(order, s)
		}
		counts[s]++
	}
	best, n := "", 0
	for _, s := range order {
		if counts[s] > n {
			best, n = s, counts[s]
		}
	}
	return best, len(order) <= 1
}

// publicURL returns the URL given for the node whose peer URL is peer, and
// its ID, when the user asked that node too.
func publicURL(vs []view, peer string) (base, id string) {
	for _, v := range vs {
		if v.Err == nil && v.Info.Self == peer {
			return v.URL, v.Info.NodeID
		}
	}
	return "", ""
}

// ownerResult is owner's JSON output.
type ownerResult struct {
	Key     string      `json:"key"`
	Owner   string      `json:"owner"`             // the owner's peer URL
	NodeID  string      `json:"node_id,omitempty"` // when a queried node is the owner
	URL     string      `json:"url,omitempty"`     // its public URL, likewise
	Share   float64     `json:"share"`             // its fraction of the hash space
	Members int         `json:"members"`           // in the ring of the majority
	Version string      `json:"version"`           // that ring's version
	Agree   bool        `json:"agree"`             // every node that answered names the same owner
	Views   []ownerView `json:"views"`
}

type ownerView struct {
	URL     string `json:"url"`
	Owner   string `json:"owner,omitempty"`
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
}

func runOwner(ctx context.Context, args []string, env environ) error {
	cmd := newCommand("owner", "owner [flags] KEY", env).withOutput()
	pos, err := cmd.parse(args, 1, 1)
	if err != nil {
		return err
	}
	o, key := &cmd.opts, pos[0]
	c := newClient(o)
	defer c.close()
	vs := views(ctx, c, o.URLs, &key)
	ok := answered(vs)
	var errs []error
	for _, v := range vs {
		errs = append(errs, v.Err)
	}
	if len(ok) == 0 {
		return failed(ctx, env.Stderr, errs...)
	}
	owner, agree := majority(ok, func(v view) string { return v.Info.Owner })
	var ref ringInfo
	for _, v := range ok {
		if v.Info.Owner == owner {
			ref = v.Info
			break
		}
	}
	res := ownerResult{Key: key, Owner: owner, Share: ref.Shares[owner], Members: len(ref.Members),
		Version: ref.Version, Agree: agree}
	res.URL, res.NodeID = publicURL(vs, owner)
	for _, v := range vs {
		ov := ownerView{URL: v.URL, Owner: v.Info.Owner, Version: v.Info.Version}
		if v.Err != nil {
			ov = ownerView{URL: v.URL, Error: v.Err.Error()}
		}
		res.Views = append(res.Views, ov)
	}
	return printResult(ctx, o, env, res, res.text, errs)
}

func (r ownerResult) text() string {
	var b strings.Builder
	who := r.Owner
	if r.NodeID != "" {
		who += " (" + r.NodeID + ")"
	}
	fmt.Fprintf(&b, "key %q: owner %s\n", r.Key, who)
	fmt.Fprintf(&b, "share: %.1f%% of the ring (%d members, ring %s)\n", 100*r.Share, r.Members, r.Version)
	if r.Agree {
		var n int
		for _, v := range r.Views {
			if v.Error == "" {
				n++
			}
		}
		fmt.Fprintf(&b, "agreed by %d of %d nodes asked\n", n, len(r.Views))
		return b.String()
	}
	b.WriteString("the nodes disagree (a membership change in flight?):\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, v := range r.Views {
		if v.Error == "" {
			fmt.Fprintf(tw, "  %s\towner %s\tring %s\n", v.URL, v.Owner, v.Version)
		}
	}
	tw.Flush()
	return b.String()
}

// membersResult is members' JSON output.
type membersResult struct {
	Nodes   []memberNode `json:"nodes"`   // the nodes asked, in -url order
	Members []member     `json:"members"` // the ring of the majority
	Version string       `json:"version"`
	Agree   bool         `json:"agree"` // every node that answered has that ring
}

type memberNode struct {
	URL         string     `json:"url"`
	Error       string     `json:"error,omitempty"`
	NodeID      string     `json:"node_id,omitempty"`
	Self        string     `json:"self,omitempty"` // its peer URL
	Ready       bool       `json:"ready"`
	Version     string     `json:"version,omitempty"`
	Members     int        `json:"members"`
	Static      bool       `json:"static,omitempty"`
	Connected   *bool      `json:"etcd_connected,omitempty"`
	Registered  *bool      `json:"etcd_registered,omitempty"`
	LastContact *time.Time `json:"etcd_last_contact,omitempty"`
	Pending     []string   `json:"pending,omitempty"` // members in their hold-down
}

type member struct {
	Peer   string  `json:"peer"`
	Share  float64 `json:"share"`
	NodeID string  `json:"node_id,omitempty"`
	URL    string  `json:"url,omitempty"`
}

func runMembers(ctx context.Context, args []string, env environ) error {
	cmd := newCommand("members", "members [flags]", env).withOutput().withAll()
	if _, err := cmd.parse(args, 0, 0); err != nil {
		return err
	}
	o := &cmd.opts
	c := newClient(o)
	defer c.close()
	if o.All {
		o.URLs = withMembers(ctx, c, o.URLs)
	}
	vs := views(ctx, c, o.URLs, nil)
	ok := answered(vs)
	var errs []error
	for _, v := range vs {
		errs = append(errs, v.Err)
	}
	if len(ok) == 0 {
		return failed(ctx, env.Stderr, errs...)
	}
	var res membersResult
	res.Version, res.Agree = majority(ok, func(v view) string { return v.Info.Version })
	var ref ringInfo
	for _, v := range vs {
		n := memberNode{URL: v.URL}
		if v.Err != nil {
			n.Error = v.Err.Error()
			res.Nodes = append(res.Nodes, n)
			continue
		}
		in := v.Info
		if in.Version == res.Version && ref.Version == "" {
			ref = in
		}
		n.NodeID, n.Self, n.Ready, n.Version, n.Members, n.Static = in.NodeID, in.Self, in.Ready, in.Version, len(in.Members), in.Static
		if in.Etcd != nil {
			n.Connected, n.Registered, n.LastContact, n.Pending = &in.Etcd.Connected, &in.Etcd.Registered, &in.Etcd.LastContact, in.Etcd.Pending
		}
		res.Nodes = append(res.Nodes, n)
	}
	for _, m := range ref.Members {
		base, id := publicURL(vs, m)
		res.Members = append(res.Members, member{Peer: m, Share: ref.Shares[m], NodeID: id, URL: base})
	}
	return printResult(ctx, o, env, res, res.text, errs)
}

func (r membersResult) text() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tID\tREADY\tRING\tMEMBERS\tETCD")
	for _, n := range r.Nodes {
		if n.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\n", n.URL, "no answer (see the error)")
			continue
		}
		etcd := "static"
		if n.Connected != nil {
			etcd = "connected"
			if !*n.Connected {
				etcd = "disconnected"
			}
			if !*n.Registered {
				etcd += ", not registered"
			}
			if len(n.Pending) > 0 {
				etcd += fmt.Sprintf(", %d in hold-down", len(n.Pending))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", n.URL, n.NodeID, yesNo(n.Ready), n.Version, n.Members, etcd)
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nring %s: %d members", r.Version, len(r.Members))
	if !r.Agree {
		b.WriteString(" (the nodes disagree: a membership change in flight?)")
	}
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tSHARE\tID")
	for _, m := range r.Members {
		id := m.NodeID
		if id == "" {
			id = "-"
		}
		fmt.Fprintf(tw, "%s\t%.1f%%\t%s\n", m.Peer, 100*m.Share, id)
	}
	tw.Flush()
	return b.String()
}
