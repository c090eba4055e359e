package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ringcache/ringcache/cache"
)

// peer is the client of one member: a cache.Peer. Its requests go through
// the Pool's shared http.Client.
type peer struct {
	pool *Pool
	url  string // base URL, no trailing slash

	// downUntil is when, in Unix nanoseconds, to try a peer again that
	// could not be dialled; zero when it is thought up.
	downUntil atomic.Int64
}

var _ cache.Peer = (*peer)(nil)

// String returns the peer's base URL, for logs.
func (pe *peer) String() string { return pe.url }

// Fetch asks the peer for key's value with groupcache's GET. The peer serves
// it with Group.GetLocal and never forwards it.
func (pe *peer) Fetch(ctx context.Context, group, key string) (cache.Value, error) {
	var v cache.Value
	err := pe.do(ctx, "get", http.MethodGet, group, key, nil, nil, func(res *http.Response) error {
		var err error
		v, err = decodeValue(res, pe.pool.cfg.MaxResponseBytes)
		return err
	})
	return v, err
}

// Store sets key's value at the peer with a PUT of the raw bytes; the value's
// expiry and content type ride in headers.
func (pe *peer) Store(ctx context.Context, group, key string, v cache.Value) error {
	return pe.do(ctx, "set", http.MethodPut, group, key, v.Data, func(h http.Header) {
		setValueHeaders(h, v)
	}, nil)
}

// Invalidate drops key from the peer's caches with a DELETE.
func (pe *peer) Invalidate(ctx context.Context, group, key string) error {
	return pe.do(ctx, "remove", http.MethodDelete, group, key, nil, nil, nil)
}

// do sends one request under the pool's per-peer timeout, signs it when the
// pool has a secret, maps the status to an error and hands a 2xx response to
// read. Every failure is a *PeerError.
func (pe *peer) do(ctx context.Context, op, method, group, key string, body []byte,
	header func(http.Header), read func(*http.Response) error) (err error) {
	p := pe.pool
	start := time.Now()
	status := 0
	defer func() {
		if err != nil {
			err = &PeerError{Peer: pe.url, Op: op, StatusCode: status, Err: err}
		}
		if p.cfg.OnPeerRequest != nil {
			p.cfg.OnPeerRequest(pe.url, op, time.Since(start), err)
		}
	}()

	if until := pe.downUntil.Load(); until != 0 {
		now := p.now().UnixNano()
		if now < until {
			return ErrPeerDown
		}
		// The window is over: one request probes the peer while the others
		// go on skipping it until the probe's dial ends, rather than all of
		// them waiting on a dead address again.
		if !pe.downUntil.CompareAndSwap(until, now+int64(p.cfg.DialTimeout)) {
			return ErrPeerDown
		}
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PeerTimeout)
	defer cancel()
	var rb io.Reader
	if body != nil {
		rb = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, pe.url+peerPath(p.cfg.BasePath, group, key), rb)
	if err != nil {
		return err
	}
	st := p.state.Load()
	req.Header[hdrPeer] = p.selfHeader
	req.Header[hdrRingVersion] = st.versionHeader
	if len(p.cfg.Secret) > 0 {
		now := p.now().Unix()
		req.Header.Set(hdrDate, strconv.FormatInt(now, 10))
		req.Header.Set(hdrSignature, signature(p.cfg.Secret, method, req.URL.EscapedPath(), now))
	}
	if header != nil {
		header(req.Header)
	}
	res, err := p.client.Do(req)
	if err != nil {
		if isDialError(err) {
			pe.downUntil.Store(p.now().Add(p.cfg.DialTimeout).UnixNano())
		}
		return err
	}
	// Load before Store: on the usual path the peer was never marked down,
	// and a store on every request would bounce the cache line between
	// the cores fetching from this peer.
	if pe.downUntil.Load() != 0 {
		pe.downUntil.Store(0)
	}
	defer res.Body.Close()
	status = res.StatusCode
	p.checkVersion(st, pe.url, res.Header.Get(hdrRingVersion))
	if err := statusError(res); err != nil {
		// Drain a short error body so that the connection is reused.
		io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
		return err
	}
	if read != nil {
		return read(res)
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
// cache.ErrNotFound, cache.ErrLoad and cache.ErrBadKey mean that the owner
// answered (the key is absent, its origin failed, it refuses the key): the
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
	case res.Header.Get(hdrLoadError) != "":
		// A marker rather than the status alone: a proxy between the
		// nodes can answer 502 or 504 on its own, and that is not the
		// owner's origin failing.
		if code == http.StatusGatewayTimeout {
			return fmt.Errorf("%w: %w", cache.ErrLoad, context.DeadlineExceeded)
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
	return cache.Value{
		Data:        data,
		ContentType: res.Header.Get(hdrContentType),
		Expires:     exp,
		NoStore:     res.Header.Get(hdrNoStore) != "",
	}, nil
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
}

// isPeerError reports whether err came from a peer request, for StatusOf.
func isPeerError(err error) bool {
	_, ok := errors.AsType[*PeerError](err)
	return ok
}
