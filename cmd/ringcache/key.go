package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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
	pos, err := cmd.parse(args, 1, maxGetKeys)
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
