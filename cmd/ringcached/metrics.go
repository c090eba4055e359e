package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport"
)

// metrics are one node's Prometheus metrics, in a registry of their own so
// that several nodes can live in one process (dev mode, tests).
type metrics struct {
	reg            *prometheus.Registry
	originDuration *prometheus.HistogramVec // group, outcome
	peerRequests   *prometheus.CounterVec   // peer, op, outcome
	peerDuration   *prometheus.HistogramVec // peer, op

	// peersSeen holds the peer label values in use (a set of URLs), so
	// that forgetPeers finds the series of peers that left.
	peersSeen sync.Map
}

// latencyBuckets span a loopback hit (100µs) to a slow origin (10s).
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// newMetrics registers the process and Go collectors, the histograms and
// counters fed as things happen, and a collector that reads the node's
// counters when Prometheus scrapes (so the Get path pays nothing for them).
func newMetrics(state clusterState) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		originDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ringcache_origin_duration_seconds",
			Help:    "Time taken by origin loads on this node, by group and outcome (ok, not_found, error).",
			Buckets: latencyBuckets,
		}, []string{"group", "outcome"}),
		peerRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringcache_peer_requests_total",
			Help: "Requests this node made to peers, by peer, operation (get, set, remove) and outcome (ok, not_found, unauthorized, timeout, error).",
		}, []string{"peer", "op", "outcome"}),
		peerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ringcache_peer_request_duration_seconds",
			Help:    "Time taken by requests this node made to peers, by peer and operation.",
			Buckets: latencyBuckets,
		}, []string{"peer", "op"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.originDuration, m.peerRequests, m.peerDuration,
		&statsCollector{state: state},
	)
	return m
}

// handler serves the registry in the Prometheus text format.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// observePeer is the transport's OnPeerRequest hook.
func (m *metrics) observePeer(peer, op string, d time.Duration, err error) {
	m.peerRequests.WithLabelValues(peer, op, peerOutcome(err)).Inc()
	m.peerDuration.WithLabelValues(peer, op).Observe(d.Seconds())
	// After the series, so that a peer with series is always in peersSeen
	// (see forgetPeers).
	if _, ok := m.peersSeen.Load(peer); !ok {
		m.peersSeen.Store(peer, struct{}{})
	}
}

// forgetPeers deletes the series of every peer not in members. The peer
// label comes from the membership, which is unbounded over time (a container
// gets a new name on each restart), so the series of departed peers must
// go. A request to a departed peer may end during the deletion; because
// observePeer writes its series before it looks at peersSeen, either the
// deletion comes after the series (1: observe counts b, finds b seen;
// 2: forget drops b from peersSeen, deletes b's series), or b is stored
// again (1: forget drops b; 2: observe counts b, stores b) and the next
// change deletes it: no series is left that peersSeen does not hold.
func (m *metrics) forgetPeers(members []string) {
	m.peersSeen.Range(func(k, _ any) bool {
		peer := k.(string)
		if !slices.Contains(members, peer) {
			m.peersSeen.Delete(peer)
			m.peerRequests.DeletePartialMatch(prometheus.Labels{"peer": peer})
			m.peerDuration.DeletePartialMatch(prometheus.Labels{"peer": peer})
		}
		return true
	})
}

func peerOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, cache.ErrNotFound):
		return "not_found"
	case errors.Is(err, transport.ErrUnauthorized):
		return "unauthorized"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "error"
}

// timedGetter wraps an origin to observe each load's duration.
func (m *metrics) timedGetter(group string, g cache.Getter) cache.Getter {
	ok := m.originDuration.WithLabelValues(group, "ok")
	notFound := m.originDuration.WithLabelValues(group, "not_found")
	failed := m.originDuration.WithLabelValues(group, "error")
	return cache.GetterFunc(func(ctx context.Context, key string) (cache.Value, error) {
		start := time.Now()
		v, err := g.Get(ctx, key)
		h := ok
		switch {
		case errors.Is(err, cache.ErrNotFound):
			h = notFound
		case err != nil:
			h = failed
		}
		h.Observe(time.Since(start).Seconds())
		return v, err
	})
}

// clusterState is what the stats collector reads at scrape time.
type clusterState interface {
	groups() []*cache.Group
	members() int
	ringVersion() uint64
	ready() bool
	// etcdConnected reports whether the node is connected to etcd; ok is
	// false with static membership.
	etcdConnected() (connected, ok bool)
	// listeners returns the capped listeners; none before serving.
	listeners() []capped
	// purges returns how many purges the node applied, by group and scope,
	// and whether it serves from its caches (it may not have missed one).
	purges() (counts map[[2]string]int64, current bool)
}

// statsCollector turns Group.Stats and the ring's state into metrics when
// Prometheus scrapes.
type statsCollector struct{ state clusterState }

var (
	descGets         = prometheus.NewDesc("ringcache_gets_total", "Get calls, including requests from peers.", []string{"group"}, nil)
	descPeerGets     = prometheus.NewDesc("ringcache_peer_gets_total", "Gets that came from peers (also counted in ringcache_gets_total).", []string{"group"}, nil)
	descHits         = prometheus.NewDesc("ringcache_hits_total", "Gets served from a cache: main (keys this node owns) or hot (copies of popular keys owned by peers).", []string{"group", "cache"}, nil)
	descLoads        = prometheus.NewDesc("ringcache_loads_total", "Misses by how they were filled: local (an origin load by this node), peer (fetched from the owner), dedup (shared another caller's load or fetch).", []string{"group", "source"}, nil)
	descNotFound     = prometheus.NewDesc("ringcache_not_found_total", "Gets for keys the origin does not have (remembered ones included).", []string{"group"}, nil)
	descErrors       = prometheus.NewDesc("ringcache_errors_total", "Errors by kind: peer (a fetch from the owner failed; a local load followed), get (a Get failed), too_large (a value over max-value-bytes, from the origin or a write).", []string{"group", "kind"}, nil)
	descHandoffs     = prometheus.NewDesc("ringcache_handoffs_total", "Values of keys that changed owner handed over between nodes instead of loaded again: taken (by this node, the new owner) or given (by this node, the previous owner).", []string{"group", "direction"}, nil)
	descStale        = prometheus.NewDesc("ringcache_stale_served_total", "Values served past their expiry, within stale-while-revalidate or stale-if-error.", []string{"group"}, nil)
	descEvictions    = prometheus.NewDesc("ringcache_evictions_total", "Entries evicted for space from the main and hot caches and, with copies > 1, the copies.", []string{"group"}, nil)
	descPromotions   = prometheus.NewDesc("ringcache_hot_promotions_total", "Values fetched from a peer and kept in the hot cache.", []string{"group"}, nil)
	descBytes        = prometheus.NewDesc("ringcache_bytes", "Bytes held (keys, values and per-entry overhead): main (keys this node owns), hot (copies of popular keys owned by peers), copies (other nodes' values this node holds as an heir, with copies > 1).", []string{"group", "cache"}, nil)
	descCopies       = prometheus.NewDesc("ringcache_copies_total", "Copies of values (copies > 1): sent (of this node's values, taken by an heir), kept (taken from owners), promoted (became this node's values when it took their keys over), served (read while a key's owner could not be reached), repaired (sent after a membership change to bring keys back to copies nodes).", []string{"group", "event"}, nil)
	descRepairBytes  = prometheus.NewDesc("ringcache_copies_repaired_bytes_total", "Value bytes of the copies sent after membership changes.", []string{"group"}, nil)
	descItems        = prometheus.NewDesc("ringcache_items", "Entries held.", []string{"group", "cache"}, nil)
	descMaxBytes     = prometheus.NewDesc("ringcache_max_bytes", "The group's memory budget (main and hot caches together).", []string{"group"}, nil)
	descMembers      = prometheus.NewDesc("ringcache_members", "Members of the ring, this node included.", nil, nil)
	descVersion      = prometheus.NewDesc("ringcache_ring_version_info", "The ring's version (hex) as a label; the value is always 1.", []string{"version"}, nil)
	descReady        = prometheus.NewDesc("ringcache_ready", "1 when the node is registered and its ring built (what /readyz reports).", nil, nil)
	descConnected    = prometheus.NewDesc("ringcache_etcd_connected", "1 while the node's lease and watch in etcd are alive (etcd membership only).", nil, nil)
	descConnsOpen    = prometheus.NewDesc("ringcache_connections_open", "Connections open on a listener (public, peer or admin).", []string{"listener"}, nil)
	descConnsRefused = prometheus.NewDesc("ringcache_connections_refused_total", "Connections refused at once by a listener: at its cap (max_conns, -max-conns) or at one client address's share of it (per_client, -max-conns-per-client).", []string{"listener", "reason"}, nil)
	descLoadSlots    = prometheus.NewDesc("ringcache_origin_loads", "Origin loads now: running (at most the group's max-loads) or waiting for a slot (at most load-queue).", []string{"group", "state"}, nil)
	descLoadsQueued  = prometheus.NewDesc("ringcache_origin_loads_queued_total", "Origin loads that had to wait for a slot (max-loads were running), granted or not.", []string{"group"}, nil)
	descLoadsShed    = prometheus.NewDesc("ringcache_origin_loads_shed_total", "Origin loads refused (503 with Retry-After) because the group's load queue was full or their wait ran out (load-queue, load-queue-wait).", []string{"group"}, nil)
	descPurges       = prometheus.NewDesc("ringcache_purges_total", "Purges this node applied (made here or elsewhere in the cluster), by scope: group (every key) or prefix.", []string{"group", "scope"}, nil)
	descPurged       = prometheus.NewDesc("ringcache_purged_entries_total", "Entries purges dropped from this node's caches.", []string{"group"}, nil)
	descCurrent      = prometheus.NewDesc("ringcache_purges_current", "1 while the node serves from its caches; 0 while it may have missed a purge (it has not read the purge log for -purge-lease) and serves every read from the origin.", nil, nil)
	descMemLimit     = prometheus.NewDesc("ringcache_memory_limit_bytes", "The soft memory limit in force (runtime/debug.SetMemoryLimit); absent when there is none.", nil, nil)
)

// Describe sends the descriptors of every metric Collect sends.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGets, descPeerGets, descHits, descLoads, descNotFound, descErrors, descHandoffs, descStale, descEvictions, descPromotions, descBytes, descItems, descMaxBytes, descMembers, descVersion, descReady, descConnected, descConnsOpen, descConnsRefused, descMemLimit, descLoadSlots, descLoadsQueued, descLoadsShed, descPurges, descPurged, descCurrent, descCopies, descRepairBytes} {
		ch <- d
	}
}

// Collect reads every group's Stats and the ring's state.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	for _, g := range c.state.groups() {
		s, name := g.Stats(), g.Name()
		counter(descGets, s.Gets, name)
		counter(descPeerGets, s.PeerGets, name)
		counter(descHits, s.MainHits, name, "main")
		counter(descHits, s.HotHits, name, "hot")
		counter(descLoads, s.LocalLoads, name, "local")
		counter(descLoads, s.PeerLoads, name, "peer")
		counter(descLoads, s.LoadsDeduped, name, "dedup")
		counter(descNotFound, s.NotFounds, name)
		counter(descErrors, s.PeerErrors, name, "peer")
		counter(descErrors, s.Errors, name, "get")
		counter(descErrors, s.TooLarge, name, "too_large")
		counter(descHandoffs, s.HandoffsTaken, name, "taken")
		counter(descHandoffs, s.HandoffsGiven, name, "given")
		counter(descStale, s.StaleServed, name)
		counter(descEvictions, s.Evictions, name)
		counter(descPromotions, s.HotPromotions, name)
		gauge(descBytes, s.MainBytes, name, "main")
		gauge(descBytes, s.HotBytes, name, "hot")
		gauge(descItems, s.MainItems, name, "main")
		gauge(descItems, s.HotItems, name, "hot")
		if g.Config().Copies > 1 {
			gauge(descBytes, s.CopyBytes, name, "copies")
			gauge(descItems, s.CopyItems, name, "copies")
			counter(descCopies, s.CopiesSent, name, "sent")
			counter(descCopies, s.CopiesKept, name, "kept")
			counter(descCopies, s.CopiesPromoted, name, "promoted")
			counter(descCopies, s.CopiesServed, name, "served")
			counter(descCopies, s.CopiesRepaired, name, "repaired")
			counter(descRepairBytes, s.BytesRepaired, name)
		}
		gauge(descMaxBytes, g.Config().MaxBytes, name)
		gauge(descLoadSlots, s.LoadsRunning, name, "running")
		gauge(descLoadSlots, s.LoadsWaiting, name, "waiting")
		counter(descLoadsQueued, s.LoadsQueued, name)
		counter(descLoadsShed, s.LoadsShed, name)
		counter(descPurged, s.Purged, name)
	}
	counts, current := c.state.purges()
	for k, v := range counts {
		counter(descPurges, v, k[0], k[1])
	}
	gauge(descCurrent, boolInt(current))
	gauge(descMembers, int64(c.state.members()))
	gauge(descVersion, 1, fmt.Sprintf("%x", c.state.ringVersion()))
	gauge(descReady, boolInt(c.state.ready()))
	if connected, ok := c.state.etcdConnected(); ok {
		gauge(descConnected, boolInt(connected))
	}
	for _, ln := range c.state.listeners() {
		gauge(descConnsOpen, int64(ln.Open()), ln.name)
		counter(descConnsRefused, int64(ln.Refused()), ln.name, "max_conns")
		counter(descConnsRefused, int64(ln.ClientRefused()), ln.name, "per_client")
	}
	if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
		gauge(descMemLimit, limit)
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
