package peers_test

import (
	"fmt"

	"github.com/ringcache/ringcache/peers"
)

// printSetter stands in for transport.Pool, whose Set builds the ring.
type printSetter struct{}

func (printSetter) Set(peers ...string) error { fmt.Println(peers); return nil }

// A cluster without etcd hands a fixed list to the pool: the same sorted, deduplicated set
// that a Registry would hand over.
func ExampleStatic() {
	_, err := peers.Static(printSetter{}, "http://10.0.0.2:7070",
		"http://10.0.0.3:7070", "http://10.0.0.1:7070", "http://10.0.0.2:7070")
	fmt.Println(err)
	_, err = peers.Static(printSetter{}, "http://10.0.0.2:7070", "tcp://10.0.0.3:7070")
	fmt.Println(err)
	// Output:
	// [http://10.0.0.1:7070 http://10.0.0.2:7070 http://10.0.0.3:7070]
	// <nil>
	// transport: bad peer URL "tcp://10.0.0.3:7070": scheme must be http or https
}
