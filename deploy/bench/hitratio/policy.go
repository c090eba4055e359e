package main

import (
	"container/list"
	"context"
	"fmt"

	arc "github.com/hashicorp/golang-lru/arc/v2"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/maypok86/otter/v2"

	"github.com/ringcache/ringcache/cache"
)

// A policy is one cache replayed against a trace: access reports whether
// key was a hit, and on a miss the key is loaded (stored).
type policy interface {
	access(key uint64) bool
}

// policies are the caches compared, in the table's column order; each
// makes a cache of capacity entries.
var policies = []struct {
	name string
	make func(capacity int) policy
}{
	{"ringcache", func(n int) policy { return newRingcache(n, cache.PolicySLRU) }},
	{"ringcache-lru", func(n int) policy { return newRingcache(n, cache.PolicyLRU) }},
	{"lru", func(n int) policy {
		c, _ := simplelru.NewLRU[uint64, struct{}](n, nil)
		return getAdd{c.Get, func(k uint64) { c.Add(k, struct{}{}) }}
	}},
	{"2q", func(n int) policy {
		c, _ := lru.New2Q[uint64, struct{}](n)
		return getAdd{c.Get, func(k uint64) { c.Add(k, struct{}{}) }}
	}},
	{"arc", func(n int) policy {
		c, _ := arc.NewARC[uint64, struct{}](n)
		return getAdd{c.Get, func(k uint64) { c.Add(k, struct{}{}) }}
	}},
	{"otter", newOtter},
	{"s3fifo", func(n int) policy { return newS3FIFO(n) }},
}

// getAdd is a golang-lru cache, by its methods.
type getAdd struct {
	get func(uint64) (struct{}, bool)
	add func(uint64)
}

func (p getAdd) access(key uint64) bool {
	if _, ok := p.get(key); ok {
		return true
	}
	p.add(key)
	return false
}

// otterCache is otter v2 (W-TinyLFU with an adaptive window), its
// maintenance run on the caller's goroutine so that the replay is
// deterministic.
type otterCache struct {
	c *otter.Cache[uint64, struct{}]
}

func newOtter(n int) policy {
	return otterCache{otter.Must(&otter.Options[uint64, struct{}]{MaximumSize: n, Executor: func(f func()) { f() }})}
}

func (p otterCache) access(key uint64) bool {
	if _, ok := p.c.GetIfPresent(key); ok {
		return true
	}
	p.c.Set(key, struct{}{})
	return false
}

// ringcacheGroup is a single-node cache.Group, as an embedder runs one,
// given the budget the sizing rule gives for capacity entries of the
// replay's keys and values (deploy/README.md, Memory and sizing): a hit is
// a Get that did not load.
type ringcacheGroup struct {
	g     *cache.Group
	loads *int
	key   []byte
}

// valueBytes is the size of every value the replays store.
var valueBytes = 64

func newRingcache(n int, policy string) policy {
	loads := new(int)
	value := make([]byte, valueBytes)
	g, err := cache.New(cache.Config{}).NewGroup(cache.GroupConfig{
		Name:     "replay",
		Policy:   policy,
		MaxBytes: int64(n) * cache.EntryBytes(fmt.Sprintf("%016x", 0), cache.Value{Data: value}),
		Getter: cache.GetterFunc(func(context.Context, string) (cache.Value, error) {
			*loads++
			return cache.Value{Data: value}, nil
		}),
	})
	if err != nil {
		panic(err)
	}
	return &ringcacheGroup{g: g, loads: loads}
}

func (p *ringcacheGroup) access(key uint64) bool {
	before := *p.loads
	p.key = fmt.Appendf(p.key[:0], "%016x", key)
	if _, err := p.g.Get(context.Background(), string(p.key)); err != nil {
		panic(err)
	}
	return *p.loads == before
}

// s3fifo is S3-FIFO (Yang et al., "FIFO queues are all you need for cache
// eviction", SOSP 2023): a small FIFO of a tenth of the capacity that new
// keys enter, a main FIFO for keys read again while in it, and a ghost
// FIFO of keys evicted from the small one, which enter the main one when
// they come back. Reads only bump a counter (0 to 3). Written here: the
// Go S3-FIFO library (scalalang2/golang-fifo) is not served by the module
// proxy this project builds from.
type s3fifo struct {
	capacity, smallCap int
	small, main, ghost *list.List
	where              map[uint64]*list.Element
	ghosts             map[uint64]*list.Element
}

type s3entry struct {
	key   uint64
	freq  int
	small bool
}

func newS3FIFO(n int) *s3fifo {
	return &s3fifo{capacity: n, smallCap: max(1, n/10), small: list.New(), main: list.New(), ghost: list.New(),
		where: make(map[uint64]*list.Element), ghosts: make(map[uint64]*list.Element)}
}

func (c *s3fifo) access(key uint64) bool {
	if e, ok := c.where[key]; ok {
		en := e.Value.(*s3entry)
		en.freq = min(en.freq+1, 3)
		return true
	}
	for c.small.Len()+c.main.Len() >= c.capacity {
		c.evict()
	}
	if g, ok := c.ghosts[key]; ok {
		c.ghost.Remove(g)
		delete(c.ghosts, key)
		c.where[key] = c.main.PushFront(&s3entry{key: key})
	} else {
		c.where[key] = c.small.PushFront(&s3entry{key: key, small: true})
	}
	return false
}

func (c *s3fifo) evict() {
	if c.small.Len() >= c.smallCap || c.main.Len() == 0 {
		c.evictSmall()
	} else {
		c.evictMain()
	}
}

func (c *s3fifo) evictSmall() {
	for c.small.Len() > 0 {
		e := c.small.Back()
		en := c.small.Remove(e).(*s3entry)
		if en.freq > 1 {
			en.freq, en.small = 0, false
			c.where[en.key] = c.main.PushFront(en)
			if c.main.Len() > c.capacity-c.smallCap {
				c.evictMain()
			}
			continue
		}
		delete(c.where, en.key)
		c.ghosts[en.key] = c.ghost.PushFront(en.key)
		if c.ghost.Len() > c.capacity-c.smallCap {
			delete(c.ghosts, c.ghost.Remove(c.ghost.Back()).(uint64))
		}
		return
	}
}

func (c *s3fifo) evictMain() {
	for c.main.Len() > 0 {
		e := c.main.Back()
		en := e.Value.(*s3entry)
		if en.freq > 0 {
			en.freq--
			c.main.MoveToFront(e)
			continue
		}
		c.main.Remove(e)
		delete(c.where, en.key)
		return
	}
}
