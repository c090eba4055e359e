package cache

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// versioned is an origin whose value of a key changes with every load, so
// that a read can tell a value loaded before a purge from one after it.
func versioned(loads *atomic.Int64) GetterFunc {
	return func(_ context.Context, key string) (Value, error) {
		return Value{Data: fmt.Appendf(nil, "%s@%d", key, loads.Add(1))}, nil
	}
}

func TestPurgePrefixDropsOnlyItsKeys(t *testing.T) {
	var loads atomic.Int64
	g := newTestGroup(t, GroupConfig{}, versioned(&loads))
	keys := []string{"user/1", "user/2", "users", "order/1", "u"}
	before := map[string]string{}
	for _, k := range keys {
		v, err := g.Get(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		before[k] = string(v.Data)
	}
	res, err := g.PurgePrefix(t.Context(), "user/")
	if err != nil {
		t.Fatal(err)
	}
	if res.Group != "g" || res.Prefix != "user/" || res.ID == "" {
		t.Errorf("result %+v: want group g, prefix user/ and an ID", res)
	}
	if got := g.Stats().Purged; got != 2 {
		t.Errorf("Stats.Purged = %d, want 2", got)
	}
	for _, k := range keys {
		v, err := g.Get(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		purged := k == "user/1" || k == "user/2"
		if same := string(v.Data) == before[k]; same == purged {
			t.Errorf("after the purge of user/, %s = %q (before %q): purged %v", k, v.Data, before[k], purged)
		}
	}
	if got := loads.Load(); got != int64(len(keys))+2 {
		t.Errorf("%d origin loads, want %d (each key once, the two purged twice)", got, len(keys)+2)
	}
}

func TestPurgeVoidsALoadInProgress(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var n atomic.Int64
	g := newTestGroup(t, GroupConfig{}, func(_ context.Context, key string) (Value, error) {
		if n.Add(1) == 1 {
			close(started)
			<-release
			return Value{Data: []byte("old")}, nil
		}
		return Value{Data: []byte("new")}, nil
	})
	done := make(chan Value)
	go func() {
		v, _ := g.Get(context.Background(), "k")
		done <- v
	}()
	<-started
	if _, err := g.Purge(t.Context()); err != nil {
		t.Fatal(err)
	}
	close(release)
	if v := <-done; string(v.Data) != "old" {
		t.Fatalf("the caller that overlapped the purge got %q, want its own load's old", v.Data)
	}
	// The load began before the purge: its value is not kept.
	mustGet(t, g, "k", "new")
}

func TestNotCurrentServesNothingCached(t *testing.T) {
	var current atomic.Bool
	current.Store(true)
	var loads atomic.Int64
	n := newNode(t, Config{Current: current.Load})
	g, err := n.NewGroup(GroupConfig{Name: "g", MaxBytes: 1 << 20, Getter: versioned(&loads)})
	if err != nil {
		t.Fatal(err)
	}
	mustGet(t, g, "k", "k@1")
	mustGet(t, g, "k", "k@1")
	current.Store(false)
	if _, ok, _ := g.GetCached("k"); ok {
		t.Error("GetCached found k while the node is not current")
	}
	if v, ok := g.Handoff("k"); ok {
		t.Errorf("Handoff gave %q while the node is not current", v.Data)
	}
	if kv := g.Newest(10); len(kv) != 0 {
		t.Errorf("Newest gave %d values while the node is not current", len(kv))
	}
	mustGet(t, g, "k", "k@2") // a miss: loaded again
	current.Store(true)
	mustGet(t, g, "k", "k@2") // what it loaded is kept
}
