package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// watchRow is one node's rates over one interval (or the sum over nodes).
type watchRow struct {
	URL        string  `json:"url"`
	Error      string  `json:"error,omitempty"`
	ReqPerS    float64 `json:"req_per_s"`    // Gets from clients
	PeerPerS   float64 `json:"peer_per_s"`   // Gets from peers
	HitRatio   float64 `json:"hit_ratio"`    // (main + hot hits) / Gets, this interval
	LoadsPerS  float64 `json:"loads_per_s"`  // origin loads
	ErrorsPerS float64 `json:"errors_per_s"` // failed Gets
	Items      int64   `json:"items"`
	Bytes      int64   `json:"bytes"`
}

// watchSample is one line of watch's JSON output.
type watchSample struct {
	Time  time.Time  `json:"time"`
	Nodes []watchRow `json:"nodes"`
	Total watchRow   `json:"total"`
}

// scraped is a node's summed counters at a moment.
type scraped struct {
	at    time.Time
	stats groupStats
	ok    bool
}

func runWatch(ctx context.Context, args []string, env environ) error {
	cmd := newCommand("watch", "watch [flags]", env).withOutput().withGroup("", "count only this group").withAll()
	interval := cmd.fs.Duration("interval", time.Second, "time between samples")
	count := cmd.fs.Int("count", 0, "stop after this many samples; 0: at Ctrl-C")
	if _, err := cmd.parse(args, 0, 0); err != nil {
		return err
	}
	switch {
	case *interval < 10*time.Millisecond:
		return fmt.Errorf("%w: watch: -interval %v: want at least 10ms", errUsage, *interval)
	case *count < 0:
		return fmt.Errorf("%w: watch: -count %d: must not be negative", errUsage, *count)
	}
	o := &cmd.opts
	c := newClient(o)
	defer c.close()
	if o.All {
		o.URLs = withMembers(ctx, c, o.URLs)
	}

	sample := func() ([]scraped, []error) {
		out := make([]scraped, len(o.URLs))
		errs := each(o.URLs, func(i int, base string) error {
			mfs, err := c.scrape(ctx, base)
			if err != nil {
				return err
			}
			var sum groupStats
			for _, g := range parseStats(mfs).sortedGroups(o.Group) {
				sum.add(g)
			}
			out[i] = scraped{at: time.Now(), stats: sum, ok: true}
			return nil
		})
		return out, errs
	}
	prev, errs := sample()
	if !anyOK(prev) {
		return failed(ctx, env.Stderr, errs...)
	}
	d := display{w: env.Stdout, terminal: env.terminal(env.Stdout), json: o.json(), every: *interval}
	t := time.NewTicker(*interval)
	defer t.Stop()
	for n := 0; *count == 0 || n < *count; n++ {
		select {
		case <-ctx.Done():
			return nil // Ctrl-C is how a watch ends
		case <-t.C:
		}
		cur, errs := sample()
		if ctx.Err() != nil {
			return nil
		}
		s := watchSample{Time: time.Now()}
		for i, base := range o.URLs {
			row := watchRow{URL: base}
			switch {
			case errs[i] != nil:
				row.Error = errs[i].Error()
			case !prev[i].ok:
				row.Error = "answered again; rates from the next sample"
			default:
				row = rates(base, prev[i], cur[i])
				s.Total.add(row)
			}
			if cur[i].ok {
				prev[i] = cur[i]
			}
			s.Nodes = append(s.Nodes, row)
		}
		s.Total.URL = "all nodes"
		s.Total.HitRatio = totalHitRatio(s.Nodes)
		if err := d.show(s); err != nil {
			return err
		}
	}
	return nil
}

func anyOK(s []scraped) bool {
	for _, x := range s {
		if x.ok {
			return true
		}
	}
	return false
}

// rates turns two scrapes of a node into per-second rates. A counter that
// went down means the node restarted: its counters start again from zero.
func rates(base string, a, b scraped) watchRow {
	d := b.stats.sub(a.stats)
	if d.Gets < 0 || d.LocalLoads < 0 || d.Errors < 0 {
		d = b.stats
	}
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 {
		secs = 1e-9
	}
	return watchRow{
		URL:        base,
		ReqPerS:    float64(d.ClientGets()) / secs,
		PeerPerS:   float64(d.PeerGets) / secs,
		HitRatio:   ratio(d.MainHits+d.HotHits, d.Gets),
		LoadsPerS:  float64(d.LocalLoads) / secs,
		ErrorsPerS: float64(d.Errors) / secs,
		Items:      b.stats.MainItems + b.stats.HotItems,
		Bytes:      b.stats.MainBytes + b.stats.HotBytes,
	}
}

func (r *watchRow) add(t watchRow) {
	r.ReqPerS += t.ReqPerS
	r.PeerPerS += t.PeerPerS
	r.LoadsPerS += t.LoadsPerS
	r.ErrorsPerS += t.ErrorsPerS
	r.Items += t.Items
	r.Bytes += t.Bytes
}

// totalHitRatio weighs each node's ratio by its Gets per second.
func totalHitRatio(rows []watchRow) float64 {
	var hits, gets float64
	for _, r := range rows {
		if r.Error == "" {
			g := r.ReqPerS + r.PeerPerS
			hits += r.HitRatio * g
			gets += g
		}
	}
	if gets == 0 {
		return 0
	}
	return hits / gets
}

// display writes watch's samples: a table redrawn in place on a terminal,
// plain timestamped lines otherwise, JSON lines with -o json. Columns have
// fixed widths, so that plain lines from different samples line up.
type display struct {
	w        io.Writer
	terminal bool
	json     bool
	every    time.Duration
	width    int  // of the NODE column
	lines    int  // lines of the last frame, to move back over
	header   bool // plain lines: the header was written
}

func (d *display) show(s watchSample) error {
	if d.json {
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		_, err = d.w.Write(append(b, '\n'))
		return err
	}
	rows := s.Nodes
	if len(rows) > 1 {
		rows = append(slices.Clone(rows), s.Total)
	}
	for _, r := range rows {
		d.width = max(d.width, len(r.URL))
	}
	var b strings.Builder
	line := func(prefix string, cols ...string) {
		fmt.Fprintf(&b, "%s%-*s", prefix, d.width, cols[0])
		for _, c := range cols[1:] {
			fmt.Fprintf(&b, " %10s", c)
		}
		b.WriteString("\n")
	}
	head := []string{"NODE", "REQ/S", "PEER/S", "HIT", "LOADS/S", "ERRORS/S", "ITEMS", "BYTES"}
	row := func(prefix string, r watchRow) {
		if r.Error != "" {
			fmt.Fprintf(&b, "%s%-*s  %s\n", prefix, d.width, r.URL, r.Error)
			return
		}
		hit := "-" // no gets: no ratio
		if r.ReqPerS+r.PeerPerS > 0 {
			hit = fmt.Sprintf("%.1f%%", 100*r.HitRatio)
		}
		line(prefix, r.URL, fmt.Sprintf("%.1f", r.ReqPerS), fmt.Sprintf("%.1f", r.PeerPerS), hit, fmt.Sprintf("%.1f", r.LoadsPerS),
			fmt.Sprintf("%.1f", r.ErrorsPerS), strconv.FormatInt(r.Items, 10), bytesIEC(r.Bytes))
	}
	if d.terminal {
		fmt.Fprintf(&b, "ringcache watch  %s  every %s  (Ctrl-C stops)\n\n", s.Time.Format("15:04:05"), d.every)
		line("", head...)
		for _, r := range rows {
			row("", r)
		}
		frame := b.String()
		var out strings.Builder
		if d.lines > 0 {
			// Back to the top of the last frame and clear from there: the
			// table is redrawn in place.
			fmt.Fprintf(&out, "\x1b[%dA\x1b[J", d.lines)
		}
		out.WriteString(frame)
		d.lines = strings.Count(frame, "\n")
		return writeOut(d.w, out.String())
	}
	// Plain lines: a header once, then one line per node per sample, each
	// with its time, so that a log or a grep reads them on their own.
	if !d.header {
		line("TIME     ", head...)
		d.header = true
	}
	stamp := s.Time.Format("15:04:05") + " "
	for _, r := range rows {
		row(stamp, r)
	}
	return writeOut(d.w, b.String())
}
