package consistenthash_test

import (
	"fmt"
	"sync/atomic"

	"github.com/ringcache/ringcache/consistenthash"
)

// A ring with the defaults (50 replicas, CRC32) assigns keys exactly as
// groupcache's consistenthash does.
func Example() {
	ring := consistenthash.New(0, nil)
	if err := ring.Add("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ring.Get("user:42"))
	fmt.Println(ring.GetN("user:42", 2))
	// Output:
	// 10.0.0.3:8080
	// [10.0.0.3:8080 10.0.0.1:8080]
}

// Membership changes build a new ring and publish it; readers load the
// current ring with no lock.
func ExampleMap_Clone() {
	var current atomic.Pointer[consistenthash.Map]
	ring := consistenthash.New(160, consistenthash.XXHash)
	_ = ring.Add("a", "b")
	current.Store(ring)

	next := current.Load().Clone()
	_ = next.Add("c")
	current.Store(next)

	fmt.Println(ring.Nodes(), current.Load().Nodes())
	fmt.Println(ring.Version() != current.Load().Version())
	// Output:
	// [a b] [a b c]
	// true
}

// A node with twice the memory gets twice the points, and so about twice
// the keys (each ring is one draw: here 0.64 against the ideal 0.67).
func ExampleMap_AddWeighted() {
	ring := consistenthash.New(160, consistenthash.XXHash)
	_ = ring.Add("small")
	_ = ring.AddWeighted("big", 2)
	sh := ring.Shares()
	fmt.Printf("big %.2f small %.2f\n", sh["big"], sh["small"])
	// Output:
	// big 0.64 small 0.36
}

// The flag of a daemon picks the hash by name.
func ExampleHashByName() {
	fn, ok := consistenthash.HashByName("xxhash")
	fmt.Println(ok, fn([]byte("key")) == consistenthash.XXHash([]byte("key")))
	_, ok = consistenthash.HashByName("sha1")
	fmt.Println(ok)
	// Output:
	// true true
	// false
}

// Range placement: each joining node takes an even share from the largest
// nodes; positions can be stored and reassigned elsewhere.
func ExampleRanges() {
	r := consistenthash.NewRanges(16, consistenthash.XXHash)
	for _, n := range []string{"a", "b", "c"} {
		if err := r.Join(n); err != nil {
			fmt.Println(err)
			return
		}
	}
	sh := r.Shares()
	fmt.Printf("a %.3f b %.3f c %.3f\n", sh["a"], sh["b"], sh["c"])

	copyOf := consistenthash.NewRanges(16, consistenthash.XXHash)
	for _, n := range r.Nodes() {
		pos, _ := r.Positions(n)
		_ = copyOf.Assign(n, pos)
	}
	fmt.Println(copyOf.Version() == r.Version(), copyOf.Get("user:42") == r.Get("user:42"))
	// Output:
	// a 0.333 b 0.333 c 0.333
	// true true
}
