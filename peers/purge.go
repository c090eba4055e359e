package peers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// PurgeRetention is how long a purge stays in etcd: a node that has not
// read the purge log for longer than this cannot know what it missed, and
// must drop its whole cache (transport does).
const PurgeRetention = 24 * time.Hour

// purgePrefix is where the cluster's purges are recorded: beside the
// members' prefix, never under it (the members' watch and the join
// transaction read every key there).
func (c Config) purgePrefix() string {
	if c.Prefix == "/ringcache/"+c.Cluster+"/members/" {
		return "/ringcache/" + c.Cluster + "/purges/"
	}
	return strings.TrimSuffix(c.Prefix, "/") + "-purges/"
}

// RecordPurge records a purge (data, opaque to the registry) in etcd, under
// a lease of PurgeRetention, and returns the revision it was recorded at
// and the peer URLs of the members registered at that revision: every node
// that may have read the purge log before the purge, and so may not have
// seen it. Together with PurgesSince it is the purge log of
// transport.PurgeLog.
func (r *Registry) RecordPurge(ctx context.Context, data []byte) (rev int64, members []string, err error) {
	lease, err := r.client.Grant(ctx, int64(PurgeRetention/time.Second))
	if err != nil {
		return 0, nil, fmt.Errorf("peers: record purge: %w", err)
	}
	var id [8]byte
	rand.Read(id[:])
	key := r.cfg.purgePrefix() + hex.EncodeToString(id[:])
	resp, err := r.client.Txn(ctx).Then(
		clientv3.OpPut(key, string(data), clientv3.WithLease(lease.ID)),
		clientv3.OpGet(r.cfg.Prefix, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return 0, nil, fmt.Errorf("peers: record purge: %w", err)
	}
	var ms []Member
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if c, ok := r.decodeChange(kv.Key, kv.Value, false); ok && !c.deleted {
			ms = append(ms, c.member)
		}
	}
	return resp.Header.Revision, peerURLs(ms), nil
}

// PurgesSince calls each for every purge recorded after revision after,
// oldest first, and returns the revision its read was made at: the log is
// complete up to it. The read is linearizable: a purge whose RecordPurge
// returned before PurgesSince was called is in it.
func (r *Registry) PurgesSince(ctx context.Context, after int64, each func(rev int64, data []byte)) (current int64, err error) {
	resp, err := r.client.Get(ctx, r.cfg.purgePrefix(), clientv3.WithPrefix(),
		clientv3.WithMinModRev(after+1), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend))
	if err != nil {
		return 0, fmt.Errorf("peers: read purges: %w", err)
	}
	for _, kv := range resp.Kvs {
		each(kv.ModRevision, kv.Value)
	}
	return resp.Header.Revision, nil
}
