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
func explain(ops []porcupine.Operation) string {
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
		for _, op := range kops[max(0, lo-15):lo] {
			out += fmt.Sprintf("  c%d %8.3fms..%8.3fms %s\n", op.ClientId, float64(op.Call-t0)/1e6, float64(op.Return-t0)/1e6, registerModel.DescribeOperation(op.Input, op.Output))
		}
		return out
	}
	return "no single key is illegal"
}
