package store

import (
	"encoding/binary"
	"fmt"
)

// Check verifies the store's invariants, for tests: the bytes and entries
// counted are those of the live entries, within the bound, and the pages
// agree with the records (verify).
func (l *Store) Check() error {
	var wantBytes, wantItems int64
	l.mu.RLock()
	bytes, items := l.bytes, l.n
	l.each(func(_ int32, r *rec) bool {
		wantBytes += int64(r.size)
		wantItems++
		return true
	})
	max := l.maxBytes
	l.mu.RUnlock()
	if bytes != wantBytes || items != wantItems {
		return fmt.Errorf("Usage() = %d bytes, %d items; live entries sum to %d bytes, %d items", bytes, items, wantBytes, wantItems)
	}
	if bytes > max {
		return fmt.Errorf("bytes %d > maxBytes %d", bytes, max)
	}
	return l.verify()
}

// verify checks the pages against the records: every live record's bytes
// are where its header says, each page's live count is what its records
// hold, no closed page is left sparse, dead is what the pages hold beyond
// that, and it fits the budget with bytes (unless one entry alone is left
// over it).
func (l *Store) verify() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	live := make([]int, len(l.pages))
	var err error
	l.each(func(id int32, r *rec) bool {
		p := l.pages[r.page]
		h := p.buf[r.off-headLen:]
		if got, n := int32(binary.LittleEndian.Uint32(h)), int(binary.LittleEndian.Uint32(h[4:])); got != id || headLen+n != l.packed(r) {
			err = fmt.Errorf("record %d: header says record %d, %d bytes; the record needs %d", id, got, n, l.packed(r))
			return false
		}
		if l.index[r.hash] != id {
			err = fmt.Errorf("record %d: not in the index", id)
			return false
		}
		live[r.page] += l.packed(r)
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
