package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ringcache/ringcache/cache"
)

// peer is the client of one member: a cache.Peer and a cache.Leaser. Its
// requests go through the Pool's shared http.Client.
type peer struct {
	pool *Pool
	url  string // base URL, no trailing slash

	// suspect is the circuit breaker: set when the peer could not be
	// dialled or fell silent (no byte for Config.PeerTimeout), cleared when
	// a probe (a lease ping, one at a time) gets an answer. While it is set,
	// requests fail at once with ErrPeerDown and the cache falls back.
	suspect atomic.Bool
	probing atomic.Bool // a lease ping is in flight

	// waiting holds the requests in flight to the peer (*exchange keys),
	// so that when one of them finds the peer silent the others that have
	// heard nothing from it lately end at once too, rather than each
	// waiting out its own PeerTimeout.
	waiting sync.Map

	// fetching counts the fetches in flight to the peer, single or
	// batched; coalescing starts when one is (coalesce.go).
	fetching atomic.Int32
	noBatch  atomic.Bool // the peer does not take batches
	// batchPaused is when fetches to the peer may be batched again (Unix
	// nanoseconds) after a batch failed.
	batchPaused atomic.Int64
	batches     sync.Map // group name → *coalescer

	contact contact
	// membership is what the peer last said about this node: whether its
	// ring counts this node in, as of when the request was sent.
	membership atomic.Pointer[membership]
	// since is the first token the peer gave for this node in the
	// current drop epoch (tenure.go).
	since   atomic.Pointer[baseline]
	sinceAt atomic.Int64 // when the last request was sent whose answer confirmed since
}

type membership struct {
	at     time.Time
	member bool
}

var (
	_ cache.Peer           = (*peer)(nil)
	_ cache.Leaser         = (*peer)(nil)
	_ cache.HandoffFetcher = (*peer)(nil)
)

// String returns the peer's base URL, its identity.
func (pe *peer) String() string { return pe.url }

// Contact reports this node's contact lease from the peer (cache.Leaser),
// and starts a renewal in the background when the lease is missing or half
// spent, so that a node that keeps hot copies of the peer's values keeps its
// lease without a fetch.
func (pe *peer) Contact(now time.Time) (uint64, bool) {
	epoch, ok, renew := pe.contact.state(now, pe.pool.cfg.LeaseTTL)
	if renew {
		pe.probe()
	}
	return epoch, ok
}

// probe sends one lease ping in the background unless one is in flight: it
// renews the lease and, for a suspected peer, is the breaker's half-open
// probe.
func (pe *peer) probe() {
	if !pe.probing.CompareAndSwap(false, true) {
		return
	}
	if !pe.pool.goBackground(func(ctx context.Context) {
		defer pe.probing.Store(false)
		err := pe.do(ctx, peerRequest{op: "lease", method: http.MethodGet, path: pe.pool.cfg.BasePath + leaseRoute, probe: true})
		// Any answer, whatever its status, shows that the peer is alive.
		perr, failed := errors.AsType[*PeerError](err)
		if (!failed || perr.StatusCode != 0) && pe.suspect.CompareAndSwap(true, false) {
			pe.pool.cfg.Logger.Info("transport: peer answers again", "peer", pe.url)
		}
	}) {
		pe.probing.Store(false)
	}
}

// trip opens the breaker.
func (pe *peer) trip(err error) {
	if !pe.suspect.CompareAndSwap(false, true) {
		return
	}
	// A peer that has left the ring (a clean stop) is expected to go
	// quiet: no warning then.
	level := slog.LevelWarn
	if pe.pool.state.Load().peers[pe.url] != pe {
		level = slog.LevelInfo
	}
	pe.pool.cfg.Logger.Log(context.Background(), level, "transport: peer suspected; requests for its keys fall back until it answers",
		"peer", pe.url, "err", err)
	// 1: request A is sent, 2: the peer stops, 3: request B is sent,
	// 4: A times out and trips the breaker: B would still wait its whole
	// PeerTimeout. Requests that have heard nothing for a while end now;
	// one that got a 102 lately is an owner loading for it, and goes on.
	quiet := time.Now().UnixNano() - int64(pe.pool.cfg.PeerTimeout/2)
	pe.waiting.Range(func(k, _ any) bool {
		if x := k.(*exchange); x.heard.Load() < quiet {
			x.cancel(errSilent)
		}
		return true
	})
}

// exchange is one request in flight to a peer, for trip.
type exchange struct {
	heard  atomic.Int64 // Unix nanoseconds of the last byte from the peer; 0: none yet
	cancel context.CancelCauseFunc
}

// Fetch asks the peer for key's value with groupcache's GET. The peer serves
// it with PeerView.Get and never forwards it; while its origin load runs
// it sends 102 Processing, which keeps the request alive past PeerTimeout.
// While another fetch to the peer is in flight, the key goes in a batch
// with others first (coalesce.go).
func (pe *peer) Fetch(ctx context.Context, group, key string) (cache.Value, error) {
	v, _, err := pe.FetchLeased(ctx, group, key)
	return v, err
}

// FetchLeased is Fetch, saying whether the value came under the contact
// lease its answer renewed (cache.FetchLeaser): a value the owner loaded
// for a batch after it began its answer did not.
func (pe *peer) FetchLeased(ctx context.Context, group, key string) (cache.Value, bool, error) {
	if c := pe.coalescer(group); c != nil {
		if v, err, final, late := c.fetch(ctx, key); final {
			return v, !late, err
		}
	}
	pe.fetching.Add(1)
	defer pe.fetching.Add(-1)
	var v cache.Value
	err := pe.do(ctx, peerRequest{op: "get", method: http.MethodGet, group: group, key: key, read: func(res *http.Response) error {
		var err error
		v, err = decodeValue(res, pe.pool.cfg.MaxResponseBytes)
		return err
	}})
	return v, true, err
}

// FetchHandoff asks the peer, the key's previous owner, for the value it
// holds (cache.HandoffFetcher): a GET marked X-Ringcache-Handoff, which the
// peer answers from its caches only. cache.ErrNotFound: it holds none.
func (pe *peer) FetchHandoff(ctx context.Context, group, key string) (cache.Value, error) {
	var v cache.Value
	err := pe.do(ctx, peerRequest{op: "handoff", method: http.MethodGet, group: group, key: key,
		header: func(h http.Header) { h[hdrHandoff] = handoffMarker },
		read: func(res *http.Response) error {
			var err error
			v, err = decodeValue(res, pe.pool.cfg.MaxResponseBytes)
			return err
		}})
	return v, err
}

// Store applies a write at the peer, the key's owner, with a PUT of the raw
// bytes; the value's expiry and content type ride in headers.
func (pe *peer) Store(ctx context.Context, group, key string, v cache.Value) (cache.WriteResult, error) {
	var res cache.WriteResult
	err := pe.do(ctx, peerRequest{op: "set", method: http.MethodPut, group: group, key: key, body: v.Data,
		header: func(h http.Header) { setValueHeaders(h, v) },
		read:   func(r *http.Response) error { res = writeResult(r); return nil }})
	return res, err
}

// Remove applies a removal at the peer, the key's owner, with a DELETE.
func (pe *peer) Remove(ctx context.Context, group, key string) (cache.WriteResult, error) {
	var res cache.WriteResult
	err := pe.do(ctx, peerRequest{op: "remove", method: http.MethodDelete, group: group, key: key,
		read: func(r *http.Response) error { res = writeResult(r); return nil }})
	return res, err
}

// Drop drops the peer's own copies of key, with a DELETE of scope "copy".
func (pe *peer) Drop(ctx context.Context, group, key string) error {
	return pe.drop(ctx, group, key, false)
}

// drop asks the peer to drop its copies of key; replaced says the write
// was a PUT (hdrHandoff).
func (pe *peer) drop(ctx context.Context, group, key string, replaced bool) error {
	return pe.do(ctx, peerRequest{op: "drop", method: http.MethodDelete, group: group, key: key,
		header: func(h http.Header) {
			h[hdrScope] = scopeCopy
			if replaced {
				h[hdrHandoff] = replacedValue
			}
		}})
}

// writeResult reads the owner's answer to a write.
func writeResult(res *http.Response) cache.WriteResult {
	var r cache.WriteResult
	if u := res.Header.Get(hdrUnreached); u != "" {
		r.Unreached = strings.Split(u, ",")
	}
	return r
}

// peerRequest is one request to a peer.
type peerRequest struct {
	op, method string
	group, key string // the key's route, unless path is set
	path       string // an escaped path of its own (the lease ping)
	body       []byte
	header     func(http.Header)          // adds headers; may be nil
	read       func(*http.Response) error // reads a 2xx response; may be nil
	// write marks a request the peer answers after applying it, with no
	// 102 meanwhile (a batch of handed-over values): it is allowed more
	// silence than PeerTimeout.
	write bool
	// probe lets the request through an open breaker.
	probe bool
	// lease asks for a contact lease (every GET does).
	lease bool
	// stream: the body's reader shows the peer alive as it reads
	// (aliveOf), not only its first byte (an answer that streams frames as
	// loads end).
	stream bool
}

// errSilent is the cause of a request that got no byte for PeerTimeout.
var errSilent = errors.New("no answer within the peer timeout")

// do sends one request, signs it when the pool has a secret, maps the status
// to an error and hands a 2xx response to r.read. Every failure is a
// *PeerError.
//
// A request fails as silent when no byte of the response (an informational
// 102 included) arrives within PeerTimeout, or no byte of the body within
// PeerTimeout of the headers; otherwise only ctx bounds it. A silent or
// undialable peer opens the breaker.
func (pe *peer) do(ctx context.Context, r peerRequest) (err error) {
	p := pe.pool
	start := time.Now()
	status := 0
	defer func() {
		if err != nil {
			err = &PeerError{Peer: pe.url, Op: r.op, StatusCode: status, Err: err}
		}
		if p.cfg.OnPeerRequest != nil && !r.probe {
			p.cfg.OnPeerRequest(pe.url, r.op, time.Since(start), err)
		}
	}()
	if pe.suspect.Load() && !r.probe {
		pe.probe()
		return ErrPeerDown
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	silence := p.cfg.PeerTimeout
	if r.write {
		// A batch of handed-over values is applied before the answer,
		// with no 102 meanwhile.
		silence += p.cfg.LeaseTTL + leaseMargin(p.cfg.LeaseTTL)
	}
	timer := time.AfterFunc(silence, func() { cancel(errSilent) })
	defer timer.Stop()
	x := &exchange{cancel: cancel}
	pe.waiting.Store(x, nil)
	defer pe.waiting.Delete(x)
	alive := func() {
		timer.Reset(p.cfg.PeerTimeout)
		x.heard.Store(time.Now().UnixNano())
	}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(int, textproto.MIMEHeader) error { alive(); return nil },
	})
	var rb io.Reader
	if r.body != nil {
		rb = bytes.NewReader(r.body)
	}
	path := r.path
	if path == "" {
		path = peerPath(p.cfg.BasePath, r.group, r.key)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, pe.url+path, rb)
	if err != nil {
		return err
	}
	st := p.state.Load()
	req.Header[hdrPeer] = p.selfHeader
	req.Header[hdrRingVersion] = st.versionHeader
	if h, ok := st.sinceHeader[pe.url]; ok {
		req.Header[hdrMemberSince] = h
	}
	if r.method == http.MethodGet || r.lease {
		req.Header[hdrLease] = leaseWanted
	}
	if c := cache.CallerOf(ctx); c != "" && r.method == http.MethodGet {
		req.Header[hdrCaller] = []string{c}
	}
	if r.method == http.MethodPost {
		// Every peer POST may be sent twice (a batch read, values handed
		// over, copies, a purge): the header is how net/http, and our
		// directTransport, know that a request whose reused connection
		// turned out closed may go again on a new one.
		req.Header[hdrIdempotencyKey] = idempotentYes
	}
	if r.header != nil {
		r.header(req.Header)
	}
	p.auth.sign(req, pe.url, r.body, p.now()) // last: it signs the headers
	sent := time.Now()
	res, err := p.client.Do(req)
	if err != nil {
		if context.Cause(ctx) == errSilent {
			// Not the context error the client reports: the caller did not
			// give up, the peer said nothing.
			err = fmt.Errorf("%w: %v", ErrPeerSilent, err)
			pe.trip(err)
		} else if isDialError(err) {
			pe.trip(err)
		}
		return err
	}
	alive() // the body has PeerTimeout from here
	defer res.Body.Close()
	if r.stream {
		res.Body = &aliveBody{res.Body, alive}
	}
	status = res.StatusCode
	if res.Header.Get(hdrRingVersion) == "" {
		pe.contact.legacy.Store(true)
	} else if g := res.Header.Get(hdrLease); g != "" && validGrant(g) {
		pe.contact.legacy.Store(false)
		pe.contact.renew(sent, g, p.cfg.LeaseTTL)
	}
	if m := res.Header.Get(hdrMember); m != "" {
		pe.membership.Store(&membership{at: sent, member: m == "1"})
		p.noteMember(pe, m == "1", res.Header.Get(hdrMemberSince), sent)
	}
	p.checkVersion(st, pe.url, res.Header.Get(hdrRingVersion))
	if err := statusError(res); err != nil {
		// Drain a short error body so that the connection is reused.
		io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
		return err
	}
	if r.read != nil {
		if err := r.read(res); err != nil {
			if context.Cause(ctx) == errSilent {
				err = fmt.Errorf("%w: %v", ErrPeerSilent, err)
				pe.trip(err)
			}
			return err
		}
	}
	return nil
}

// isDialError reports whether err means that no connection could be made:
// the name did not resolve, or the connect failed or timed out. Errors on an
// established connection (a reset, a slow owner) do not count: they say
// nothing about the next connection.
func isDialError(err error) bool {
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return true
	}
	op, ok := errors.AsType[*net.OpError](err)
	return ok && op.Op == "dial"
}

// statusError maps a peer's status code to the error the cache acts on.
// cache.ErrNotFound, cache.ErrLoad, cache.ErrBadKey, cache.ErrOverloaded and
// cache.ErrOwnerUnreachable mean that the owner answered (the key is absent,
// its origin failed, it refuses the key, its origin is too busy, its written
// value cannot be read now): the
// cache reports that rather than loading the key a second time. Anything
// else (ErrPeerStatus, ErrUnauthorized, a network error) means the owner
// could not serve, and the cache loads locally.
func statusError(res *http.Response) error {
	code := res.StatusCode
	switch {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusNotFound && res.Header.Get(hdrNotFound) != "":
		return cache.ErrNotFound
	case code == http.StatusBadRequest:
		return cache.ErrBadKey
	case code == http.StatusUnauthorized:
		return ErrUnauthorized
	case code == http.StatusRequestEntityTooLarge:
		return cache.ErrTooLarge
	case code == http.StatusMisdirectedRequest:
		return cache.ErrNotOwner
	case code == http.StatusServiceUnavailable && res.Header.Get(hdrOverloaded) != "":
		return cache.ErrOverloaded
	case code == http.StatusServiceUnavailable && res.Header.Get(hdrWritten) != "":
		return cache.ErrOwnerUnreachable
	case res.Header.Get(hdrLoadError) != "":
		// A marker rather than the status alone: a proxy between the
		// nodes can answer 502 or 504 on its own, and that is not the
		// owner's origin failing.
		switch {
		case code == http.StatusGatewayTimeout:
			return fmt.Errorf("%w: %w", cache.ErrLoad, context.DeadlineExceeded)
		case res.Header.Get(hdrLoadError) == loadTooLarge:
			return fmt.Errorf("%w: %w", cache.ErrLoad, cache.ErrTooLarge)
		}
		return cache.ErrLoad
	}
	return ErrPeerStatus
}

// decodeValue reads a GetResponse body and the X-Ringcache headers. A
// groupcache peer sends none of the headers: the value then has no expiry
// and no content type. The body is read once into a slice of its exact size
// and the value is a subslice of it: no second copy, and no spare capacity
// that the cache's byte accounting would not see.
func decodeValue(res *http.Response, limit int64) (cache.Value, error) {
	if res.ContentLength > limit {
		return cache.Value{}, fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrBadResponse, res.ContentLength, limit)
	}
	var body []byte
	if res.ContentLength >= 0 {
		body = make([]byte, res.ContentLength)
		if _, err := io.ReadFull(res.Body, body); err != nil {
			return cache.Value{}, fmt.Errorf("reading response body: %w", err)
		}
	} else {
		// One byte past the limit tells a body that is too long from one
		// that is exactly as long as allowed.
		var err error
		body, err = io.ReadAll(io.LimitReader(res.Body, limit+1))
		if err != nil {
			return cache.Value{}, fmt.Errorf("reading response body: %w", err)
		}
		if int64(len(body)) > limit {
			return cache.Value{}, fmt.Errorf("%w: over the %d-byte limit", ErrBadResponse, limit)
		}
	}
	data, err := getResponseValue(body)
	if err != nil {
		return cache.Value{}, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	if res.ContentLength < 0 {
		data = bytes.Clone(data) // io.ReadAll leaves spare capacity
	}
	exp, err := parseExpires(res.Header.Get(hdrExpires))
	if err != nil {
		return cache.Value{}, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	if data == nil {
		data = []byte{}
	}
	v := cache.Value{
		Data:        data,
		ContentType: res.Header.Get(hdrContentType),
		Expires:     exp,
		NoStore:     res.Header.Get(hdrNoStore) != "",
	}
	if s := res.Header.Get(hdrStale); s != "" {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms < 0 {
			return cache.Value{}, fmt.Errorf("%w: %s %q", ErrBadResponse, hdrStale, s)
		}
		v.Stale, v.Age = true, time.Duration(ms)*time.Millisecond
	}
	return v, nil
}

// getResponseValue returns the value field of an encoded
// groupcachepb.GetResponse as a subslice of msg (capped, so that appending
// to it cannot write into msg). Other fields (groupcache's minute_qps) are
// skipped; a repeated value field keeps the last one, as proto.Unmarshal
// does.
func getResponseValue(msg []byte) ([]byte, error) {
	var value []byte
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		if !num.IsValid() { // ConsumeTag lets numbers up to 2^31 through
			return nil, fmt.Errorf("invalid field number %d", num)
		}
		msg = msg[n:]
		if num == getResponseValueField && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(msg)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			value = v[:len(v):len(v)]
			msg = msg[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, msg)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		msg = msg[n:]
	}
	return value, nil
}

// setValueHeaders writes what a Value carries besides its bytes.
func setValueHeaders(h http.Header, v cache.Value) {
	if v.ContentType != "" {
		h.Set(hdrContentType, v.ContentType)
	}
	if !v.Expires.IsZero() {
		h.Set(hdrExpires, formatExpires(v.Expires))
	}
	if v.NoStore {
		h.Set(hdrNoStore, "1")
	}
	if v.Stale {
		h.Set(hdrStale, strconv.FormatInt(int64(v.Age/time.Millisecond), 10))
	}
}

// isPeerError reports whether err came from a peer request.
func isPeerError(err error) bool {
	_, ok := errors.AsType[*PeerError](err)
	return ok
}

// aliveBody is the body of a streamed answer: its reader calls alive when
// it has read a whole unit (a frame), so that a peer that trickles bytes
// without finishing one is still silent.
type aliveBody struct {
	io.ReadCloser
	alive func()
}

// aliveOf returns the function that shows res's peer alive, or nil when
// res was not asked for as a stream.
func aliveOf(res *http.Response) func() {
	if b, ok := res.Body.(*aliveBody); ok {
		return b.alive
	}
	return nil
}
