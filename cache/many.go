package cache

import (
	"context"
	"sync"
)

// Result is one key's answer in GetMany: its value, or the error Get would
// have returned for it.
type Result struct {
	Key   string
	Value Value
	Err   error
}

// maxManyWorkers bounds the keys of one GetMany read at once.
const maxManyWorkers = 32

// GetMany reads keys as Get reads each, and returns their results in the
// order of keys (a key given twice is read once, and answered twice). Keys
// this node owns are served here; the others are asked of their owners,
// concurrently, so that fetches to one owner share requests (the
// transport coalesces concurrent fetches to a peer into batches); a miss
// is loaded once, by its owner, as for Get. Each key is read under ctx; a
// key not read when ctx ends gets ctx's error.
func (g *Group) GetMany(ctx context.Context, keys []string) []Result {
	out := make([]Result, len(keys))
	first := make(map[string]int, len(keys)) // key -> index of its first position
	var todo []int
	for i, k := range keys {
		out[i].Key = k
		if _, dup := first[k]; !dup {
			first[k] = i
			todo = append(todo, i)
		}
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(len(todo), maxManyWorkers) {
		wg.Go(func() {
			for i := range next {
				if err := ctx.Err(); err != nil {
					out[i].Err = err
					continue
				}
				out[i].Value, out[i].Err = g.Get(ctx, keys[i])
			}
		})
	}
	for _, i := range todo {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, k := range keys {
		if j := first[k]; j != i {
			out[i].Value, out[i].Err = out[j].Value, out[j].Err
		}
	}
	return out
}
