package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
)

// Values bench can check. The demo origin's value of a key is the hex
// SHA-256 of "ringcache-demo/<group>/<key>" repeated to the group's size
// (origin.DemoValue); bench's own PUTs follow the same rule with the prefix
// "ringcache-bench/", so that a GET can check what it reads with no table
// of values and no allocation.
const (
	demoPrefix  = "ringcache-demo/"
	benchPrefix = "ringcache-bench/"
)

// digest writes the hex SHA-256 of seed into d.
func digest(d *[2 * sha256.Size]byte, seed []byte) {
	sum := sha256.Sum256(seed)
	hex.Encode(d[:], sum[:])
}

// fill writes the value of seed into v: its digest, repeated and cut.
func fill(v []byte, seed []byte) {
	var d [2 * sha256.Size]byte
	digest(&d, seed)
	for i := 0; i < len(v); i += len(d) {
		copy(v[i:], d[:])
	}
}

// matches reports whether v is the value of seed, of any length: a check
// of the length is the caller's.
func matches(v []byte, seed []byte) bool {
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
