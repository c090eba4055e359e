// Package consistenthash maps keys to nodes with consistent hashing (Karger
// et al., "Consistent Hashing and Random Trees", STOC 1997): nodes and keys
// are hashed onto the same circle of 2^32 points and a key belongs to the
// first node point clockwise from it, so a membership change moves only the
// keys of the node that joined or left, about 1/n of them, where hash % N
// would move nearly all.
//
// # Data path
//
// A Map holds each node's replica points (replica i of node n at
// hash(strconv.Itoa(i) + n), as groupcache places them) in one sorted slice
// with the owner of each point beside it. Get hashes the key, finds the
// first point at or after it through a table indexed by the hash's top bits
// and a short search, and returns that point's owner, without allocating.
// GetN keeps walking clockwise for the fallback and replica order. The ring
// is a pure function of its members, their weights, the replica count and
// the Hash: the order of Add and Remove never matters, and when two points
// collide the node whose name sorts first owns the point.
//
// Ranges is the other design: nodes own explicit arcs, a joining
// node splits the arcs of the fullest nodes so that every share approaches
// 1/n, and a leaving node's arcs go to their predecessors. Its positions are
// values to store and share (Positions, Assign), because they depend on the
// join history rather than on names alone: JoinPositions chooses a joining
// node's positions from the stored ones, and RangesFrom rebuilds the same
// ring from them in every process. A join only cuts other members' arcs, so
// a node that leaves and rejoins an unchanged ring takes the same arcs back.
//
// # Concurrency
//
// A Map or Ranges that is no longer modified is safe for any number of
// concurrent readers without a lock. Add, AddWeighted, Remove, Join, Leave
// and Assign modify the value and must not run concurrently with anything
// else on it. To change membership of a ring that others read, Clone it,
// modify the clone, and publish it with an atomic.Pointer; readers that
// loaded the old ring keep a consistent view of it. Version lets nodes check
// that they route with the same ring.
//
// # Which hash
//
// Use XXHash for new clusters. CRC32 is the default only because groupcache
// uses it: with defaults (50 replicas, CRC32) a Map picks the same owner as
// github.com/golang/groupcache/consistenthash for every key, except at the
// rare points two nodes share, which groupcache gives to whichever node was
// added last (so groupcache's ring depends on Add order) and this package
// gives to the smaller name. Measured on 160-replica rings (the coefficient
// of variation of node shares divided by 1/sqrt(160), the value for random
// placement; the median over 40 name sets of 10 nodes and 20 of 100 nodes,
// see TestBalanceAcrossNameSets):
//
//	hash       10 nodes  100 nodes  Get, 100 nodes × 160
//	xxhash       1.03      1.00      fastest
//	ketama       0.99      0.99      MD5 per Get, several times slower
//	md5crc32     0.95      1.03      MD5 per Get, several times slower
//	crc32        2.75      3.29      fast, groupcache-compatible
//	fnv1_32      see below
//
// One ring's CV is a single random draw: at 10 nodes a ring with a good
// hash lands anywhere from about 0.5 to 1.6 times the ideal, so more
// replicas (160 rather than 50) or Ranges are the way to tighter balance,
// not a different hash. CRC32 is linear, so replica names that differ in a
// few characters land on correlated points and the shares spread about
// three times wider. FNV1_32 and MD5CRC32 exist to join rings built by the
// Java and PHP ring clients in common use; FNV1_32's abs() leaves half the
// circle unused and its weak final mixing follows key patterns, so its
// Shares overstate one node and its balance depends on the keys.
//
// # When to use Ranges
//
// Hashed replicas need no coordination: every node derives the same ring
// from the member list. Use Ranges when balance must be tight and the
// cluster can store positions (in etcd, next to membership): with 16
// positions per node a joining node takes exactly 1/(n+1) of the space and
// the largest share stays within 1.10 of the mean (measured 1.00 at 3 and
// 10 nodes, 1.03 at 100), where 160 hashed replicas give a largest share
// around 1.2 times the mean. A leaving node's arcs go to their neighbours,
// so balance degrades on departures until the next joins level it again.
package consistenthash
