package store

import (
	"hash/crc32"
	"time"
)

// Overhead is what one cached entry costs beyond its key, value and
// content type bytes: its record (80 bytes), its slot in the index (a
// uint64 and an int32, 16 bytes in a table kept between 7/16 and 7/8
// full), the 8-byte header before its bytes in a page, its slot in the
// ghost table (2 to 4 bytes, slru.go), and the records freed since the
// most entries were held, which wait to be taken again. Measured on amd64
// with runtime.MemStats, once filled and once churned
// (TestEntryOverheadMatchesHeap and ...UnderChurn keep this honest): it
// varies with how full the index's tables are, from about 115 to 140. The
// pages' dead bytes are not in it: the store counts them against the
// budget as they arise.
const Overhead = 140

// Value is a cached value: the fields of cache.Value, which converts to
// and from it.
type Value struct {
	Data                               []byte
	ContentType                        string
	Expires                            time.Time
	StaleWhileRevalidate, StaleIfError time.Duration
	Age                                time.Duration
	NoStore                            bool
	Stale                              bool
	Checksum                           uint64
}

// Checksum is the checksum Add stores with a value (cache.Checksum says
// what it is for): CRC-32C in the high 32 bits and the IEEE CRC-32 in the
// low.
func Checksum(data []byte) uint64 {
	return uint64(crc32.Checksum(data, castagnoli))<<32 | uint64(crc32.ChecksumIEEE(data))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Entry is one key's entry as the store hands it out and takes it in. Tag,
// Mark and Ref are the caller's: the store keeps them with the entry and
// hands them back unread.
type Entry struct {
	// V is the value; V.Expires is its expiry (zero: none), past which
	// (and its stale windows, Store.SetStaleGrace) Get drops it.
	V Value
	// Size is the entry's accounted size in bytes (EntrySize), fixed when
	// it is added.
	Size int64
	// Ref is a pointer the caller keeps with the entry. Few entries should
	// have one: it is held in a map with pointers, which the collector
	// visits.
	Ref any
	// Tag is a number the caller keeps with the entry.
	Tag uint64
	// Loaded is when the value was loaded or written, in Unix
	// nanoseconds: Add's condition is told it of the entry it replaces.
	Loaded int64
	// NotFound marks a remembered absence: V is empty.
	NotFound bool
	// Mark is a bit the caller keeps with the entry.
	Mark bool
}

// Clock is one reading of time.Now, taken when first asked for: a hit reads
// the clock once, however many of its checks need it, and not at all when
// none does (a value that never expires, under no lease).
type Clock struct{ t time.Time }

// NewClock returns a clock that reads now.
func NewClock(now time.Time) Clock { return Clock{now} }

// Now returns the clock's reading, taking it on the first call.
func (c *Clock) Now() time.Time {
	if c.t.IsZero() {
		c.t = time.Now()
	}
	return c.t
}

// Expired reports whether e must no longer be served at now.
func (e *Entry) Expired(now time.Time) bool {
	return !e.V.Expires.IsZero() && !now.Before(e.V.Expires)
}

// EntrySize is the accounted size of an entry for key holding v: its key,
// value and content type bytes and Overhead.
func EntrySize(key string, v Value) int64 {
	n := int64(len(key)) + int64(len(v.Data)) + int64(len(v.ContentType)) + Overhead
	if hasExtras(v) {
		n += extraLen
	}
	return n
}

// hasExtras reports whether v sets a field that an entry keeps in its bytes
// rather than in its record.
func hasExtras(v Value) bool {
	return v.StaleWhileRevalidate != 0 || v.StaleIfError != 0 || v.Age != 0
}
