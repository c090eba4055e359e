package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// A trace is the keys of its requests, in order.
type trace struct {
	name     string
	keys     []uint64
	distinct int
}

// readTrace reads a trace file in one of the formats of ../shared/traces,
// told by its name: ARC's .lis (per line "start count ...": the keys
// start, start+1, ..., start+count-1), cache2k's .trace (big-endian int32
// keys) and a plain .txt (one integer key per line), each optionally
// compressed (.zst, .xz).
func readTrace(path string) (*trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	name := filepath.Base(path)
	var r io.Reader = bufio.NewReaderSize(f, 1<<20)
	base := name
	switch {
	case strings.HasSuffix(base, ".zst"):
		d, err := zstd.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		defer d.Close()
		r, base = d, strings.TrimSuffix(base, ".zst")
	case strings.HasSuffix(base, ".xz"):
		d, err := xz.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r, base = d, strings.TrimSuffix(base, ".xz")
	}
	var keys []uint64
	switch filepath.Ext(base) {
	case ".lis":
		keys, err = readLIS(r)
	case ".trace":
		keys, err = readInt32BE(r)
	case ".txt":
		keys, err = readLines(r)
	default:
		return nil, fmt.Errorf("%s: unknown trace format (want .lis, .trace or .txt, optionally .zst or .xz)", name)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no requests", name)
	}
	seen := make(map[uint64]struct{}, len(keys)/4)
	for _, k := range keys {
		seen[k] = struct{}{}
	}
	return &trace{name: name, keys: keys, distinct: len(seen)}, nil
}

func readLIS(r io.Reader) ([]uint64, error) {
	var keys []uint64
	s := bufio.NewScanner(r)
	for n := 1; s.Scan(); n++ {
		f := strings.Fields(s.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: want start and count", n)
		}
		start, err1 := strconv.ParseUint(f[0], 10, 64)
		count, err2 := strconv.ParseUint(f[1], 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		for i := range count {
			keys = append(keys, start+i)
		}
	}
	return keys, s.Err()
}

func readInt32BE(r io.Reader) ([]uint64, error) {
	var keys []uint64
	var b [4]byte
	for {
		if _, err := io.ReadFull(r, b[:]); err == io.EOF {
			return keys, nil
		} else if err != nil {
			return nil, err
		}
		keys = append(keys, uint64(uint32(binary.BigEndian.Uint32(b[:]))))
	}
}

func readLines(r io.Reader) ([]uint64, error) {
	var keys []uint64
	s := bufio.NewScanner(r)
	for n := 1; s.Scan(); n++ {
		t := strings.TrimSpace(s.Text())
		if t == "" {
			continue
		}
		k, err := strconv.ParseUint(t, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		keys = append(keys, k)
	}
	return keys, s.Err()
}
