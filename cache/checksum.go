package cache

import "hash/crc32"

// Checksum returns a 64-bit checksum of data: its CRC-32C in the high half
// and its CRC-32 (IEEE) in the low half, which together act as one 64-bit
// CRC whose polynomial is the product of the two. Both have hardware paths
// (SSE4.2 and PCLMULQDQ on amd64, the CRC instructions on ARMv8), so 1 KiB
// costs about 100 ns. Two different values collide with probability 2^-64;
// a CRC is not collision resistant, so it identifies versions of a value,
// it does not authenticate them.
//
// The cache fills Value.Checksum with it when it stores a value, so that a
// reader that needs a validator (the transport's ETag) does not hash the
// bytes again on every read.
func Checksum(data []byte) uint64 {
	return uint64(crc32.Checksum(data, castagnoli))<<32 | uint64(crc32.ChecksumIEEE(data))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)
