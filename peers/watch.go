package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var (
	errCompacted   = errors.New("peers: watch revision compacted")
	errWatchClosed = errors.New("peers: watch closed")
)

// watch follows the members prefix from revision rev, listing again whenever a watch ends
// (its revision was compacted, etcd lost its leader, or the stream failed).
func (r *Registry) watch(rev int64, out chan<- update) {
	defer r.wg.Done()
	for {
		err := r.watchFrom(rev, out)
		if r.ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.watching = false
		r.notifyLocked()
		r.mu.Unlock()
		if errors.Is(err, errCompacted) {
			r.compactions.Add(1)
			r.log.Info("peers: watch revision compacted; listing again", "err", err)
		} else {
			r.log.Warn("peers: watch ended; listing again", "err", err)
		}
		delay := minRetry
		for {
			var u update
			rev, u, err = r.list(r.ctx)
			if err == nil {
				select {
				case out <- u:
				case <-r.ctx.Done():
					return
				}
				break
			}
			if r.ctx.Err() != nil || !r.sleep(delay) {
				return
			}
			delay = min(2*delay, maxRetry)
		}
		// The list is complete at rev, so watching from rev+1 loses nothing in between.
		rev++
	}
}

// watchFrom watches the prefix from rev and forwards every response until the watch ends.
func (r *Registry) watchFrom(rev int64, out chan<- update) error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(r.ctx))
	defer cancel()
	wch := r.client.Watch(ctx, r.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithCreatedNotify())
	for wresp := range wch {
		if wresp.CompactRevision != 0 {
			return fmt.Errorf("%w: wanted %d, compacted up to %d", errCompacted, rev, wresp.CompactRevision)
		}
		if err := wresp.Err(); err != nil {
			return err
		}
		r.touch(true)
		if wresp.Created || wresp.IsProgressNotify() {
			continue
		}
		var u update
		for _, ev := range wresp.Events {
			if c, ok := r.decodeChange(ev.Kv.Key, ev.Kv.Value, ev.Type == clientv3.EventTypeDelete); ok {
				u.changes = append(u.changes, c)
			}
		}
		if len(u.changes) == 0 {
			continue
		}
		if r.log.Enabled(r.ctx, slog.LevelDebug) {
			r.log.Debug("peers: watch events", "rev", wresp.Header.Revision, "changes", describe(u.changes))
		}
		select {
		case out <- u:
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
	return errWatchClosed
}

// describe renders changes for a debug log line.
func describe(cs []change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		switch {
		case c.deleted:
			out[i] = "-" + c.id
		case c.member.Leaving:
			out[i] = "~" + c.id
		default:
			out[i] = "+" + c.id
		}
	}
	return out
}

// list reads the whole prefix: the complete member set at the returned revision.
func (r *Registry) list(ctx context.Context) (int64, update, error) {
	opCtx, cancel := context.WithTimeout(ctx, r.cfg.TTL)
	defer cancel()
	resp, err := r.client.Get(opCtx, r.cfg.Prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, update{}, err
	}
	u := update{reset: true}
	for _, kv := range resp.Kvs {
		if c, ok := r.decodeChange(kv.Key, kv.Value, false); ok {
			u.changes = append(u.changes, c)
		}
	}
	return resp.Header.Revision, u, nil
}

// decodeChange turns one key under the prefix into a change. Keys that are not a member ID
// (deeper paths, bad characters) are not ours and are skipped; a value that does not decode
// makes the member count as absent.
func (r *Registry) decodeChange(key, value []byte, deleted bool) (change, bool) {
	id, ok := strings.CutPrefix(string(key), r.cfg.Prefix)
	if !ok || !checkID(id) {
		return change{}, false
	}
	if deleted {
		return change{id: id, deleted: true}, true
	}
	m, err := decodeMember(id, value)
	if err != nil {
		r.log.Warn("peers: member ignored", "peer", id, "err", err)
		return change{id: id, deleted: true}, true
	}
	return change{id: id, member: m}, true
}
