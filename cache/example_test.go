package cache_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringcache/ringcache/cache"
)

// A single node: the Getter is the origin, Get reads through the cache.
func Example() {
	node := cache.New(cache.Config{}) // no Peers: this node owns every key
	users, err := node.NewGroup(cache.GroupConfig{
		Name:     "users",
		MaxBytes: 64 << 20,
		TTL:      time.Minute,
		Getter: cache.GetterFunc(func(ctx context.Context, key string) (cache.Value, error) {
			if key != "ada" {
				return cache.Value{}, cache.ErrNotFound
			}
			return cache.Value{Data: []byte("Ada Lovelace"), ContentType: "text/plain"}, nil
		}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for range 3 {
		v, err := users.Get(ctx, "ada")
		fmt.Println(string(v.Data), err)
	}
	_, err = users.Get(ctx, "bob")
	fmt.Println(errors.Is(err, cache.ErrNotFound))

	s := users.Stats()
	fmt.Printf("gets %d, origin loads %d, hits %d\n", s.Gets, s.LocalLoads, s.MainHits)
	// Output:
	// Ada Lovelace <nil>
	// Ada Lovelace <nil>
	// Ada Lovelace <nil>
	// true
	// gets 4, origin loads 2, hits 2
}
