package cache

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestReadWaitsForAWriteInProgress holds a write at its owner while it
// drops the other node's copy, and checks that a read at the owner
// meanwhile answers neither the new value (the other node could still
// serve its old copy after that: a read going back in time) nor the old
// one once the write is done: it waits for the write, then returns the
// new value. GetCached, which never waits, reports a miss meanwhile.
func TestReadWaitsForAWriteInProgress(t *testing.T) {
	t.Parallel()
	owner := func(string) int { return 0 }
	c := newCluster(t, 2, owner, GroupConfig{MaxBytes: 1 << 20, HotAfter: 1}, func(int) Getter {
		return GetterFunc(func(_ context.Context, key string) (Value, error) { return Value{Data: []byte("v:" + key)}, nil })
	})
	ctx := t.Context()
	if _, err := c.groups[0].Set(ctx, "k", Value{Data: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	mustGet(t, c.groups[1], "k", "old") // node 1 keeps a copy

	dropping, release := make(chan struct{}), make(chan struct{})
	c.peers[1].beforeInvalidate = func() {
		close(dropping)
		<-release
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := c.groups[0].Set(ctx, "k", Value{Data: []byte("new")})
		wrote <- err
	}()
	<-dropping
	read := make(chan string, 1)
	go func() {
		v, err := c.groups[0].Get(ctx, "k")
		if err != nil {
			read <- err.Error()
			return
		}
		read <- string(v.Data)
	}()
	select {
	case got := <-read:
		t.Fatalf("a read at the owner during the write returned %q before the write was done", got)
	case <-time.After(100 * time.Millisecond):
	}
	if v, ok, _ := c.groups[0].GetCached("k"); ok {
		t.Fatalf("GetCached during the write = %q, want a miss", v.Data)
	}
	mustGet(t, c.groups[1], "k", "old") // not dropped yet: the write is not done
	close(release)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if got := <-read; got != "new" {
		t.Fatalf("the read that waited for the write returned %q, want new", got)
	}
	mustGet(t, c.groups[1], "k", "new")
}

// TestWrittenKeysNeverForget: past maxEverWritten keys the oldest leave the
// exact set, but their stripes stay marked, so every key added still counts
// as written; a key in a stripe nothing spilt into does not.
func TestWrittenKeysNeverForget(t *testing.T) {
	w := newWrittenKeys()
	const n = maxEverWritten + 100
	for h := range uint64(n) {
		w.add(h * epochStripes) // all in stripe 0
	}
	for h := range uint64(n) {
		if !w.has(h * epochStripes) {
			t.Fatalf("key hash %d, added, is not written", h*epochStripes)
		}
	}
	if w.has(1) {
		t.Fatal("a key never added, in a stripe nothing spilt into, counts as written")
	}
	if !w.has(n * epochStripes) {
		t.Fatal("a key of a spilt stripe does not count as written")
	}
}

// TestGuardAdmits: a load's guard admits its result only while the key's
// epoch and the ring are what they were when it began, and not over an
// entry stored after it began (Store.Add's condition).
func TestGuardAdmits(t *testing.T) {
	t.Parallel()
	var epoch, ring atomic.Uint64
	gd := guard{epoch: &epoch, wantEpoch: epoch.Load(), ring: &ring, wantRing: ring.Load(), began: 100}
	if !gd.admits(0) || !gd.admits(100) {
		t.Fatal("a holding guard refused to replace nothing, or an entry stored before its load began")
	}
	if gd.admits(101) {
		t.Fatal("a guard let a load replace an entry stored after it began")
	}
	epoch.Add(1) // a write
	if gd.admits(0) {
		t.Fatal("a guard admitted a load that a write overlapped")
	}
	gd.wantEpoch = epoch.Load()
	ring.Add(1) // a ring change
	if gd.admits(0) {
		t.Fatal("a guard admitted a load that a ring change overlapped")
	}
	if !(guard{}).admits(1 << 62) {
		t.Fatal("the zero guard refused")
	}
}
