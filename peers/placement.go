package peers

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxPositions is the most ring positions a member may hold. Positions are read from etcd, so
// a bound keeps one bad value from making every node build a huge ring.
const MaxPositions = 1024

// ErrBadPositions is returned, wrapped with the reason, when a Placer returns positions that
// cannot be stored: none, more than MaxPositions, or one that another member holds.
var ErrBadPositions = errors.New("peers: bad ring positions")

// CheckPositions reports whether a Placer may give a node n positions: 1 to MaxPositions, or
// an error wrapping ErrBadPositions. The Registry checks every Placer's answer against it; a
// program whose Placer takes a configured number of positions checks that number with it before
// it starts, rather than learn at its first registration that the number is too large.
func CheckPositions(n int) error {
	if n < 1 || n > MaxPositions {
		return fmt.Errorf("%w: %d: want 1 to %d", ErrBadPositions, n, MaxPositions)
	}
	return nil
}

// A Placer chooses the positions of a node that joins a ring of explicit arcs
// (consistenthash.Ranges), for clusters whose nodes share their positions through etcd rather
// than hash them from their names.
//
// The Registry calls Place each time it registers, unless the positions it held before are
// still free: ring maps every other member's ID to its positions as etcd holds them, and the
// result is stored in this node's Member value in one transaction that fails if any member
// key changed since ring was read. On a conflict (another node joined at the same moment) the
// Registry reads again and calls Place again, so two nodes never take the same position, nor
// split the same arc with the same ring in mind. Place must not keep ring.
type Placer interface {
	Place(ring map[string][]uint32, node string) ([]uint32, error)
}

// PlacerFunc adapts a function to a Placer, as http.HandlerFunc does for handlers.
type PlacerFunc func(ring map[string][]uint32, node string) ([]uint32, error)

// Place calls f.
func (f PlacerFunc) Place(ring map[string][]uint32, node string) ([]uint32, error) {
	return f(ring, node)
}

// RangesSetter is the Setter of a cluster with explicit arcs. When Config.Placer is set, the
// Registry calls SetRanges instead of Set or SetWeighted: with every member's peer URL mapped to
// the member's positions, in ascending order (if two members announce one URL, the positions of
// the member whose ID sorts first), each time a URL or a position changes. A member whose
// positions are missing (a node started without placement) maps to none and should own
// nothing. The map is the callee's to keep. Calls follow Set's rules. The transport's Pool
// implements it with consistenthash.RangesFrom, so that every node builds the same ring from
// what etcd holds.
type RangesSetter interface {
	SetRanges(positions map[string][]uint32) error
}

// Claim retry delays: a conflict means another node committed its join a moment ago, so the
// next attempt almost always succeeds; the jitter spreads a crowd of nodes started together.
const (
	claimRetry    = 5 * time.Millisecond
	maxClaimRetry = 100 * time.Millisecond
)

// put writes this node's key under lease: a plain put, or with a Placer the join transaction
// of claim.
func (r *Registry) put(ctx context.Context, lease clientv3.LeaseID, value string) (created int64, err error) {
	if r.cfg.Placer == nil {
		resp, err := r.client.Put(ctx, r.key, value, clientv3.WithLease(lease), clientv3.WithPrevKV())
		if err != nil {
			return 0, err
		}
		return createRevision(resp.Header.Revision, resp.PrevKv), nil
	}
	return r.claim(ctx, lease)
}

// createRevision returns the create revision of a key just put at rev,
// whose previous version was prev (nil: the put created it).
func createRevision(rev int64, prev *mvccpb.KeyValue) int64 {
	if prev != nil {
		return prev.CreateRevision
	}
	return rev
}

// claim reads the members, keeps this node's previous positions if no other member holds
// any of them (those it claimed before, so that a registration lost while etcd blinked comes
// back to the same arcs; or, in a new process, those its key still holds, so that a node that
// crashed and restarted within its lease does too) or asks the Placer for new ones, and puts its key with them if no member key was created,
// changed or put again since the read. It retries on a conflict until ctx ends.
//
// The comparison is on the ModRevision of every key under the prefix, so it catches what
// matters: 1: A reads at revision 10, 2: B reads at 10, 1: A commits (its key at 11), 2: B's
// comparison fails (a key is at 11 > 10), 2: B reads again, sees A's positions and places
// itself around them. A deletion (a member that leaves meanwhile) passes the comparison; it
// cannot make two members share a position, only leave the joining node's cuts less even,
// since they were chosen with the leaving member's arcs still on the ring.
func (r *Registry) claim(ctx context.Context, lease clientv3.LeaseID) (created int64, err error) {
	delay := claimRetry
	for attempt := 1; ; attempt++ {
		ring, own, rev, err := r.readRing(ctx)
		if err != nil {
			return 0, err
		}
		r.mu.Lock()
		pos := r.claimed
		r.mu.Unlock()
		if len(pos) == 0 && own != nil {
			switch {
			case !own.Leaving:
				pos = own.Positions // an earlier process's, whose lease still runs
			case own.Ring != 0 && own.Ring == ringPrint(ring):
				pos = own.Positions // an earlier process's, which left this very ring
			}
		}
		if len(pos) == 0 || holdsAny(ring, pos) {
			if pos, err = r.place(ring); err != nil {
				return 0, err
			}
		}
		m := r.self
		m.Positions = pos
		r.mu.Lock()
		m.Leaving = r.leaving
		r.mu.Unlock()
		value, err := m.encode()
		if err != nil {
			return 0, err
		}
		if r.cfg.beforeCommit != nil {
			r.cfg.beforeCommit(attempt)
		}
		unchanged := clientv3.Compare(clientv3.ModRevision(r.cfg.Prefix).WithPrefix(), "<", rev+1)
		tr, err := r.client.Txn(ctx).If(unchanged).Then(clientv3.OpPut(r.key, value, clientv3.WithLease(lease), clientv3.WithPrevKV())).Commit()
		if err != nil {
			return 0, err
		}
		if tr.Succeeded {
			var prev *mvccpb.KeyValue
			if len(tr.Responses) == 1 && tr.Responses[0].GetResponsePut() != nil {
				prev = tr.Responses[0].GetResponsePut().PrevKv
			}
			r.mu.Lock()
			r.claimed = pos
			r.mu.Unlock()
			r.claimConflicts.Add(int64(attempt - 1))
			r.log.Info("peers: ring positions claimed", "positions", len(pos), "attempts", attempt, "rev", tr.Header.Revision)
			return createRevision(tr.Header.Revision, prev), nil
		}
		// Jittered, so that nodes that keep colliding stop doing so.
		t := time.NewTimer(delay/2 + rand.N(delay))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("claim ring positions after %d conflicts: %w", attempt, ctx.Err())
		}
		delay = min(2*delay, maxClaimRetry)
	}
}

// readRing reads the member keys: every other member's positions (a member marked leaving
// holds none), this node's own member value as etcd holds it (nil: none), and the revision
// of the read.
func (r *Registry) readRing(ctx context.Context) (ring map[string][]uint32, own *Member, rev int64, err error) {
	resp, err := r.client.Get(ctx, r.cfg.Prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, 0, err
	}
	ring = map[string][]uint32{}
	for _, kv := range resp.Kvs {
		c, ok := r.decodeChange(kv.Key, kv.Value, false)
		switch {
		case !ok || c.deleted:
		case c.id == r.cfg.NodeID:
			own = &c.member
		case !c.member.Leaving:
			ring[c.id] = c.member.Positions
		}
	}
	return ring, own, resp.Header.Revision, nil
}

// ringPrint is a fingerprint of the positions of ring's members, never 0.
func ringPrint(ring map[string][]uint32) uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, id := range slices.Sorted(maps.Keys(ring)) {
		h.Write([]byte(id))
		h.Write([]byte{0})
		for _, p := range ring[id] {
			binary.BigEndian.PutUint32(b[:], p)
			h.Write(b[:])
		}
		h.Write([]byte{0})
	}
	return max(h.Sum64(), 1)
}

// parkTTL is how long, in seconds, a node that left gracefully keeps its positions in etcd
// for a process with its ID to take back (Registry.Close): long enough for a rolling
// restart's stop and start, and short, since the positions are kept only while no other
// member changed.
const parkTTL = 60

// park moves this node's key, marked leaving, to a lease of its own that lasts parkTTL, with
// positions and a fingerprint of the other members' positions now. The other nodes drop a
// member marked leaving at once, as before; a process with this node's ID that registers
// before the lease runs out, while the others still hold exactly those positions, takes the
// same positions back (claim), so that a rolling restart ends with the ring it began with
// and moves no key for good.
func (r *Registry) park(ctx context.Context, positions []uint32) error {
	ring, _, _, err := r.readRing(ctx)
	if err != nil {
		return err
	}
	g, err := r.client.Grant(ctx, parkTTL)
	if err != nil {
		return err
	}
	m := r.self
	m.Leaving, m.Positions, m.Ring = true, positions, ringPrint(ring)
	v, err := m.encode()
	if err == nil {
		_, err = r.client.Put(ctx, r.key, v, clientv3.WithLease(g.ID))
	}
	if err != nil {
		_, _ = r.client.Revoke(ctx, g.ID) // the lease would run out in parkTTL anyway
	}
	return err
}

// place asks the Placer for this node's positions on ring and checks them.
func (r *Registry) place(ring map[string][]uint32) ([]uint32, error) {
	pos, err := r.cfg.Placer.Place(ring, r.cfg.NodeID)
	if err != nil {
		return nil, fmt.Errorf("place on the ring: %w", err)
	}
	pos = slices.Clone(pos)
	slices.Sort(pos)
	if err := CheckPositions(len(pos)); err != nil {
		return nil, err
	}
	switch {
	case len(slices.Compact(slices.Clone(pos))) != len(pos):
		return nil, fmt.Errorf("%w: a position repeats", ErrBadPositions)
	case holdsAny(ring, pos):
		return nil, fmt.Errorf("%w: a position is held by another member", ErrBadPositions)
	}
	return pos, nil
}

// holdsAny reports whether a member of ring holds one of the sorted positions pos.
func holdsAny(ring map[string][]uint32, pos []uint32) bool {
	for _, ps := range ring {
		for _, p := range ps {
			if _, ok := slices.BinarySearch(pos, p); ok {
				return true
			}
		}
	}
	return false
}

// peerPositions maps the peer URL of each of ms to its positions: what a RangesSetter
// receives. Of two members announcing one URL (a misconfiguration), the one whose ID sorts
// first wins, so that the result does not depend on their order.
func peerPositions(ms []Member) map[string][]uint32 {
	out := make(map[string][]uint32, len(ms))
	for _, m := range slices.SortedFunc(slices.Values(ms), func(a, b Member) int { return cmp.Compare(a.ID, b.ID) }) {
		if _, ok := out[m.PeerURL]; !ok {
			out[m.PeerURL] = slices.Clone(m.Positions)
		}
	}
	return out
}

// samePositions reports whether two results of peerPositions are equal.
func samePositions(a, b map[string][]uint32) bool {
	return maps.EqualFunc(a, b, func(x, y []uint32) bool { return slices.Equal(x, y) })
}

// ClaimConflicts returns how many times a registration of this node found that another node
// had joined between its read and its transaction, and so read and placed itself again.
func (r *Registry) ClaimConflicts() int64 { return r.claimConflicts.Load() }
