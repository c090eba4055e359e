package store

import (
	"fmt"
	"testing"
)

// addAt stores a 100-byte value under key, loaded at t.
func addAt(l *Store, key string, t int64) {
	v := val(100)
	l.Add(key, Entry{V: v, Size: EntrySize(key, v), Loaded: t}, nil)
}

// newPair returns a primary and a backup store paired under a bound of n
// entries of 100-byte values with keys of 4 bytes.
func newPair(n int64) (primary, backup *Store) {
	primary, backup = New(n*EntrySize("p000", val(100))), New(1<<30)
	primary.SetSLRU(true)
	Pair(primary, backup)
	return primary, backup
}

// TestPairEvictsTheOlder: a paired primary and backup store share the
// primary's bound, and when either needs room the older of their next
// victims goes, the backup on a tie.
func TestPairEvictsTheOlder(t *testing.T) {
	t.Parallel()
	p, b := newPair(10)
	for i := range 5 {
		addAt(b, fmt.Sprintf("b%03d", i), int64(10+i)) // backups loaded at 10..14
	}
	for i := range 5 {
		addAt(p, fmt.Sprintf("p%03d", i), int64(20+i)) // primaries at 20..24
	}
	if _, n := p.Usage(); n != 5 {
		t.Fatalf("primary holds %d entries, want 5: the backups' room is the primaries' too", n)
	}
	// Full: each new primary evicts the oldest backup, which is older
	// than every primary.
	for i := 5; i < 8; i++ {
		addAt(p, fmt.Sprintf("p%03d", i), int64(20+i))
	}
	if _, n := b.Usage(); n != 2 {
		t.Fatalf("backup holds %d entries after 3 newer primaries, want 2", n)
	}
	if _, ok := b.Get("b002", new(Clock)); ok {
		t.Fatal("a backup older than every primary outlived a newer one")
	}
	// The backups left (13, 14) are older than every primary: a new one
	// evicts them first, then, newer than the oldest primary (20), that
	// primary.
	for i := range 3 {
		addAt(b, fmt.Sprintf("b1%02d", i), int64(30+i))
	}
	if _, ok := b.Get("b004", new(Clock)); ok {
		t.Fatal("a backup older than every primary outlived three newer backups")
	}
	if _, ok := p.Get("p000", new(Clock)); ok {
		t.Fatal("the oldest primary was kept over a newer backup")
	}
	if _, ok := p.Get("p001", new(Clock)); !ok {
		t.Fatal("a primary newer than the oldest was evicted")
	}
	// Of a primary and a backup stored at once, the backup goes first.
	p2, b2 := newPair(2)
	addAt(p2, "p001", 5)
	addAt(b2, "b001", 5)
	addAt(p2, "p002", 6)
	if _, ok := b2.Get("b001", new(Clock)); ok {
		t.Fatal("of a primary and a backup of the same age, the primary was evicted")
	}
	if _, ok := p2.Get("p001", new(Clock)); !ok {
		t.Fatal("a primary was evicted before a backup of its age")
	}
	for _, l := range []*Store{p, b, p2, b2} {
		assertAccounting(t, l)
	}
	pb, _ := p.Usage()
	bb, _ := b.Usage()
	if pb+bb > p.MaxBytes() {
		t.Fatalf("primary %d + backup %d bytes > the bound %d", pb, bb, p.MaxBytes())
	}
}

// TestPairKeepsAPrimaryReadAgain: a primary read again is protected by
// the segmented LRU and outlives older-stored backups and newer ones
// alike while it is; the backups give way to it.
func TestPairKeepsAPrimaryReadAgain(t *testing.T) {
	t.Parallel()
	p, b := newPair(8)
	addAt(p, "p000", 1)
	p.Get("p000", new(Clock)) // read again: protected at the next eviction
	for i := range 20 {
		addAt(b, fmt.Sprintf("b%03d", i), int64(10+i))
	}
	if _, ok := p.Get("p000", new(Clock)); !ok {
		t.Fatal("a primary read again was evicted by newer backups")
	}
	if _, n := b.Usage(); n != 7 {
		t.Fatalf("backup holds %d entries, want 7 (the bound of 8 less the primary)", n)
	}
	assertAccounting(t, p)
	assertAccounting(t, b)
}
