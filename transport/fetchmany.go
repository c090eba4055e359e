package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ringcache/ringcache/cache"
	"github.com/ringcache/ringcache/transport/api"
)

// One request per owner (cache.ManyFetcher): Group.GetMany sends each
// owner a batch of all the keys it owns, marked hdrLoadMisses. The owner
// answers what its caches hold at once, as for any batch, then a frameLate
// and, as each load of the other keys ends, its frame: a value, a
// not-found, a load error, or "miss" (a value too large for a batch). While
// loads run it sends a frameBeat every PeerTimeout/3, so that the
// requester can tell a loading owner from a silent one, as a single GET's
// 102s do. Values after frameLate are served to the caller, never kept as
// copies: the lease in the answer's headers was granted before they were
// loaded, so it says nothing of a write during their load.
const (
	// maxManyKeys bounds the keys of a batch that loads: a public batch
	// read's whole limit, so that it asks each owner once.
	maxManyKeys = api.MaxBatchKeys
	// maxBatchLoads bounds the loads one such batch runs at once; the
	// group's load gate bounds them again, fairly between callers.
	maxBatchLoads = 32
	// maxManyAnswer bounds the bytes of its answer: every key's frame
	// head, api.MaxBatchBytes of values, and a megabyte of beats.
	maxManyAnswer = maxManyKeys*(maxFrameOverhead+batchTypeBytes) + api.MaxBatchBytes + maxBeatBytes
	// maxBeatBytes bounds the beats of one answer: a megabyte, about three
	// days of loading at the default peer timeout.
	maxBeatBytes = 1 << 20
)

// errNoBatch is FetchMany's answer for a peer that takes no batches.
var errNoBatch = errors.New("peer takes no batches")

// FetchMany asks the peer, the owner of keys, for all of them in one
// request per maxManyKeys (cache.ManyFetcher).
func (pe *peer) FetchMany(ctx context.Context, group string, keys []string) ([]cache.Fetched, error) {
	if pe.noBatch.Load() || pe.contact.legacy.Load() {
		return nil, errNoBatch
	}
	out := make([]cache.Fetched, 0, len(keys))
	var errs []error
	for len(keys) > 0 {
		n := min(len(keys), maxManyKeys)
		res, err := pe.fetchMany(ctx, group, keys[:n])
		errs = append(errs, err)
		for _, r := range res {
			out = append(out, cache.Fetched{Value: r.v, Err: r.err, Done: r.final, Leased: !r.late})
		}
		keys = keys[n:]
	}
	return out, errors.Join(errs...)
}

// fetchMany sends one request of FetchMany. Its results hold what was
// answered before an error, if any.
func (pe *peer) fetchMany(ctx context.Context, group string, keys []string) ([]batchResult, error) {
	res := make([]batchResult, len(keys))
	pe.fetching.Add(1)
	defer pe.fetching.Add(-1)
	err := pe.do(ctx, peerRequest{op: "batch", method: http.MethodPost,
		path: pe.pool.cfg.BasePath + batchRoute + escapeSegment(group), body: appendKeys(nil, keys), lease: true, stream: true,
		header: func(h http.Header) {
			h[hdrLoadMisses] = loadMissesYes
			if c := cache.CallerOf(ctx); c != "" {
				h[hdrCaller] = []string{c}
			}
		},
		read: func(r *http.Response) error {
			if r.Header.Get("Content-Type") != batchType {
				return fmt.Errorf("%w: content type %q", errBatchAnswer, r.Header.Get("Content-Type"))
			}
			return readEachFrame(bufio.NewReader(io.LimitReader(r.Body, maxManyAnswer)), len(res), pe.pool.cfg.MaxResponseBytes,
				frameSink{got: func(i int, br batchResult) { res[i] = br }, alive: aliveOf(r)})
		}})
	if err != nil {
		pe.refusedBatch(err)
	}
	return res, err
}

// streamLoads is the rest of a batch that loads (serveBatch): it loads
// keys[i] for every i in pending, at most maxBatchLoads at once, each for
// callers[i] if it is named (else for the request's caller), and writes
// each one's frame as its load ends, with a frameBeat every PeerTimeout/3
// meanwhile. Values past budget bytes are answered "miss".
func (h *peerHandler) streamLoads(w http.ResponseWriter, r *http.Request, pv cache.PeerView, keys, callers []string, pending []int, budget int) {
	rc := http.NewResponseController(w)
	from := r.Header.Get(hdrPeer)
	w.Write([]byte{frameLate})
	rc.Flush()
	type loaded struct {
		i   int
		v   cache.Value
		err error
	}
	ctx := cache.WithCaller(r.Context(), callerOf(r))
	todo := make(chan int, len(pending))
	for _, i := range pending {
		todo <- i
	}
	close(todo)
	// Buffered for every key: a worker never waits for the writer, which
	// may have left with the client.
	done := make(chan loaded, len(pending))
	for range min(len(pending), maxBatchLoads) {
		go func() {
			for i := range todo {
				if ctx.Err() != nil {
					return
				}
				kctx := ctx
				if callers != nil && callers[i] != "" {
					kctx = cache.WithCaller(ctx, callers[i])
				}
				v, err := pv.Get(kctx, keys[i], from, 0, nil)
				done <- loaded{i, v, err}
			}
		}()
	}
	beat := time.NewTicker(h.pool.cfg.PeerTimeout / 3)
	defer beat.Stop()
	var frame []byte
	write := func(l loaded) {
		frame = frame[:0]
		var data []byte
		switch {
		case l.err == nil && len(l.v.Data) <= batchValueBytes && len(l.v.ContentType) <= batchTypeBytes && len(l.v.Data) <= budget:
			frame = appendValueHead(frame, l.i, l.v)
			data = l.v.Data
			budget -= len(data)
		case errors.Is(l.err, cache.ErrNotFound):
			frame = appendIndexFrame(frame, frameNotFound, l.i)
		case l.err != nil && loadErrorKind(l.err) != 0:
			frame = append(appendIndexFrame(frame, frameError, l.i), loadErrorKind(l.err))
		default: // too large for a batch, or an error the requester's own fetch must meet
			frame = appendIndexFrame(frame, frameMiss, l.i)
		}
		w.Write(frame)
		if len(data) > 0 {
			w.Write(data)
		}
	}
	for left := len(pending); left > 0; {
		select {
		case l := <-done:
			left--
			write(l)
			// The loads that ended meanwhile go in the same flush: a fast
			// origin's answers cost one write, not one each.
			for more := true; more && left > 0; {
				select {
				case l := <-done:
					left--
					write(l)
				default:
					more = false
				}
			}
		case <-beat.C:
			w.Write([]byte{frameBeat})
		case <-ctx.Done():
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}

// loadErrorKind is err's frameError kind, or 0 for an error a batch does
// not carry.
func loadErrorKind(err error) byte {
	switch {
	case errors.Is(err, cache.ErrOverloaded):
		return loadOverloaded
	case errors.Is(err, cache.ErrNotOwner):
		return loadNotOwner
	case !errors.Is(err, cache.ErrLoad):
		return 0
	case errors.Is(err, context.DeadlineExceeded):
		return loadTimedOut
	case errors.Is(err, cache.ErrTooLarge):
		return loadOverLimit
	}
	return loadFailed
}

// loadError is the error of a frameError of kind k (nil for no kind), as
// statusError reads a single GET's.
func loadError(k byte) error {
	switch k {
	case loadFailed:
		return cache.ErrLoad
	case loadTimedOut:
		return fmt.Errorf("%w: %w", cache.ErrLoad, context.DeadlineExceeded)
	case loadOverLimit:
		return fmt.Errorf("%w: %w", cache.ErrLoad, cache.ErrTooLarge)
	case loadOverloaded:
		return cache.ErrOverloaded
	case loadNotOwner:
		return cache.ErrNotOwner
	}
	return nil
}

// callerOf is who a peer request asks for, for the owner's load queue:
// the client the requesting node serves, else the node; a groupcache peer
// names neither and counts as its address.
func callerOf(r *http.Request) string {
	if c := r.Header.Get(hdrCaller); c != "" {
		return c
	}
	if c := r.Header.Get(hdrPeer); c != "" {
		return c
	}
	return api.ClientOf(r.RemoteAddr).String()
}

// maxCallersHeader bounds hdrCallers: past it, the keys left count as the
// request's caller.
const maxCallersHeader = 16 << 10

// appendCallers encodes callers as hdrCallers does, or returns nil when
// none is named.
func appendCallers(b []byte, callers []string) []byte {
	named := false
	for _, c := range callers {
		named = named || c != ""
	}
	if !named {
		return nil
	}
	for i, c := range callers {
		if i > 0 {
			b = append(b, ',')
			if c == callers[i-1] {
				continue
			}
		}
		if len(b)+len(c)*3 > maxCallersHeader {
			break
		}
		b = append(b, url.QueryEscape(c)...)
	}
	return b
}

// readCallers decodes hdrCallers for n keys: nil when it is absent or names
// more than n; "" for a caller it cannot read, and for the keys past the
// end of a header cut at maxCallersHeader.
func readCallers(h string, n int) []string {
	if h == "" {
		return nil
	}
	out := make([]string, 0, n)
	for e := range strings.SplitSeq(h, ",") {
		if len(out) == n {
			return nil
		}
		switch c, err := url.QueryUnescape(e); {
		case e == "" && len(out) > 0:
			out = append(out, out[len(out)-1])
		case err == nil:
			out = append(out, c)
		default:
			out = append(out, "")
		}
	}
	for len(out) < n { // cut at maxCallersHeader
		out = append(out, "")
	}
	return out
}
