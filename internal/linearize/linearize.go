// Package linearize checks histories of reads and writes of cache keys for
// linearizability, key by key, with porcupine (as etcd's robustness tests
// do): the tests' one model of a key read through a read-through cache.
package linearize

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Input is one operation on a key. The Output of a get is the value read,
// as a string: "" for the origin's value.
type Input struct {
	Op    string // "get", "put" or "delete"
	Key   string
	Value string // put: the value written (never "")
	Via   string // the node the client asked, for descriptions
}

// Model is a register per key, read through a cache whose origin has a
// value of its own for every key: it starts as the origin's value, a PUT
// sets it, a DELETE sets it back to the origin's (the next read loads it),
// and a GET returns it. State "" stands for the origin's value.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		return slices.Collect(maps.Values(byKey(history)))
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		switch in := input.(Input); in.Op {
		case "put":
			return true, in.Value
		case "delete":
			return true, ""
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(Input)
		switch in.Op {
		case "put":
			return fmt.Sprintf("%s put(%s, %s)", in.Via, in.Key, in.Value)
		case "delete":
			return fmt.Sprintf("%s delete(%s)", in.Via, in.Key)
		}
		return fmt.Sprintf("%s get(%s) -> %s", in.Via, in.Key, describe(output.(string)))
	},
	DescribeState: func(state any) string { return describe(state.(string)) },
}

func describe(v string) string {
	if v == "" {
		return "origin"
	}
	return v
}

func byKey(ops []porcupine.Operation) map[string][]porcupine.Operation {
	m := map[string][]porcupine.Operation{}
	for _, op := range ops {
		k := op.Input.(Input).Key
		m[k] = append(m[k], op)
	}
	return m
}

// History collects the operations of concurrent clients. It is safe for
// concurrent use.
type History struct {
	mu   sync.Mutex
	ops  []porcupine.Operation
	open []int // indexes of writes whose outcome is unknown
}

// Add records an operation; out is what a get read. A write whose outcome
// is unknown (no answer, or a 5xx that may come after it was applied), known
// false, may have happened at any time after its call: it returns at the
// history's end (Close).
func (h *History) Add(client int, in Input, out string, call, ret time.Time, known bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call.UnixNano(), Return: ret.UnixNano()})
	if !known {
		h.open = append(h.open, len(h.ops)-1)
	}
}

// Close ends the history at end, and returns its operations and how many
// writes had no known outcome.
func (h *History) Close(end time.Time) (ops []porcupine.Operation, open int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, i := range h.open {
		h.ops[i].Return = end.UnixNano()
	}
	return h.ops, len(h.open)
}

// Explain finds a key whose operations are not linearizable and the
// shortest prefix of them, by call time, that is not, and describes the 15
// operations up to its end, in ms from the key's first call, with the write
// of the value the last of them read when the window does not show it.
// about, if not nil, adds lines on the key between from and to (Unix
// nanoseconds; t0 is the key's first call), such as the origin's loads.
func Explain(ops []porcupine.Operation, about func(key string, from, to, t0 int64) string) string {
	m := byKey(ops)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kops := m[k]
		if porcupine.CheckOperationsTimeout(Model, kops, 30*time.Second) != porcupine.Illegal {
			continue
		}
		slices.SortFunc(kops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		lo, hi := 1, len(kops)
		for lo < hi {
			mid := (lo + hi) / 2
			if porcupine.CheckOperationsTimeout(Model, kops[:mid], 30*time.Second) == porcupine.Illegal {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		t0 := kops[0].Call
		line := func(op porcupine.Operation) string {
			return fmt.Sprintf("c%d %8.3fms..%8.3fms %s", op.ClientId, float64(op.Call-t0)/1e6, float64(op.Return-t0)/1e6,
				Model.DescribeOperation(op.Input, op.Output))
		}
		var b strings.Builder
		fmt.Fprintf(&b, "key %s: illegal from its operation %d of %d:\n", k, lo, len(kops))
		window := kops[max(0, lo-15):lo]
		for _, op := range window {
			fmt.Fprintf(&b, "  %s\n", line(op))
		}
		if last := kops[lo-1]; last.Input.(Input).Op == "get" {
			for _, op := range kops {
				if in := op.Input.(Input); in.Op == "put" && in.Value == last.Output.(string) && !slices.Contains(window, op) {
					fmt.Fprintf(&b, "  its write: %s\n", line(op))
				}
			}
		}
		if about != nil {
			b.WriteString(about(k, window[0].Call, window[len(window)-1].Return, t0))
		}
		return b.String()
	}
	return "no single key is illegal"
}
