package transport

import (
	"net/http"
	"testing"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// What the tests outside the package (package transport_test, which may
// import transport/fast, itself an importer of transport) use of the
// package's own test helpers.

type (
	TestResponse = response
)

var (
	TestClient     = testClient
	MustDo         = mustDo
	Holding        = holding
	ReportCPU      = reportCPU
	MustListen     = mustListen
	EscapeSegment  = escapeSegment
	DefaultOrigin  = defaultOrigin
	MetadataOrigin = metadataOrigin
	Owner          = owner
)

const TestGroup = testGroup

// URL is the node's base URL.
func (n *testNode) URL() string { return n.url }

// Node is the node.
func (n *testNode) Node() *Node { return n.n }

// Do is do.
var Do = do

// TestOpts is clusterOpts' fields that the tests outside the package set.
type TestOpts struct {
	Group   func(*cache.GroupConfig)
	Origin  origin
	Handler func(i int, c *api.HandlerConfig)
}

// NewTestCluster is newCluster with o.
func NewTestCluster(t testing.TB, n int, o TestOpts) ([]*testNode, *loadLog) {
	return newCluster(t, n, clusterOpts{group: o.Group, origin: o.Origin, handler: o.Handler})
}

// Status, Body and Header are the response's.
func (r response) Status() int         { return r.status }
func (r response) Body() string        { return r.body }
func (r response) Header() http.Header { return r.header }
