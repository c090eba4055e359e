// Package ui is the operator's page of a ringcache node: the ring drawn as
// an SVG circle with each member's arcs in its own colour, the members with
// their state, weight, share and the ring version each last reported, each
// group's hit ratios, rates, memory and hottest keys, the membership
// timeline, and a "where is this key?" box that highlights the owner's arc.
//
// # Data path
//
// A Source (the daemon) fills a Snapshot on each request. The Handler
// renders it on the server with html/template, so the page is complete
// without JavaScript, and serves the same Snapshot as JSON, which the
// embedded script polls every two seconds to redraw the page in place.
// Every asset is embedded with embed; nothing is loaded from elsewhere, and
// the Content-Security-Policy allows nothing else. The page only reads:
// it has no control that changes the node.
//
// # Concurrency
//
// A Handler is safe for concurrent use if its Source is.
package ui
