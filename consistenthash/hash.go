package consistenthash

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Hash maps bytes to a point on the ring, a uint32.
//
// The five hashes below are functions, not variables, so that no importer
// can replace one under the others: every node of a cluster must place keys
// with the same function, and a process-wide variable would let one package
// change the placement of every ring in the program.
//
// A Hash must be a pure function of data and must neither modify nor retain
// data: Map.Get passes the key's bytes without copying them (that is what
// makes Get allocation-free), so data may alias an immutable string.
type Hash func(data []byte) uint32

// CRC32 is crc32.ChecksumIEEE, the default Hash when New gets nil. It is
// what github.com/golang/groupcache's consistenthash uses, so a ring built
// with it assigns keys exactly as groupcache does. CRC is linear, not a mixing
// hash: similar names ("node-1", "node-2") land on correlated points, and the
// balance is measurably worse than XXHash's (see the package doc).
func CRC32(data []byte) uint32 { return crc32.ChecksumIEEE(data) }

// FNV1_32 is the 32-bit FNV hash with extra avalanche mixing used by Java
// rings (a TreeMap keyed by this value): from the offset basis 2166136261,
// each byte does h = (h ^ b) * 16777619 (the FNV-1a step), then, on a signed
// 32-bit int with arithmetic shifts as in Java, h += h<<13; h ^= h>>7;
// h += h<<3; h ^= h>>17; h += h<<5, and finally h = abs(h). It equals the
// Java getHash for ASCII strings (Java hashes UTF-16 chars, this hashes
// bytes). As in Java, abs(math.MinInt32) stays negative; that one value reads
// 0x80000000 here, so a Java TreeMap sorts it first and this ring last.
func FNV1_32(data []byte) uint32 {
	h := uint32(2166136261)
	for _, b := range data {
		h = (h ^ uint32(b)) * 16777619
	}
	// The mixing runs on a signed int as in the Java original, where >> is
	// an arithmetic shift that copies the sign bit.
	s := int32(h)
	s += s << 13
	s ^= s >> 7
	s += s << 3
	s ^= s >> 17
	s += s << 5
	if s < 0 && s != math.MinInt32 {
		s = -s
	}
	return uint32(s)
}

// MD5CRC32 is crc32 (IEEE) of the lowercase hex MD5 digest of data, as PHP
// rings compute crc32(md5($key)). The MD5 makes it well mixed but slow.
func MD5CRC32(data []byte) uint32 {
	d := md5.Sum(data)
	var hx [md5.Size * 2]byte
	hex.Encode(hx[:], d[:])
	// crc32.ChecksumIEEE lets its argument escape, which would move hx to
	// the heap on every call; this table loop computes the same CRC on the
	// stack.
	crc := ^uint32(0)
	for _, b := range hx {
		crc = crc32.IEEETable[byte(crc)^b] ^ (crc >> 8)
	}
	return ^crc
}

// Ketama is the first four bytes of the MD5 digest of data read
// little-endian, the point function of memcached's ketama clients. Only the
// hash matches ketama: a Map still places replica i of node n at
// Ketama(strconv.Itoa(i) + n), not at ketama's "n-i" points.
func Ketama(data []byte) uint32 {
	d := md5.Sum(data)
	return binary.LittleEndian.Uint32(d[:4])
}

// XXHash is the low 32 bits of xxhash64 (github.com/cespare/xxhash/v2). It is
// the recommended Hash for new clusters: the fastest of the five on short
// keys, well mixed, and its balance matches random placement (see the
// package doc).
func XXHash(data []byte) uint32 { return uint32(xxhash.Sum64(data)) }

// hashNames lists the names HashByName accepts, in the order a help text
// shows them.
var hashNames = []string{"crc32", "fnv1_32", "md5crc32", "ketama", "xxhash"}

// HashByName returns the Hash called name: "crc32", "fnv1_32", "md5crc32",
// "ketama" or "xxhash". The bool is false for any other name, so a flag
// parser can report the bad value.
func HashByName(name string) (Hash, bool) {
	switch name {
	case "crc32":
		return CRC32, true
	case "fnv1_32":
		return FNV1_32, true
	case "md5crc32":
		return MD5CRC32, true
	case "ketama":
		return Ketama, true
	case "xxhash":
		return XXHash, true
	}
	return nil, false
}

// HashNames returns the names HashByName accepts, for help texts.
func HashNames() []string {
	return slices.Clone(hashNames)
}
