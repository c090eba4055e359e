package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ringcache/ringcache/transport/api"
)

// hdrUnreached names, on a write's 204, the nodes the owner could not tell
// to drop their copy (the write was applied; their copies expired by lease).
const hdrUnreached = "Ringcache-Unreached"

// keyNotFound reports whether a 404 says the origin does not have the key,
// as opposed to an unknown group: the public API tells them apart only by
// the short text, "not found" for a key (an older daemon also set
// X-Ringcache-Not-Found).
func keyNotFound(a answer) bool {
	if a.Status != http.StatusNotFound {
		return false
	}
	return a.Header.Get("X-Ringcache-Not-Found") != "" || strings.TrimSpace(string(a.Body)) == "not found"
}

// firstAnswer sends the request made by mk to each node in turn until one
// answers: a node that cannot be reached is reported on stderr and the next
// one tried, because any node answers for any key.
func (c *client) firstAnswer(ctx context.Context, urls []string, stderr io.Writer, mk func(base string) request) (request, answer, error) {
	var misses []string
	for i, base := range urls {
		r := mk(base)
		a, err := c.do(ctx, r)
		if err == nil {
			return r, a, nil
		}
		if !errors.Is(err, errUnreachable) || len(urls) == 1 {
			return r, a, err
		}
		misses = append(misses, err.Error())
		if i < len(urls)-1 {
			fmt.Fprintf(stderr, "ringcache: %v; trying %s\n", err, urls[i+1])
		}
	}
	return request{}, answer{}, fmt.Errorf("%w: no node answered: %s", errUnreachable, strings.Join(misses, "; "))
}

// getResult is get's JSON output.
type getResult struct {
	Group       string `json:"group"`
	Key         string `json:"key"`
	Node        string `json:"node"` // the URL that answered
	Size        int    `json:"size"`
	ContentType string `json:"content_type"`
	ETag        string `json:"etag"`
	// MaxAge is the seconds the value has left, when it expires.
	MaxAge *int64 `json:"max_age,omitempty"`
	// Age is set on a stale answer (served past its expiry within the
	// group's stale windows): seconds since the value was loaded.
	Age *int64 `json:"age,omitempty"`
	// Value is the value when it is valid UTF-8, else ValueBase64 holds it.
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
}

func runGet(ctx context.Context, args []string, env environ) error {
	cmd := newCommand("get", "get [flags] KEY [KEY...]", env).withOutput().withGroup("demo", "the keys' group")
	pos, err := cmd.parse(args, 1, api.MaxBatchKeys)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return getMany(ctx, cmd, env, pos)
	}
	o, key := &cmd.opts, pos[0]
	if key == "" {
		return fmt.Errorf("%w: get: empty key", errUsage)
	}
	c := newClient(o)
	defer c.close()
	r, a, err := c.firstAnswer(ctx, o.URLs, env.Stderr, func(base string) request {
		return request{Method: http.MethodGet, Base: base, Path: keyPath(o.Group, key)}
	})
	if err != nil {
		return err
	}
	switch {
	case keyNotFound(a):
		return fmt.Errorf("%w: key %q in group %q", errNotFound, key, o.Group)
	case a.Status != http.StatusOK:
		return c.failure(r, a)
	}
	if !o.json() {
		out := a.Body
		if env.terminal(env.Stdout) && len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n') // keep the prompt off the value's last line
		}
		_, err := env.Stdout.Write(out)
		return err
	}
	res := getResult{Group: o.Group, Key: key, Node: r.Base, Size: len(a.Body),
		ContentType: a.Header.Get("Content-Type"), ETag: a.Header.Get("ETag")}
	if age, ok := maxAge(a.Header.Get("Cache-Control")); ok {
		res.MaxAge = &age
	}
	if age, err := strconv.ParseInt(a.Header.Get("Age"), 10, 64); err == nil {
		res.Age = &age
	}
	if utf8.Valid(a.Body) {
		s := string(a.Body)
		res.Value = &s
	} else {
		s := base64.StdEncoding.EncodeToString(a.Body)
		res.ValueBase64 = &s
	}
	return writeJSON(env.Stdout, res)
}

// maxAge returns the max-age directive of a Cache-Control header.
func maxAge(header string) (int64, bool) {
	for d := range strings.SplitSeq(header, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(d), "=")
		if ok && strings.EqualFold(name, "max-age") {
			n, err := strconv.ParseInt(val, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

func runPut(ctx context.Context, args []string, env environ) error {
	cmd := newCommand("put", "put [flags] KEY [VALUE]   (without VALUE: -file, else stdin)", env).withGroup("demo", "the key's group")
	file := cmd.fs.String("file", "", `read the value from this file ("-" for stdin)`)
	ttl := cmd.fs.Duration("ttl", 0, "expire the value after this long (whole seconds, rounded up); 0: never")
	ctype := cmd.fs.String("content-type", "", "the value's Content-Type; empty: the node's default")
	empty := cmd.fs.Bool("empty", false, "store an empty value read from stdin or -file (refused without it: nothing piped in is more often a mistake)")
	pos, err := cmd.parse(args, 1, 2)
	if err != nil {
		return err
	}
	o, key := &cmd.opts, pos[0]
	switch {
	case key == "":
		return fmt.Errorf("%w: put: empty key", errUsage)
	case len(pos) == 2 && *file != "":
		return fmt.Errorf("%w: put: give VALUE or -file, not both", errUsage)
	case *ttl < 0:
		return fmt.Errorf("%w: put: -ttl %v: must not be negative", errUsage, *ttl)
	}
	var value []byte
	switch {
	case len(pos) == 2:
		value = []byte(pos[1])
	case *file == "" || *file == "-":
		if env.terminal(env.Stdin) {
			fmt.Fprintln(env.Stderr, "ringcache: reading the value from the terminal; Ctrl-D ends it")
		}
		value, err = io.ReadAll(io.LimitReader(env.Stdin, maxBody+1))
	default:
		value, err = os.ReadFile(*file)
	}
	if err != nil {
		return fmt.Errorf("put: reading the value: %w", err)
	}
	if len(value) > maxBody {
		return fmt.Errorf("%w: put: value over %d bytes", errUsage, maxBody)
	}
	if len(value) == 0 && len(pos) == 1 && !*empty {
		return fmt.Errorf("%w: put: the value read is empty; give -empty to store an empty value", errUsage)
	}
	hdr := http.Header{}
	if *ttl > 0 {
		secs := int64(math.Ceil(ttl.Seconds()))
		hdr.Set("Cache-Control", "max-age="+strconv.FormatInt(secs, 10))
	}
	if *ctype != "" {
		hdr.Set("Content-Type", *ctype)
	}
	return write(ctx, cmd, env, func(base string) request {
		return request{Method: http.MethodPut, Base: base, Path: keyPath(o.Group, key), Body: value, Header: hdr}
	})
}

func runDel(ctx context.Context, args []string, env environ) error {
	cmd := newCommand("del", "del [flags] KEY", env).withGroup("demo", "the key's group")
	pos, err := cmd.parse(args, 1, 1)
	if err != nil {
		return err
	}
	o, key := &cmd.opts, pos[0]
	if key == "" {
		return fmt.Errorf("%w: del: empty key", errUsage)
	}
	return write(ctx, cmd, env, func(base string) request {
		return request{Method: http.MethodDelete, Base: base, Path: keyPath(o.Group, key)}
	})
}

// write sends a PUT or DELETE to the first node that answers and expects
// 204. It prints nothing on success but a note naming the nodes the owner
// could not reach. A 503 with Retry-After means the write reached a node
// that no longer owns the key, during a membership change, and was not
// applied: it is sent again after the pause the node asks for, a few times.
func write(ctx context.Context, cmd *command, env environ, mk func(base string) request) error {
	c := newClient(&cmd.opts)
	defer c.close()
	for attempt := 1; ; attempt++ {
		r, a, err := c.firstAnswer(ctx, cmd.opts.URLs, env.Stderr, mk)
		if err != nil {
			return err
		}
		switch {
		case a.Status == http.StatusNoContent || a.Status == http.StatusOK:
			if u := a.Header.Get(hdrUnreached); u != "" {
				fmt.Fprintf(env.Stderr, "ringcache: written; the owner could not reach %s (their copies had expired)\n", u)
			}
			return nil
		case a.Status == http.StatusServiceUnavailable && a.Header.Get("Retry-After") != "" && attempt < maxWriteAttempts:
			pause := retryAfter(a.Header.Get("Retry-After"))
			fmt.Fprintf(env.Stderr, "ringcache: %v; again in %v\n", c.failure(r, a), pause)
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return context.Cause(ctx)
			}
		default:
			return c.failure(r, a)
		}
	}
}

// maxWriteAttempts bounds how often write tries while a key's owner changes.
const maxWriteAttempts = 4

// retryAfter reads a Retry-After in seconds, bounded to 1 to 5 seconds.
func retryAfter(h string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil {
		n = 1
	}
	return time.Duration(min(max(n, 1), 5)) * time.Second
}

// getMany reads several keys in one request (POST /cache/{group} with a
// form of keys) and prints each: in text, "KEY<TAB>VALUE" a line for the
// keys found (a key or value with a newline or tab is written quoted), and
// a line on stderr for each other; with -o json, the node's answer as it
// is, one JSON object a key. The exit status is 3 when a key was not found
// and nothing failed, 1 when one failed.
func getMany(ctx context.Context, cmd *command, env environ, keys []string) error {
	o := &cmd.opts
	form := url.Values{"key": keys}
	for _, k := range keys {
		if k == "" {
			return fmt.Errorf("%w: get: empty key", errUsage)
		}
	}
	c := newClient(o)
	defer c.close()
	r, a, err := c.firstAnswer(ctx, o.URLs, env.Stderr, func(base string) request {
		h := http.Header{}
		h.Set("Content-Type", "application/x-www-form-urlencoded")
		return request{Method: http.MethodPost, Base: base, Path: "/cache/" + url.PathEscape(o.Group),
			Body: []byte(form.Encode()), Header: h}
	})
	if err != nil {
		return err
	}
	if a.Status != http.StatusOK {
		return c.failure(r, a)
	}
	if o.json() {
		if _, err := env.Stdout.Write(a.Body); err != nil {
			return err
		}
	}
	missing, failed := 0, 0
	sc := bufio.NewScanner(bytes.NewReader(a.Body))
	sc.Buffer(nil, len(a.Body)+1)
	w := bufio.NewWriter(env.Stdout)
	for sc.Scan() {
		var it api.BatchItem
		if err := json.Unmarshal(sc.Bytes(), &it); err != nil {
			return fmt.Errorf("get: %s answered: %v", r.Base, err)
		}
		switch {
		case o.json():
			if it.Status == http.StatusNotFound {
				missing++
			} else if it.Status != http.StatusOK {
				failed++
			}
		case it.Status == http.StatusOK:
			v := it.Value
			if it.ValueBase64 != nil {
				v = string(it.ValueBase64)
			}
			fmt.Fprintf(w, "%s\t%s\n", field(it.Key), field(v))
		case it.Status == http.StatusNotFound:
			missing++
			fmt.Fprintf(env.Stderr, "ringcache: %s: not found\n", field(it.Key))
		default:
			failed++
			fmt.Fprintf(env.Stderr, "ringcache: %s: %d %s\n", field(it.Key), it.Status, it.Error)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	switch {
	case failed > 0:
		return fmt.Errorf("get: %d of %d keys failed", failed, len(keys))
	case missing > 0:
		return fmt.Errorf("%w: %d of %d keys in group %q", errNotFound, missing, len(keys), o.Group)
	}
	return nil
}

// field is s as one field of a tab-separated line: quoted if it holds a
// tab, a newline or a quote.
func field(s string) string {
	if strings.ContainsAny(s, "\t\n\r\"") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// purgeResult is the JSON answer of DELETE /cache/{group}.
type purgeResult struct {
	ID          string   `json:"id"`
	Group       string   `json:"group"`
	Prefix      string   `json:"prefix"`
	By          string   `json:"by"`
	Rev         int64    `json:"rev"`
	Confirmed   []string `json:"confirmed"`
	Unconfirmed []string `json:"unconfirmed"`
	Recorded    bool     `json:"recorded"`
}

// minPurgeTimeout is the least time purge waits for its answer: a purge
// waits up to the nodes' -purge-lease (1m by default) for a node it
// cannot reach.
const minPurgeTimeout = 3 * time.Minute

func runPurge(ctx context.Context, args []string, env environ) error {
	cmd := newCommand("purge", "purge [flags] GROUP", env).withOutput()
	prefix := cmd.fs.String("prefix", "", "purge only the keys that start with this (default: every key of the group)")
	pos, err := cmd.parse(args, 1, 1)
	if err != nil {
		return err
	}
	group := pos[0]
	if group == "" {
		return fmt.Errorf("%w: purge: empty group", errUsage)
	}
	path := "/cache/" + url.PathEscape(group)
	if *prefix != "" {
		path += "?prefix=" + url.QueryEscape(*prefix)
	}
	o := &cmd.opts
	o.Timeout = max(o.Timeout, minPurgeTimeout)
	c := newClient(o)
	defer c.close()
	r, a, err := c.firstAnswer(ctx, o.URLs, env.Stderr, func(base string) request {
		return request{Method: http.MethodDelete, Base: base, Path: path}
	})
	if err != nil {
		return err
	}
	if a.Status != http.StatusOK {
		return c.failure(r, a)
	}
	if o.json() {
		_, err := env.Stdout.Write(a.Body)
		return err
	}
	var res purgeResult
	if err := json.Unmarshal(a.Body, &res); err != nil {
		return fmt.Errorf("purge: %s answered: %v", r.Base, err)
	}
	scope := "every key of group " + res.Group
	if res.Prefix != "" {
		scope = fmt.Sprintf("the keys of group %s under %q", res.Group, res.Prefix)
	}
	fmt.Fprintf(env.Stdout, "purged %s\n", scope)
	fmt.Fprintf(env.Stdout, "  applied by %d nodes: %s\n", len(res.Confirmed)+1, strings.Join(append([]string{res.By}, res.Confirmed...), ", "))
	if len(res.Unconfirmed) > 0 {
		if res.Recorded {
			fmt.Fprintf(env.Stdout, "  not reached: %s (they serve nothing from their caches until they read the purge, which is recorded in etcd)\n", strings.Join(res.Unconfirmed, ", "))
		} else {
			fmt.Fprintf(env.Stdout, "  NOT REACHED: %s (still retried for 10 minutes by %s; a node that is not reached may serve old values)\n", strings.Join(res.Unconfirmed, ", "), res.By)
		}
	}
	if res.Recorded {
		fmt.Fprintf(env.Stdout, "  recorded in etcd at revision %d (id %s)\n", res.Rev, res.ID)
	}
	return nil
}
