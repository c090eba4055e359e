package loadgen

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync/atomic"

	"github.com/ringcache/ringcache/transport/origin"
)

// PutPrefix seeds the values of Puts without a Value: the value of a key
// is the hex SHA-256 of "ringcache-bench/<group>/<key>", repeated and cut
// to the value size (the demo origin's rule with another prefix), so that
// a GET checks what it reads with no table of values and no allocation,
// and a value the generator wrote never passes for the demo origin's.
const PutPrefix = "ringcache-bench/"

// PutSeed appends the seed of the value of key index k to b.
func PutSeed(b []byte, group, prefix string, k int) []byte {
	b = append(b, PutPrefix...)
	b = append(b, group...)
	b = append(b, '/')
	b = append(b, prefix...)
	return strconv.AppendInt(b, int64(k), 10)
}

// digest writes the hex SHA-256 of seed into d.
func digest(d *[2 * sha256.Size]byte, seed []byte) {
	sum := sha256.Sum256(seed)
	hex.Encode(d[:], sum[:])
}

// Fill writes the value of seed into v: its digest, repeated and cut.
func Fill(v []byte, seed []byte) {
	var d [2 * sha256.Size]byte
	digest(&d, seed)
	for i := 0; i < len(v); i += len(d) {
		copy(v[i:], d[:])
	}
}

// Matches reports whether v is the value of seed, of any length: a check
// of the length is the caller's.
func Matches(v []byte, seed []byte) bool {
	var d [2 * sha256.Size]byte
	digest(&d, seed)
	for len(v) > 0 {
		n := min(len(v), len(d))
		if !bytes.Equal(v[:n], d[:n]) {
			return false
		}
		v = v[n:]
	}
	return true
}

// checker holds what a check of indexed keys needs. A Check is called
// concurrently: its scratch is per call, on the stack where it fits.
type checker struct {
	group, prefix string
	size          int          // the Puts' value size
	demo          bool         // the group's origin is the demo origin
	demoLen       atomic.Int64 // the length of the first demo value seen, -1 before
}

// DemoCheck checks GETs of a group whose origin is the demo origin: every
// body must be the origin's value, of size bytes if size > 0, else all of
// one length, set by the first; a value Puts by the value rule wrote (an
// earlier run) is the key's Other value.
func DemoCheck(group, prefix string, size int) Check {
	c := &checker{group: group, prefix: prefix, demo: true}
	c.demoLen.Store(-1)
	if size > 0 {
		c.demoLen.Store(int64(size))
	}
	return c.demoCheck
}

// PutCheck checks GETs of indexed keys that Puts of size bytes wrote; with
// demo, the demo origin's value is the key's Other value: a Put lives
// only in its owner's memory, and an eviction or a change of owner since
// brings the origin's value back. Not the value written, but not a wrong
// one.
func PutCheck(group, prefix string, size int, demo bool) Check {
	c := &checker{group: group, prefix: prefix, size: size, demo: demo}
	return c.putCheck
}

func (c *checker) demoCheck(op *Op, body []byte) Verdict {
	n := int64(len(body))
	if n > 0 && c.isDemo(op, body) {
		// Only a demo value may set the length: the first body can be
		// another one.
		c.demoLen.CompareAndSwap(-1, n)
		if n == c.demoLen.Load() {
			return Right
		}
		return Wrong
	}
	if n > 0 && c.isPut(op, body) {
		return Other
	}
	return Wrong
}

func (c *checker) putCheck(op *Op, body []byte) Verdict {
	if len(body) == c.size && c.isPut(op, body) {
		return Right
	}
	if c.demo && len(body) > 0 && c.isDemo(op, body) {
		return Other
	}
	return Wrong
}

func (c *checker) isPut(op *Op, body []byte) bool {
	var scratch [128]byte
	return Matches(body, PutSeed(scratch[:0], c.group, c.prefix, op.Key))
}

// isDemo reports whether body is op's key's value from the demo origin,
// by the origin's own rule. That costs a few small allocations per
// request, next to net/http's dozens, and keeps one definition of the
// rule.
func (c *checker) isDemo(op *Op, body []byte) bool {
	var scratch [64]byte
	key := op.Name
	if key == "" {
		key = string(strconv.AppendInt(append(scratch[:0], c.prefix...), int64(op.Key), 10))
	}
	return bytes.Equal(body, origin.DemoValue(c.group, key, len(body)))
}
