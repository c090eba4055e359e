package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
)

// benchPrefix seeds the values bench PUTs: the value of a key is the hex
// SHA-256 of "ringcache-bench/<group>/<key>", repeated and cut to the value
// size (the demo origin's rule with another prefix), so that a GET checks
// what it reads with no table of values and no allocation, and a value
// bench wrote never passes for the demo origin's.
const benchPrefix = "ringcache-bench/"

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
