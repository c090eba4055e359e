package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestGroupHoldsWhatTheSizingRuleSays: a group given the budget of C
// entries by the sizing rule (key, value and content type plus
// entryOverhead each; deploy/README.md, Memory and sizing) holds at least
// 0.97 C of them once full, whatever the value size and the order of
// reads: random reads over 2C keys, and a scan of 3C keys, each new. A
// group with no peers has no copies to keep, and its hot cache's part
// (HotBytes, a default eighth) is the main cache's.
func TestGroupHoldsWhatTheSizingRuleSays(t *testing.T) {
	t.Parallel()
	for _, size := range []int{100, 1024} {
		for _, order := range []string{"random", "scan"} {
			t.Run(fmt.Sprintf("%dB/%s", size, order), func(t *testing.T) {
				t.Parallel()
				const c = 20_000
				value := make([]byte, size)
				keyOf := func(i int) string { return fmt.Sprintf("key-%08d", i) }
				budget := int64(c) * EntryBytes(keyOf(0), Value{Data: value})
				g, err := New(Config{}).NewGroup(GroupConfig{Name: "g", MaxBytes: budget,
					Getter: GetterFunc(func(context.Context, string) (Value, error) { return Value{Data: value}, nil })})
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				r := rand.New(rand.NewPCG(1, 2))
				for i := range 3 * c {
					k := i
					if order == "random" {
						k = r.IntN(2 * c)
					}
					if _, err := g.Get(ctx, keyOf(k)); err != nil {
						t.Fatal(err)
					}
				}
				s := g.Stats()
				held := float64(s.MainItems) / c
				t.Logf("held %.3f C (%d of %d); dead bytes %.1f%% of the budget", held, s.MainItems, c,
					100*float64(s.DeadBytes)/float64(budget))
				if held < 0.97 {
					t.Errorf("holds %.3f C, want at least 0.97 C", held)
				}
				if s.MainBytes+s.HotBytes+s.DeadBytes > budget {
					t.Errorf("main %d + hot %d + dead %d bytes = over the budget %d", s.MainBytes, s.HotBytes, s.DeadBytes, budget)
				}
			})
		}
	}
}
