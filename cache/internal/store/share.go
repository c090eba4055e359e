package store

// Budgets that two stores share: a part of one counted against the
// other's bound (Share, the cache's hot copies against its main cache),
// and a pair that evicts the older of their entries (Pair, the cache's
// own values and the copies it keeps for other nodes).

// lent returns the bytes of share that count against this store's bound.
// With a pool (Pair), all of the backups' bytes do. The caller holds mu.
func (l *Store) lent() int64 {
	var n int64
	if l.share != nil {
		n = min(l.share.used.Load(), l.sharePart)
	}
	if l.pool != nil && !l.backup {
		n += l.pool.charged()
	}
	return n
}

// over reports whether the entries, the dead bytes and the share's part
// exceed the bound: for the backups of a pair, the primaries' bound. The
// caller holds mu.
func (l *Store) over() bool {
	if l.backup {
		return l.pool.over()
	}
	return l.charged()+l.lent() > l.maxBytes
}

// Share makes up to part bytes of what s holds count against this store's
// bound: s borrows the rest from the room this store leaves free, and gives
// it back when this store grows (the caller trims s then). Call it before
// the stores are used.
func (l *Store) Share(s *Store, part int64) { l.share, l.sharePart = s, part }

// Shares returns the store Share gave this one and its part.
func (l *Store) Shares() (*Store, int64) { return l.share, l.sharePart }

// Pair makes backup share primary's lock and bound: the bytes of both
// count against primary's bound (backup's own is not used), and when
// either needs room the older of their next victims goes: backup's if it
// was stored no later than the one primary's policy would evict next from
// its probation list, else primary's. So under pressure a backup is
// evicted before a primary of the same age, and the two split the budget
// by age, not by a fixed part; a primary read again (protected, slru.go)
// outranks every backup until the policy demotes it. Call it before the
// stores are used.
func Pair(primary, backup *Store) {
	backup.mu = primary.mu
	primary.pool, backup.pool = backup, primary
	backup.backup = true
}

// evictOne evicts one entry to make room, never protect (an entry of l
// just added): l's victim, or in a pair the older of the two stores'
// (Pair). It reports false if there is none. The caller holds mu
// exclusively.
func (l *Store) evictOne(protect int32) bool {
	if l.pool == nil {
		return l.evictFrom(protect)
	}
	p, b, pp, bp := l, l.pool, protect, int32(noRecord)
	if l.backup {
		p, b, pp, bp = l.pool, l, noRecord, protect
	}
	bt, bok := b.nextLoaded(bp)
	pt, pok := p.nextLoaded(pp)
	if bok && (!pok || bt <= pt) && b.evictFrom(bp) {
		return true
	}
	return p.evictFrom(pp) || b.evictFrom(bp)
}

// evictFrom evicts l's victim, never protect, and reports false if there
// is none. The caller holds mu exclusively.
func (l *Store) evictFrom(protect int32) bool {
	v := l.victim(protect)
	if v == noRecord {
		return false
	}
	l.evict(v)
	return true
}

// nextLoaded returns when the entry that l would evict next from its
// probation list was stored (Entry.Loaded), never protect; false if there
// is none: an entry read since it came there is not a candidate, and nor
// is one of the protected list (slru.go), which outranks every backup.
// The caller holds mu exclusively.
func (l *Store) nextLoaded(protect int32) (int64, bool) {
	if id := l.settleTail(protect); id != noRecord {
		return l.rec(id).loaded, true
	}
	return 0, false
}
