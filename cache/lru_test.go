package cache

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
)

// assertAccounting checks the invariant: reported bytes and items equal the
// sums over the live entries, and bytes fit the budget.
func assertAccounting(t *testing.T, l *lru) {
	t.Helper()
	bytes, items := l.usage()
	wantBytes, wantItems := l.check()
	if bytes != wantBytes || items != wantItems {
		t.Fatalf("usage() = %d bytes, %d items; live entries sum to %d bytes, %d items", bytes, items, wantBytes, wantItems)
	}
	if bytes > l.maxBytes {
		t.Fatalf("bytes %d > maxBytes %d", bytes, l.maxBytes)
	}
	if err := l.verify(); err != nil {
		t.Fatal(err)
	}
}

// verify checks the pages against the records: every live record's bytes
// are where its header says, each page's live count is what its records
// hold, no closed page is left sparse, dead is what the pages hold beyond
// that, and it fits the budget with bytes (unless one entry alone is left
// over it).
func (l *lru) verify() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	live := make([]int, len(l.pages))
	var err error
	l.each(func(id int32, r *rec) bool {
		p := l.pages[r.page]
		h := p.buf[r.off-headLen:]
		if got, n := int32(binary.LittleEndian.Uint32(h)), int(binary.LittleEndian.Uint32(h[4:])); got != id || headLen+n != r.packed() {
			err = fmt.Errorf("record %d: header says record %d, %d bytes; the record needs %d", id, got, n, r.packed())
			return false
		}
		if l.index[r.hash] != id {
			err = fmt.Errorf("record %d: not in the index", id)
			return false
		}
		live[r.page] += r.packed()
		return true
	})
	if err != nil {
		return err
	}
	var dead int64
	for i, p := range l.pages {
		if p == nil {
			continue
		}
		if p.live != live[i] {
			return fmt.Errorf("page %d: live %d, its records hold %d", i, p.live, live[i])
		}
		if p.live == 0 {
			return fmt.Errorf("page %d: kept with nothing live", i)
		}
		if p.closed {
			dead += int64(cap(p.buf) - p.live)
		} else if int32(i) != l.cur {
			return fmt.Errorf("page %d: open, but not the current page %d", i, l.cur)
		}
		if l.isSparse(p) {
			return fmt.Errorf("page %d: closed with %d of %d bytes live, not compacted", i, p.live, cap(p.buf))
		}
	}
	if dead != l.dead {
		return fmt.Errorf("dead = %d, the pages hold %d", l.dead, dead)
	}
	if l.bytes+l.dead > l.maxBytes && l.n > 1 {
		return fmt.Errorf("bytes %d + dead %d > maxBytes %d", l.bytes, l.dead, l.maxBytes)
	}
	if len(l.index) != int(l.n) {
		return fmt.Errorf("index holds %d, n = %d", len(l.index), l.n)
	}
	var n int64
	for i, li := range l.lists {
		var bytes int64
		for id := li.tail; id != noRecord; id = l.rec(id).next {
			r := l.rec(id)
			if b2i(r.flags&frequent != 0) != i {
				return fmt.Errorf("record %d: in list %d, flagged for the other", id, i)
			}
			bytes += int64(r.size)
			n++
		}
		if bytes != li.bytes {
			return fmt.Errorf("list %d: holds %d bytes, counts %d", i, bytes, li.bytes)
		}
	}
	if n != l.n {
		return fmt.Errorf("the lists hold %d records, n = %d", n, l.n)
	}
	if p := l.lists[1]; !l.slru && p.head != noRecord {
		return fmt.Errorf("an LRU with a protected list")
	}
	return nil
}

func val(n int) Value { return Value{Data: make([]byte, n)} }

func addVal(l *lru, key string, n int) bool {
	v := val(n)
	return l.add(key, entry{v: v, size: entrySize(key, v)}, guard{})
}

func TestLRUAccountsBytes(t *testing.T) {
	t.Parallel()
	l := newLRU(10 * (entryOverhead + 100))
	addVal(l, "a", 10)
	addVal(l, "bb", 20)
	if b, n := l.usage(); b != 2*entryOverhead+1+10+2+20 || n != 2 {
		t.Fatalf("usage() = %d, %d; want %d, 2", b, n, 2*entryOverhead+33)
	}
	// Replacing a key subtracts the old entry: simplelru's Add alone would not.
	addVal(l, "a", 50)
	if b, n := l.usage(); b != 2*entryOverhead+1+50+2+20 || n != 2 {
		t.Fatalf("after replace usage() = %d, %d; want %d, 2", b, n, 2*entryOverhead+73)
	}
	v := Value{Data: []byte("x"), ContentType: "text/plain"}
	if got, want := entrySize("k", v), int64(1+1+10+entryOverhead); got != want {
		t.Fatalf("entrySize = %d, want %d (key + data + content type + overhead)", got, want)
	}
	l.remove("a")
	assertAccounting(t, l)
	if b, n := l.usage(); b != entryOverhead+22 || n != 1 {
		t.Fatalf("after remove usage() = %d, %d", b, n)
	}
}

func TestLRUEvictsLeastRecentlyUsedByBytes(t *testing.T) {
	t.Parallel()
	size := int64(entryOverhead + 1 + 100)
	l := newLRU(3 * size)
	for _, k := range []string{"a", "b", "c"} {
		addVal(l, k, 100)
	}
	l.get("a", new(clock)) // a is now the most recent; b is the oldest
	addVal(l, "d", 100)
	if _, ok := l.get("b", new(clock)); ok {
		t.Fatal("b survived; it was the least recently used")
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := l.get(k, new(clock)); !ok {
			t.Fatalf("%s was evicted", k)
		}
	}
	if got := l.evictions.Load(); got != 1 {
		t.Fatalf("evictions = %d, want 1", got)
	}
	// One large entry evicts as many as it takes.
	addVal(l, "e", int(2*size))
	if _, n := l.usage(); n != 1 {
		t.Fatalf("items = %d after a 2-entry-sized add, want 1 (e alone fits)", n)
	}
	if got := l.evictions.Load(); got != 4 {
		t.Fatalf("evictions = %d, want 4", got)
	}
	assertAccounting(t, l)
}

func TestLRURejectsEntryLargerThanBudget(t *testing.T) {
	t.Parallel()
	l := newLRU(1000)
	addVal(l, "k", 10)
	if addVal(l, "k", 1000) {
		t.Fatal("stored an entry larger than the whole budget")
	}
	if _, ok := l.get("k", new(clock)); ok {
		t.Fatal("the old value of k survived a rejected replacement")
	}
	if !addVal(l, "other", 10) {
		t.Fatal("a small entry was not stored")
	}
	assertAccounting(t, l)

	disabled := newLRU(0)
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
				l := newLRU(1 << 20)
				exp := tc.exp(time.Now().Add(time.Second))
				v := Value{Data: []byte("x"), Expires: exp}
				l.add("k", entry{v: v, size: entrySize("k", v)}, guard{})
				time.Sleep(time.Second - time.Nanosecond)
				e, ok := l.get("k", new(clock))
				if !ok {
					t.Fatal("entry missing before its expiry")
				}
				if !e.v.Expires.Equal(exp) {
					t.Fatalf("Expires = %v, stored %v", e.v.Expires, exp)
				}
				time.Sleep(time.Nanosecond)
				if _, ok := l.get("k", new(clock)); ok {
					t.Fatal("entry served at its expiry")
				}
				if b, n := l.usage(); b != 0 || n != 0 {
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
		l := newLRU(1 << 20)
		now := time.Now()
		old := Value{Data: []byte("old"), Expires: now.Add(time.Second)}
		l.add("k", entry{v: old, size: entrySize("k", old)}, guard{})
		later := now.Add(2 * time.Second)
		// The reader saw the old entry expired at later; before it drops
		// it, a writer replaces it.
		fresh := Value{Data: []byte("new"), Expires: now.Add(time.Minute)}
		l.add("k", entry{v: fresh, size: entrySize("k", fresh)}, guard{})
		l.dropExpired(l.hash("k"), "k", &clock{later})
		e, ok := l.get("k", &clock{later})
		if !ok || string(e.v.Data) != "new" {
			t.Fatalf("after dropExpired: %q, %v; want the replacement kept", e.v.Data, ok)
		}
		// Past the replacement's own expiry, it goes too.
		l.dropExpired(l.hash("k"), "k", &clock{now.Add(2 * time.Minute)})
		if b, n := l.usage(); b != 0 || n != 0 {
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
	l := newLRU(20 * (entryOverhead + 500)) // pages of pageMin bytes
	uniform := func(b []byte) bool { return len(b) == 0 || bytes.Count(b, b[:1]) == len(b) }
	var wg sync.WaitGroup
	var mu sync.Mutex
	var held [][]byte
	bad := 0
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range 3000 {
				key := strconv.Itoa(r.IntN(100))
				switch r.IntN(4) {
				case 0:
					l.remove(key)
				case 1:
					e, ok := l.get(key, new(clock))
					if !ok {
						break
					}
					mu.Lock()
					if !uniform(e.v.Data) {
						bad++
					}
					if i%20 == 0 {
						held = append(held, e.v.Data)
					}
					mu.Unlock()
				default:
					v := Value{Data: bytes.Repeat([]byte{byte(r.Uint32())}, r.IntN(1000))}
					l.add(key, entry{v: v, size: entrySize(key, v)}, guard{})
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

func TestLRUGuardDiscardsStaleAdd(t *testing.T) {
	t.Parallel()
	l := newLRU(1 << 20)
	var epoch atomic.Uint64
	want := epoch.Load()
	epoch.Add(1) // a Remove happened while the load ran
	v := val(1)
	if l.add("k", entry{v: v, size: entrySize("k", v)}, guard{epoch: &epoch, wantEpoch: want}) {
		t.Fatal("add stored a value whose epoch had moved on")
	}
	if !l.add("k", entry{v: v, size: entrySize("k", v)}, guard{epoch: &epoch, wantEpoch: epoch.Load()}) {
		t.Fatal("add refused a value with the current epoch")
	}
}

// TestEntryOverheadMatchesHeap measures what an entry really costs, so that
// entryOverhead (and MaxBytes with it) stays close to the heap: "bytes"
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
		ownCT   bool // a content type string per entry
		readAll bool // the value is read with io.ReadAll
		spare   bool // the value's buffer is twice its size
	}{
		{name: "empty", size: 0, n: 50000},
		{name: "100B", size: 100, n: 50000},
		{name: "100B, own content type", size: 100, n: 50000, ownCT: true},
		{name: "1KiB", size: 1 << 10, n: 20000},
		{name: "1KiB, own content type", size: 1 << 10, n: 20000, ownCT: true},
		{name: "100B, read with io.ReadAll", size: 100, n: 50000, ownCT: true, readAll: true},
		{name: "4KiB, in a buffer twice its size", size: 4 << 10, n: 5000, spare: true},
		{name: "64KiB", size: 64 << 10, n: 600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := make([]string, tc.n)
			for i := range keys {
				keys[i] = "key-" + strconv.Itoa(1000000+i)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			l := newLRU(1 << 40)
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
				e := entry{v: v, size: entrySize(k, v)}
				charged += e.size
				l.add(k, e, guard{})
			}
			// The budget is charged the pages' dead bytes as well (here
			// the tails of full pages).
			l.mu.Lock()
			charged += l.dead
			l.mu.Unlock()
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
			// keys too: were it collected in between, its strings would
			// be subtracted from what the entries cost.
			runtime.KeepAlive(l)
			runtime.KeepAlive(keys)
			ratio := heap / float64(charged)
			t.Logf("%d entries: heap %.0f bytes per entry, charged %.0f (heap / charged %.3f); entryOverhead %d",
				tc.n, heap/float64(tc.n), float64(charged)/float64(tc.n), ratio, entryOverhead)
			// Charging more than the heap holds wastes budget; charging less
			// lets the heap outgrow it, which is worse.
			if ratio < 0.85 || ratio > 1.05 {
				t.Fatalf("heap / charged = %.3f: an entry of %d bytes costs %.0f bytes of heap but %.0f of the budget", ratio, tc.size, heap/float64(tc.n), float64(charged)/float64(tc.n))
			}
		})
	}
}

// TestEntryOverheadMatchesHeapUnderChurn is TestEntryOverheadMatchesHeap
// the way a node runs: a budget filled past its end and then churned by
// random reads that store their misses, so that entries are evicted,
// pages fragment and are compacted, and records are freed and taken again,
// under the default policy, whose ghost table entryOverhead pays for. What
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
			l := newLRU(budget)
			l.slru = true // the default policy, whose ghost table is in entryOverhead
			keys := int(1.375 * budget / float64(size+entryOverhead+11))
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
func hit(l *lru, key string) bool {
	_, ok := l.get(key, new(clock))
	return ok
}

// TestLRUKeepsOnlyTheKey stores a key cut from a larger string, as a
// request's key is cut from its request line: the entry must not keep the
// larger string alive, which its accounting would not see.
func TestLRUKeepsOnlyTheKey(t *testing.T) {
	const n, line = 2000, 4096
	l := newLRU(1 << 40)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		s := strings.Repeat("x", line) + strconv.Itoa(i)
		key := s[line-8:]
		v := val(1)
		l.add(key, entry{v: v, size: entrySize(key, v)}, guard{})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(l)
	if per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n; per > line/2 {
		t.Fatalf("each entry holds %d bytes of heap: the %d-byte strings its keys were cut from stay alive", per, line)
	}
	if _, ok := l.get(strings.Repeat("x", 8)+"7", new(clock)); !ok {
		t.Fatal("a stored key is not found")
	}
}

// TestLRUKeepsEveryField stores entries that set each field an entry can
// carry and reads them back unchanged: the slot keeps most of them in a few
// words and the rarely set ones in the entry's allocation.
func TestLRUKeepsEveryField(t *testing.T) {
	t.Parallel()
	now := time.Now()
	owner := lease{epoch: 3, ok: true}
	for _, c := range []struct {
		name string
		e    entry
	}{
		{"empty", entry{}},
		{"nil data", entry{v: Value{Data: nil}}},
		{"not found", entry{notFound: true, v: Value{Expires: now.Add(time.Minute)}}},
		{"small", entry{v: Value{Data: []byte("hello"), ContentType: "text/plain"}, stamp: 7, loaded: now.UnixNano()}},
		{"large", entry{v: Value{Data: bytes.Repeat([]byte("x"), 4*packMax), ContentType: "application/json"}}},
		{"hot copy", entry{v: Value{Data: []byte("v"), Expires: now.Add(time.Hour)}, src: owner, stamp: 3, fallback: true}},
		{"wall expiry", entry{v: Value{Data: []byte("v"), Expires: time.Unix(0, now.Add(time.Hour).UnixNano())}}},
		{"stale windows", entry{v: Value{Data: []byte("v"), StaleWhileRevalidate: time.Second, StaleIfError: time.Hour}}},
		{"stale, aged", entry{v: Value{Data: []byte("v"), Stale: true, Age: 90 * time.Second}}},
		{"no store", entry{v: Value{Data: []byte("v"), NoStore: true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := newLRU(1 << 20)
			in := c.e
			in.size = entrySize("key", in.v)
			if !l.add("key", in, guard{}) {
				t.Fatal("not stored")
			}
			got, ok := l.get("key", new(clock))
			if !ok {
				t.Fatal("not found")
			}
			want := in
			want.v.Checksum = Checksum(in.v.Data)
			if gv, wv := got.v, want.v; !bytes.Equal(gv.Data, wv.Data) || (gv.Data == nil) != (wv.Data == nil) ||
				gv.ContentType != wv.ContentType || !gv.Expires.Equal(wv.Expires) ||
				gv.StaleWhileRevalidate != wv.StaleWhileRevalidate || gv.StaleIfError != wv.StaleIfError ||
				gv.Age != wv.Age || gv.NoStore != wv.NoStore || gv.Stale != wv.Stale || gv.Checksum != wv.Checksum {
				t.Errorf("value = %+v\nwant    %+v", gv, wv)
			}
			if got.size != want.size || got.src != want.src || got.stamp != want.stamp || got.loaded != want.loaded ||
				got.notFound != want.notFound || got.fallback != want.fallback {
				t.Errorf("entry = %+v\nwant    %+v", got, want)
			}
			// Data is shared by every reader: appending to it must not
			// write into the entry.
			if cap(got.v.Data) != len(got.v.Data) {
				t.Errorf("cap(Data) = %d, len %d", cap(got.v.Data), len(got.v.Data))
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
	from, to := newLRU(1<<20), newLRU(1<<20)
	for i, size := range []int{0, 10, packMax, 4 * packMax} {
		v := Value{Data: bytes.Repeat([]byte("x"), size), ContentType: "text/plain"}
		if i == 1 {
			v.StaleIfError = time.Minute
		}
		key := "key" + strconv.Itoa(i)
		from.add(key, entry{v: v, size: entrySize(key, v)}, guard{})
	}
	from.add("changed", entry{v: Value{Data: bytes.Repeat([]byte("o"), 2*packMax)}, size: entrySize("changed", val(2*packMax))}, guard{})
	for _, m := range from.takeIf(func(string) bool { return true }) {
		e := m.e
		if m.key == "changed" {
			e.v.Data = bytes.Repeat([]byte("n"), 2*packMax)
		}
		if !to.add(m.key, e, guard{}) {
			t.Fatalf("%s not stored", m.key)
		}
		got, _ := to.get(m.key, new(clock))
		moved := len(m.e.v.Data) > 0 && unsafe.SliceData(got.v.Data) == unsafe.SliceData(m.e.v.Data)
		if want := len(m.e.v.Data) > packMax && m.key != "changed"; moved != want {
			t.Errorf("%s: moved without a copy = %v, want %v", m.key, moved, want)
		}
		if want := e.v.Data; !bytes.Equal(got.v.Data, want) || got.v.StaleIfError != e.v.StaleIfError {
			t.Errorf("%s: Data = %.20q (%d bytes), StaleIfError %v; want %.20q (%d bytes), %v", m.key,
				got.v.Data, len(got.v.Data), got.v.StaleIfError, want, len(want), e.v.StaleIfError)
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
	l := newLRU(1 << 20)
	other := Value{Data: []byte("other's")}
	o := entry{v: other, size: entrySize("other", other)}
	l.mu.Lock()
	l.put(l.hash("key"), "other", &o)
	l.mu.Unlock()
	if _, ok := l.get("key", new(clock)); ok {
		t.Fatal("key found: it has another key's entry")
	}
	l.remove("key")
	if _, n := l.usage(); n != 1 {
		t.Fatal("removing key removed the other key's entry")
	}
	if l.addIfAbsent("key", entry{v: val(3), size: entrySize("key", val(3))}, guard{}) == false {
		t.Fatal("addIfAbsent: key is absent, but nothing was stored")
	}
	if e, ok := l.get("key", new(clock)); !ok || len(e.v.Data) != 3 {
		t.Fatal("key not found after it was stored")
	}
	if b, n := l.usage(); n != 1 || b != entrySize("key", val(3)) {
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
// The small budget has pages of pageMin bytes, so that many entries need a
// page of their own, which a size class rounds up.
func TestLRUCompactsPages(t *testing.T) {
	t.Parallel()
	for _, budget := range []int64{256 << 10, 16 << 10} {
		t.Run(strconv.FormatInt(budget, 10), func(t *testing.T) {
			t.Parallel()
			churn(t, newLRU(budget))
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

func churn(t *testing.T, l *lru) {
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
			if !l.add(key, entry{v: v, size: entrySize(key, v)}, guard{}) {
				t.Fatalf("step %d: %s not stored", step, key)
			}
			ref.Add(key, v.Data)
		case op < 7:
			l.remove(key)
			ref.Remove(key)
		default:
			e, ok := l.get(key, new(clock))
			want, wok := ref.Get(key)
			if ok != wok || !bytes.Equal(e.v.Data, want) {
				t.Fatalf("step %d: %s = %v, %d bytes; want %v, the %d written last", step, key, ok, len(e.v.Data), wok, len(want))
			}
			if ok && len(readers) < 200 && len(e.v.Data) > 0 {
				readers = append(readers, held{key, e.v.Data, bytes.Clone(e.v.Data)})
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
	if compactions == 0 || l.evictions.Load() == 0 {
		t.Fatalf("%d pages compacted, %d entries evicted: the churn did not do what it is for", compactions, l.evictions.Load())
	}
	t.Logf("%d compactions, %d evictions, %d pages", compactions, l.evictions.Load(), pages)
	assertAccounting(t, l)
}

// budget returns the byte bound.
func (l *lru) budget() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxBytes
}

// check recomputes bytes and items by walking the live entries; tests
// compare it with usage to prove the accounting invariant.
func (l *lru) check() (bytes, items int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.each(func(_ int32, r *rec) bool {
		bytes += int64(r.size)
		items++
		return true
	})
	return bytes, items
}

// TestSLRUKeepsKeysReadTwice: with PolicySLRU, keys read again while cached
// outlive a scan of keys read once, as long as they fit in the protected
// third (a small budget's, with no ghost table); with PolicyLRU the scan
// evicts them. Either way the lists agree with the records (verify)
// throughout.
func TestSLRUKeepsKeysReadTwice(t *testing.T) {
	t.Parallel()
	key := func(p string, i int) string { return fmt.Sprintf("%s%03d", p, i) }
	one := entrySize(key("k", 0), val(100))
	for _, slru := range []bool{true, false} {
		l := newLRU(20 * one)
		l.slru = slru
		for i := range 20 {
			addVal(l, key("k", i), 100)
		}
		for i := range 6 { // within the protected third
			if _, ok := l.get(key("k", i), new(clock)); !ok {
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
			if _, ok := l.get(key("k", i), new(clock)); ok {
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
	l := newLRU(20 * one)
	l.slru = true
	for i := range 20 {
		addVal(l, key("k", i), 100)
	}
	for i := range 20 {
		l.get(key("k", i), new(clock))
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
	one := entrySize(key("s", 0), val(100))
	for _, n := range []int64{400, 20} {
		l := newLRU(n * one)
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
	one := entrySize(key("a", 0), val(100))
	for _, slru := range []bool{true, false} {
		l := newLRU(50 * one)
		l.slru = slru
		for i := range 20 {
			addVal(l, key("a", i), 100)
			l.get(key("a", i), new(clock)) // read twice
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
			if _, ok := l.get(key("a", i), new(clock)); ok {
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
		l := newLRU(1 << 20)
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
				_, hit := l.get(fmt.Sprintf("k%d", i), new(clock))
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
