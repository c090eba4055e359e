//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Tally holds origin loads by key, then by the node that loaded.
type Tally map[string]map[string]int64

// Key returns the loads of one key, cluster-wide.
func (t Tally) Key(k string) int64 {
	var n int64
	for _, c := range t[k] {
		n += c
	}
	return n
}

// Total returns all loads.
func (t Tally) Total() int64 {
	var n int64
	for k := range t {
		n += t.Key(k)
	}
	return n
}

// Who describes which nodes loaded a key: "node1:1 node3:2".
func (t Tally) Who(k string) string {
	var parts []string
	for _, node := range slices.Sorted(maps.Keys(t[k])) {
		parts = append(parts, fmt.Sprintf("%s:%d", node, t[k][node]))
	}
	return strings.Join(parts, " ")
}

// Minus returns the loads in t that are not in earlier, an earlier tally of
// the same window: what happened between the two.
func (t Tally) Minus(earlier Tally) Tally {
	d := Tally{}
	for k, by := range t {
		for node, n := range by {
			d.add(k, node, n-earlier[k][node])
		}
	}
	return d
}

func (t Tally) add(key, node string, n int64) {
	if n == 0 {
		return
	}
	if t[key] == nil {
		t[key] = map[string]int64{}
	}
	t[key][node] += n
}

// Ledger adds up origin loads per key, cluster-wide, over a window that may
// span node restarts. Each node reports its own counts in /debug/origin and
// a new process counts from zero, so the ledger keeps what a node counted
// before it went away (Ending) and each node's counts at the window's start
// (Reset). Loads a node made between its last Ending and its death are lost:
// call Ending right before killing it. Ledger is not safe for concurrent use.
type Ledger struct {
	api     *API
	group   string
	base    map[string]map[string]int64 // node -> key -> count at the window's start
	carried Tally                       // loads by processes that ended in the window
}

// NewLedger returns a ledger for one group whose window starts with every
// node at zero, as in a fresh cluster.
func NewLedger(api *API, group string) *Ledger {
	return &Ledger{api: api, group: group, base: map[string]map[string]int64{}, carried: Tally{}}
}

// Reset starts a new window at the current counts of the given nodes (name
// to base URL). Nodes not given start the window at zero.
func (l *Ledger) Reset(ctx context.Context, nodes map[string]string) error {
	l.base = map[string]map[string]int64{}
	l.carried = Tally{}
	for node, url := range nodes {
		g, err := l.api.Origin(ctx, url, l.group)
		if err != nil {
			return err
		}
		l.base[node] = maps.Clone(g.Keys)
	}
	return nil
}

// Ending keeps what a node loaded in this window so far; call it right before
// the node's process ends. Its next process starts from zero.
func (l *Ledger) Ending(ctx context.Context, node, url string) error {
	g, err := l.api.Origin(ctx, url, l.group)
	if err != nil {
		return err
	}
	l.Ended(node, g)
	return nil
}

// Ended keeps what a node had loaded in this window when it last answered,
// g being its last /debug/origin answer before its process ended. A node
// that stops gracefully keeps serving for a while after it was told to stop
// (it hands its values over first): a caller that polls it until it is gone
// and passes the last answer here misses none of the loads it made then.
func (l *Ledger) Ended(node string, g GroupLoads) {
	for k, n := range g.Keys {
		l.carried.add(k, node, n-l.base[node][k])
	}
	l.base[node] = map[string]int64{}
}

// Loads returns the origin loads in the window: what ended processes carried
// plus what the given running nodes loaded since the window began.
func (l *Ledger) Loads(ctx context.Context, nodes map[string]string) (Tally, error) {
	t := Tally{}
	for k, by := range l.carried {
		for node, n := range by {
			t.add(k, node, n)
		}
	}
	for node, url := range nodes {
		g, err := l.api.Origin(ctx, url, l.group)
		if err != nil {
			return nil, err
		}
		for k, n := range g.Keys {
			t.add(k, node, n-l.base[node][k])
		}
	}
	return t, nil
}
