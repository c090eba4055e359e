package main

import (
	"fmt"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// explain finds, in an illegal history, a key whose operations are not
// linearizable and the shortest prefix (by call time) that is not, and
// describes the operations around its end.
func explain(ops []porcupine.Operation, o *countingOrigin) string {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range ops {
		k := op.Input.(regInput).key
		byKey[k] = append(byKey[k], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kops := byKey[k]
		if porcupine.CheckOperationsTimeout(registerModel, kops, 30*time.Second) != porcupine.Illegal {
			continue
		}
		sort.Slice(kops, func(i, j int) bool { return kops[i].Call < kops[j].Call })
		lo, hi := 1, len(kops)
		for lo < hi {
			mid := (lo + hi) / 2
			if porcupine.CheckOperationsTimeout(registerModel, kops[:mid], 30*time.Second) == porcupine.Illegal {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		t0 := kops[0].Call
		out := fmt.Sprintf("key %s: illegal from its operation %d of %d:\n", k, lo, len(kops))
		window := kops[max(0, lo-15):lo]
		for _, op := range window {
			out += fmt.Sprintf("  c%d %8.3fms..%8.3fms %s\n", op.ClientId, float64(op.Call-t0)/1e6, float64(op.Return-t0)/1e6, registerModel.DescribeOperation(op.Input, op.Output))
		}
		// The write of the value the last read returned, if the window
		// does not show it: a read of an older write.
		if last := kops[lo-1]; last.Input.(regInput).op == "get" {
			for _, op := range kops {
				if in := op.Input.(regInput); in.op == "put" && in.value == last.Output.(regOutput).value {
					out += fmt.Sprintf("  its write: c%d %8.3fms..%8.3fms %s\n", op.ClientId, float64(op.Call-t0)/1e6, float64(op.Return-t0)/1e6, registerModel.DescribeOperation(op.Input, op.Output))
				}
			}
		}
		o.mu.Lock()
		for _, l := range o.log {
			if at := l.at.UnixNano(); l.key == k && at >= window[0].Call && at <= window[len(window)-1].Return {
				out += fmt.Sprintf("  origin load by %s at %8.3fms\n", l.node, float64(at-t0)/1e6)
			}
		}
		o.mu.Unlock()
		return out
	}
	return "no single key is illegal"
}
