package cache

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

func TestGetManyKeepsOrderAndLoadsOnce(t *testing.T) {
	var loads atomic.Int64
	g := newTestGroup(t, GroupConfig{}, func(_ context.Context, key string) (Value, error) {
		loads.Add(1)
		if key == "missing" {
			return Value{}, ErrNotFound
		}
		return Value{Data: []byte("v:" + key)}, nil
	})
	mustGet(t, g, "warm", "v:warm")
	var keys []string
	for i := range 100 {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	keys = append(keys, "warm", "missing", "k7", "")
	res := g.GetMany(t.Context(), keys)
	if len(res) != len(keys) {
		t.Fatalf("%d results for %d keys", len(res), len(keys))
	}
	for i, r := range res {
		switch k := keys[i]; {
		case r.Key != k:
			t.Errorf("result %d is for %q, want %q", i, r.Key, k)
		case k == "missing":
			if !errors.Is(r.Err, ErrNotFound) {
				t.Errorf("missing: %v, want ErrNotFound", r.Err)
			}
		case k == "":
			if !errors.Is(r.Err, ErrBadKey) {
				t.Errorf("empty key: %v, want ErrBadKey", r.Err)
			}
		case r.Err != nil || string(r.Value.Data) != "v:"+k:
			t.Errorf("%s: %q, %v", k, r.Value.Data, r.Err)
		}
	}
	// 100 new keys and "missing", once each: k7 twice in the batch, warm cached.
	if got := loads.Load(); got != 1+100+1 {
		t.Errorf("%d origin loads, want 102 (the warm-up, 100 keys, the missing one)", got)
	}
}
