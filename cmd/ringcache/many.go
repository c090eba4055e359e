package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// maxGetKeys is the most keys one get reads: a node's batch limit
// (transport.MaxBatchKeys).
const maxGetKeys = 1000

// manyItem is one key's line in a node's batch answer.
type manyItem struct {
	Key         string `json:"key"`
	Status      int    `json:"status"`
	Value       string `json:"value"`
	ValueBase64 []byte `json:"value_base64"`
	Error       string `json:"error"`
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
		var it manyItem
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
