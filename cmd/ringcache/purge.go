package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

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
