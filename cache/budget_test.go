package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ringcache/ringcache/cache/internal/store"
)

// TestGroupHoldsWhatTheSizingRuleSays: a group given the budget of C
// entries by the sizing rule (key, value and content type plus
// store.Overhead each; deploy/README.md, Memory and sizing) holds at least
// 0.97 C of them at every read once full, whatever the value size and the
// order of reads: random reads over 2C keys, and a scan of keys each new.
// Any budget holds it, down to a dozen entries (under 34, every entry):
// values of 2029 bytes, with their key, leave the largest unused tail in a
// closed page of the largest size; a smaller budget has smaller pages, and
// keeps larger values in allocations of their own, or every entry (under
// 144 KiB: the budgets of 40 entries, and of 250 of 100 B). A group with
// no peers has no copies to keep, and its hot cache's part (HotBytes, a
// default eighth) is the main cache's.
func TestGroupHoldsWhatTheSizingRuleSays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		size int
		c    int // entries the budget pays for
	}{
		{100, 20_000}, {1024, 20_000}, {2029, 20_000}, {2029, 2_250}, // 4.7 MiB
		{100, 9_400}, {1024, 2_010}, {1900, 1_120}, // 2.3 MiB
		{100, 4_897}, {1024, 1_000}, {2029, 489}, {3000, 100}, // 1.2 MiB to 300 KiB
		{100, 250}, {1024, 250}, {100, 40}, {1024, 40}, {2029, 40}, // 290 KiB to 10 KiB
		{100, 13}, {1024, 20}, {3000, 30}, // where 0.97 C is C
	} {
		for _, order := range []string{"random", "scan"} {
			t.Run(fmt.Sprintf("%dB/C=%d/%s", tc.size, tc.c, order), func(t *testing.T) {
				t.Parallel()
				c := tc.c
				value := make([]byte, tc.size)
				keyOf := func(i int) string { return fmt.Sprintf("key-%08d", i) }
				budget := int64(c) * EntryBytes(keyOf(0), Value{Data: value})
				g, err := newNode(t, Config{}).NewGroup(GroupConfig{Name: "g", MaxBytes: budget,
					Getter: GetterFunc(func(context.Context, string) (Value, error) { return Value{Data: value}, nil })})
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				r := rand.New(rand.NewPCG(1, 2))
				least, dead := int64(c), int64(0)
				for i := range 5 * c {
					k := i
					if order == "random" {
						k = r.IntN(2 * c)
					}
					if _, err := g.Get(ctx, keyOf(k)); err != nil {
						t.Fatal(err)
					}
					if i < 3*c {
						continue // filling
					}
					s := g.Stats()
					if s.MainItems < least {
						least, dead = s.MainItems, s.DeadBytes
					}
					if s.MainBytes+s.HotBytes+s.DeadBytes > budget {
						t.Fatalf("main %d + hot %d + dead %d bytes = over the budget %d", s.MainBytes, s.HotBytes, s.DeadBytes, budget)
					}
				}
				held := float64(least) / float64(c)
				t.Logf("held %.3f C at least (%d of %d); dead bytes then %.1f%% of the budget", held, least, c,
					100*float64(dead)/float64(budget))
				if held < 0.97 {
					t.Errorf("held %.3f C, want at least 0.97 C", held)
				}
			})
		}
	}
}

// TestCompactionDoesNotChaseTails: values that leave each closed page
// an unused tail of about one entry (1.5% of it: 2029 bytes in the 128
// KiB pages of a 4.7 MiB budget, 509 bytes in the 32 KiB pages of 1.6
// MiB), half the dead bytes' bound, which compaction cannot
// reach: it only moves a tail to another page. It must leave such pages
// alone rather than copy them over and over.
func TestCompactionDoesNotChaseTails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ c, size, page int }{{2250, 2029, 128 << 10}, {2500, 509, 32 << 10}} {
		for _, order := range []string{"random", "scan"} {
			t.Run(fmt.Sprintf("%dB/%s", tc.size, order), func(t *testing.T) {
				t.Parallel()
				c := int64(tc.c)
				value := make([]byte, tc.size)
				keyOf := func(i int) string { return fmt.Sprintf("key-%08d", i) }
				g, err := newNode(t, Config{}).NewGroup(GroupConfig{Name: "g", MaxBytes: c * EntryBytes(keyOf(0), Value{Data: value}),
					Getter: GetterFunc(func(context.Context, string) (Value, error) { return Value{Data: value}, nil })})
				if err != nil {
					t.Fatal(err)
				}
				if g.main.PageSize() != tc.page {
					t.Fatalf("pages of %d bytes, want %d", g.main.PageSize(), tc.page)
				}
				ctx := context.Background()
				r := rand.New(rand.NewPCG(1, 2))
				for i := range 5 * tc.c {
					k := i
					if order == "random" {
						k = r.IntN(2 * tc.c)
					}
					if _, err := g.Get(ctx, keyOf(k)); err != nil {
						t.Fatal(err)
					}
				}
				compactions, evictions := g.main.Compactions(), g.main.Evictions()
				t.Logf("%d compactions for %d evictions", compactions, evictions)
				if evictions == 0 || compactions > evictions/2 {
					t.Errorf("%d compactions for %d evictions, want at most one for two", compactions, evictions)
				}
			})
		}
	}
}

// TestCopiesShareTheBudgetByAge: with copies, a group's own values and the
// copies it keeps as an heir share MaxBytes, and under pressure the older
// goes, a copy before a value of the group's own of the same age: own
// values take the whole budget while no copies come, newer copies
// displace the oldest own values, and newer own values the copies.
func TestCopiesShareTheBudgetByAge(t *testing.T) {
	t.Parallel()
	const n = 1000 // entries the budget pays for
	v := func(key string) Value { return Value{Data: []byte("v:" + key)} }
	own := func(i int) string { return fmt.Sprintf("own%04d", i) }
	cp := func(i int) string { return fmt.Sprintf("cpy%04d", i) }
	g := newTestGroup(t, GroupConfig{MaxBytes: n * EntryBytes(own(0), v(own(0))), Copies: 2},
		func(_ context.Context, key string) (Value, error) { return v(key), nil })
	held := func(key func(int) string, from, to int) (n int) {
		for i := from; i < to; i++ {
			if _, ok := g.main.Get(key(i), new(store.Clock)); ok {
				n++
			} else if _, ok := g.copies.Get(key(i), new(store.Clock)); ok {
				n++
			}
		}
		return n
	}
	for i := range n {
		mustGet(t, g, own(i), "v:"+own(i))
	}
	if s := g.Stats(); s.MainItems < n*9/10 {
		t.Fatalf("own values hold %d entries of a budget of %d with no copies: the copies' room went unused", s.MainItems, n)
	}
	for i := range n / 2 {
		if !g.KeepCopy(cp(i), v(cp(i)), "node1", uint64(i+1)) {
			t.Fatalf("copy %d refused", i)
		}
	}
	if h := held(cp, 0, n/2); h < n/2*9/10 {
		t.Fatalf("%d of %d copies held: newer copies gave way to older values", h, n/2)
	}
	if h := held(own, 0, n/4); h != 0 {
		t.Fatalf("%d of the %d oldest own values held: they outlived newer copies", h, n/4)
	}
	if h := held(own, 3*n/4, n); h < n/4*9/10 {
		t.Fatalf("%d of the %d newest own values held", h, n/4)
	}
	for i := n; i < 2*n; i++ {
		mustGet(t, g, own(i), "v:"+own(i))
	}
	if h := held(cp, 0, n/2); h != 0 {
		t.Fatalf("%d copies held after %d newer own values: older copies outlived them", h, n)
	}
	s := g.Stats()
	if total := s.MainBytes + s.CopyBytes + s.DeadBytes; total > g.Config().MaxBytes {
		t.Fatalf("main %d + copies %d + dead %d = %d bytes > MaxBytes %d", s.MainBytes, s.CopyBytes, s.DeadBytes, total, g.Config().MaxBytes)
	}
	assertAccounting(t, g.main)
	assertAccounting(t, g.copies)
}

// TestCopiesTakeBackWhatHotCopiesBorrowed: the hot cache borrows the room
// the main cache leaves, and copies, which share that room, take it back
// as they arrive: the three never hold more than MaxBytes together (but
// for the entry just stored).
func TestCopiesTakeBackWhatHotCopiesBorrowed(t *testing.T) {
	t.Parallel()
	const n = 1000
	v := Value{Data: make([]byte, 100)}
	entry := EntryBytes("key0000", v)
	g := newTestGroup(t, GroupConfig{MaxBytes: n * entry, HotBytes: n * entry / 8, Copies: 2},
		func(context.Context, string) (Value, error) { return v, nil })
	g.reclaim() // lend the main cache's room to the hot cache
	for i := range n / 2 {
		k := fmt.Sprintf("hot%04d", i)
		g.hot.Add(k, store.Entry{V: store.Value(v), Size: entrySize(k, v)}, nil)
	}
	if s := g.Stats(); s.HotBytes < n/2*entry*9/10 {
		t.Fatalf("the hot cache holds %d bytes, want about %d: it did not borrow", s.HotBytes, n/2*entry)
	}
	for i := range n {
		k := fmt.Sprintf("cpy%04d", i)
		if !g.KeepCopy(k, v, "node1", uint64(i+1)) {
			t.Fatalf("copy %d refused", i)
		}
		s := g.Stats()
		if total := s.MainBytes + s.HotBytes + s.CopyBytes + s.DeadBytes; total > g.Config().MaxBytes+entry {
			t.Fatalf("after copy %d: main %d + hot %d + copies %d + dead %d = %d bytes > MaxBytes %d",
				i, s.MainBytes, s.HotBytes, s.CopyBytes, s.DeadBytes, total, g.Config().MaxBytes)
		}
	}
}
