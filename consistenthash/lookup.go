package consistenthash

import "math/bits"

// lookup finds, for a hash, the first of a sorted list of points at or
// after it. A binary search over a 160,000-point ring takes 17 dependent,
// mostly cache-missing steps; lookup first jumps through a table indexed by
// the hash's top bits (one bucket per point on average), then scans the
// one or two points left. It is immutable after newLookup.
type lookup struct {
	points []uint32
	// first[b] is the index of the first point >= b<<shift, for
	// b in [0, 2^(32-shift)], with first[last+1] = len(points).
	first []uint32
	shift uint
}

func newLookup(points []uint32) lookup {
	l := lookup{points: points}
	if len(points) == 0 {
		return l
	}
	// About one point per bucket: 2^b >= len(points), b in [1, 24].
	b := min(max(bits.Len(uint(len(points)-1)), 1), 24)
	l.shift = uint(32 - b)
	l.first = make([]uint32, 1<<b+1)
	i := 0
	for bucket := range 1 << b {
		lo := uint32(bucket) << l.shift
		for i < len(points) && points[i] < lo {
			i++
		}
		l.first[bucket] = uint32(i)
	}
	l.first[1<<b] = uint32(len(points))
	return l
}

// ceil returns the index of the first point >= h, or len(points) if there
// is none. The list must not be empty.
func (l *lookup) ceil(h uint32) int {
	b := h >> l.shift
	lo, hi := int(l.first[b]), int(l.first[b+1])
	// Every point at index >= hi is >= (b+1)<<shift > h, so the answer
	// is in [lo, hi]; with about one point per bucket this loop rarely
	// runs more than twice.
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if l.points[mid] < h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
