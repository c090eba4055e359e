package cache

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringcache/ringcache/cache/internal/store"
)

// TestHotKeys checks the order HotKeys reports: by the sketch's estimate,
// then most recently used first, with main-cache keys left out.
func TestHotKeys(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	// Node 1 owns every key but the "own" ones; node 0's copies go hot on
	// their first miss and the counts never halve during the test.
	owner := func(key string) int {
		if strings.HasPrefix(key, "own") {
			return 0
		}
		return 1
	}
	c := newCluster(t, 2, owner, GroupConfig{MaxBytes: 1 << 20, HotAfter: 1, HotWindow: time.Hour}, o.getter)
	g := c.groups[0]
	for _, k := range []string{"a", "b", "c", "own1", "d", "e"} {
		mustGet(t, g, k, "v:"+k)
	}
	for range 3 {
		g.freq.add("b")
	}
	g.freq.add("c")
	mustGet(t, g, "a", "v:a") // a hot hit: it moves nothing (slru.go)

	got := g.HotKeys(10)
	var keys []string
	var ests []int
	for _, h := range got {
		keys = append(keys, h.Key)
		ests = append(ests, h.Estimate)
		e, ok := g.hot.Get(h.Key, new(store.Clock))
		if !ok || h.Bytes != e.Size {
			t.Errorf("%s: Bytes %d, entry %v %d", h.Key, h.Bytes, ok, e.Size)
		}
	}
	if want := []string{"b", "c", "e", "d", "a"}; !slices.Equal(keys, want) {
		t.Errorf("HotKeys = %v (estimates %v), want %v", keys, ests, want)
	}
	if want := []int{4, 2, 1, 1, 1}; !slices.Equal(ests, want) {
		t.Errorf("estimates = %v, want %v", ests, want)
	}
	if top := g.HotKeys(2); len(top) != 2 || top[0].Key != "b" || top[1].Key != "c" {
		t.Errorf("HotKeys(2) = %+v", top)
	}
	if g.HotKeys(0) != nil {
		t.Error("HotKeys(0) is not nil")
	}
	// The owner keeps the keys in its main cache: nothing is hot there.
	if hot := c.groups[1].HotKeys(10); len(hot) != 0 {
		t.Errorf("owner's HotKeys = %+v, want none", hot)
	}
}

// lease is a contact lease fixed by the test.
type lease struct {
	epoch uint64
	ok    bool
}

func (l lease) Contact(time.Time) (uint64, bool) { return l.epoch, l.ok }

// TestHotKeysSkipsUnservable checks that a hot copy the group would not
// serve is not reported, though the LRU still holds it: expired, under a
// lapsed or renewed lease, or a remembered not-found.
func TestHotKeysSkipsUnservable(t *testing.T) {
	t.Parallel()
	l := store.New(1 << 20)
	now := time.Now()
	for _, c := range []struct {
		key string
		e   store.Entry
	}{
		{"expired", store.Entry{V: store.Value{Expires: now.Add(-time.Second)}, Size: 10}},
		{"later", store.Entry{V: store.Value{Expires: now.Add(time.Hour)}, Size: 20}},
		{"forever", store.Entry{Size: 30}},
		{"not-found", store.Entry{NotFound: true, Size: 40}},
		{"leased", store.Entry{Size: 50, Ref: lease{epoch: 7, ok: true}, Tag: 7}},
		{"lapsed", store.Entry{Size: 60, Ref: lease{epoch: 7}, Tag: 7}},
		{"lapsed-fallback", store.Entry{Size: 70, Ref: lease{epoch: 7}, Tag: 7, Mark: true}},
		{"old-epoch", store.Entry{Size: 80, Ref: lease{epoch: 8, ok: true}, Tag: 7}},
	} {
		l.Add(c.key, c.e, nil)
	}
	got := recentHot(l, now)
	want := []HotKey{{"lapsed-fallback", 0, 70}, {"leased", 0, 50}, {"forever", 0, 30}, {"later", 0, 20}}
	if !slices.Equal(got, want) {
		t.Errorf("recent = %+v\nwant     %+v", got, want)
	}
}

// BenchmarkHotKeys measures a status page's look at a full hot cache of
// 10,000 entries (the entries of an 8 MiB hot cache of 600-byte values),
// against a Get hit of the same group in the same run for scale.
func BenchmarkHotKeys(b *testing.B) {
	g := newTestGroup(b, GroupConfig{MaxBytes: 64 << 20, HotBytes: 32 << 20}, func(context.Context, string) (Value, error) {
		return Value{Data: []byte("v")}, nil
	})
	for i := range 10000 {
		k := "key-" + strconv.Itoa(i)
		g.freq.add(k)
		v := Value{Data: make([]byte, 600)}
		g.hot.Add(k, store.Entry{V: store.Value(v), Size: entrySize(k, v)}, nil)
	}
	if _, n := g.hot.Usage(); n != 10000 {
		b.Fatalf("%d hot entries", n)
	}
	b.Run("op=hotkeys", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(g.HotKeys(10)) != 10 {
				b.Fatal("short")
			}
		}
	})
	b.Run("op=get-hit", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := g.Get(ctx, "key-1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
