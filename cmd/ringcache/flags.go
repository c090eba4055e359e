package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// defaultURL is the first node of "ringcached dev".
const defaultURL = "http://127.0.0.1:8081"

// options are the flags every cluster command shares.
type options struct {
	URLs    []string      // the nodes' public base URLs, without a trailing "/"
	Token   string        // bearer token; "" sends none
	Output  string        // "text" or "json"
	Timeout time.Duration // per request
	Group   string        // the group of get, put, del and bench; a filter for stats and watch
	All     bool          // also ask the ring's members that -url does not name
}

func (o *options) json() bool { return o.Output == "json" }

// command is one subcommand's flag set with the shared options on it.
type command struct {
	fs      *flag.FlagSet
	opts    options
	rawURLs string
	env     environ
}

func newCommand(name, synopsis string, env environ) *command {
	c := &command{env: env}
	c.opts.Output = "text"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stdout)
	urls := env.getenv("RINGCACHE_URL")
	if urls == "" {
		urls = defaultURL
	}
	fs.StringVar(&c.rawURLs, "url", urls, "comma-separated public URLs of nodes (env RINGCACHE_URL)")
	fs.StringVar(&c.opts.Token, "token", env.getenv("RINGCACHE_TOKEN"), "bearer token, sent when set (env RINGCACHE_TOKEN, which ps does not show)")
	fs.DurationVar(&c.opts.Timeout, "timeout", 5*time.Second, "bound on each request")
	fs.Usage = func() {
		fmt.Fprintf(env.Stdout, "usage: ringcache %s\n", synopsis)
		fs.PrintDefaults()
	}
	c.fs = fs
	return c
}

// withOutput adds -o, for the commands that read.
func (c *command) withOutput() *command {
	c.fs.StringVar(&c.opts.Output, "o", "text", "output: text or json")
	return c
}

// withAll adds -all, for the commands that ask every node.
func (c *command) withAll() *command {
	c.fs.BoolVar(&c.opts.All, "all", false, "also ask every ring member -url does not name, at its peer URL (works where nodes serve the public API there, as in ringcached dev)")
	return c
}

// withGroup adds -group with the default def ("" for a filter).
func (c *command) withGroup(def, help string) *command {
	c.fs.StringVar(&c.opts.Group, "group", def, help)
	return c
}

// parse parses args, which may mix flags and positional arguments
// ("get hello -group api" as well as "get -group api hello"); after "--"
// everything is positional, for keys that start with "-". It checks the
// shared options and that between min and max positional arguments remain.
func (c *command) parse(args []string, min, max int) ([]string, error) {
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		rest := c.fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	switch {
	case len(pos) < min:
		return nil, fmt.Errorf("%w: %s: missing argument (see -h)", errUsage, c.fs.Name())
	case len(pos) > max:
		return nil, fmt.Errorf("%w: %s: unexpected argument %q", errUsage, c.fs.Name(), pos[max])
	}
	return pos, c.check()
}

func (c *command) check() error {
	o := &c.opts
	if o.Output != "text" && o.Output != "json" {
		return fmt.Errorf("%w: -o %q: want text or json", errUsage, o.Output)
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("%w: -timeout %v: must be positive", errUsage, o.Timeout)
	}
	urls, err := parseURLs(c.rawURLs)
	if err != nil {
		return err
	}
	o.URLs = urls
	if c.fs.Lookup("group") != nil && o.Group != "" && !validGroup(o.Group) {
		return fmt.Errorf("%w: -group %q: want letters, digits, '.', '_' or '-'", errUsage, o.Group)
	}
	return nil
}

// parseURLs splits and checks a comma-separated list of node URLs.
func parseURLs(s string) ([]string, error) {
	var out []string
	for raw := range strings.SplitSeq(s, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("%w: -url %q: want http://host:port or https://host:port", errUsage, raw)
		}
		out = append(out, strings.TrimRight(u.String(), "/"))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: -url: no node URL given", errUsage)
	}
	return out, nil
}

// validGroup mirrors the daemon's rule for group names, so that a typo is
// caught before a request: 1 to 128 of [A-Za-z0-9._-], not "." or "..".
func validGroup(name string) bool {
	if name == "" || len(name) > 128 || name == "." || name == ".." {
		return false
	}
	for _, r := range name {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '.', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}
