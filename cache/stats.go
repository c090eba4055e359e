package cache

import "sync/atomic"

// Stats are a group's counters, read with Group.Stats. Counters only grow;
// the Bytes and Items fields are the caches' current usage.
type Stats struct {
	Gets          int64 // Get and PeerView.Get calls
	PeerGets      int64 // PeerView.Get calls: requests that came from peers (also in Gets)
	MainHits      int64 // served from the main cache
	HotHits       int64 // served from the hot cache
	PeerLoads     int64 // values fetched from the owning peer
	PeerErrors    int64 // failed fetches from a peer (a local fallback follows)
	LocalLoads    int64 // origin loads by this node (Getter calls)
	LoadsDeduped  int64 // callers that shared another caller's load or fetch
	NotFounds     int64 // origin said not found (including remembered ones)
	Errors        int64 // Get calls that returned an error other than not-found
	Evictions     int64 // entries evicted for space (main, hot and copies)
	HotPromotions int64 // values fetched from a peer and kept in the hot cache
	TooLarge      int64 // values refused because they exceed MaxValueBytes
	HandoffsTaken int64 // values of keys that moved here taken from their previous owner (fetched or adopted) instead of loaded
	HandoffsGiven int64 // values of keys that moved away handed to their new owner
	StaleServed   int64 // values served past their expiry (stale-while-revalidate or stale-if-error)
	Purged        int64 // entries dropped by purges (Purge, PurgePrefix), every cache of this node
	LoadsRunning  int64 // origin loads running now (at most MaxLoads)
	LoadsWaiting  int64 // origin loads waiting for a slot now (at most LoadQueue)
	LoadsQueued   int64 // origin loads that had to wait for a slot, granted or not
	LoadsShed     int64 // origin loads refused with ErrOverloaded
	MainBytes     int64 // bytes in the main cache: keys, values and per-entry overhead
	MainItems     int64 // entries in the main cache (remembered not-founds included)
	HotBytes      int64 // bytes in the hot cache
	HotItems      int64 // entries in the hot cache
	// Copies (GroupConfig.Copies > 1): values of other nodes' keys held
	// here as an heir, and how copies moved.
	CopyBytes      int64 // bytes of copies held here (their own part of MaxBytes)
	CopyItems      int64 // copies held here
	CopiesSent     int64 // copies of this node's values an heir took, after a load, hand-off or write
	CopiesKept     int64 // copies taken from owners
	CopiesPromoted int64 // copies that became this node's own values when it took their keys over
	CopiesServed   int64 // copies read, here or from another heir, while a key's owner could not be reached
	CopiesRepaired int64 // copies sent after ring changes to bring keys back to Copies nodes
	BytesRepaired  int64 // value bytes of those
	// DeadBytes is the bytes of both caches' pages that no entry holds
	// until a compaction drops them (about 1/32 of the budget at most).
	// They count against MaxBytes with MainBytes and HotBytes.
	DeadBytes int64
}

// counters are a group's live counters; Stats is their snapshot.
type counters struct {
	gets, peerGets, mainHits, hotHits atomic.Int64
	peerLoads, peerErrors, localLoads atomic.Int64
	deduped, notFounds, errors        atomic.Int64
	hotPromotions, tooLarge           atomic.Int64
	handoffsTaken, handoffsGiven      atomic.Int64
	staleServed, purged               atomic.Int64
	copiesSent, copiesKept            atomic.Int64
	copiesPromoted, copiesServed      atomic.Int64
	copiesRepaired, bytesRepaired     atomic.Int64
}

// Stats returns a snapshot of the group's counters. The fields are read one
// by one, so a snapshot taken under load need not add up exactly.
func (g *Group) Stats() Stats {
	s := Stats{
		Gets:          g.st.gets.Load(),
		PeerGets:      g.st.peerGets.Load(),
		MainHits:      g.st.mainHits.Load(),
		HotHits:       g.st.hotHits.Load(),
		PeerLoads:     g.st.peerLoads.Load(),
		PeerErrors:    g.st.peerErrors.Load(),
		LocalLoads:    g.st.localLoads.Load(),
		LoadsDeduped:  g.st.deduped.Load(),
		NotFounds:     g.st.notFounds.Load(),
		Errors:        g.st.errors.Load(),
		Evictions:     g.main.evictions.Load() + g.hot.evictions.Load() + g.copies.evictions.Load(),
		HotPromotions: g.st.hotPromotions.Load(),
		TooLarge:      g.st.tooLarge.Load(),
		HandoffsTaken: g.st.handoffsTaken.Load(),
		HandoffsGiven: g.st.handoffsGiven.Load(),
		StaleServed:   g.st.staleServed.Load(),
		Purged:        g.st.purged.Load(),

		CopiesSent:     g.st.copiesSent.Load(),
		CopiesKept:     g.st.copiesKept.Load(),
		CopiesPromoted: g.st.copiesPromoted.Load(),
		CopiesServed:   g.st.copiesServed.Load(),
		CopiesRepaired: g.st.copiesRepaired.Load(),
		BytesRepaired:  g.st.bytesRepaired.Load(),
	}
	running, waiting := g.gate.usage()
	s.LoadsRunning, s.LoadsWaiting = int64(running), int64(waiting)
	if g.gate != nil {
		s.LoadsQueued, s.LoadsShed = g.gate.queued.Load(), g.gate.shed.Load()
	}
	s.MainBytes, s.MainItems = g.main.usage()
	s.HotBytes, s.HotItems = g.hot.usage()
	s.CopyBytes, s.CopyItems = g.copies.usage()
	s.DeadBytes = g.main.deadBytes() + g.hot.deadBytes() + g.copies.deadBytes()
	return s
}
