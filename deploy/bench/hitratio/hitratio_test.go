package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/ringcache/ringcache/cache"
	"github.com/ulikunitz/xz"
)

// TestReadTrace reads each format, plain and compressed, as the table's
// traces are.
func TestReadTrace(t *testing.T) {
	dir := t.TempDir()
	lis := []byte("10 3 0 0\n\n7 1 0 0\n10 1 0 0\n")
	var be bytes.Buffer
	for _, k := range []uint32{5, 1 << 31, 5} {
		binary.Write(&be, binary.BigEndian, k)
	}
	txt := []byte("42\n43\n\n42\n")
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var zs bytes.Buffer
	zw, _ := zstd.NewWriter(&zs)
	zw.Write(lis)
	zw.Close()
	var xs bytes.Buffer
	xw, _ := xz.NewWriter(&xs)
	xw.Write(be.Bytes())
	xw.Close()
	for _, tt := range []struct {
		path     string
		keys     []uint64
		distinct int
	}{
		{write("a.lis", lis), []uint64{10, 11, 12, 7, 10}, 4},
		{write("b.lis.zst", zs.Bytes()), []uint64{10, 11, 12, 7, 10}, 4},
		{write("c.trace", be.Bytes()), []uint64{5, 1 << 31, 5}, 2},
		{write("d.trace.xz", xs.Bytes()), []uint64{5, 1 << 31, 5}, 2},
		{write("e.txt", txt), []uint64{42, 43, 42}, 2},
	} {
		tr, err := readTrace(tt.path)
		if err != nil {
			t.Fatalf("%s: %v", tt.path, err)
		}
		if !slices.Equal(tr.keys, tt.keys) || tr.distinct != tt.distinct {
			t.Errorf("%s: keys %v (%d distinct), want %v (%d)", filepath.Base(tt.path), tr.keys, tr.distinct, tt.keys, tt.distinct)
		}
	}
	for _, bad := range []string{write("f.csv", txt), write("g.txt", []byte("x\n")), write("h.lis", []byte("1\n"))} {
		if _, err := readTrace(bad); err == nil {
			t.Errorf("%s: read without an error", filepath.Base(bad))
		}
	}
}

// TestLRUOnOLTPMatchesThePublishedFigures checks the harness: LRU on the
// OLTP trace holds exactly the hit ratios published for it. And the
// project's store at its default policy, given the sizing rule's budget
// for as many entries, makes at most LRU's misses plus 1%.
func TestLRUOnOLTPMatchesThePublishedFigures(t *testing.T) {
	dir := os.Getenv("RINGCACHE_TRACES")
	if dir == "" {
		dir = "../../../../shared/traces"
	}
	path := filepath.Join(dir, "arc-OLTP.lis.zst")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("the traces are kept out of the repository (their terms); none at %s: set RINGCACHE_TRACES to the directory that holds arc-OLTP.lis.zst", dir)
	}
	tr, err := readTrace(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.keys) != 914145 || tr.distinct != 186880 {
		t.Fatalf("OLTP: %d requests, %d distinct keys; want 914,145 and 186,880", len(tr.keys), tr.distinct)
	}
	for _, c := range []struct {
		entries int
		want    string
	}{{250, "16.47"}, {1000, "32.83"}, {2000, "42.47"}} {
		hits := run(policies[2].make(c.entries), tr.keys)
		if got := percent(hits, len(tr.keys)); got != c.want {
			t.Errorf("LRU at %d entries: %s%% hits, published %s%%", c.entries, got, c.want)
		}
		store := run(newRingcache(c.entries, cache.PolicySLRU), tr.keys)
		if m, lm := len(tr.keys)-store, len(tr.keys)-hits; float64(m) > 1.01*float64(lm) {
			t.Errorf("the store at %d entries' budget: %d misses, LRU %d (over 1%% more)", c.entries, m, lm)
		}
	}
}
