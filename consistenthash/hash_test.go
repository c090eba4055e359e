package consistenthash

import (
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// The FNV1_32 values were printed by the Java getHash that Java rings use
// (java 17 on this machine); the MD5CRC32 and Ketama values by Python's
// zlib.crc32(md5(s).hexdigest()) and struct.unpack('<I', md5(s)[:4]), an
// independent implementation of what PHP and ketama clients compute.
func TestHashVectors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in                               string
		crc, fnv, md5crc, ketama, xxhash uint32
	}{
		{"", 0, 1494218850, 1136548044, 3649838548, 0x51d8e999},
		{"hello", 907060870, 350638217, 2804381190, 708854109, uint32(xxhash.Sum64String("hello"))},
		{"192.168.0.0:111&&VN0", 1915825080, 1686427075, 1549141992, 1360409818, uint32(xxhash.Sum64String("192.168.0.0:111&&VN0"))},
		{"node-1", 334634079, 1543003305, 1710537944, 3110339029, uint32(xxhash.Sum64String("node-1"))},
		{"a", 3904355907, 649470159, 3867013014, 3111502092, uint32(xxhash.Sum64String("a"))},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			for _, c := range []struct {
				name string
				fn   Hash
				want uint32
			}{
				{"crc32", CRC32, tt.crc},
				{"fnv1_32", FNV1_32, tt.fnv},
				{"md5crc32", MD5CRC32, tt.md5crc},
				{"ketama", Ketama, tt.ketama},
				{"xxhash", XXHash, tt.xxhash},
			} {
				if got := c.fn([]byte(tt.in)); got != c.want {
					t.Errorf("%s(%q) = %d, want %d", c.name, tt.in, got, c.want)
				}
			}
		})
	}
}

func TestFNV1_32NeverNegativeExceptMinInt(t *testing.T) {
	t.Parallel()
	// Read as a Java int, every value but MinInt32 is >= 0.
	for i := range 100000 {
		h := FNV1_32([]byte{byte(i), byte(i >> 8), byte(i >> 16)})
		if int32(h) < 0 && h != 0x80000000 {
			t.Fatalf("FNV1_32(%d) = %#x, negative as a Java int", i, h)
		}
	}
}

func TestHashByName(t *testing.T) {
	t.Parallel()
	probe := []byte("probe")
	want := map[string]Hash{"crc32": CRC32, "fnv1_32": FNV1_32, "md5crc32": MD5CRC32, "ketama": Ketama, "xxhash": XXHash}
	if got := HashNames(); !slices.Equal(got, []string{"crc32", "fnv1_32", "md5crc32", "ketama", "xxhash"}) {
		t.Errorf("HashNames() = %v", got)
	}
	for _, name := range HashNames() {
		fn, ok := HashByName(name)
		if !ok {
			t.Fatalf("HashByName(%q) not found", name)
		}
		if fn(probe) != want[name](probe) {
			t.Errorf("HashByName(%q) is not %s", name, name)
		}
	}
	for _, bad := range []string{"", "CRC32", "md5", "sha1"} {
		if fn, ok := HashByName(bad); ok || fn != nil {
			t.Errorf("HashByName(%q) = %v, %v; want nil, false", bad, fn != nil, ok)
		}
	}
}

func TestHashesDoNotAllocate(t *testing.T) {
	data := []byte("some-key-0123456789")
	for _, name := range HashNames() {
		fn, _ := HashByName(name)
		if n := testing.AllocsPerRun(100, func() { fn(data) }); n != 0 {
			t.Errorf("%s allocates %v times per call", name, n)
		}
	}
}
