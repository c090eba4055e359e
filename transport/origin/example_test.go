package origin_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/origin"
)

// The demo origin's value of a key can be computed anywhere: it is the hex
// SHA-256 of "ringcache-demo/<group>/<key>", repeated and cut to the size.
func ExampleDemoValue() {
	fmt.Println(string(origin.DemoValue("demo", "hello", 16)))
	fmt.Println(string(origin.DemoValue("demo", "hello", 70)))
	// Output:
	// 7c4873c5fe9734b1
	// 7c4873c5fe9734b1b3f6bed0fa946d3cfa801e3db022bc0db857ab2c8a13817a7c4873
}

// A group loads a missing key from its origin once; later Gets are hits.
func ExampleNewDemo() {
	demo, err := origin.NewDemo(origin.DemoConfig{Group: "demo", Size: 16})
	if err != nil {
		panic(err)
	}
	node := cache.New(cache.Config{})
	g, err := node.NewGroup(cache.GroupConfig{Name: "demo", Getter: demo, MaxBytes: 1 << 20})
	if err != nil {
		panic(err)
	}
	for range 3 {
		v, err := g.Get(context.Background(), "hello")
		if err != nil {
			panic(err)
		}
		fmt.Println(string(v.Data))
	}
	fmt.Println("origin loads:", demo.Loads().Loads)
	// Output:
	// 7c4873c5fe9734b1
	// 7c4873c5fe9734b1
	// 7c4873c5fe9734b1
	// origin loads: 1
}

// An HTTP origin fills a URL template; the upstream's 404 becomes
// cache.ErrNotFound and its Cache-Control sets each value's expiry.
func ExampleNewHTTP() {
	api, err := origin.NewHTTP(origin.HTTPConfig{
		URL:     "http://origin.internal:9000/v1/{group}/{key}",
		Group:   "users",
		Timeout: 2 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	node := cache.New(cache.Config{})
	_, err = node.NewGroup(cache.GroupConfig{Name: "users", Getter: api, MaxBytes: 64 << 20, TTL: time.Minute})
	fmt.Println(err)
	// Output: <nil>
}

// A directory origin serves files under a root; keys that would leave it
// are refused.
func ExampleNewDir() {
	files, err := origin.NewDir(origin.DirConfig{Root: "testdata"})
	if err != nil {
		panic(err)
	}
	_, err = files.Get(context.Background(), "../dir.go")
	fmt.Println(err)
	// Output: origin: bad key "../dir.go": ".." element
}
