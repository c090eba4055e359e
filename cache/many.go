package cache

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ringcache/ringcache/cache/internal/store"
)

// Result is one key's answer in GetMany: its value, or the error Get would
// have returned for it.
type Result struct {
	Key   string
	Value Value
	Err   error
}

// A ManyFetcher is a Peer that answers many of a group's keys in one
// request (the transport's peers are). GetMany asks each owner that is one
// for all of its keys at once; it asks other peers key by key.
type ManyFetcher interface {
	// FetchMany asks the peer for keys, all owned by it, in one request.
	// The peer serves each from its caches or loads it, as for Fetch, and
	// never forwards the request. It returns one Fetched a key, in the
	// order of keys, with the error that cut the request short if one
	// did: the keys answered before it are answered, and a key the peer
	// did not answer (Done false) is then fetched alone. Without a
	// Fetched for every key, every key is fetched alone.
	FetchMany(ctx context.Context, group string, keys []string) ([]Fetched, error)
}

// Fetched is one key's answer in FetchMany.
type Fetched struct {
	Value Value
	// Err is a final answer, as Fetch's: ErrNotFound, ErrLoad or
	// ErrOverloaded.
	Err error
	// Done is false when the peer left the key to be fetched alone.
	Done bool
	// Leased is true when the value came with the contact lease the
	// request renewed (it was in the peer's caches when the peer granted
	// it), so that a copy of it may be kept as a fetched one would be. A
	// value the peer loaded after its answer began is served, not kept.
	Leased bool
}

// maxManyWorkers bounds the keys of one GetMany that one reader reads as
// Get does at once: the keys given, and those each owner left.
const maxManyWorkers = 32

// GetMany reads keys as Get reads each, and returns their results in the
// order of keys (a key given twice is read once, and answered twice).
// Keys this node owns are served here, and copies it holds of the others;
// the rest are asked of their owners, one request per owner (a ManyFetcher;
// others are asked key by key, concurrently). A miss is loaded once, by
// its owner, as for Get; a key an owner could not answer is read as Get
// reads it (its owner again, or the origin here when the owner is down).
// Each key is read under ctx; a key not read when ctx ends gets ctx's
// error.
func (g *Group) GetMany(ctx context.Context, keys []string) []Result {
	out := make([]Result, len(keys))
	first := make(map[string]int, len(keys)) // key -> index of its first position
	var single []int                         // read as Get reads
	byOwner := make(map[ManyFetcher][]int)
	for i, k := range keys {
		out[i].Key = k
		if _, dup := first[k]; dup {
			continue
		}
		first[k] = i
		owner, remote := g.pick(k)
		mf, ok := owner.(ManyFetcher)
		if !remote || !ok || k == "" {
			single = append(single, i)
			continue
		}
		// A copy held here answers as Get's would; a stale one is left
		// to Get, which may serve it if the owner fails.
		var clk store.Clock
		var e store.Entry
		if g.look(k, true, &clk, &e) {
			v, err, done := g.answer(k, &e, true, &clk)
			if done {
				g.st.gets.Add(1)
				g.count(err)
				out[i].Value, out[i].Err = v, err
			} else {
				single = append(single, i)
			}
			continue
		}
		byOwner[mf] = append(byOwner[mf], i)
	}
	// The keys read as Get reads go at once, beside the owners' requests;
	// the keys an owner did not answer follow its answer.
	var wg sync.WaitGroup
	wg.Go(func() { g.getEach(ctx, keys, single, out) })
	for mf, idx := range byOwner {
		wg.Go(func() { g.getEach(ctx, keys, g.fetchMany(ctx, mf, keys, idx, out), out) })
	}
	wg.Wait()
	for i, k := range keys {
		if j := first[k]; j != i {
			out[i].Value, out[i].Err = out[j].Value, out[j].Err
		}
	}
	return out
}

// getEach reads keys[i] for every i in idx as Get reads it, into out[i],
// at most maxManyWorkers at once.
func (g *Group) getEach(ctx context.Context, keys []string, idx []int, out []Result) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(len(idx), maxManyWorkers) {
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
	for _, i := range idx {
		next <- i
	}
	close(next)
	wg.Wait()
}

// fetchMany asks mf, the owner of keys[i] for every i in idx, for them in
// one request and fills out. It returns the indexes it could not answer,
// to be read as Get reads. What it keeps of a value is what fetchPeer
// keeps: a copy, if the hot cache's rule admits it and it came with the
// request's lease.
func (g *Group) fetchMany(ctx context.Context, mf ManyFetcher, keys []string, idx []int, out []Result) (rest []int) {
	ask := make([]string, len(idx))
	guards := make([]guard, len(idx))
	keep := make([]bool, len(idx))
	for j, i := range idx {
		ask[j] = keys[i]
		if g.freq != nil {
			g.freq.add(keys[i])
		}
		guards[j], keep[j] = g.takeGuard(g.loadGuard(keys[i]))
	}
	// As a fetch's: the owner's loads may take up to LoadTimeout.
	fctx, cancel := context.WithTimeout(ctx, g.cfg.LoadTimeout+time.Second)
	// The keys it did not answer are read as Get reads them, which counts
	// what fails then.
	res, _ := mf.FetchMany(fctx, g.cfg.Name, ask)
	cancel()
	if len(res) != len(idx) {
		return idx
	}
	for j, i := range idx {
		r := res[j]
		switch {
		case !r.Done:
			rest = append(rest, i)
			continue
		case r.Err != nil:
			if !errors.Is(r.Err, ErrNotFound) && !errors.Is(r.Err, ErrLoad) && !errors.Is(r.Err, ErrOverloaded) {
				rest = append(rest, i) // not an answer FetchMany may give
				continue
			}
			g.st.gets.Add(1)
			g.count(r.Err)
			out[i].Err = r.Err
		default:
			g.st.gets.Add(1)
			g.st.peerLoads.Add(1)
			if keep[j] && r.Leased {
				g.keepHot(keys[i], r.Value, mf.(Peer), guards[j])
			}
			out[i].Value = r.Value
		}
	}
	return rest
}
