package store

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
)

// assertAccounting fails t if l's invariants do not hold (Store.Check).
func assertAccounting(t *testing.T, l *Store) {
	t.Helper()
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
}

func val(n int) Value { return Value{Data: make([]byte, n)} }

func addVal(l *Store, key string, n int) bool {
	v := val(n)
	return l.Add(key, Entry{V: v, Size: EntrySize(key, v)}, nil)
}

func TestLRUAccountsBytes(t *testing.T) {
	t.Parallel()
	l := New(10 * (Overhead + 100))
	addVal(l, "a", 10)
	addVal(l, "bb", 20)
	if b, n := l.Usage(); b != 2*Overhead+1+10+2+20 || n != 2 {
		t.Fatalf("usage() = %d, %d; want %d, 2", b, n, 2*Overhead+33)
	}
	// Replacing a key subtracts the old entry: simplelru's Add alone would not.
	addVal(l, "a", 50)
	if b, n := l.Usage(); b != 2*Overhead+1+50+2+20 || n != 2 {
		t.Fatalf("after replace usage() = %d, %d; want %d, 2", b, n, 2*Overhead+73)
	}
	v := Value{Data: []byte("x"), ContentType: "text/plain"}
	if got, want := EntrySize("k", v), int64(1+1+10+Overhead); got != want {
		t.Fatalf("entrySize = %d, want %d (key + data + content type + overhead)", got, want)
	}
	l.Remove("a")
	assertAccounting(t, l)
	if b, n := l.Usage(); b != Overhead+22 || n != 1 {
		t.Fatalf("after remove usage() = %d, %d", b, n)
	}
}

func TestLRUEvictsLeastRecentlyUsedByBytes(t *testing.T) {
	t.Parallel()
	size := int64(Overhead + 1 + 100)
	l := New(3 * size)
	for _, k := range []string{"a", "b", "c"} {
		addVal(l, k, 100)
	}
	l.Get("a", new(Clock)) // a is now the most recent; b is the oldest
	addVal(l, "d", 100)
	if _, ok := l.Get("b", new(Clock)); ok {
		t.Fatal("b survived; it was the least recently used")
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := l.Get(k, new(Clock)); !ok {
			t.Fatalf("%s was evicted", k)
		}
	}
	if got := l.evictions.Load(); got != 1 {
		t.Fatalf("evictions = %d, want 1", got)
	}
	// One large entry evicts as many as it takes.
	addVal(l, "e", int(2*size))
	if _, n := l.Usage(); n != 1 {
		t.Fatalf("items = %d after a 2-entry-sized add, want 1 (e alone fits)", n)
	}
	if got := l.evictions.Load(); got != 4 {
		t.Fatalf("evictions = %d, want 4", got)
	}
	assertAccounting(t, l)
}

func TestLRURejectsEntryLargerThanBudget(t *testing.T) {
	t.Parallel()
	l := New(1000)
	addVal(l, "k", 10)
	if addVal(l, "k", 1000) {
		t.Fatal("stored an entry larger than the whole budget")
	}
	if _, ok := l.Get("k", new(Clock)); ok {
		t.Fatal("the old value of k survived a rejected replacement")
	}
	if !addVal(l, "other", 10) {
		t.Fatal("a small entry was not stored")
	}
	assertAccounting(t, l)

	disabled := New(0)
	if addVal(disabled, "k", 0) {
		t.Fatal("an lru with a zero budget stored an entry")
	}
}

func TestLRUDropsExpiredEntryOnRead(t *testing.T) {
	t.Parallel()
	// An expiry from this node's clock (a TTL) has a monotonic reading; one
	// from another node's (a peer's or a hand-off's Unix nanoseconds) has
	// none. The LRU keeps either on its own clock.
	for _, tc := range []struct {
		name string
		exp  func(time.Time) time.Time
	}{
		{"monotonic", func(t time.Time) time.Time { return t }},
		{"wall", func(t time.Time) time.Time { return t.Round(0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				l := New(1 << 20)
				exp := tc.exp(time.Now().Add(time.Second))
				v := Value{Data: []byte("x"), Expires: exp}
				l.Add("k", Entry{V: v, Size: EntrySize("k", v)}, nil)
				time.Sleep(time.Second - time.Nanosecond)
				e, ok := l.Get("k", new(Clock))
				if !ok {
					t.Fatal("entry missing before its expiry")
				}
				if !e.V.Expires.Equal(exp) {
					t.Fatalf("Expires = %v, stored %v", e.V.Expires, exp)
				}
				time.Sleep(time.Nanosecond)
				if _, ok := l.Get("k", new(Clock)); ok {
					t.Fatal("entry served at its expiry")
				}
				if b, n := l.Usage(); b != 0 || n != 0 {
					t.Fatalf("usage() = %d, %d after the expired entry was read, want 0, 0", b, n)
				}
			})
		})
	}
}

// TestLRUDropExpiredKeepsAReplacement: a reader that found key's entry
// expired drops it after releasing the lock, looking the key up again; an
// entry written for the key in between is fresh and stays.
func TestLRUDropExpiredKeepsAReplacement(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := New(1 << 20)
		now := time.Now()
		old := Value{Data: []byte("old"), Expires: now.Add(time.Second)}
		l.Add("k", Entry{V: old, Size: EntrySize("k", old)}, nil)
		later := now.Add(2 * time.Second)
		// The reader saw the old entry expired at later; before it drops
		// it, a writer replaces it.
		fresh := Value{Data: []byte("new"), Expires: now.Add(time.Minute)}
		l.Add("k", Entry{V: fresh, Size: EntrySize("k", fresh)}, nil)
		l.dropExpired(l.hash("k"), "k", &Clock{later})
		e, ok := l.Get("k", &Clock{later})
		if !ok || string(e.V.Data) != "new" {
			t.Fatalf("after dropExpired: %q, %v; want the replacement kept", e.V.Data, ok)
		}
		// Past the replacement's own expiry, it goes too.
		l.dropExpired(l.hash("k"), "k", &Clock{now.Add(2 * time.Minute)})
		if b, n := l.Usage(); b != 0 || n != 0 {
			t.Fatalf("usage() = %d, %d after dropping the expired replacement, want 0, 0", b, n)
		}
	})
}

// TestLRUAccountingUnderConcurrency gets, adds and removes from 8
// goroutines at once, so that entries are evicted and pages compacted and
// dropped under the readers. The accounting holds at the end; every value
// read holds the one byte it was written with, throughout and still once
// the churn is over. Under -race, a write into bytes a reader was handed is
// reported as a race.
func TestLRUAccountingUnderConcurrency(t *testing.T) {
	t.Parallel()
	l := New(250 * (Overhead + 500)) // pages of pageMin bytes
	uniform := func(b []byte) bool { return len(b) == 0 || bytes.Count(b, b[:1]) == len(b) }
	var wg sync.WaitGroup
	var mu sync.Mutex
	var held [][]byte
	bad := 0
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range 3000 {
				key := strconv.Itoa(r.IntN(400))
				switch r.IntN(4) {
				case 0:
					l.Remove(key)
				case 1:
					e, ok := l.Get(key, new(Clock))
					if !ok {
						break
					}
					mu.Lock()
					if !uniform(e.V.Data) {
						bad++
					}
					if i%20 == 0 {
						held = append(held, e.V.Data)
					}
					mu.Unlock()
				default:
					v := Value{Data: bytes.Repeat([]byte{byte(r.Uint32())}, r.IntN(1000))}
					l.Add(key, Entry{V: v, Size: EntrySize(key, v)}, nil)
				}
			}
		})
	}
	wg.Wait()
	assertAccounting(t, l)
	if bad > 0 {
		t.Fatalf("%d values read with bytes another write put there", bad)
	}
	for _, d := range held {
		if !uniform(d) {
			t.Fatal("a value's bytes changed after it was read")
		}
	}
	l.mu.Lock()
	compactions := l.compactions
	l.mu.Unlock()
	if l.evictions.Load() == 0 || compactions == 0 || len(held) == 0 {
		t.Fatalf("%d evictions, %d compactions, %d values held: the test did not exercise what it is for", l.evictions.Load(), compactions, len(held))
	}
}

// TestAddAsksItsCondition: Add stores only if its condition, asked under
// the lock, says so, and tells it when the entry it would replace was
// loaded (0: none). The cache's guards (a write's epoch, a ring change, a
// load older than what is stored) are built on it.
func TestAddAsksItsCondition(t *testing.T) {
	t.Parallel()
	l := New(1 << 20)
	v := val(1)
	if l.Add("k", Entry{V: v, Size: EntrySize("k", v), Loaded: 5}, func(int64) bool { return false }) {
		t.Fatal("Add stored a value its condition refused")
	}
	if _, n := l.Usage(); n != 0 {
		t.Fatalf("%d entries after a refused Add", n)
	}
	var told []int64
	ok := func(replaced int64) bool { told = append(told, replaced); return true }
	if !l.Add("k", Entry{V: v, Size: EntrySize("k", v), Loaded: 5}, ok) || !l.Add("k", Entry{V: v, Size: EntrySize("k", v), Loaded: 7}, ok) {
		t.Fatal("Add refused a value its condition admitted")
	}
	if !slices.Equal(told, []int64{0, 5}) {
		t.Fatalf("the condition was told %v, want [0 5]: nothing, then the first entry's Loaded", told)
	}
	if e, ok := l.Get("k", new(Clock)); !ok || e.Loaded != 7 {
		t.Fatalf("Get = %+v, %v; want the second entry", e, ok)
	}
}

// TestEntryOverheadMatchesHeap measures what an entry really costs, so that
// Overhead (and MaxBytes with it) stays close to the heap: "bytes"
// means bytes. The key and value given to the LRU are allocations of their
// own, as a request's key and a loaded value are; the content type is
// either one shared string (every demo value) or one allocated per value
// (an HTTP origin's header); a value may sit in a larger buffer (io.ReadAll,
// as the HTTP origin reads a body, starts with 512 bytes). For every value
// size the heap per entry must be between 85% and 105% of what the budget
// is charged.
func TestEntryOverheadMatchesHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap over thousands of entries")
	}
	const contentType = "text/plain; charset=utf-8"
	for _, tc := range []struct {
		name    string
		size, n int
		ownCT   bool  // a content type string per entry
		readAll bool  // the value is read with io.ReadAll
		spare   bool  // the value's buffer is twice its size
		budget  int64 // each store's; 0: one store for all
		// pageless: as in a store under 144 KiB
		pageless bool
	}{
		{name: "empty", size: 0, n: 50000},
		{name: "100B", size: 100, n: 50000},
		{name: "100B, own content type", size: 100, n: 50000, ownCT: true},
		{name: "1KiB", size: 1 << 10, n: 20000},
		{name: "1KiB, own content type", size: 1 << 10, n: 20000, ownCT: true},
		{name: "100B, read with io.ReadAll", size: 100, n: 50000, ownCT: true, readAll: true},
		{name: "4KiB, in a buffer twice its size", size: 4 << 10, n: 5000, spare: true},
		{name: "64KiB", size: 64 << 10, n: 600},
		// Small stores: smaller pages, values over 1/64 of one in
		// allocations of their own, and under 144 KiB every entry.
		{name: "100B, stores of 1 MiB", size: 100, n: 50000, budget: 1 << 20},
		{name: "1KiB, stores of 1 MiB", size: 1 << 10, n: 20000, budget: 1 << 20},
		// Under 144 KiB (here in one store, whose fixed cost, a chunk of
		// records, would otherwise dominate), every entry is in a page of
		// its own, whose rounding and 48 bytes are not charged.
		{name: "100B, a page each", size: 100, n: 50000, pageless: true},
		{name: "1KiB, a page each", size: 1 << 10, n: 20000, pageless: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := make([]string, tc.n)
			for i := range keys {
				keys[i] = "key-" + strconv.Itoa(1000000+i)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			budget := tc.budget
			if budget == 0 {
				budget = 1 << 40
			}
			var stores []*Store
			var charged int64
			for _, k := range keys {
				// A key of its own, as a request's path is not kept.
				k = strings.Clone(k)
				v := Value{Data: make([]byte, tc.size)}
				switch {
				case tc.readAll:
					v.Data, _ = io.ReadAll(bytes.NewReader(v.Data))
				case tc.spare:
					v.Data = make([]byte, tc.size, 2*tc.size)
				}
				if tc.size > 0 {
					v.ContentType = contentType
					if tc.ownCT {
						v.ContentType = strings.Clone(contentType)
					}
				}
				e := Entry{V: v, Size: EntrySize(k, v)}
				if len(stores) == 0 || stores[len(stores)-1].Room() < e.Size {
					l := New(budget)
					if tc.pageless {
						l.pageSize = 0
					}
					stores = append(stores, l)
				}
				charged += e.Size
				stores[len(stores)-1].Add(k, e, nil)
			}
			// The budget is charged the pages' dead bytes as well (here
			// the tails of full pages).
			for _, l := range stores {
				l.mu.Lock()
				charged += l.dead
				l.mu.Unlock()
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
			// keys too: were it collected in between, its strings would
			// be subtracted from what the entries cost.
			runtime.KeepAlive(stores)
			runtime.KeepAlive(keys)
			ratio := heap / float64(charged)
			t.Logf("%d entries: heap %.0f bytes per entry, charged %.0f (heap / charged %.3f); Overhead %d",
				tc.n, heap/float64(tc.n), float64(charged)/float64(tc.n), ratio, Overhead)
			// Charging more than the heap holds wastes budget; charging less
			// lets the heap outgrow it, which is worse.
			high := 1.05
			if tc.pageless {
				high = 1.15
			}
			if ratio < 0.85 || ratio > high {
				t.Fatalf("heap / charged = %.3f: an entry of %d bytes costs %.0f bytes of heap but %.0f of the budget", ratio, tc.size, heap/float64(tc.n), float64(charged)/float64(tc.n))
			}
		})
	}
}

// TestEntryOverheadMatchesHeapUnderChurn is TestEntryOverheadMatchesHeap
// the way a node runs: a budget filled past its end and then churned by
// random reads that store their misses, so that entries are evicted,
// pages fragment and are compacted, and records are freed and taken again,
// under the default policy, whose ghost table Overhead pays for. What
// the budget is charged (entries and dead page bytes) must stay within 85%
// to 105% of the heap.
func TestEntryOverheadMatchesHeapUnderChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("churns a 32 MiB cache")
	}
	const budget = 32 << 20
	for _, size := range []int{100, 1 << 10} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			l := New(budget)
			l.slru = true // the default policy, whose ghost table is in Overhead
			keys := int(1.375 * budget / float64(size+Overhead+11))
			key := func(i int) string { return "key-" + strconv.Itoa(1000000+i) }
			for i := range keys {
				addVal(l, key(i), size)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for range 2 * keys {
				if k := key(rng.IntN(keys)); !hit(l, k) {
					addVal(l, k, size)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
			l.mu.Lock()
			charged, dead, n, compactions := l.bytes+l.dead, l.dead, l.n, l.compactions
			l.mu.Unlock()
			runtime.KeepAlive(l)
			ratio := heap / float64(charged)
			t.Logf("%d entries of %d B, %.1f%% of the budget dead, %d compactions, %d ghost slots: heap / charged %.3f", n, size, 100*float64(dead)/budget, compactions, len(l.ghosts), ratio)
			if compactions == 0 || l.evictions.Load() == 0 || len(l.ghosts) == 0 {
				t.Fatalf("%d compactions, %d evictions, %d ghost slots: the churn did not do what it is for", compactions, l.evictions.Load(), len(l.ghosts))
			}
			if ratio < 0.85 || ratio > 1.05 {
				t.Fatalf("heap / charged = %.3f after churn", ratio)
			}
		})
	}
}

// hit reports whether key is in l.
func hit(l *Store, key string) bool {
	_, ok := l.Get(key, new(Clock))
	return ok
}

// TestLRUKeepsOnlyTheKey stores a key cut from a larger string, as a
// request's key is cut from its request line: the entry must not keep the
// larger string alive, which its accounting would not see.
func TestLRUKeepsOnlyTheKey(t *testing.T) {
	const n, line = 2000, 4096
	l := New(1 << 40)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		s := strings.Repeat("x", line) + strconv.Itoa(i)
		key := s[line-8:]
		v := val(1)
		l.Add(key, Entry{V: v, Size: EntrySize(key, v)}, nil)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(l)
	if per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n; per > line/2 {
		t.Fatalf("each entry holds %d bytes of heap: the %d-byte strings its keys were cut from stay alive", per, line)
	}
	if _, ok := l.Get(strings.Repeat("x", 8)+"7", new(Clock)); !ok {
		t.Fatal("a stored key is not found")
	}
}

// TestLRUKeepsEveryField stores entries that set each field an entry can
// carry and reads them back unchanged: the slot keeps most of them in a few
// words and the rarely set ones in the entry's allocation.
func TestLRUKeepsEveryField(t *testing.T) {
	t.Parallel()
	now := time.Now()
	owner := &struct{ epoch uint64 }{3} // a pointer the caller keeps with the entry
	for _, c := range []struct {
		name string
		e    Entry
	}{
		{"empty", Entry{}},
		{"nil data", Entry{V: Value{Data: nil}}},
		{"not found", Entry{NotFound: true, V: Value{Expires: now.Add(time.Minute)}}},
		{"small", Entry{V: Value{Data: []byte("hello"), ContentType: "text/plain"}, Tag: 7, Loaded: now.UnixNano()}},
		{"large", Entry{V: Value{Data: bytes.Repeat([]byte("x"), 4*packMax), ContentType: "application/json"}}},
		{"with ref, tag and mark", Entry{V: Value{Data: []byte("v"), Expires: now.Add(time.Hour)}, Ref: owner, Tag: 3, Mark: true}},
		{"wall expiry", Entry{V: Value{Data: []byte("v"), Expires: time.Unix(0, now.Add(time.Hour).UnixNano())}}},
		{"stale windows", Entry{V: Value{Data: []byte("v"), StaleWhileRevalidate: time.Second, StaleIfError: time.Hour}}},
		{"stale, aged", Entry{V: Value{Data: []byte("v"), Stale: true, Age: 90 * time.Second}}},
		{"no store", Entry{V: Value{Data: []byte("v"), NoStore: true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := New(1 << 20)
			in := c.e
			in.Size = EntrySize("key", in.V)
			if !l.Add("key", in, nil) {
				t.Fatal("not stored")
			}
			got, ok := l.Get("key", new(Clock))
			if !ok {
				t.Fatal("not found")
			}
			want := in
			want.V.Checksum = Checksum(in.V.Data)
			if gv, wv := got.V, want.V; !bytes.Equal(gv.Data, wv.Data) || (gv.Data == nil) != (wv.Data == nil) ||
				gv.ContentType != wv.ContentType || !gv.Expires.Equal(wv.Expires) ||
				gv.StaleWhileRevalidate != wv.StaleWhileRevalidate || gv.StaleIfError != wv.StaleIfError ||
				gv.Age != wv.Age || gv.NoStore != wv.NoStore || gv.Stale != wv.Stale || gv.Checksum != wv.Checksum {
				t.Errorf("value = %+v\nwant    %+v", gv, wv)
			}
			if got.Size != want.Size || got.Ref != want.Ref || got.Tag != want.Tag || got.Loaded != want.Loaded ||
				got.NotFound != want.NotFound || got.Mark != want.Mark {
				t.Errorf("entry = %+v\nwant    %+v", got, want)
			}
			// Data is shared by every reader: appending to it must not
			// write into the entry.
			if cap(got.V.Data) != len(got.V.Data) {
				t.Errorf("cap(Data) = %d, len %d", cap(got.V.Data), len(got.V.Data))
			}
		})
	}
}

// TestLRUMovesWithoutCopying takes entries out of one LRU and adds them to
// another, as a hand-off does: a large value moves, its bytes not copied;
// a small one is copied into the other LRU's pages; an entry changed in
// between is stored as changed.
func TestLRUMovesWithoutCopying(t *testing.T) {
	t.Parallel()
	from, to := New(1<<20), New(1<<20)
	for i, size := range []int{0, 10, packMax, 4 * packMax} {
		v := Value{Data: bytes.Repeat([]byte("x"), size), ContentType: "text/plain"}
		if i == 1 {
			v.StaleIfError = time.Minute
		}
		key := "key" + strconv.Itoa(i)
		from.Add(key, Entry{V: v, Size: EntrySize(key, v)}, nil)
	}
	from.Add("changed", Entry{V: Value{Data: bytes.Repeat([]byte("o"), 2*packMax)}, Size: EntrySize("changed", val(2*packMax))}, nil)
	for _, m := range from.TakeIf(func(string) bool { return true }) {
		e := m.E
		if m.Key == "changed" {
			e.V.Data = bytes.Repeat([]byte("n"), 2*packMax)
		}
		if !to.Add(m.Key, e, nil) {
			t.Fatalf("%s not stored", m.Key)
		}
		got, _ := to.Get(m.Key, new(Clock))
		moved := len(m.E.V.Data) > 0 && unsafe.SliceData(got.V.Data) == unsafe.SliceData(m.E.V.Data)
		if want := len(m.E.V.Data) > packMax && m.Key != "changed"; moved != want {
			t.Errorf("%s: moved without a copy = %v, want %v", m.Key, moved, want)
		}
		if want := e.V.Data; !bytes.Equal(got.V.Data, want) || got.V.StaleIfError != e.V.StaleIfError {
			t.Errorf("%s: Data = %.20q (%d bytes), StaleIfError %v; want %.20q (%d bytes), %v", m.Key,
				got.V.Data, len(got.V.Data), got.V.StaleIfError, want, len(want), e.V.StaleIfError)
		}
	}
	assertAccounting(t, from)
	assertAccounting(t, to)
}

// TestLRUHashCollision puts another key's entry under the hash of key, as
// a collision of the two keys' hashes would: key is not found, removing it
// leaves the other one alone, and storing it replaces the other one with
// the accounting intact.
func TestLRUHashCollision(t *testing.T) {
	t.Parallel()
	l := New(1 << 20)
	other := Value{Data: []byte("other's")}
	o := Entry{V: other, Size: EntrySize("other", other)}
	l.mu.Lock()
	l.put(l.hash("key"), "other", &o)
	l.mu.Unlock()
	if _, ok := l.Get("key", new(Clock)); ok {
		t.Fatal("key found: it has another key's entry")
	}
	l.Remove("key")
	if _, n := l.Usage(); n != 1 {
		t.Fatal("removing key removed the other key's entry")
	}
	if l.AddIfAbsent("key", Entry{V: val(3), Size: EntrySize("key", val(3))}, nil) == false {
		t.Fatal("addIfAbsent: key is absent, but nothing was stored")
	}
	if e, ok := l.Get("key", new(Clock)); !ok || len(e.V.Data) != 3 {
		t.Fatal("key not found after it was stored")
	}
	if b, n := l.Usage(); n != 1 || b != EntrySize("key", val(3)) {
		t.Fatalf("usage() = %d, %d: the other key's entry should have been dropped", b, n)
	}
	assertAccounting(t, l)
}

// TestLRUCompactsPages churns an LRU whose pages fill and fragment: keys
// written again and again with values of every size, removed, read and
// evicted, next to a CLOCK written plainly (clockRef) as the reference
// for the policy. After every step the pages agree with the records, no
// closed page is left sparse, and the keys are the reference's, in its
// order, less the ones its victims that the bytes evicted; every read
// returns the last
// value written; and bytes a reader was handed before compactions moved
// their entry are still the bytes it was handed.
//
// The smaller budgets have pages of pageMin bytes, so that many entries
// need a page of their own, and none (every entry in a page of its own).
func TestLRUCompactsPages(t *testing.T) {
	t.Parallel()
	for _, budget := range []int64{256 << 10, 96 << 10, 16 << 10} {
		t.Run(strconv.FormatInt(budget, 10), func(t *testing.T) {
			t.Parallel()
			churn(t, New(budget))
		})
	}
}

// clockRef is the lru's policy without slru, written plainly: a CLOCK
// kept as a list from the next victim on, where a key read since it came
// to the tail goes round again, and the key stored last is never the
// victim.
type clockRef struct {
	keys []string
	data map[string][]byte
	read map[string]bool
	last string
}

func (c *clockRef) Add(key string, data []byte) {
	if c.data == nil {
		c.data, c.read = map[string][]byte{}, map[string]bool{}
	}
	c.Remove(key)
	c.keys = append(c.keys, key)
	c.data[key], c.last = data, key
}

func (c *clockRef) Remove(key string) {
	if i := slices.Index(c.keys, key); i >= 0 {
		c.keys = slices.Delete(c.keys, i, i+1)
		delete(c.data, key)
		delete(c.read, key)
	}
}

func (c *clockRef) Get(key string) ([]byte, bool) {
	d, ok := c.data[key]
	if ok {
		c.read[key] = true
	}
	return d, ok
}

func (c *clockRef) Len() int { return len(c.keys) }

func (c *clockRef) Keys() []string { return c.keys }

// RemoveOldest evicts the victim.
func (c *clockRef) RemoveOldest() {
	for {
		k := c.keys[0]
		if k != c.last && !c.read[k] {
			c.Remove(k)
			return
		}
		delete(c.read, k)
		c.keys = append(c.keys[1:], k)
	}
}

func churn(t *testing.T, l *Store) {
	ref := &clockRef{}
	rng := rand.New(rand.NewPCG(1, 2))
	value := func(key string, version int, size int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = key[i%len(key)] + byte(version)
		}
		return b
	}
	type held struct {
		key  string
		data []byte // as handed out
		want []byte // a copy, as it was
	}
	var readers []held
	for step := range 20000 {
		key := "k" + strconv.Itoa(rng.IntN(400))
		switch op := rng.IntN(10); {
		case op < 6:
			size := rng.IntN(3 * packMax)
			if rng.IntN(4) > 0 {
				size = rng.IntN(200)
			}
			v := Value{Data: value(key, step, size), ContentType: "text/plain"}
			if !l.Add(key, Entry{V: v, Size: EntrySize(key, v)}, nil) {
				t.Fatalf("step %d: %s not stored", step, key)
			}
			ref.Add(key, v.Data)
		case op < 7:
			l.Remove(key)
			ref.Remove(key)
		default:
			e, ok := l.Get(key, new(Clock))
			want, wok := ref.Get(key)
			if ok != wok || !bytes.Equal(e.V.Data, want) {
				t.Fatalf("step %d: %s = %v, %d bytes; want %v, the %d written last", step, key, ok, len(e.V.Data), wok, len(want))
			}
			if ok && len(readers) < 200 && len(e.V.Data) > 0 {
				readers = append(readers, held{key, e.V.Data, bytes.Clone(e.V.Data)})
			}
		}
		l.mu.Lock()
		var keys []string
		l.each(func(_ int32, r *rec) bool {
			keys = append(keys, l.key(r))
			return true
		})
		l.mu.Unlock()
		for ref.Len() > len(keys) {
			ref.RemoveOldest()
		}
		if got, want := keys, ref.Keys(); !slices.Equal(got, want) {
			t.Fatalf("step %d: keys, the next victim first:\n%q\nwant (clockRef's)\n%q", step, got, want)
		}
		if err := l.verify(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	for _, r := range readers {
		if !bytes.Equal(r.data, r.want) {
			t.Fatalf("bytes handed out for %s changed under their reader", r.key)
		}
	}
	l.mu.Lock()
	compactions, pages := l.compactions, len(l.pages)
	l.mu.Unlock()
	if compactions == 0 && l.pageSize > 0 || l.evictions.Load() == 0 {
		t.Fatalf("%d pages compacted, %d entries evicted: the churn did not do what it is for", compactions, l.evictions.Load())
	}
	t.Logf("pages of %d bytes: %d compactions, %d evictions, %d pages", l.pageSize, compactions, l.evictions.Load(), pages)
	assertAccounting(t, l)
}

// TestSLRUKeepsKeysReadTwice: with PolicySLRU, keys read again while cached
// outlive a scan of keys read once, as long as they fit in the protected
// third (a small budget's, with no ghost table); with PolicyLRU the scan
// evicts them. Either way the lists agree with the records (verify)
// throughout.
func TestSLRUKeepsKeysReadTwice(t *testing.T) {
	t.Parallel()
	key := func(p string, i int) string { return fmt.Sprintf("%s%03d", p, i) }
	one := EntrySize(key("k", 0), val(100))
	for _, slru := range []bool{true, false} {
		l := New(20 * one)
		l.slru = slru
		for i := range 20 {
			addVal(l, key("k", i), 100)
		}
		for i := range 6 { // within the protected third
			if _, ok := l.Get(key("k", i), new(Clock)); !ok {
				t.Fatalf("slru %v: k%03d missing before the scan", slru, i)
			}
		}
		for i := range 100 {
			addVal(l, key("s", i), 100)
			if err := l.verify(); err != nil {
				t.Fatalf("slru %v, scan %d: %v", slru, i, err)
			}
		}
		kept := 0
		for i := range 6 {
			if _, ok := l.Get(key("k", i), new(Clock)); ok {
				kept++
			}
		}
		if want := map[bool]int{true: 6, false: 0}[slru]; kept != want {
			t.Errorf("slru %v: %d of the 6 keys read twice outlived the scan, want %d", slru, kept, want)
		}
	}
	// Read again, every key is protected at first; the protected list
	// keeps a third of the budget (with no ghost table, as at this size),
	// and the rest goes back to probation.
	l := New(20 * one)
	l.slru = true
	for i := range 20 {
		addVal(l, key("k", i), 100)
	}
	for i := range 20 {
		l.Get(key("k", i), new(Clock))
	}
	// A hit moves nothing; the next store, needing a victim, does.
	addVal(l, "new", 100)
	if err := l.verify(); err != nil {
		t.Fatal(err)
	}
	if p := l.lists[1].bytes; p > 20*one/3 || p < 20*one/3-one {
		t.Fatalf("protected list holds %d bytes of a %d-byte budget, want about a third", p, 20*one)
	}
}

// TestSLRUGhostsAdmitASecondRead: a key evicted from probation leaves a
// ghost, and stored again while the ghost is there (read a second time, a
// miss) it goes to the protected list, so it outlives the next scan, which
// evicts every key read once. A scan's own keys, all new, are almost never
// taken for ghosts. A full cache has a slot for each entry it holds, but
// one of fewer than minGhostSlots entries none, and there the key read
// again is on probation. The table's bytes count against the budget.
func TestSLRUGhostsAdmitASecondRead(t *testing.T) {
	t.Parallel()
	key := func(p string, i int) string { return fmt.Sprintf("%s%04d", p, i) }
	one := EntrySize(key("s", 0), val(100))
	for _, n := range []int64{400, 20} {
		l := New(n * one)
		l.slru = true
		ghosts := n >= minGhostSlots
		scan := func(p string) {
			for i := range 2 * int(n) {
				addVal(l, key(p, i), 100)
			}
		}
		scan("s")
		if got := int64(len(l.ghosts)); ghosts != (got > 0) || ghosts && (got > 2*l.n || 2*got < l.n) {
			t.Fatalf("%d entries' budget: %d ghost slots for %d entries held, want one each with a table (%v)", n, got, l.n, ghosts)
		}
		if protected := l.lists[1].bytes; protected > 2*n*one/100 {
			t.Errorf("%d entries' budget: a scan of new keys left %d bytes in the protected list, want at most 1%% of them", n, protected)
		}
		// A key read once, then evicted by as many keys as the budget
		// holds: its ghost is the last one left.
		addVal(l, "back", 100)
		held := func() bool { _, ok := l.index[l.hash("back")]; return ok } // a hit would give it another lap
		for i := 0; held(); i++ {
			if i > 2*int(n) {
				t.Fatalf("%d entries' budget: a key read once outlived a scan of twice the budget", n)
			}
			addVal(l, key("u", i), 100)
		}
		addVal(l, "back", 100) // read again: a miss, loaded and stored
		if got := l.rec(l.index[l.hash("back")]).flags&frequent != 0; got != ghosts {
			t.Errorf("%d entries' budget: the key read again is protected: %v, want %v", n, got, ghosts)
		}
		scan("t")
		if got := hit(l, "back"); got != ghosts {
			t.Errorf("%d entries' budget: the key read twice outlived the next scan: %v, want %v", n, got, ghosts)
		}
		assertAccounting(t, l)
		if l.charged()+l.lent() > l.maxBytes {
			t.Errorf("%d entries' budget: charged %d bytes (table included) over the budget %d", n, l.charged(), l.maxBytes)
		}
	}
}

// TestSLRULargeValueFlushesKeysReadOnce: a large value read once takes the
// room of keys read once before that of keys read twice, however old: the
// 20 keys read twice survive it. With PolicyLRU (a CLOCK) as well: read
// since they were stored, they get another lap, and the keys read once go
// first.
func TestSLRULargeValueFlushesKeysReadOnce(t *testing.T) {
	t.Parallel()
	key := func(p string, i int) string { return fmt.Sprintf("%s%03d", p, i) }
	one := EntrySize(key("a", 0), val(100))
	for _, slru := range []bool{true, false} {
		l := New(50 * one)
		l.slru = slru
		for i := range 20 {
			addVal(l, key("a", i), 100)
			l.Get(key("a", i), new(Clock)) // read twice
		}
		for i := range 25 {
			addVal(l, key("b", i), 100) // read once
		}
		addVal(l, "big", int(20*one)) // about 20 small entries' room
		if err := l.verify(); err != nil {
			t.Fatal(err)
		}
		kept := 0
		for i := range 20 {
			if _, ok := l.Get(key("a", i), new(Clock)); ok {
				kept++
			}
		}
		if kept != 20 {
			t.Errorf("slru %v: %d of 20 keys read twice survived a large value", slru, kept)
		}
	}
}

// TestHitTakesTheLockShared: a hit neither waits for another hit nor
// moves its entry: with the lock held shared (as by a hit in progress),
// reads of both policies complete, and the lists' order is as it was.
func TestHitTakesTheLockShared(t *testing.T) {
	t.Parallel()
	for _, slru := range []bool{true, false} {
		l := New(1 << 20)
		l.slru = slru
		for i := range 10 {
			addVal(l, fmt.Sprintf("k%d", i), 100)
		}
		order := func() []string {
			var keys []string
			l.each(func(_ int32, r *rec) bool {
				keys = append(keys, l.key(r))
				return true
			})
			return keys
		}
		l.mu.RLock()
		before := order()
		done := make(chan bool)
		go func() {
			ok := true
			for i := range 10 {
				_, hit := l.Get(fmt.Sprintf("k%d", i), new(Clock))
				ok = ok && hit
			}
			done <- ok
		}()
		select {
		case ok := <-done:
			if !ok {
				t.Errorf("slru %v: a read missed", slru)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("slru %v: reads wait while the lock is held shared", slru)
		}
		after := order()
		l.mu.RUnlock()
		if !slices.Equal(before, after) {
			t.Errorf("slru %v: reads moved entries: %q, then %q", slru, before, after)
		}
	}
}
