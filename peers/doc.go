// Package peers keeps a ringcache node's view of its cluster in etcd and pushes the member set
// into a Setter (in the daemon, the transport's Pool), so that the ring follows joins, leaves and crashes.
//
// A Registry puts one key per node, Prefix+NodeID, whose JSON value is a Member, under a lease
// kept alive in the background; when the lease is lost it grants a new one and puts the key
// again. It lists the prefix, then watches from the list's revision + 1 (with
// WithRequireLeader), and lists again whenever a watch ends, for example on a compacted
// revision. Additions reach the Setter at once; a member whose key disappears stays for a
// hold-down, and while half of the members or more are missing the removals wait a further
// confirmation delay, so that an etcd outage followed by expired and re-put leases does not
// flap the ring. A graceful Close marks the key as leaving before revoking it, so that the
// others drop the node at once. When etcd is unreachable the last member set stays in use: an
// error means "unknown", never "empty".
//
// With a Placer (Config.Placer) the cluster places its nodes on a ring of explicit arcs
// instead of hashing their names: each Member value also carries the node's positions. A
// registration reads the members, chooses positions that split the largest arcs (or keeps the
// ones this node held, if they are still free), and puts its key in one transaction that
// succeeds only if no member key changed since the read; a node that loses the race reads
// again, so two nodes joining at once never take the same position. A member that leaves (at
// once when it leaves gracefully, after the hold-down when it crashed) takes its positions
// with it, and its arcs join their predecessors'. A graceful leave keeps the positions in etcd
// for a minute, with a fingerprint of the other members' positions: a node that registers
// again under the same ID within that minute, while the others hold exactly those positions,
// takes the same ones back, so a rolling restart ends with the ring it began with. The
// Setter, a RangesSetter, receives every member's positions, so every node builds the same
// ring from what etcd holds.
//
// Static is the same hand-over for a fixed list, for clusters without etcd.
//
// A Registry is safe for concurrent use; it calls the Setter from one goroutine at a time and
// never while holding its own locks. Close stops every goroutine it started.
package peers
